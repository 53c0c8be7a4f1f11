"""Test sessions, one per package, each in its own virtualenv with only what it needs.

`nox` runs them all (the README's test command; `.ci/run` calls it). torch is pinned to
2.13.0 everywhere: on the dev machines pip takes the CPU build from the local wheel cache.
"""

from __future__ import annotations

import os
import platform
import shutil

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = False
nox.options.sessions = ["lint", "engine", "triton", "client", "server", "decide", "integration"]

PY = "3.11"
TORCH = "torch==2.13.0"
ENGINE = "./packages/strata-engine"
SERVER = "./packages/strata-server"
CLIENT = "./packages/strata-client"
DECIDE = "./packages/strata-decide"


def pytest(session: nox.Session, *paths: str) -> None:
    session.run("python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=15", *paths, *session.posargs)


@nox.session(python=PY)
def lint(session: nox.Session) -> None:
    session.install("ruff==0.17.6")
    session.run("ruff", "check", ".")


def install_aarch64_tools(session: nox.Session) -> None:
    """The aarch64 cross compiler and qemu, for the test that runs the kernels' NEON build and
    compares its bits with this host's. Where they cannot be installed, that test skips with
    a printed reason."""
    if shutil.which("aarch64-linux-gnu-gcc") and shutil.which("qemu-aarch64"):
        return
    if platform.machine() != "x86_64" or not shutil.which("apt-get") or os.geteuid() != 0:
        session.log("aarch64 cross tools cannot be installed here: the qemu kernel test will skip")
        return
    session.run(
        "bash", "-c",
        "(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
        "gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user) > /dev/null "
        "|| echo 'apt-get could not install the aarch64 cross tools: the qemu kernel test will skip'",
        external=True,
    )  # fmt: skip


@nox.session(python=PY)
def engine(session: nox.Session) -> None:
    install_aarch64_tools(session)
    session.install(TORCH)
    session.install(f"{ENGINE}[test]")
    pytest(session, "packages/strata-engine/tests")


@nox.session(python=PY)
def triton(session: nox.Session) -> None:
    """The Triton GPU kernels under Triton's interpreter on the CPU (no GPU needed)."""
    session.install(TORCH)
    session.install(f"{ENGINE}[gpu,test]")
    session.env["TRITON_INTERPRET"] = "1"
    pytest(session, "packages/strata-engine/tests/test_triton_kernels.py", "packages/strata-engine/tests/test_triton_model.py")


@nox.session(python=PY)
def client(session: nox.Session) -> None:
    session.install(f"{CLIENT}[test]")
    session.run(
        "python", "-c",
        "import importlib.util as u, sys; bad=[m for m in ('torch','strata_engine','strata_server') "
        "if u.find_spec(m)]; sys.exit(f'client env must not have {bad}' if bad else 0)",
    )  # fmt: skip
    pytest(session, "packages/strata-client/tests")


@nox.session(python=PY)
def server(session: nox.Session) -> None:
    session.install(TORCH)
    session.install(ENGINE, f"{SERVER}[test]")
    pytest(session, "packages/strata-server/tests")


@nox.session(python=PY)
def decide(session: nox.Session) -> None:
    session.install(CLIENT, f"{DECIDE}[test]")
    pytest(session, "packages/strata-decide/tests")


@nox.session(python=PY)
def integration(session: nox.Session) -> None:
    """Cross-package tests: the real server on the real model, spoken to over HTTP."""
    session.install(TORCH)
    session.install(ENGINE, f"{SERVER}[test]", f"{CLIENT}[test]", f"{DECIDE}[test]")
    pytest(session, "tests")


@nox.session(python=PY)
def bench(session: nox.Session) -> None:
    """Benchmarks against llama.cpp (llama-cpp-python compiles for ~6-10 minutes)."""
    session.install(TORCH)
    session.install(ENGINE, SERVER, CLIENT, DECIDE, "llama-cpp-python==0.3.36", "psutil")
    for script in ("bench/bench_engine.py", "bench/bench_batching.py", "bench/bench_server.py", "bench/bench_decide.py"):
        session.run("python", script)
