"""One native call per layer (fused_layer.py / layer.c strata_layer) against the per-operation
path of model.py: the same bits for every architecture switch it covers (biases, q/k norms,
both RoPE layouts, GeGLU, post-norms, soft-capped and sliding-window attention), for a prefill
chunk and a decode step; and the layers it does not cover take the per-operation path."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from strata_engine.config import ModelConfig
from strata_engine.gguf_loader import GGUFFile
from strata_engine.kernels.choice import make_ops
from strata_engine.model import Transformer
from strata_engine.testing.fused_runs import COVERED, PER_OPERATION, run
from strata_engine.testing.tiny_arch_models import ARCH_SPECS, write_arch_model
from strata_engine.testing.tiny_models import TINY_SPECS, write_tiny_model


def _model(path: Path) -> Transformer:
    gguf = GGUFFile(path)
    return Transformer(gguf, ModelConfig.from_metadata(gguf.metadata), make_ops("native", "cpu", 2))


@pytest.mark.parametrize("name", COVERED)
def test_one_call_per_layer_gives_the_per_operation_bits(tmp_path: Path, name: str) -> None:
    tiny = {s.name: s for s in TINY_SPECS}
    if name in tiny:
        path = write_tiny_model(tmp_path / "m.gguf", tiny[name])
    else:
        path = write_arch_model(tmp_path / "m.gguf", next(s for s in ARCH_SPECS if s.name == name))
    model = _model(path)
    assert model.fused is not None, "a dense layer must take the one-call path"
    fused, per_op = run(model, True), run(model, False)
    for a, b in zip(fused, per_op, strict=True):
        assert np.array_equal(a, b), f"max difference {np.abs(a - b).max():.3e}"
    assert not np.array_equal(fused[0][0], fused[0][1])  # a real forward, not a constant


@pytest.mark.parametrize("spec", PER_OPERATION, ids=lambda s: s.name)
def test_mixture_of_experts_and_query_temperature_keep_the_per_operation_path(tmp_path: Path, spec) -> None:
    assert _model(write_arch_model(tmp_path / "m.gguf", spec)).fused is None


def test_the_torch_fallback_has_no_one_call_path(tmp_path: Path) -> None:
    gguf = GGUFFile(write_tiny_model(tmp_path / "m.gguf", TINY_SPECS[0]))
    model = Transformer(gguf, ModelConfig.from_metadata(gguf.metadata), make_ops("torch", "cpu", 2))
    assert model.fused is None
