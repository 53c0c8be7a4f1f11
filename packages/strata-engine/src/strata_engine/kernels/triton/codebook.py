"""The 4-bit codebook types (IQ4_NL, IQ4_XS, MXFP4) in the C packer's bytes, decoded on the device.

strata_q8_pack holds them as the loader does (WT_HALF_SCALES: the file's own scale fields), per
group of 16 outputs and block of 32 inputs (native/q8.h's top comment):

- IQ4_NL: the file's fp16 d f16[16], then the 4 x 64 bytes of 4-bit indices (Q4_0's nibble
  layout), 4.5 bits a weight;
- MXFP4: the file's e8m0 bytes u8[16], then the indices, 4.25 bits a weight;
- IQ4_XS: no scales a block; before every 8th block its super-block's fields as the file stores
  them, d f16[16], scales_h u16[16], scales_l u32[16] (128 bytes), then 8 blocks of indices,
  4.25 bits a weight; block j's scale d * (ls - 32), ls its 6-bit scale.

Each call of the C kernels looks a group up into the Q8_0 group of the same values (lookup_group:
codebook[index] a byte, the scale as fp32, each conversion exact); the device does the same in
registers, the 16 int8 entries held as four 32-bit constants (no memory read): the decode MMA
takes a packed word's 8 indices at once by byte permutes (`words`: PTX prmt, under the interpreter
its documented function written out), the tile path and a tied head's rows one index at a time
(`lookup`: the constant picked by the index's top two bits, its byte by the low two), and the
scale is converted where it is read. The integer sums and the float sequence are then Q8_0's, so
the bits are the C kernels'.

The device's type code for them is the held one (code | WT_HALF_SCALES, `*_H` below): a packing
with fp32 scales (the code alone) never reaches the device (stored.for_packing).
"""

from __future__ import annotations

import os

import numpy as np
import triton
import triton.language as tl

from strata_engine.kernels import transcode
from strata_engine.kernels.triton.wtypes import IQ4_NL, IQ4_XS, MXFP4
from strata_engine.kernels.weight_types import HALF_SCALES

IQ4_NL_H = tl.constexpr(IQ4_NL.value | HALF_SCALES)
IQ4_XS_H = tl.constexpr(IQ4_XS.value | HALF_SCALES)
MXFP4_H = tl.constexpr(MXFP4.value | HALF_SCALES)
HELD = (IQ4_NL_H.value, IQ4_XS_H.value, MXFP4_H.value)
# Triton's interpreter runs no PTX: there `_prmt` is its documented function written out
_EMULATE = tl.constexpr(os.environ.get("TRITON_INTERPRET") == "1")


def _entry_words(values: np.ndarray) -> list[tl.constexpr]:
    """A codebook's 16 int8 entries as four little-endian int32 words (entry 4 w + c is byte c)."""
    return [tl.constexpr(int(v)) for v in np.asarray(values, np.int8).view(np.int32)]


NL0, NL1, NL2, NL3 = _entry_words(transcode.IQ4_VALUES)
MX0, MX1, MX2, MX3 = _entry_words(transcode.MXFP4_VALUES)


def codebook(t: int) -> np.ndarray:
    """The int8 codebook of a held codebook type (gguf-py's)."""
    return transcode.MXFP4_VALUES if t == MXFP4_H.value else transcode.IQ4_VALUES


@triton.jit
def _table(i, T0: tl.constexpr, T1: tl.constexpr, T2: tl.constexpr, T3: tl.constexpr):
    word = tl.where((i & 8) != 0, tl.where((i & 4) != 0, T3, T2), tl.where((i & 4) != 0, T1, T0))
    return (word >> ((i & 3) * 8)).to(tl.int8)


@triton.jit
def lookup(i, WT: tl.constexpr):
    """int8 codebook[i] of indices i (0 to 15, any integer type), selected in registers."""
    i = i.to(tl.int32)
    if WT == MXFP4_H:  # noqa: SIM108 (a constexpr branch: one kernel per type compiles only its line)
        v = _table(i, MX0, MX1, MX2, MX3)
    else:
        v = _table(i, NL0, NL1, NL2, NL3)
    return v


