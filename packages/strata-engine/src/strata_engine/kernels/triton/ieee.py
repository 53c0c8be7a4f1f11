"""The C kernels' fixed float sequences (native/vector.h) as Triton functions, so that a Triton
kernel built from them computes the CPU's bits.

vector.h defines the arithmetic: a 16-lane vector `vf` whose every operation is one IEEE
single-precision operation per lane. Each function here performs exactly the operations of its
vector.h namesake, in the same order: plain `*`/`+`/`-` where C does (kernels compile with
`enable_fp_fusion=False`, LAUNCH below, so the compiler never contracts them into an FMA),
`tl.fma` where C calls vf_fma, `tl.div_rn`/`tl.sqrt_rn` for C's correctly rounded division and
square root, and `tl.where` comparisons for vf_max/vf_min (whose NaN and signed-zero rules are
the C ternaries', not an instruction set's max). Reductions are never `tl.sum`/`tl.max` over more
than two values when their order could change a bit: `hsum16` is vf_hsum's fixed tree.

The constants are C's float literals as fp32 values (their decimal expansions here are exact).
"""

from __future__ import annotations

import os
from typing import Any

import triton
import triton.language as tl

# Launch options of every float kernel: no multiply-add contraction (C builds with
# -ffp-contract=off). The interpreter ignores launch options it has no use for.
LAUNCH: dict[str, Any] = {"enable_fp_fusion": False}
# Under Triton's interpreter (tests without a GPU) an operation costs the same for a tensor of 16
# values or of 16000, so kernels take more rows a program there; which outputs share a program
# never changes an output's operations, so the bits are the same either way.
# STRATA_TRITON_GPU_TILES=1 keeps the GPU's tile sizes under the interpreter: the compile check
# (strata_engine/testing/triton_compile.py) records the launches a GPU would make.
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1" and os.environ.get("STRATA_TRITON_GPU_TILES") != "1"


def fit(n: int, most: int, least: int = 1) -> int:
    """A program's size along an axis of `n` items, at most `most` (the module's constant): `most`
    on a GPU; under the interpreter (INTERPRETED) the least power of two from `least` that holds
    `n`, since there every operation also pays for the padding past `n`. A speed choice only, as
    `most` is: which items share a program never changes an item's operations."""
    if not INTERPRETED:
        return most
    return max(least, min(most, triton.next_power_of_2(max(n, 1))))


@triton.jit
def vmax(a, b):
    """vf_max: a > b ? a : b, lane-wise (a NaN in `a` never wins)."""
    return tl.where(a > b, a, b)


@triton.jit
def vmin(a, b):
    """vf_min: a < b ? a : b, lane-wise."""
    return tl.where(a < b, a, b)


@triton.jit
def exp(x):
    """vf_exp: x clamped to [-87.3, 88.3], k = round(x / ln2) by the 1.5 * 2^23 trick, r by
    Cody-Waite (two FMAs), e^r by Taylor to degree 7 in Horner form (FMAs), times 2^k."""
    x = vmin(vmax(x, -87.30000305175781), 88.30000305175781)
    k = (x * 1.4426950216293335 + 12582912.0) - 12582912.0
    r = tl.fma(k, -0.693359375, x)
    r = tl.fma(k, 0.00021219444170128554, r)
    p = tl.fma(tl.full(x.shape, 0.00019841270113829523, tl.float32), r, 0.0013888889225199819)
    p = tl.fma(p, r, 0.008333333767950535)
    p = tl.fma(p, r, 0.0416666679084301)
    p = tl.fma(p, r, 0.1666666716337204)
    p = tl.fma(p, r, 0.5)
    p = tl.fma(p, r, 1.0)
    p = tl.fma(p, r, 1.0)
    two_k = ((k.to(tl.int32) + 127) << 23).to(tl.float32, bitcast=True)
    return p * two_k


