"""Gate/up, SwiGLU (or GeGLU) and its quantisation in one launch (kernels/triton/gateup.py)
against the C kernels, bit for bit.

The reference is the C code: strata_q8_matmul / strata_limb_matmul through NativeOps.linear for
gate and up on the bytes strata_q8_pack wrote, then NativeOps.silu_mul / gelu_mul; the digits
are quantize.py's of that product (held to the C quantisers by the other Triton tests). Without
a GPU these run under Triton's interpreter."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from strata_engine.testing import triton_setup  # noqa: F401  (before triton: TRITON_INTERPRET=1 without a GPU)

pytest.importorskip(
    "triton", reason="the Triton kernels need `pip install triton` (the engine's [gpu] extra)"
)

from gguf import GGMLQuantizationType as QT

from strata_engine.gguf_loader import TensorInfo
from strata_engine.kernels.native.backend import NativeOps
from strata_engine.kernels.triton import gateup, intmatmul, mmadecode, packed
from strata_engine.kernels.triton.quantize import quantize
from strata_engine.kernels.weights import Weight
from strata_engine.testing.tiny_models import encode_tensor
from strata_engine.testing.triton_setup import DEVICE, on

pytestmark = pytest.mark.filterwarnings("ignore:(overflow|invalid value) encountered:RuntimeWarning")

K = 768  # 24 blocks, 3 super-blocks
N = 160  # 3 tiles of 64 outputs (MMA_N set to 64), the last half full


def _weight(qtype: QT, rng: np.random.Generator) -> Weight:
    values = rng.normal(0, 0.05, size=(N, K)).astype(np.float32)
    data = np.ascontiguousarray(encode_tensor(values, qtype, rng))
    return Weight.from_info(TensorInfo("w", (N, K), qtype, data.reshape(-1)))


def _same(got: torch.Tensor, want: torch.Tensor) -> bool:
    return got.shape == want.shape and torch.equal(
        got.contiguous().view(torch.int32), want.contiguous().view(torch.int32)
    )


@pytest.mark.parametrize(
    "types,limbs,gelu",
    [((QT.Q4_K, QT.Q4_K), 3, False), ((QT.Q4_K, QT.Q6_K), 3, True), ((QT.Q8_0, QT.Q5_K), 0, False)],
    ids=("Q4_K+Q4_K-limbs3-silu", "Q4_K+Q6_K-limbs3-gelu", "Q8_0+Q5_K-q8-silu"),
)
@pytest.mark.parametrize("rows", (1, 2, 5))
def test_one_launch_gives_the_c_kernels_bits(
    monkeypatch, rows: int, types: tuple[QT, QT], limbs: int, gelu: bool
) -> None:
    """act(x gate^T) * (x up^T) and its digits, scales and dsums: the C kernels' product and
    quantize's digits of it, one program a tile and split along K into 2 and 3 ranges."""
    rng = np.random.default_rng(rows)
    c = NativeOps(1, q8=True, limbs=limbs)
    weights = [c.pack(_weight(t, rng)) for t in types]
    x = rng.normal(0, 1, size=(rows, K)).astype(np.float32)
    x[0, :32] = np.arange(32, dtype=np.float32) - 15.5
    g, u = (c.linear(x, w) for w in weights)
    want = on(c.gelu_mul(g, u) if gelu else c.silu_mul(g, u))
    pws = [packed.from_packed(w, DEVICE) for w in weights]
    digits = pws[0].limbs
    xq = quantize(on(x), digits)
    monkeypatch.setattr(intmatmul, "MMA_N", 64)
    groups = -(-rows // mmadecode.TOKENS.value)
    for programs, ranges in ((1, 1), (3 * 2 * groups, 2), (3 * 3 * groups, 3)):
        monkeypatch.setattr(mmadecode, "PROGRAMS", programs)
        assert mmadecode.plan(rows, N, K // 32, 64)[0][2] == ranges
        assert gateup.fits(xq, pws[0], pws[1])
        y, yq = gateup.gated(xq, pws[0], pws[1], gelu)
        assert _same(y, want), f"{rows} rows, {ranges} K ranges"
        ref = quantize(want, digits)
        assert torch.equal(yq.q, ref.q), f"digits, {rows} rows, {ranges} K ranges"
        assert _same(yq.s, ref.s) and _same(yq.dsum, ref.dsum), f"scales, {rows} rows, {ranges} K ranges"
    assert not mmadecode.counts(torch.device(DEVICE), 1).any(), "every count is back to zero"


def test_a_stacked_gate_up_weight_splits_into_its_members(monkeypatch) -> None:
    """gate and up of one type stacked as one packed weight (model.fuse_projections), split by
    gateup.members into views of its groups: the C kernels' bits of each weight on its own."""
    rng = np.random.default_rng(7)
    c = NativeOps(1, q8=True, limbs=3)
    values = [rng.normal(0, 0.05, size=(N, K)).astype(np.float32) for _ in range(2)]
    data = [np.ascontiguousarray(encode_tensor(v, QT.Q4_K, rng)).reshape(-1) for v in values]
    gate, up = (c.pack(Weight.from_info(TensorInfo("w", (N, K), QT.Q4_K, d))) for d in data)
    both = c.pack(Weight.from_info(TensorInfo("w", (2 * N, K), QT.Q4_K, np.concatenate(data))))
    x = rng.normal(0, 1, size=(3, K)).astype(np.float32)
    want = on(c.silu_mul(c.linear(x, gate), c.linear(x, up)))
    members = gateup.members(packed.from_packed(both, DEVICE), (N, N))
    assert [m.out_features for m in members] == [N, N]
    assert gateup.members(packed.from_packed(both, DEVICE), (N - 8, N + 8)) == []  # not whole groups
    monkeypatch.setattr(intmatmul, "MMA_N", 64)
    y, _ = gateup.gated(quantize(on(x), 3), members[0], members[1], False)
    assert _same(y, want)
