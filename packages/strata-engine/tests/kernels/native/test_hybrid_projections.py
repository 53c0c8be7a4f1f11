"""A hybrid layer's matmuls of one input fused by stored type (hybrid_projections.Projections)
against one matmul each: the same bits for every member, in every native arithmetic, for decode
and prefill row counts, with the types mixed as a Q4_K_M file mixes them and member sizes that
are not whole groups of 16 outputs (beta and alpha: one row a value head)."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from strata_engine.gguf_loader import TensorInfo
from strata_engine.hybrid_projections import Projections
from strata_engine.kernels.native.backend import NativeOps
from strata_engine.kernels.weights import Weight
from strata_engine.testing.tiny_models import encode_tensor

K = 512  # input features: whole K-quant blocks
MEMBERS = {  # name: (output features, stored type)
    "attn_qkv": (768, QT.Q4_K),
    "attn_gate": (256, QT.Q6_K),
    "ssm_beta": (8, QT.Q4_K),
    "ssm_alpha": (8, QT.Q6_K),
    "q8": (40, QT.Q8_0),
    "f32": (24, QT.F32),
    "router": (4, QT.F32),
}


def _weights(rng: np.random.Generator) -> dict[str, Weight]:
    out = {}
    for name, (rows, qtype) in MEMBERS.items():
        values = rng.normal(0.0, 0.1, size=(rows, K)).astype(np.float32)
        data = values if qtype == QT.F32 else encode_tensor(values, qtype, rng)
        out[name] = Weight.from_info(TensorInfo(name, (rows, K), qtype, data))
    return out


@pytest.mark.parametrize(
    "mode", [(False, 0), (True, 0), (True, 2), (True, 3)], ids=["fp32", "q8", "limb2", "limb3"]
)
def test_each_member_is_its_own_matmuls_bits(mode: tuple[bool, int]) -> None:
    rng = np.random.default_rng(3)
    ops = NativeOps(2, q8=mode[0], limbs=mode[1])
    weights = _weights(rng)
    fused = Projections.of(ops, weights)
    kinds = {w.kernel_type for w in weights.values()}
    assert len(fused.fused) == len(kinds)  # one matmul a stored type
    assert sorted(fused.names) == sorted(MEMBERS)
    for rows in (1, 2, 7, 70, 130):
        x = rng.normal(0.0, 1.0, size=(rows, K)).astype(np.float32)
        got = fused.apply(ops, x)
        for name, w in weights.items():
            want = ops.linear(x, ops.pack(w))
            assert got[name].shape == want.shape and got[name].flags.c_contiguous
            assert np.array_equal(got[name].view(np.uint32), want.view(np.uint32)), (name, rows)