@triton.jit
def _prmt(a, b, s):
    """PTX's prmt.b32 d, a, b, s with every selector's msb 0: byte n of d is byte (s >> 4 n) & 7
    of the 8 bytes {b, a} (a's bytes 0-3, b's 4-7); s's bits above 16 are not read."""
    if _EMULATE:
        d = tl.zeros_like(s)
        for n in tl.static_range(4):
            k = (s >> (4 * n)) & 7
            d = d | ((((tl.where(k < 4, a, b)) >> ((k & 3) * 8)) & 255) << (8 * n))
    else:
        d = tl.inline_asm_elementwise(
            "prmt.b32 $0, $1, $2, $3;", "=r,r,r,r", [a, b, s], dtype=tl.int32, is_pure=True, pack=1
        )
    return d


@triton.jit
def _words(w, T0: tl.constexpr, T1: tl.constexpr, T2: tl.constexpr, T3: tl.constexpr):
    zero = w & 0
    s = w & 0x77777777  # each index's low 3 bits: its byte in entries 0-7 and in 8-15
    e0, e1, e2, e3 = zero + T0, zero + T1, zero + T2, zero + T3
    # entries (indices 0-7, 8-15) of nibbles 0-3, then of nibbles 4-7
    a1, b1 = _prmt(e0, e1, s), _prmt(e2, e3, s)
    a2, b2 = _prmt(e0, e1, s >> 16), _prmt(e2, e3, s >> 16)
    pick = 0x32103210 | ((w >> 1) & 0x44444444)  # nibble n: byte n of the low or (bit 3) the high
    r1, r2 = _prmt(a1, b1, pick), _prmt(a2, b2, pick >> 16)  # nibble n's entry in byte n (r2: n - 4)
    return _prmt(r1, r2, zero + 0x6420), _prmt(r1, r2, zero + 0x7531)


@triton.jit
def words(w, WT: tl.constexpr):
    """(low, high) words of int8 codebook entries from a packed word of 8 indices (byte c: an index
    in its low nibble and one in its high): byte c of low is codebook[w's byte c & 15], of high
    codebook[its byte c >> 4]. Byte permutes select them from the entries held as four 32-bit
    constants (8 byte permutes and about 5 other instructions for 8 weights; no memory read)."""
    if WT == MXFP4_H:
        lo, hi = _words(w, MX0, MX1, MX2, MX3)
    else:
        lo, hi = _words(w, NL0, NL1, NL2, NL3)
    return lo, hi


@triton.jit
def _word(wf_ptr, at, live):
    """The 4-byte word holding byte `at` (the packed layout's fields are aligned to their size)."""
    return tl.load(wf_ptr + (at >> 2), mask=live, other=0.0).to(tl.int32, bitcast=True)


@triton.jit
def _half(wf_ptr, at, o, live):
    """The fp16 at byte `at` (2 o past a multiple of 4) as fp32: exact (f16_at's value; a NaN's
    payload aside)."""
    bits = (_word(wf_ptr, at, live) >> ((o & 1) * 16)).to(tl.int16)
    return bits.to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def scale(wf_ptr, blk, o, live, WT: tl.constexpr):
    """Output o's scale of an IQ4_NL or MXFP4 block at `blk` as fp32 (packed_codebook_scale's):
    the file's fp16 d, or 2^(E - 128) from the e8m0 byte E (e8m0_half_at: E < 2 the subnormals)."""
    if WT == MXFP4_H:
        e = (_word(wf_ptr, blk + o, live) >> ((o & 3) * 8)) & 255
        bits = tl.where(e < 2, 0x00200000 << e, (e - 1) << 23)
        s = bits.to(tl.float32, bitcast=True)
    else:
        s = _half(wf_ptr, blk + 2 * o, o, live)
    return s


@triton.jit
def xs_header(wf_ptr, head, o, live):
    """An IQ4_XS super-block's fields for output o from its header at `head`: (d as fp32,
    scales_h, scales_l) as int32."""
    d = _half(wf_ptr, head + 2 * o, o, live)
    h = (_word(wf_ptr, head + 32 + 2 * o, live) >> ((o & 1) * 16)) & 0xFFFF
    return d, h, _word(wf_ptr, head + 64 + 4 * o, live)


@triton.jit
def xs_scale(d, h, lo, j):
    """Block j's scale of its super-block: d * (ls - 32), ls = nibble j of scales_l with bits 2j,
    2j + 1 of scales_h above it (iq4_xs_ls): the C kernels' one fp32 product."""
    ls = ((lo >> (4 * j)) & 15) | (((h >> (2 * j)) & 3) << 4)
    return d * (ls - 32).to(tl.float32)
