"""Dequantisation of GGUF weight blocks inside Triton kernels, one block of 32 weights at a time.

`block` turns block b (weights 32b .. 32b + 31) of rows `rows` of a stored weight into fp32 as
two halves of 16, `lo` (weights 0-15 of the block) and `hi` (16-31): the two vectors C's
`dequant_block` (native/matmul.c) gives, which its matmul feeds to two 16-lane FMAs in that order.
Each value is computed with the float operations gguf-py's numpy dequantiser (`gguf.quants`)
and the C kernels use, in the same order, so the values are gguf-py's bits (kernels launch with
multiply-add fusion off, `ieee.LAUNCH`). A block's scales are read and decoded once per row (a
K-quant's: once per sub-block of 32), its quants as whole bytes.

Layouts (`KT`, the kernel type code; codes and block sizes are strata_wtypes', by name: wtypes.py):
- F32: `wf` is the fp32 tensor itself (rows of `row_bytes / 4` values, any length).
- Q4_0, Q4_1, Q8_0: the engine's layout (`weights.widen_scales`): the fp16 scale (and
  Q4_1's min) widened to fp32 at the start of each 32-value block; `wf` is a fp32 view.
- Q5_0, Q5_1: the engine's layout: d f32, (Q5_1: m f32,) qh u32, qs[16]; `wf` is a fp32 view.
- F16, BF16: 2 bytes a value as stored, widened here by their bits alone (`_f16`: numpy's
  conversion, no float operation but an exact one); read through `wq`.
- Q2_K: the GGUF super-blocks of 256 values as stored (scales[16], qs[64], d f16, dmin f16).
- Q4_K, Q5_K, Q6_K: the raw GGUF super-blocks of 256 values; `wf` is a fp16 view.
- IQ2_XS, IQ2_S: the GGUF super-blocks as stored, after the type's grid (`GRIDS`: one 16-bit word
  of 2-bit codes per entry, native/iq_grids.h's table) at the start of `wq` (stored.py puts it
  there), so that the kernels need no other argument.
"""

from __future__ import annotations

import numpy as np
import triton
import triton.language as tl
from gguf import quants

from strata_engine.kernels.triton.wtypes import (
    BF16,
    BF16_BYTES,
    F16,
    F16_BYTES,
    F32,
    IQ2_S,
    IQ2_S_BYTES,
    IQ2_XS,
    IQ2_XS_BYTES,
    Q2_K,
    Q2_K_BYTES,
    Q4_0,
    Q4_0_BYTES,
    Q4_1,
    Q4_1_BYTES,
    Q4_K,
    Q4_K_BYTES,
    Q5_0,
    Q5_0_BYTES,
    Q5_1,
    Q5_1_BYTES,
    Q5_K,
    Q5_K_BYTES,
    Q6_K,
    Q6_K_BYTES,
    Q8_0,
    Q8_0_BYTES,
)
from strata_engine.kernels.weight_types import BY_CODE


def _grid_words(q: type[quants.IQ2_XS] | type[quants.IQ2_S]) -> np.ndarray:
    """gguf-py's grid of an IQ2 type as 16-bit words: value k of an entry in bits 2k, 2k + 1, its
    code 0, 1, 2 for 8, 25, 43 (native/iq_grids.h's encoding)."""
    q.init_grid()
    assert q.grid is not None
    grid = np.asarray(q.grid, dtype=np.float32).reshape(-1, 8)
    codes = np.searchsorted(np.array([8.0, 25.0, 43.0], dtype=np.float32), grid)
    return (codes << (2 * np.arange(8))).sum(axis=1).astype(np.uint16)


GRIDS = {int(IQ2_XS.value): _grid_words(quants.IQ2_XS), int(IQ2_S.value): _grid_words(quants.IQ2_S)}
IQ2_XS_GRID = tl.constexpr(GRIDS[int(IQ2_XS.value)].nbytes)  # bytes of the grid before the blocks
IQ2_S_GRID = tl.constexpr(GRIDS[int(IQ2_S.value)].nbytes)


def row_bytes(kt: int, in_features: int) -> int:
    """Bytes of one row of `in_features` values in the layout `block` reads."""
    return BY_CODE[kt].row_bytes(in_features, device=True)


