"""Q2_K on the device's integer kernels: its 2-bit quants unpacked in registers, and the per-half
min factors its float sequence takes (native/q8.h's top comment states both).

The C packer (strata_q8_pack) writes a Q2_K block of a group of 16 outputs as its scale-and-min
bytes (one a half and output: sc | m << 4), then two planes of 64 bytes, one a half h: bits 2r,
2r + 1 of byte 4o + c are w(o, 16h + 4r + c), in [0, 3] (offset 0). The quants are summed per
half (each half has its own scale), and per block the float steps are

    acc = fma((d * sc_0) * s, (float)S_0, acc), then half 1's,
    acc = fma(dmin * m_0, -dsum_0, acc), then half 1's,

with dsum_h = s * (float)(sum of half h's activation integers): limb_quantize_block's (and
q8_quantize's) dsum[h] for Q2_K. The activations the device quantises carry one dsum a block
(every other type's), so the kernels form each half's from the digits themselves: an exact
integer sum, then the same one multiplication, hence the C kernels' value.
"""

from __future__ import annotations

import triton
import triton.language as tl

from strata_engine.kernels.triton.wtypes import Q2_K


@triton.jit
def pairs(wf_ptr, qw, live):
    """mmadecode._weights' (lo, hi) words for a Q2_K block of BN outputs: int32 [BN, 4], byte c
    of word r element 4r + c of half 0 (lo) and half 1 (hi), from each half's plane word (`qw`:
    output o's word of half 0's plane; half 1's is 16 words on)."""
    r = tl.arange(0, 4)[None, :]
    p0 = tl.load(wf_ptr + qw[:, None], mask=live[:, None], other=0.0).to(tl.int32, bitcast=True)
    p1 = tl.load(wf_ptr + qw[:, None] + 16, mask=live[:, None], other=0.0).to(tl.int32, bitcast=True)
    return (p0 >> (2 * r)) & 0x03030303, (p1 >> (2 * r)) & 0x03030303


@triton.jit
def quants(wq_ptr, qs, k, o, live):
    """packed.quants for Q2_K: w(o, k) of one block, bits 2r, 2r + 1 of half k / 16's plane."""
    byte = tl.load(wq_ptr + qs + (k >> 4) * 64 + 4 * o + (k & 3), mask=live, other=0).to(tl.int32)
    return (byte >> (2 * ((k & 15) >> 2))) & 3


@triton.jit
def scales(wq_ptr, blk, o, live, d, dmin):
    """(d * sc_0, d * sc_1, dmin * m_0, dmin * m_1) per output: the load's own fp32 products of
    each half's byte sc | m << 4 (q8_scale, q8_add_min)."""
    sm0 = tl.load(wq_ptr + blk + o, mask=live, other=0).to(tl.int32)
    sm1 = tl.load(wq_ptr + blk + 16 + o, mask=live, other=0).to(tl.int32)
    return (
        d * (sm0 & 15).to(tl.float32),
        d * (sm1 & 15).to(tl.float32),
        dmin * (sm0 >> 4).to(tl.float32),
        dmin * (sm1 >> 4).to(tl.float32),
    )


@triton.jit
def _half_sums(q_ptr, xb, rmask, LIMBS: tl.constexpr, WORDS: tl.constexpr):
    """Each row's exact sums of its integers X over half 0 and half 1 of block `xb` (int32:
    |sum| < 2^28), from the digits: sum_j 256^j (limb j's digit sum), by Horner's rule. `q_ptr`
    the int8 digits [M, nb, LIMBS, 32], or (WORDS) the same as int32 words, 8 a limb."""
    h0 = tl.zeros(xb.shape, tl.int32)
    h1 = tl.zeros(xb.shape, tl.int32)
    for i in tl.static_range(LIMBS):
        at = (xb * LIMBS + (LIMBS - 1 - i))[:, None]
        if WORDS:
            w = tl.arange(0, 8)[None, :]
            x = tl.load(q_ptr + at * 8 + w, mask=rmask[:, None], other=0)
            x = ((x << 24) >> 24) + ((x << 16) >> 24) + ((x << 8) >> 24) + (x >> 24)
            first = w < 4
        else:
            k = tl.arange(0, 32)[None, :]
            x = tl.load(q_ptr + at * 32 + k, mask=rmask[:, None], other=0).to(tl.int32)
            first = k < 16
        lo = tl.sum(tl.where(first, x, 0), axis=1)
        h0 = h0 * 256 + lo
        h1 = h1 * 256 + (tl.sum(x, axis=1) - lo)
    return h0, h1


@triton.jit
def dsums(q_ptr, s_ptr, dsum_ptr, xb, rmask, LIMBS: tl.constexpr, WT: tl.constexpr, WORDS: tl.constexpr):
    """The min factors of block `xb` per row, for half 0 and half 1: the quantiser's dsum for
    both (the types with one min a block), or Q2_K's dsum_h = s * (float)(half h's sum): a zero
    block's 0, and a NaN block's 0 as limb_quantize_block gives it (q8's rule: s * 0)."""
    if WT == Q2_K:
        s = tl.load(s_ptr + xb, mask=rmask, other=0.0)
        h0, h1 = _half_sums(q_ptr, xb, rmask, LIMBS, WORDS)
        d0 = s * h0.to(tl.float32)
        d1 = s * h1.to(tl.float32)
        if LIMBS > 1:  # a zero or NaN block's integers are all 0, its dsums 0 (s may be NaN)
            d0 = tl.where(h0 == 0, 0.0, d0)
            d1 = tl.where(h1 == 0, 0.0, d1)
    else:
        d0 = tl.load(dsum_ptr + xb, mask=rmask, other=0.0)
        d1 = d0
    return d0, d1
