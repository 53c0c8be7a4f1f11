"""The integer matmuls' per-block float steps (intmatmul.py's contract), shared by the tile path
and the decode path (mmadecode.py) so that both give one output the same float sequence."""

from __future__ import annotations

import triton
import triton.language as tl

from strata_engine.kernels.triton.ieee import canonical_nan
from strata_engine.kernels.triton.wtypes import IQ2_S, IQ2_XS, Q2_K, Q4_1, Q4_K, Q5_1, Q5_K, Q6_K


@triton.jit
def value(sa, sb, sc, LIMBS: tl.constexpr):
    """The block's exact sum over the limbs' sums, converted once to fp32 (limb.c's limb_value3)."""
    if LIMBS == 1:
        f = sa.to(tl.float32)
    elif LIMBS == 2:
        f = (sb * 256 + sa).to(tl.float32)
    else:
        f = (sc.to(tl.float64) * 65536.0 + (sb * 256 + sa).to(tl.float64)).to(tl.float32)
    return f


@triton.jit
def accumulate(acc, f0, f1, ws0, ws1, mn, mn1, s, dsum, dsum1, WT: tl.constexpr):
    """One block's float steps, in the C kernels' order (all operands broadcast to acc's shape;
    f1, ws1, mn1 and dsum1 the second half's, read by the types with two: Q6_K, Q2_K, IQ2_XS,
    IQ2_S)."""
    acc = tl.fma(ws0 * s, f0, acc)
    if WT == Q6_K or WT == Q2_K or WT == IQ2_XS or WT == IQ2_S:  # noqa: SIM109 (the second half's scale)
        acc = tl.fma(ws1 * s, f1, acc)
    if WT == Q4_1 or WT == Q5_1:  # noqa: SIM109 (+ min * dsum)
        acc = tl.fma(mn, dsum, acc)
    elif WT == Q4_K or WT == Q5_K:  # noqa: SIM109 (a jit function: constexpr tests, no `in`)
        # - (dmin * m) * dsum, as fma(dmin * m, -dsum, acc)
        acc = tl.fma(mn, -dsum, acc)
    elif WT == Q2_K:  # after both halves' scales, each half's min on that half's dsum
        acc = tl.fma(mn, -dsum, acc)
        acc = tl.fma(mn1, -dsum1, acc)
    return acc


@triton.jit
def epilogue(acc, b_ptr, r_ptr, y_ptr, rn, rows, rmask, N, HAS_BIAS: tl.constexpr, HAS_RES: tl.constexpr):
    """y of the decode path's (outputs rn, rows) from acc: + bias, NaNs made canonical, + the
    residual, stored."""
    if HAS_BIAS:
        acc = acc + tl.load(b_ptr + rn, mask=rn < N, other=0.0)[:, None]
    acc = canonical_nan(acc)
    at = rows.to(tl.int64)[None, :] * N + rn[:, None]
    if HAS_RES:  # the residual stream's x + y, the model's fp32 addition
        acc = tl.load(r_ptr + at, mask=rmask[None, :] & (rn < N)[:, None], other=0.0) + acc
    tl.store(y_ptr + at, acc, mask=rmask[None, :] & (rn < N)[:, None])
