"""q/k/v and gate/up read through one matmul (model.FusedProjection, for backends that pay per
launch) against one matmul each: the same bits for every dense architecture, with the stored
types mixed as the tiny models mix them (runs of one type fuse, the others stand alone)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from strata_engine.config import ModelConfig
from strata_engine.gguf_loader import GGUFFile
from strata_engine.kernels.native.backend import NativeOps
from strata_engine.model import Transformer
from strata_engine.testing.fused_runs import COVERED, run
from strata_engine.testing.tiny_arch_models import ARCH_SPECS, write_arch_model
from strata_engine.testing.tiny_models import TINY_SPECS, write_tiny_model


class FusingOps(NativeOps):
    """The C kernels, asking the model for fused projections (as the Triton backend does)."""

    fuses_projections = True


def _model(path: Path, ops: NativeOps) -> Transformer:
    gguf = GGUFFile(path)
    model = Transformer(gguf, ModelConfig.from_metadata(gguf.metadata), ops)
    model.fused = None  # the per-operation path, where the projections are read
    return model


def _path(tmp_path: Path, name: str) -> Path:
    tiny = {s.name: s for s in TINY_SPECS}
    if name in tiny:
        return write_tiny_model(tmp_path / "m.gguf", tiny[name])
    return write_arch_model(tmp_path / "m.gguf", next(s for s in ARCH_SPECS if s.name == name))


@pytest.mark.parametrize("limbs", [0, 3], ids=["fp32", "limb3"])
@pytest.mark.parametrize("name", COVERED)
def test_fused_projections_give_the_unfused_bits(tmp_path: Path, name: str, limbs: int) -> None:
    path = _path(tmp_path, name)
    fused = _model(path, FusingOps(2, limbs=limbs))
    plain = _model(path, NativeOps(2, limbs=limbs))
    assert all(layer.qkv is not None and layer.gate_up is not None for layer in fused.layers)
    assert all(layer.qkv is None for layer in plain.layers)
    widths = [sum(len(p.widths) for p in layer.qkv or ()) for layer in fused.layers]
    assert widths == [3] * len(fused.layers)  # q, k and v, each read once
    for a, b in zip(run(fused, False), run(plain, False), strict=True):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), (
            f"max difference {np.abs(a - b).max():.3e}"
        )


def test_same_typed_projections_share_one_matmul(tmp_path: Path) -> None:
    """At least one model fuses a real run (two or more members in one weight), so the test above
    proves the split of a fused output, not only one-member runs."""
    runs = []
    for name in COVERED:
        (tmp_path / name).mkdir()
        model = _model(_path(tmp_path / name, name), FusingOps(2))
        runs += [
            len(p.widths) for layer in model.layers for p in (*(layer.qkv or ()), *(layer.gate_up or ()))
        ]
    assert max(runs) >= 2
