"""Test sessions, one per package.

`nox` runs them all (the README's test command; `.ci/run` calls it). torch is pinned to
2.13.0 everywhere: on the dev machines pip takes the CPU build from the local wheel cache.

Virtualenvs: the sessions that need torch (lint, engine, llama, server, integration, bench) share
one, `.nox/torch-shared`, so torch is installed once and kept between runs; each session
reinstalls the local packages it tests, so the code under test is always the tree's. The
client and decide sessions keep their own small virtualenvs (they must not see torch),
reused between runs. `rm -rf .nox` starts from scratch (e.g. after dropping a dependency).
"""

from __future__ import annotations

import os
import platform
import shutil

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = [
    "lint", "engine", "llama", "triton", "client", "server", "decide", "integration", "without_torch", "ray",
    "browser", "lm_eval",
]  # fmt: skip

PY = "3.11"
TORCH = "torch==2.13.0"
ENGINE = "./packages/strata-engine"
SERVER = "./packages/strata-server"
CLIENT = "./packages/strata-client"
DECIDE = "./packages/strata-decide"
TORCH_ENV = os.path.abspath(".nox/torch-shared")
TORCH_PYTHON = f"{TORCH_ENV}/bin/python"
LINT_TOOLS = ("ruff==0.17.6", "mypy==2.4.1")
LLAMA_CPP = "llama-cpp-python==0.3.36"  # compiled once (minutes); pip's wheel cache keeps the build
PLAYWRIGHT = "playwright>=1.45"
LM_EVAL = "lm_eval[api]==0.4.13"  # the version docs/howto-lm-eval.md is tested with


# Every session prints its skips by reason; under CI a test may skip only for a reason CI cannot
# remove (ALLOWED_SKIPS in tests/skip_summary.py, a plugin imported from the repository root).
SKIPS = ("-p", "tests.skip_summary") + (
    ("--strict-skips",) if os.environ.get("CI", "").lower() in ("true", "1") else ()
)


def pytest(session: nox.Session, *paths: str, python: str = "python") -> None:
    session.run(
        python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=15", *SKIPS, *paths,
        *session.posargs,
    )  # fmt: skip


def torch_env(session: nox.Session, *packages: str) -> str:
    """The shared torch virtualenv, with `packages` (re)installed; returns its python.

    pip leaves torch alone once the pinned version is there, so it is downloaded once.
    """
    if not os.path.exists(TORCH_PYTHON):
        session.run(f"python{PY}", "-m", "venv", TORCH_ENV, external=True)
    session.run(TORCH_PYTHON, "-m", "pip", "install", "-q", TORCH, *packages, external=True)
    return TORCH_PYTHON


@nox.session(python=PY, venv_backend="none")
def lint(session: nox.Session) -> None:
    """ruff (lint and format) over the tree; mypy over the four packages (config: pyproject.toml)."""
    python = torch_env(
        session, *LINT_TOOLS, f"{ENGINE}[test]", SERVER, CLIENT, DECIDE
    )  # [test]: the test support (strata_engine.testing) imports pytest
    session.run(python, "-m", "ruff", "check", ".", external=True)
    session.run(python, "-m", "ruff", "format", "--check", ".", external=True)
    session.run(python, "-m", "mypy", external=True)


def install_aarch64_tools(session: nox.Session) -> None:
    """The aarch64 cross compiler and qemu, for the test that runs the kernels' NEON build and
    compares its bits with this host's, and clang, the second compiler. Where they cannot be
    installed, those tests skip with a printed reason."""
    if shutil.which("aarch64-linux-gnu-gcc") and shutil.which("qemu-aarch64") and shutil.which("clang"):
        return
    if platform.machine() != "x86_64" or not shutil.which("apt-get") or os.geteuid() != 0:
        session.log("aarch64 cross tools cannot be installed here: the qemu kernel test will skip")
        return
    session.run(
        "bash", "-c",
        "(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
        "gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user clang) > /dev/null "
        "|| echo 'apt-get could not install the aarch64 cross tools: the qemu kernel test will skip'",
        external=True,
    )  # fmt: skip


