"""The kernels that quantise the activation they make (RMSNorm's and the gated FFN's, for the
integer matmul's input) give the bits of the two kernels they replace: the normed or gated rows
of norm.py / activation.py, and quantize.py's digits, scales and dsums of those rows, which the
other Triton tests hold to the C kernels. Edge blocks (zero, NaN, overflow, subnormal, a row
longer than one step of the fused kernel) are reached here, where an engine's rows do not."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from strata_engine.testing import triton_setup  # noqa: F401  (before triton: TRITON_INTERPRET=1 without a GPU)

pytest.importorskip(
    "triton", reason="the Triton kernels need `pip install triton` (the engine's [gpu] extra)"
)

from strata_engine.kernels.triton import activation, norm, quantize
from strata_engine.kernels.triton.quantize import Quantised
from strata_engine.testing.triton_setup import on


def _rows(k: int, seed: int) -> np.ndarray:
    """Rows whose blocks reach the quantisation's edges once normed or gated: a zero block, a
    NaN, an infinity, values near fp32's largest and below limb.c's 2^-100, plain rows."""
    x = np.random.default_rng(seed).normal(0, 1, size=(7, k)).astype(np.float32)
    x[0, :32] = 0.0
    x[1, 40] = np.nan
    x[2, 3] = np.inf
    x[3, 32:64] = 3e38
    x[4, :] *= np.float32(2.0**-60)
    x[4, :32] = 1e-40
    return x


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.contiguous().view(torch.int32), b.contiguous().view(torch.int32))


def _same_quantised(got: Quantised, want: Quantised) -> None:
    assert torch.equal(got.q, want.q), "digits"
    assert _same(got.s, want.s) and _same(got.dsum, want.dsum), "scales or dsums"


@pytest.mark.parametrize("limbs", (1, 2, 3))
@pytest.mark.parametrize("k", (96, 1280))  # 1280: more blocks than one step of the fused kernel
def test_rmsnorm_quantised_is_rmsnorm_then_quantize(limbs: int, k: int) -> None:
    x = on(_rows(k, k + limbs))
    w = np.random.default_rng(1).normal(0, 1, k).astype(np.float32)
    w[64:96] = 0.0  # a block the weight zeroes
    w[:8] = 1e-38  # tiny products: subnormal and zero blocks
    y, xq = norm.rmsnorm_quantize(x, on(w), 1e-5, limbs)
    want = norm.rmsnorm(x, on(w), 1e-5)
    assert _same(y, want)
    _same_quantised(xq, quantize.quantize(want, limbs))
    assert torch.isnan(xq.s).any() == (limbs > 1)  # the NaN row reached (q8 ignores NaN)


@pytest.mark.parametrize("limbs", (1, 3))
@pytest.mark.parametrize("gelu", (False, True), ids=("silu", "gelu"))
def test_gated_quantised_is_gated_then_quantize(limbs: int, gelu: bool) -> None:
    g, u = on(_rows(160, 2) * 30), on(_rows(160, 3))  # gates past e^x's range both ways
    y, xq = activation.gated_quantize(g, u, gelu, limbs)
    want = activation.gelu_mul(g, u) if gelu else activation.silu_mul(g, u)
    assert _same(y, want)
    _same_quantised(xq, quantize.quantize(want, limbs))


@pytest.mark.parametrize("limbs", (1, 3))
@pytest.mark.parametrize(("h", "kvh", "d"), [(6, 2, 64), (4, 4, 32)], ids=["gqa3", "mha"])
def test_attention_quantised_is_attention_then_quantize(limbs: int, h: int, kvh: int, d: int) -> None:
    """The attention kernel's output rows [T, H D] quantised in its epilogue (for the attention
    output's matmul) are quantize.py's of its output; the output itself is unchanged (the edge
    blocks are the other fused kernels' cases here: the same store_blocks)."""
    from strata_engine.kernels.triton import attention
    from strata_engine.testing.triton_checks import LENGTHS, POSITIONS, TOKEN_SEQ, attention_meta, paged_cache

    bs = 16
    k, v, tables = paged_cache(LENGTHS, kvh, d, bs, seed=h + d)
    q = np.random.default_rng(d + limbs).standard_normal((len(POSITIONS), h, d)).astype(np.float32)
    q[3, 1] *= np.float32(2.0**-120)  # a head whose scores are all tiny: a uniform softmax
    meta = attention_meta(tables, TOKEN_SEQ, POSITIONS, bs)
    args = (on(q), on(k), on(v), meta, on(meta.positions), on(meta.token_seq), on(meta.block_tables))
    mp = int(meta.positions.max())
    want = attention.attention(*args, mp)
    got, xq = attention.attention_quantize(*args, mp, None, 0, 0.0, None, limbs)
    assert _same(got, want) and xq is not None
    _same_quantised(xq, quantize.quantize(want.reshape(len(POSITIONS), -1), limbs))


def test_a_matmul_reads_the_made_digits_only_for_the_rows_they_were_made_from() -> None:
    """The backend pairs a fused kernel's output with its digits and hands them to an integer
    matmul that reads those same rows (also as a contiguous view of their storage, as the
    attention output [T, H, D] is read as [T, H D]); any other input of the matmul (another
    tensor of the same shape, a changed copy, some of the rows) is quantised on its own. Each
    product must equal that of a backend that made nothing (its input quantised anew)."""
    from gguf import GGMLQuantizationType as QT

    from strata_engine.gguf_loader import TensorInfo
    from strata_engine.kernels.triton.backend import TritonOps
    from strata_engine.kernels.weights import Weight

    n, k = 37, 128
    rng = np.random.default_rng(11)
    blocks = rng.integers(0, 256, (n * k // 32, 34), dtype=np.uint8)  # Q8_0: fp16 d, 32 quants
    blocks[:, :2] = np.full((len(blocks), 1), 0.01, np.float16).view(np.uint8)
    ops, fresh = (TritonOps(on(np.zeros(1)).device, limbs=3) for _ in range(2))
    w = ops.pack(Weight.from_info(TensorInfo("w", (n, k), QT.Q8_0, blocks.reshape(-1))))
    y = ops.rmsnorm(on(rng.normal(0, 1, (4, k)).astype(np.float32)), on(np.ones(k, np.float32)), 1e-6)
    inputs = {
        "another tensor": on(rng.normal(0, 1, (4, k)).astype(np.float32)),
        "a changed copy": y.clone().mul_(2.0),
        "some of the rows": y[:2],
        "the rows": y,
        "a view of their storage": y.view(4, 2, k // 2).reshape(4, k),
    }
    for name, x in inputs.items():
        assert _same(ops.linear(x, w), fresh.linear(x, w)), name
