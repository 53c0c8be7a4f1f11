"""A residual update, its RMSNorm and the norm's quantisation in one launch (kernels/triton/addnorm.py)
against the C kernels, bit for bit.

The reference is the C code: NativeOps.linear (strata_q8_matmul / strata_limb_matmul on the bytes
strata_q8_pack wrote), numpy's fp32 residual addition, NativeOps.rmsnorm (strata_rmsnorm); the
digits are quantize.py's of that norm (held to the C quantisers by the other Triton tests).
Without a GPU these run under Triton's interpreter."""

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
from strata_engine.kernels.triton import addnorm, intmatmul, mmadecode, norm, packed
from strata_engine.kernels.triton.quantize import quantize
from strata_engine.kernels.weights import Weight
from strata_engine.testing.tiny_models import encode_tensor
from strata_engine.testing.triton_setup import DEVICE, on

pytestmark = pytest.mark.filterwarnings("ignore:(overflow|invalid value) encountered:RuntimeWarning")

K = 768  # 24 blocks, 3 super-blocks
N = 160  # 3 tiles of 64 outputs (MMA_N set to 64), the last half full; 5 blocks of 32 a row
EPS = 1e-5


def _same(got: torch.Tensor, want: torch.Tensor) -> bool:
    return got.shape == want.shape and torch.equal(
        got.contiguous().view(torch.int32), want.contiguous().view(torch.int32)
    )


@pytest.mark.parametrize(
    "qtype,limbs", [(QT.Q4_K, 3), (QT.Q6_K, 3), (QT.Q8_0, 0)], ids=("Q4_K-limbs3", "Q6_K-limbs3", "Q8_0-q8")
)
@pytest.mark.parametrize("rows", (1, 5))
def test_one_launch_gives_the_c_kernels_bits(monkeypatch, rows: int, qtype: QT, limbs: int) -> None:
    """residual + x W^T, its RMSNorm and the norm's digits, scales and dsums: the C kernels'
    matmul, fp32 addition and norm and quantize's digits of it, one program a tile and split
    along K into 2 and 3 ranges, with one and two groups of rows (Q8_0 with a bias, as gpt-oss's
    attention output has)."""
    rng = np.random.default_rng(rows)
    c = NativeOps(1, q8=True, limbs=limbs)
    values = rng.normal(0, 0.05, size=(N, K)).astype(np.float32)
    data = np.ascontiguousarray(encode_tensor(values, qtype, rng))
    w = c.pack(Weight.from_info(TensorInfo("w", (N, K), qtype, data.reshape(-1))))
    x = rng.normal(0, 1, size=(rows, K)).astype(np.float32)
    residual = rng.normal(0, 1, size=(rows, N)).astype(np.float32)
    gain = rng.normal(1, 0.1, size=N).astype(np.float32)
    bias = rng.normal(0, 1, size=N).astype(np.float32) if qtype == QT.Q8_0 else None
    want_y = residual + c.linear(x, w, bias)
    want_h = on(c.rmsnorm(want_y, gain, EPS))
    pw = packed.from_packed(w, DEVICE)
    xq = quantize(on(x), pw.limbs)
    ref = quantize(want_h, pw.limbs)
    monkeypatch.setattr(intmatmul, "MMA_N", 64)
    groups = -(-rows // mmadecode.TOKENS.value)
    for programs, ranges in ((1, 1), (3 * 2 * groups, 2), (3 * 3 * groups, 3)):
        monkeypatch.setattr(mmadecode, "PROGRAMS", programs)
        assert mmadecode.plan(rows, N, K // 32, 64)[0][2] == ranges
        assert addnorm.fits(rows, K, pw, on(residual), on(gain))
        y, h, hq = addnorm.linear_add_norm(
            xq, pw, on(residual), on(gain), EPS, None if bias is None else on(bias)
        )
        assert _same(y, on(want_y)), f"the residual, {rows} rows, {ranges} K ranges"
        assert _same(h, want_h), f"the norm, {rows} rows, {ranges} K ranges"
        assert torch.equal(hq.q, ref.q), f"digits, {rows} rows, {ranges} K ranges"
        assert _same(hq.s, ref.s) and _same(hq.dsum, ref.dsum), f"scales, {rows} rows, {ranges} K ranges"
    assert not mmadecode.counts(torch.device(DEVICE), 1).any(), "every count is back to zero"


def test_the_backend_fuses_only_where_the_decode_path_applies(monkeypatch) -> None:
    """fused_norm.add_norm on TritonOps (the integer mode, 3 rows): the C kernels' residual and
    norm, the norm's digits handed on to the next matmul; `linear_add_norm` None (the model's
    separate ops) at more than ROWS_MAX rows and in the fp32 mode; the C kernels' ops have none
    and take the separate ops, the same bits."""
    from strata_engine.fused_norm import add_norm
    from strata_engine.kernels.triton.backend import TritonOps

    rng = np.random.default_rng(11)
    values = rng.normal(0, 0.05, size=(N, K)).astype(np.float32)
    data = np.ascontiguousarray(encode_tensor(values, QT.Q4_K, rng))
    w = Weight.from_info(TensorInfo("w", (N, K), QT.Q4_K, data.reshape(-1)))
    c, ops = NativeOps(1, q8=True, limbs=3), TritonOps(DEVICE, limbs=3)
    x = rng.normal(0, 1, size=(3, K)).astype(np.float32)
    residual = rng.normal(0, 1, size=(3, N)).astype(np.float32)
    gain = rng.normal(1, 0.1, size=N).astype(np.float32)
    want_y = residual + c.linear(x, c.pack(w))
    want_h = c.rmsnorm(want_y, gain, EPS)
    with monkeypatch.context() as m:  # one launch: no RMSNorm launch of its own
        m.setattr(norm, "rmsnorm_quantize", None)
        y, h = add_norm(ops, x, ops.pack(w), residual, gain, EPS)
    assert _same(y, on(want_y)) and _same(h, on(want_h))
    assert ops._made is not None and ops._made[0] is h, "the norm's digits are the next matmul's input"
    assert torch.equal(ops._made[1].q, quantize(on(want_h), 3).q)
    many = np.zeros((intmatmul.ROWS_MAX + 1, K), np.float32)
    assert ops.linear_add_norm(many, ops.pack(w), np.zeros((len(many), N), np.float32), gain, EPS) is None
    fp32 = TritonOps(DEVICE, limbs=None)
    assert fp32.linear_add_norm(x, fp32.pack(w), residual, gain, EPS) is None
    assert not hasattr(c, "linear_add_norm")
    cy, ch = add_norm(c, x, c.pack(w), residual, gain, EPS)
    assert np.array_equal(cy, want_y) and np.array_equal(ch, want_h)