@nox.session(python=PY, venv_backend="none")
def engine(session: nox.Session) -> None:
    install_aarch64_tools(session)
    python = torch_env(session, f"{ENGINE}[test]")
    # the llama.cpp comparisons run in `llama`, where llama-cpp-python is installed
    pytest(session, "packages/strata-engine/tests", "-m", "not llama_cpp", python=python)


@nox.session(python=PY, venv_backend="none")
def llama(session: nox.Session) -> None:
    """Every test that compares with llama.cpp (tokenizers, architectures), with llama-cpp-python
    installed in the shared torch virtualenv (kept between runs). Here they cannot skip: a
    missing llama_cpp fails them (STRATA_REQUIRE_LLAMA_CPP=1)."""
    python = torch_env(session, f"{ENGINE}[test]", LLAMA_CPP)
    session.env["STRATA_REQUIRE_LLAMA_CPP"] = "1"
    # the tests that take the `llama_cpp` fixture (marked `llama_cpp` by the engine's conftest)
    pytest(
        session,
        "packages/strata-engine/tests",
        "-m",
        "llama_cpp",
        "--ignore=packages/strata-engine/tests/kernels/triton",
        python=python,
    )


# The Triton tests prove the C kernels' bits under Triton's interpreter, which must round tl.fma
# once, as a GPU's fma.rn and C's fmaf do: 3.9.0's does (_interpreter.fma_fp32); 3.8.0's computes
# x * y + z in fp32, two roundings, and the C-equality tests fail with it. So the floor is here,
# where the tests install Triton; the `gpu` extra stays open (triton>=3.0) for GPU hosts whose
# CUDA images ship an older Triton: on a GPU the fma rounds once whatever the version. The tests
# also refuse an interpreter whose fma rounds twice (a probe in strata_engine/testing/triton_setup.py).
TRITON_INTERPRETER = "triton>=3.9.0"
# The interpreter runs one Python thread a process: two processes (a test file each, so a file's
# module-scoped models are built once) halve the session on a 2-core host.
XDIST = "pytest-xdist==3.8.0"


@nox.session(python=PY)
def triton(session: nox.Session) -> None:
    """The Triton GPU kernels under Triton's interpreter on the CPU (no GPU needed)."""
    session.install(TORCH)
    session.install(f"{ENGINE}[gpu,test]", TRITON_INTERPRETER, XDIST)
    session.env["TRITON_INTERPRET"] = "1"
    pytest(session, "-n", "auto", "--dist", "loadfile", "packages/strata-engine/tests/kernels/triton")


@nox.session(python=PY)
def client(session: nox.Session) -> None:
    session.install(f"{CLIENT}[test]")
    session.run(
        "python", "-c",
        "import importlib.util as u, sys; bad=[m for m in ('torch','strata_engine','strata_server') "
        "if u.find_spec(m)]; sys.exit(f'client env must not have {bad}' if bad else 0)",
    )  # fmt: skip
    pytest(session, "packages/strata-client/tests")


@nox.session(python=PY, venv_backend="none")
def server(session: nox.Session) -> None:
    python = torch_env(session, ENGINE, f"{SERVER}[test]")
    pytest(session, "packages/strata-server/tests", python=python)


@nox.session(python=PY)
def decide(session: nox.Session) -> None:
    session.install(CLIENT, f"{DECIDE}[test,gateway]")
    pytest(session, "packages/strata-decide/tests")


@nox.session(python=PY, venv_backend="none")
def integration(session: nox.Session) -> None:
    """Cross-package tests: the real server on the real model, spoken to over HTTP."""
    python = torch_env(session, ENGINE, f"{SERVER}[test]", f"{CLIENT}[test]", f"{DECIDE}[test,gateway]")
    pytest(session, "tests", "--ignore=tests/browser", python=python)  # those run in `browser`


