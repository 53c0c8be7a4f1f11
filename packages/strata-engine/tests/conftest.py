"""Shared fixtures: the real default model (fetched once, cached), an engine and the reference on it."""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType

import pytest

from strata_engine.engine import LLMEngine
from strata_engine.kernels import native
from strata_engine.kernels.native import NativeUnavailable, compiler
from strata_engine.model_store import resolve_model
from strata_engine.testing.reference_forward import ReferenceModel


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that takes the `llama_cpp` fixture is marked `llama_cpp`: `nox -s llama` runs those."""
    for item in items:
        if "llama_cpp" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.llama_cpp)


@pytest.fixture(scope="session")
def llama_cpp() -> ModuleType:
    """llama-cpp-python, for the tests that compare with llama.cpp. Without it they skip, except
    under STRATA_REQUIRE_LLAMA_CPP=1 (`nox -s llama`, which installs it), where that is a failure."""
    if os.environ.get("STRATA_REQUIRE_LLAMA_CPP") == "1":
        module = importlib.import_module("llama_cpp")
    else:
        module = pytest.importorskip("llama_cpp", reason="llama-cpp-python not installed")
    plain_cpu_buffers(module)
    return module


def plain_cpu_buffers(module: ModuleType) -> None:
    """Every model the tests load in llama.cpp uses its plain CPU buffers, not the "extra" ones
    it picks by CPU (AMX tiles, repacked layouts): on a Sapphire Rapids host those crash
    llama.cpp 0.3.36 (a segfault in llama.cpp alone) on the tiny qwen3moe file with packed
    weights, and with them off the reference is computed alike on every host."""
    low = module.llama_cpp
    if getattr(low.llama_model_default_params, "plain_cpu_buffers", False):
        return
    default = low.llama_model_default_params

    def params():  # type: ignore[no-untyped-def]
        p = default()
        p.use_extra_bufts = False
        return p

    params.plain_cpu_buffers = True  # type: ignore[attr-defined]
    low.llama_model_default_params = params


@pytest.fixture(scope="session")
def model_path() -> Path:
    """The SmolLM2-135M-Instruct Q4_1 file (downloaded into STRATA_HOME on first use)."""
    return resolve_model("default")


@pytest.fixture(scope="session")
def engine(model_path: Path) -> LLMEngine:
    return LLMEngine(model_path, num_threads=2)


@pytest.fixture(scope="session")
def reference(model_path: Path) -> ReferenceModel:
    return ReferenceModel(str(model_path))


def _skip_if_no_compiler(outcome) -> None:
    """A test that needs the native kernels skips, with the reason, only where this machine has
    no C compiler; any other failure to build or load the kernels fails the test."""
    exc = outcome.excinfo
    if exc is None or not issubclass(exc[0], NativeUnavailable):
        return
    try:
        compiler()
    except NativeUnavailable as missing:
        outcome.force_exception(
            pytest.skip.Exception(f"native kernels unavailable: {missing}", _use_item_location=True)
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    _skip_if_no_compiler((yield))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    _skip_if_no_compiler((yield))


@pytest.fixture
def build_with(monkeypatch, tmp_path):
    """Build the kernels afresh into an empty STRATA_HOME with the compiler `cc` (a path)."""
    caches = (native.compiler, native.cpu_features, native._load_target)

    def use(cc: str) -> None:
        monkeypatch.setenv("STRATA_HOME", str(tmp_path / "home"))
        monkeypatch.setenv("CC", cc)
        for cached in caches:
            cached.cache_clear()

    yield use
    for cached in caches:  # later tests load the usual build again
        cached.cache_clear()
