"""exp, log, sin and cos in float64 that give the same bits on every machine.

numpy's and libm's transcendental functions are picked per CPU (SVML on AVX-512, other
code on AVX2 or NEON) and per library version, and may differ in the last bit. These use
only what IEEE 754 makes exact or correctly rounded everywhere: +, -, *, / on float64
arrays (numpy never fuses them), rint, ldexp and frexp. They serve the numbers outside the C
kernels: the RoPE tables, the renormalised values and the sampler's weights (`draw_weights`, which
the Triton draw kernel computes with the same operations, kernels/triton/draw.py).

Accuracy against the exactly rounded value (measured in tests/test_exactmath.py): exp and
log within 2 ulp; sin and cos within 1e-15 absolute for |x| up to 2**20 * pi/2.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]

LN2_HI = 6.93147180369123816490e-01  # ln 2 split so that k * LN2_HI is exact for |k| < 2**20
LN2_LO = 1.90821492927058770002e-10
INV_LN2 = 1.44269504088896338700e00
EXP_TAYLOR = [1.0 / math.factorial(n) for n in range(13, -1, -1)]  # 1/13!, ..., 1/1!, 1/0!
# pi/2 in three 33-bit parts: k * part is exact for |k| < 2**20 (Cody-Waite reduction)
_PIO2 = (1.57079632673412561417e00, 6.07710050630396597660e-11, 2.02226624871116645580e-21)
_TWO_OVER_PI = 6.36619772367581382433e-01
_SIN_TAYLOR = [(-1) ** n / math.factorial(2 * n + 1) for n in range(8, -1, -1)]  # to r^17
_COS_TAYLOR = [(-1) ** n / math.factorial(2 * n) for n in range(9, -1, -1)]  # to r^18


def _horner(coefficients: list[float], x: F64) -> F64:
    out = np.full_like(x, coefficients[0])
    for c in coefficients[1:]:
        out = out * x + c
    return out


def exp(x: npt.ArrayLike) -> F64:
    """e^x; -inf gives 0, overflow gives inf."""
    x = np.asarray(x, dtype=np.float64)
    clipped = np.clip(x, -745.0, 709.7)
    k = np.rint(clipped * INV_LN2)
    r = (clipped - k * LN2_HI) - k * LN2_LO  # |r| <= ln2/2: Taylor to r^13 leaves < 1e-17
    out = np.ldexp(_horner(EXP_TAYLOR, r), k.astype(np.int64))
    return np.where(x > 709.7, np.inf, np.where(x < -745.0, 0.0, out))


def log(x: npt.ArrayLike) -> F64:
    """Natural log of positive numbers (0 gives -inf); 2 atanh((m-1)/(m+1)) by its series."""
    x = np.asarray(x, dtype=np.float64)
    m, e = np.frexp(np.where(x > 0, x, 1.0))  # m in [0.5, 1)
    small = m < 0.7071067811865476
    m = np.where(small, m * 2.0, m)  # now in [sqrt(1/2), sqrt(2))
    e = np.where(small, e - 1, e).astype(np.float64)
    f = (m - 1.0) / (m + 1.0)
    series = _horner([1.0 / n for n in range(23, 0, -2)], f * f)  # 1 + f^2/3 + f^4/5 + ... + f^22/23
    out = e * LN2_HI + (e * LN2_LO + 2.0 * f * series)
    return np.where(x > 0, out, np.where(x == 0, -np.inf, np.nan))


def sigmoid(x: npt.ArrayLike) -> F64:
    """1 / (1 + e^-x) with `exp` (the hybrid models' gates)."""
    return 1.0 / (1.0 + exp(-np.asarray(x, dtype=np.float64)))


def sin_cos(x: npt.ArrayLike) -> tuple[F64, F64]:
    """(sin x, cos x) for |x| < 2**20 * pi/2 (RoPE angles: position * frequency)."""
    x = np.asarray(x, dtype=np.float64)
    k = np.rint(x * _TWO_OVER_PI)
    r = ((x - k * _PIO2[0]) - k * _PIO2[1]) - k * _PIO2[2]  # |r| <= pi/4
    r2 = r * r
    s = r * _horner(_SIN_TAYLOR, r2)
    c = _horner(_COS_TAYLOR, r2)
    q = k.astype(np.int64) % 4
    sin = np.choose(q, [s, c, -s, -c])
    cos = np.choose(q, [c, -s, -c, s])
    return sin, cos


def log_normalize(values: npt.ArrayLike) -> F64:
    """values - log(sum(e^values)): log-probabilities renormalised over a set (float64)."""
    v = np.asarray(values, dtype=np.float64)
    top = float(v.max())
    total = math.fsum(exp(v - top).tolist())  # fsum: exactly rounded, whatever the order
    return (v - top) - log(total)


WEIGHT_BITS = 32  # a draw's weight is floor(e^x * 2^32): exact integers, summed in any order
WEIGHT_CUTOFF = -24.0  # e^-24 * 2^32 < 1: every x below it weighs 0, so exp never goes subnormal


def draw_weights(x: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """floor(e^x * 2^WEIGHT_BITS) for scores shifted by their maximum (x <= 0), as int64.

    The sampler draws from these integers, not from float probabilities: their sums are exact in
    any order, so a device that adds them in parallel draws the CPU's token (sampler.py). An
    entry below WEIGHT_CUTOFF, -inf or NaN weighs 0; e^x for x in [WEIGHT_CUTOFF, 0] is this
    module's `exp` (k in [-35, 0]: `ldexp` is one exact multiplication by 2^k).
    """
    x = np.asarray(x, dtype=np.float64)
    flat = x.reshape(-1)
    with np.errstate(invalid="ignore"):
        live = np.flatnonzero(flat >= WEIGHT_CUTOFF)  # in a real row, few: exp runs on those only
    weights = np.zeros(flat.shape, dtype=np.int64)
    weights[live] = np.floor(exp(flat[live]) * 2.0**WEIGHT_BITS)  # times a power of two: exact
    return weights.reshape(x.shape)
