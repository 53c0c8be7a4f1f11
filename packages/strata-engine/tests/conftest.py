"""Shared fixtures: the real default model (fetched once, cached), an engine and the reference on it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from strata_engine.engine import LLMEngine
from strata_engine.model_store import resolve_model

sys.path.insert(0, str(Path(__file__).parent))  # helpers: tiny_models, reference_forward

from reference_forward import ReferenceModel


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