def install_chromium(session: nox.Session) -> None:
    """Debian's chromium, which Playwright drives (its own browser download needs a CDN).

    Where apt is not available the session skips, saying why; on a machine with apt a
    browser that cannot be installed fails the session.
    """
    if shutil.which("chromium"):
        return
    if not shutil.which("apt-get"):
        session.skip("no apt-get here to install Debian's chromium: the browser tests are skipped")
    if os.geteuid() != 0:
        session.error("chromium is missing and apt-get needs root: run `sudo apt-get install -y chromium`")
    session.run(
        "bash", "-c",
        "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium > /dev/null",
        external=True,
    )  # fmt: skip
    if not shutil.which("chromium"):
        session.error("apt-get installed no `chromium` on PATH")


@nox.session(python=PY, venv_backend="none")
def browser(session: nox.Session) -> None:
    """The decision playground in headless Chromium (Playwright), on the real gateway and server.

    Screenshots go to artifacts/playground/ (gitignored).
    """
    install_chromium(session)
    python = torch_env(
        session, ENGINE, f"{SERVER}[test]", f"{CLIENT}[test]", f"{DECIDE}[test,gateway]", PLAYWRIGHT
    )
    session.env["STRATA_BROWSER_REQUIRED"] = "1"  # a missing browser or Playwright fails here
    pytest(session, "tests/browser", python=python)


@nox.session(python=PY)
def without_torch(session: nox.Session) -> None:
    """The engine and server installed as a user installs them, without torch (an optional
    extra): a real server on the real model serves every kind of request."""
    session.install(ENGINE, f"{SERVER}[test]")
    session.run(
        "python", "-c",
        "import importlib.util as u, sys; sys.exit('torch must not be installed' if u.find_spec('torch') else 0)",
    )  # fmt: skip
    pytest(session, "tests/integration/server/test_without_torch.py")


@nox.session(python=PY)
def lm_eval(session: nox.Session) -> None:
    """docs/howto-lm-eval.md's `lm_eval` command run for real against the real server, on a local
    task of three questions (tests/docs/test_howtos.py). A virtualenv of its own, without torch:
    lm_eval brings datasets, pandas, pyarrow and scikit-learn, which no other session needs."""
    session.install(ENGINE, f"{SERVER}[test]", LM_EVAL)
    pytest(session, "tests/docs/test_howtos.py::test_lm_eval_howto_runs")


@nox.session(python=PY)
def ray(session: nox.Session) -> None:
    """`strata-server --ray`: 2 replicas on a local Ray instance, the real model (tests/integration/server/test_ray_serve.py).

    Its own virtualenv: ray[serve] brings uvloop and httptools, which uvicorn would then pick
    for the single server in the shared torch virtualenv.
    """
    session.install(TORCH)
    session.install(ENGINE, f"{SERVER}[test,ray]")
    pytest(session, "tests/integration/server/test_ray_serve.py")


@nox.session(python=PY, venv_backend="none", default=False)
def bench(session: nox.Session) -> None:
    """Benchmarks against llama.cpp (llama-cpp-python compiles for ~6-10 minutes)."""
    python = torch_env(
        session,
        ENGINE,
        SERVER,
        CLIENT,
        f"{DECIDE}[gateway]",
        LLAMA_CPP,
        "psutil",
        "matplotlib",
    )
    for script in (
        "bench/bench_engine.py",
        "bench/bench_batching.py",
        "bench/bench_server.py",
        "bench/bench_decide.py",
        "bench/bench_structured.py",
        "bench/bench_kquants.py",  # writes a ~1 GB random Q4_K_M-style GGUF under STRATA_HOME once
        "bench/plot_speed.py",  # the PNG charts in bench/results/
    ):
        session.run(python, script, external=True)