@triton.jit
def _u8(wq_ptr, offs, mask):
    return tl.load(wq_ptr + offs, mask=mask, other=0).to(tl.int32)


@triton.jit
def _i8(wq_ptr, offs, mask):
    q = _u8(wq_ptr, offs, mask)
    return tl.where(q >= 128, q - 256, q)


@triton.jit
def _u16(wq_ptr, offs, mask):
    """The little-endian 16-bit integers at byte offsets `offs`."""
    return _u8(wq_ptr, offs, mask) | (_u8(wq_ptr, offs + 1, mask) << 8)


@triton.jit
def _f16(h):
    """fp32 values of IEEE halves `h` (int32 holding their bits), as numpy converts them: built
    from the bits (an inf or NaN keeps its payload); a subnormal is m * 2^-24, one exact product."""
    sign = (h & 0x8000) << 16
    e = (h >> 10) & 31
    m = h & 0x3FF
    sub = (m.to(tl.float32) * 5.9604644775390625e-08).to(tl.int32, bitcast=True)  # 2^-24
    mag = tl.where(e == 31, 0x7F800000 | (m << 13), tl.where(e == 0, sub, ((e + 112) << 23) | (m << 13)))
    return (mag | sign).to(tl.float32, bitcast=True)


@triton.jit
def _iq2(wq_ptr, base, at, i, m, KT: tl.constexpr):
    """(grid value, sign +-1.0) of value i of group `at` (of 8) of the IQ2 super-block at `base`."""
    if KT == IQ2_XS:  # 9 bits of index; llama.cpp's ksigns of the other 7: them and their parity
        q = _u16(wq_ptr, base + 2 + 2 * at, m)
        index = q & 511
        k = q >> 9
        p = k ^ (k >> 4)
        p = p ^ (p >> 2)
        p = p ^ (p >> 1)
        sign = k | ((p & 1) << 7)
    else:  # qs: the low 8 bits, qh: the high 2 (4 groups a byte), signs: a byte a group
        high = (_u8(wq_ptr, base + 66 + at // 4, m) >> (2 * (at % 4))) & 3
        index = _u8(wq_ptr, base + 2 + at, m) | (high << 8)
        sign = _u8(wq_ptr, base + 34 + at, m)
    code = (_u16(wq_ptr, 2 * index, m) >> (2 * i)) & 3
    g = tl.where(code == 0, 8.0, tl.where(code == 1, 25.0, 43.0))
    return g, tl.where(((sign >> i) & 1) == 1, -1.0, 1.0)


@triton.jit
def row_offsets(rows, row_bytes):
    """The byte offset of each of `rows` [R] as a column [R, 1], for `block`."""
    return rows.to(tl.int64)[:, None] * row_bytes


@triton.jit
def block(wq_ptr, wf_ptr, r, b, row_bytes, m, KT: tl.constexpr):
    """(lo, hi): fp32 values [R, 16] of weights 32b .. 32b+15 and 32b+16 .. 32b+31 of the rows
    at byte offsets `r` [R, 1] (`row_offsets`); 0 where `m` [R, 1] is false (F32: and past the
    row's end). Offsets and masks come in computed once per program, not once per block."""
    lane = tl.arange(0, 16)[None, :]
    if KT == F32:
        n = row_bytes // 4
        k_lo = b * 32 + lane
        at = wf_ptr + r // 4 + k_lo
        lo = tl.load(at, mask=m & (k_lo < n), other=0.0)
        hi = tl.load(at + 16, mask=m & (k_lo + 16 < n), other=0.0)
    elif KT == F16:  # 32 values of 2 bytes
        base = r + b * (32 * F16_BYTES)
        lo = _f16(_u16(wq_ptr, base + 2 * lane, m))
        hi = _f16(_u16(wq_ptr, base + 32 + 2 * lane, m))
    elif KT == BF16:  # fp32's upper half
        base = r + b * (32 * BF16_BYTES)
        lo = (_u16(wq_ptr, base + 2 * lane, m) << 16).to(tl.float32, bitcast=True)
        hi = (_u16(wq_ptr, base + 32 + 2 * lane, m) << 16).to(tl.float32, bitcast=True)
    elif KT == Q4_0:  # d * (q - 8); q - 8 is exact
        base = r + b * Q4_0_BYTES
        d = tl.load(wf_ptr + base // 4, mask=m, other=0.0)
        q = _u8(wq_ptr, base + 4 + lane, m)
        lo = d * ((q & 15) - 8).to(tl.float32)
        hi = d * ((q >> 4) - 8).to(tl.float32)
    elif KT == Q4_1:  # d * q + m, two roundings
        base = r + b * Q4_1_BYTES
        d = tl.load(wf_ptr + base // 4, mask=m, other=0.0)
        mn = tl.load(wf_ptr + base // 4 + 1, mask=m, other=0.0)
        q = _u8(wq_ptr, base + 8 + lane, m)
        lo = d * (q & 15).to(tl.float32) + mn
        hi = d * (q >> 4).to(tl.float32) + mn
    elif KT == Q5_0:  # (q | 16 * bit i of qh) - 16, exact, times d: the C code's one rounding
        base = r + b * Q5_0_BYTES
        d = tl.load(wf_ptr + base // 4, mask=m, other=0.0)
        q = _u8(wq_ptr, base + 8 + lane, m)
        h_lo = (_u8(wq_ptr, base + 4 + lane // 8, m) >> (lane % 8)) & 1
        h_hi = (_u8(wq_ptr, base + 6 + lane // 8, m) >> (lane % 8)) & 1
        lo = (((q & 15) | (h_lo << 4)) - 16).to(tl.float32) * d
        hi = (((q >> 4) | (h_hi << 4)) - 16).to(tl.float32) * d
    elif KT == Q5_1:  # d * (q | 16 * bit i of qh) + m, two roundings
        base = r + b * Q5_1_BYTES
        d = tl.load(wf_ptr + base // 4, mask=m, other=0.0)
        mn = tl.load(wf_ptr + base // 4 + 1, mask=m, other=0.0)
        q = _u8(wq_ptr, base + 12 + lane, m)
        h_lo = (_u8(wq_ptr, base + 8 + lane // 8, m) >> (lane % 8)) & 1
        h_hi = (_u8(wq_ptr, base + 10 + lane // 8, m) >> (lane % 8)) & 1
        lo = d * ((q & 15) | (h_lo << 4)).to(tl.float32) + mn
        hi = d * ((q >> 4) | (h_hi << 4)).to(tl.float32) + mn
    elif KT == Q2_K:  # (d * (sc & 15)) * q - (dmin * (sc >> 4)) per half of 16, q 2 bits
        s = b % 8
        base = r + (b // 8) * Q2_K_BYTES
        d = _f16(_u16(wq_ptr, base + 80, m))
        dmin = _f16(_u16(wq_ptr, base + 82, m))
        sc_lo = _u8(wq_ptr, base + 2 * s, m)
        sc_hi = _u8(wq_ptr, base + 2 * s + 1, m)
        qs = base + 16 + (s // 4) * 32 + lane  # 2-bit field s % 4 of 32 bytes
        q_lo = (_u8(wq_ptr, qs, m) >> (2 * (s % 4))) & 3
        q_hi = (_u8(wq_ptr, qs + 16, m) >> (2 * (s % 4))) & 3
        lo = (d * (sc_lo & 15).to(tl.float32)) * q_lo.to(tl.float32) - dmin * (sc_lo >> 4).to(tl.float32)
        hi = (d * (sc_hi & 15).to(tl.float32)) * q_hi.to(tl.float32) - dmin * (sc_hi >> 4).to(tl.float32)
    elif KT == Q8_0:  # q * d
        base = r + b * Q8_0_BYTES
        d = tl.load(wf_ptr + base // 4, mask=m, other=0.0)
        lo = _i8(wq_ptr, base + 4 + lane, m).to(tl.float32) * d
        hi = _i8(wq_ptr, base + 20 + lane, m).to(tl.float32) * d
    elif KT == Q4_K or KT == Q5_K:  # noqa: SIM109 (a jit function: constexpr tests, no `in`)
        # (d * sc) * q - (dmin * m), sub-block s of 8
        s = b % 8
        base = r + (b // 8) * (Q4_K_BYTES if KT == Q4_K else Q5_K_BYTES)
        d = tl.load(wf_ptr + base // 2, mask=m, other=0.0).to(tl.float32)
        dmin = tl.load(wf_ptr + base // 2 + 1, mask=m, other=0.0).to(tl.float32)
        # llama.cpp's get_scale_min_k4: six-bit scale and min of sub-block s from 12 bytes
        b_s = _u8(wq_ptr, base + 4 + s, m)
        b_s4 = _u8(wq_ptr, base + 8 + s, m)
        b_sm4 = _u8(wq_ptr, base + tl.where(s >= 4, s, s + 4), m)
        sc = tl.where(s < 4, b_s & 63, (b_s4 & 15) | ((b_sm4 >> 6) << 4))
        mn = tl.where(s < 4, b_s4 & 63, (b_s4 >> 4) | ((b_s >> 6) << 4))
        scale = d * sc.to(tl.float32)
        low = dmin * mn.to(tl.float32)
        qs = base + (16 if KT == Q4_K else 48) + (s // 2) * 32 + lane  # nibble s % 2 of 32 bytes
        ql = (_u8(wq_ptr, qs, m) >> (4 * (s % 2))) & 15
        qh = (_u8(wq_ptr, qs + 16, m) >> (4 * (s % 2))) & 15
        if KT == Q5_K:  # the fifth bit: bit s of 32 bytes
            ql = ql | (((_u8(wq_ptr, base + 16 + lane, m) >> s) & 1) << 4)
            qh = qh | (((_u8(wq_ptr, base + 32 + lane, m) >> s) & 1) << 4)
        lo = scale * ql.to(tl.float32) - low
        hi = scale * qh.to(tl.float32) - low
    elif KT == Q6_K:  # (d * sc) * q per half of 16, q = (4 low bits | 2 high bits << 4) - 32
        s = b % 8
        base = r + (b // 8) * Q6_K_BYTES
        d = tl.load(wf_ptr + (base + 208) // 2, mask=m, other=0.0).to(tl.float32)
        sc_lo = _i8(wq_ptr, base + 192 + 2 * s, m)
        sc_hi = _i8(wq_ptr, base + 193 + 2 * s, m)
        ql_at = base + (s // 4) * 64 + (s % 2) * 32 + lane
        qh_at = base + 128 + (s // 4) * 32 + lane
        shift_l = 4 * ((s // 2) % 2)
        shift_h = 2 * (s % 4)
        q_lo = (
            ((_u8(wq_ptr, ql_at, m) >> shift_l) & 15) | (((_u8(wq_ptr, qh_at, m) >> shift_h) & 3) << 4)
        ) - 32
        q_hi = (
            ((_u8(wq_ptr, ql_at + 16, m) >> shift_l) & 15)
            | (((_u8(wq_ptr, qh_at + 16, m) >> shift_h) & 3) << 4)
        ) - 32
        lo = (d * sc_lo.to(tl.float32)) * q_lo.to(tl.float32)
        hi = (d * sc_hi.to(tl.float32)) * q_hi.to(tl.float32)
    elif KT == IQ2_XS or KT == IQ2_S:  # noqa: SIM109 (constexpr tests)
        # (((d * (0.5 + s)) * 0.25) * grid) * sign, s a 4-bit scale per 16 values
        s = b % 8
        if KT == IQ2_XS:
            base = r + IQ2_XS_GRID + (b // 8) * IQ2_XS_BYTES
            sc = _u8(wq_ptr, base + 66 + s, m)
        else:
            base = r + IQ2_S_GRID + (b // 8) * IQ2_S_BYTES
            sc = _u8(wq_ptr, base + 74 + s, m)
        d = _f16(_u16(wq_ptr, base, m))
        db_lo = (d * (0.5 + (sc & 15).to(tl.float32))) * 0.25
        db_hi = (d * (0.5 + (sc >> 4).to(tl.float32))) * 0.25
        g, sg = _iq2(wq_ptr, base, 4 * s + lane // 8, lane % 8, m, KT)
        lo = (db_lo * g) * sg
        g, sg = _iq2(wq_ptr, base, 4 * s + 2 + lane // 8, lane % 8, m, KT)
        hi = (db_hi * g) * sg
    return lo, hi  # masked rows: every load gave 0, so their values are 0
