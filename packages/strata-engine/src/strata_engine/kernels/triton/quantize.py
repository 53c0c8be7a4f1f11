"""Activations as integers for the integer matmul: the C kernels' rules (native/q8.c,
native/limb.c), bit for bit, one program per row and run of blocks of 32.

Why integers: a dot product of integer quants is exact, so neither the device nor the order of
its sums can change it; only a short, fixed float sequence per output remains (intmatmul.py).
That holds only if both devices quantise a block to the same integers and scale, so this module
repeats the C code's operations exactly:

- `limbs` 1 (q8's rule, kernels "native-q8"): amax = max |x| (NaN ignored), d = amax / 127,
  q = round-half-even(x * (127 / amax)) where that lies within +-127, else 0 (NaN, infinity, or
  an amax so small that 127 / amax overflows); fp32 with IEEE division (`div_rn`) and the
  portable C's 1.5 * 2^23 rounding trick.
- `limbs` 2 or 3 (limb.c's `limb_quantize_block`): s = 2^sh, the smallest power of two with
  every |X| = |round-half-even(x / s)| <= 127 (256^k - 1) / 255, formed in fp64 with the 1.5 *
  2^52 trick; X split into k balanced int8 digits. A block with a NaN or infinity gets s = NaN,
  one whose largest |x| is 0 or below 2^-100 is zero.

Every block also gets dsum = s * (float)(sum of its integers), the min term's factor. A max and
an integer sum are exact in any order, so `tl.max`/`tl.sum` are free here; every float operation
is a single IEEE operation, so fusion (off where a compiler runs) cannot change the bits either.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from strata_engine.kernels.triton.ieee import INTERPRETED, LAUNCH, fit

# blocks of 32 per program, counted over the whole [M, nb] grid: a speed choice only (each block
# is quantised alone); the interpreter pays Python time a program, so there a program takes more
BLOCKS = 256 if INTERPRETED else 8
LIMB_MIN_EXP = -100  # limb.c: blocks whose largest |x| is below 2^-100 are zero
XMAX = {2: 32639, 3: 8355711}  # 127 (256^k - 1) / 255: the largest |X| with k balanced digits


@dataclass(frozen=True)
class Quantised:
    """Rows of activations as the integer matmul reads them (limb.c's limb_rows)."""

    q: torch.Tensor  # int8 [M, nb, limbs, 32]: digit j of element k of block b
    s: torch.Tensor  # fp32 [M, nb]: the block's scale (q8: d = amax / 127)
    dsum: torch.Tensor  # fp32 [M, nb]: s * (float)(sum of the block's integers)
    limbs: int


@triton.jit(do_not_specialize=["total"])
def _quantize_kernel(
    x_ptr, q_ptr, s_ptr, dsum_ptr, total,
    LIMBS: tl.constexpr, SHIFT: tl.constexpr, XMAX: tl.constexpr, MIN_EXP: tl.constexpr,
    BB: tl.constexpr,
):  # fmt: skip
    blocks = tl.program_id(0).to(tl.int64) * BB + tl.arange(0, BB)  # indices in the row-major grid
    ok = blocks < total
    k = tl.arange(0, 32)
    x = tl.load(x_ptr + blocks[:, None] * 32 + k[None, :], mask=ok[:, None], other=0.0)
    store_blocks(x, blocks, ok, q_ptr, s_ptr, dsum_ptr, LIMBS, SHIFT, XMAX, MIN_EXP)


@triton.jit
def store_blocks(
    x, blocks, ok, q_ptr, s_ptr, dsum_ptr,
    LIMBS: tl.constexpr, SHIFT: tl.constexpr, XMAX: tl.constexpr, MIN_EXP: tl.constexpr,
):  # fmt: skip
    """Blocks x [BB, 32] (the grid's blocks `blocks`, stored where `ok`) quantised: their digits,
    scales and dsums. Kernels that compute an activation call it on their own output tile, so
    the row is quantised where it is made (norm.py, activation.py) with these same operations."""
    k = tl.arange(0, 32)
    at = blocks[:, None]  # [BB, 1]
    a = tl.abs(x)
    if LIMBS == 1:
        amax = tl.max(tl.where(a > 0.0, a, 0.0), axis=1)  # a NaN never wins, as in q8_quantize
        pos = amax > 0.0
        inv = tl.where(pos, tl.math.div_rn(tl.zeros_like(amax) + 127.0, tl.where(pos, amax, 1.0)), 0.0)
        v = x * inv[:, None]
        r = (v + 12582912.0) - 12582912.0  # 1.5 * 2^23: to nearest, ties to even
        n = tl.where((r >= -127.0) & (r <= 127.0), r, 0.0).to(tl.int32)
        tl.store(q_ptr + at * 32 + k[None, :], n.to(tl.int8), mask=ok[:, None])
        s = tl.math.div_rn(amax, tl.zeros_like(amax) + 127.0)
        dsum = s * tl.sum(n, axis=1).to(tl.float32)
    else:
        finite = a <= 3.4028234663852886e38  # false for NaN and infinity
        bad = tl.max(tl.where(finite, 0, 1), axis=1) > 0
        amax = tl.max(tl.where(finite, a, 0.0), axis=1)
        e = (amax.to(tl.int32, bitcast=True) >> 23) - 127  # floor(log2(amax)) for a normal amax
        zero = bad | (amax == 0.0) | (e < MIN_EXP)
        sh = e - SHIFT
        big = 6755399441055744.0  # 1.5 * 2^52: (v + big) - big is v to nearest, ties to even
        t = (amax.to(tl.float64) * _pow2d(-sh) + big) - big
        sh = tl.where(t > XMAX, sh + 1, sh)
        v = (x.to(tl.float64) * _pow2d(-sh)[:, None] + big) - big  # the product is exact (2^-sh)
        X = tl.where(zero[:, None], 0.0, v).to(tl.int32)
        total = tl.sum(X, axis=1)
        for j in tl.static_range(LIMBS):  # balanced digits: l = X mod 256 in [-128, 127]
            digit = ((X & 255) ^ 128) - 128
            tl.store(q_ptr + (at * LIMBS + j) * 32 + k[None, :], digit.to(tl.int8), mask=ok[:, None])
            X = (X - digit) >> 8  # exact: X - digit is a multiple of 256
        scale = ((tl.where(zero, 0, sh) + 127) << 23).to(tl.float32, bitcast=True)
        nan = (tl.zeros_like(sh) + 0x7FC00000).to(tl.float32, bitcast=True)  # C's NAN: the quiet NaN
        s = tl.where(bad, nan, tl.where(zero, 0.0, scale))
        dsum = tl.where(zero, 0.0, s * total.to(tl.float32))
    tl.store(s_ptr + blocks, s, mask=ok)
    tl.store(dsum_ptr + blocks, dsum, mask=ok)


@triton.jit
def _pow2d(e):
    """2^e as fp64 (e an int32 within fp64's normal range), built from its bits."""
    return ((e + 1023).to(tl.int64) << 52).to(tl.float64, bitcast=True)


def constants(limbs: int) -> dict[str, int]:
    """The quantisation's constexprs for `limbs` (store_blocks' LIMBS, SHIFT, XMAX, MIN_EXP)."""
    if limbs not in (1, 2, 3):
        raise ValueError(f"limbs must be 1 (q8), 2 or 3, not {limbs}")
    return {"LIMBS": limbs, "SHIFT": 8 * limbs - 2, "XMAX": XMAX.get(limbs, 0), "MIN_EXP": LIMB_MIN_EXP}


def allocate(m: int, nb: int, limbs: int, device: torch.device) -> Quantised:
    """Room for m rows of nb blocks in `limbs` digits, as a kernel calling store_blocks fills it."""
    s = torch.empty(m, nb, dtype=torch.float32, device=device)
    return Quantised(
        torch.empty(m, nb, limbs, 32, dtype=torch.int8, device=device), s, torch.empty_like(s), limbs
    )


def quantize(x: torch.Tensor, limbs: int) -> Quantised:
    """Each block of 32 of x [M, K] (K a multiple of 32) as `limbs` int8 digits and a scale."""
    consts = constants(limbs)
    x = x.to(torch.float32).contiguous()
    m, k = x.shape
    if k % 32:
        raise ValueError(f"the integer matmul takes whole blocks of 32 inputs, not K = {k}")
    nb = k // 32
    out = allocate(m, nb, limbs, x.device)
    if m and nb:
        bb = fit(m * nb, BLOCKS)
        _quantize_kernel[(triton.cdiv(m * nb, bb),)](
            x, out.q, out.s, out.dsum, m * nb, BB=bb, **consts, **LAUNCH
        )  # fmt: skip
    return out