@triton.jit
def tanh(x):
    """vf_tanh: x clamped to [-9, 9], then 1 - 2 / (e^(2x) + 1)."""
    x = vmin(vmax(x, -9.0), 9.0)
    e = exp(x + x)
    return 1.0 - tl.div_rn(tl.full(x.shape, 2.0, tl.float32), e + 1.0)


@triton.jit
def hsum16(v, ROWS: tl.constexpr):
    """vf_hsum of each row of v [ROWS, 16]: lanes (i, i+8), then (i, i+4), (i, i+2), (0, 1).

    Each step pairs two lanes by a reshape and a split (one addition per pair, so no order for
    the compiler to choose)."""
    a, b = tl.split(tl.permute(v.reshape(ROWS, 2, 8), 0, 2, 1))
    s = a + b
    a, b = tl.split(tl.permute(s.reshape(ROWS, 2, 4), 0, 2, 1))
    s = a + b
    a, b = tl.split(tl.permute(s.reshape(ROWS, 2, 2), 0, 2, 1))
    s = a + b
    a, b = tl.split(s)
    return a + b


# The one NaN every row leaves a kernel with: 0x7FC00000, C's NAN (sign clear, quiet, no payload).
NAN_BITS = tl.constexpr(0x7FC00000)


@triton.jit
def canonical_nan(x):
    """x (fp32) with every NaN as NAN_BITS. x86 propagates a NaN operand's payload (and makes
    0xFFC00000 from finite operands, as in inf - inf); NVIDIA's arithmetic returns its canonical
    0x7FFFFFFF for every NaN: so a NaN's bits depend on the device until they are replaced, at the
    end of each kernel whose output is a row (logprobs, matmul outputs). A select, no arithmetic:
    every other value keeps its bits."""
    return tl.where(x != x, tl.full(x.shape, NAN_BITS, tl.int32).to(tl.float32, bitcast=True), x)


@triton.jit
def lane(v, i, LANES: tl.constexpr):
    """Lane i of each row of v [ROWS, LANES], exactly: every other lane becomes -0.0, the
    identity of addition (x + -0.0 == x for every x, +0.0 and -0.0 included), so any summation
    order returns lane i's bits."""
    return tl.sum(tl.where(tl.arange(0, LANES)[None, :] == i, v, -0.0), axis=1)


@triton.jit
def log_d(x):
    """vector.h's log_d: the natural log of a positive, normal double, from basic double
    operations only: x = m 2^e, m in [sqrt(1/2), sqrt(2)), log m = 2 atanh((m-1)/(m+1)) by its
    series to the power 23 in Horner form (separate multiply and add), plus e ln 2."""
    bits = x.to(tl.int64, bitcast=True)
    e = ((bits >> 52) & 0x7FF) - 1023
    m = ((bits & 0x000FFFFFFFFFFFFF) | 0x3FF0000000000000).to(tl.float64, bitcast=True)
    big = m > 1.4142135623730951
    m = tl.where(big, m * 0.5, m)
    e = tl.where(big, e + 1, e)
    f = (m - 1.0) / (m + 1.0)  # fp64 division is correctly rounded (div.rn.f64)
    s = f * f
    q = tl.full(f.shape, 0.043478260869565216, tl.float64)  # 1/23
    q = q * s + 0.047619047619047616  # 1/21
    q = q * s + 0.05263157894736842  # 1/19
    q = q * s + 0.058823529411764705  # 1/17
    q = q * s + 0.06666666666666667  # 1/15
    q = q * s + 0.07692307692307693  # 1/13
    q = q * s + 0.09090909090909091  # 1/11
    q = q * s + 0.1111111111111111  # 1/9
    q = q * s + 0.14285714285714285  # 1/7
    q = q * s + 0.2  # 1/5
    q = q * s + 0.3333333333333333  # 1/3
    q = q * s + 1.0  # 1/1
    return e.to(tl.float64) * 0.6931471805599453 + (2.0 * f) * q
