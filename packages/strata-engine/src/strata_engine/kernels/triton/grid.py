"""The grid types (IQ2_XXS, IQ3_XXS, IQ3_S, IQ1_S) in the C packer's bytes, decoded on the device.

strata_q8_pack keeps a grid-type weight as stored (native/q8.h's top comment: a group of 16
outputs is its 16 rows' super-blocks, the last group's missing rows zeros), and every call of the
C kernels decodes each 32 values j of a row into the Q8_0 block of the same values (grids.c's
grid_group): int8 q and the fp32 scale of the 32, value = scale * q exactly. The device reads the
same bytes (the file's 2.06 to 3.44 bits a weight) and decodes them the same way in registers, a
word of 4 values w (0 to 7) at a time:

- IQ2_XXS (66 bytes a 256: d f16, then 8 bytes a 32): 4 grid indices of 8 values, then a u32
  aux: 4 x 7 sign bits (the eighth their parity) and the scale's nibble s on top;
  scale (d * (0.5 + s)) * 0.25;
- IQ3_XXS (98: d, qs[64], 8 u32 aux as IQ2_XXS's): 8 indices of 4 values a 32;
  scale (d * (0.5 + s)) * 0.5;
- IQ3_S (110: d, qs[64], qh[8], signs[32], scales[4]): index w qs[8 j + w] with bit w of qh[j]
  as its ninth, value i negated where bit i & 7 of signs[4 j + i / 8] is set;
  scale d * (1 + 2 s), s nibble j & 1 of scales[j / 2];
- IQ1_S (50: d, qs[32], qh u16[8]): index k qs[4 j + k] with 3 bits k of qh[j] above it, 8
  values 8 code - 8 +- 1 (- where qh's top bit is set), no signs;
  scale (d * (2 s + 1)) * 0.125, s qh[j]'s bits 12-14.

Each product is exact (an fp16 d times a small integer, then a power of two). A grid entry's
values are 32-bit words of 4 bytes (grids.c's *_bytes; IQ1_S 8 code) gathered from the type's
table (1 to 16 KB: cached near the SMs), uploaded once per device (`table`) and passed as the
weight's `wf` (the kernels' fp32-typed pointer, which the other types use for their scales): `wq`
is the rows alone, so a stacked weight's members are views of its rows with the same table.
grid_group makes a zero scale's q +-1; the device keeps q: its sign is the same (no grid value is
0), and a zero scale's block adds fma(0 * s, f, acc), which is acc whatever f's size (acc is never
-0: it starts at +0 and an exact zero sum rounds to +0), so the bits are the same.
The integer sums and the float sequence are then Q8_0's (one scale a block, no min), so the bits
are the C kernels'.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import triton
import triton.language as tl
from gguf import quants as gguf_quants

from strata_engine.kernels.triton.wtypes import (
    IQ1_S,
    IQ1_S_BYTES,
    IQ2_XXS,
    IQ2_XXS_BYTES,
    IQ3_S,
    IQ3_S_BYTES,
    IQ3_XXS,
    IQ3_XXS_BYTES,
)

HELD = (IQ2_XXS.value, IQ3_XXS.value, IQ3_S.value, IQ1_S.value)  # the grid types the device decodes
BYTES = {
    t.value: b.value
    for t, b in (
        (IQ2_XXS, IQ2_XXS_BYTES),
        (IQ3_XXS, IQ3_XXS_BYTES),
        (IQ3_S, IQ3_S_BYTES),
        (IQ1_S, IQ1_S_BYTES),
    )
}  # a super-block (the header's table)


def _table(q: Any, offset: int = 0, times: int = 1) -> np.ndarray:
    """gguf-py's grid of a type as int32 words, value k of an entry in byte k (an entry of 8
    values two words), each value (v + `offset`) * `times`."""
    q.init_grid()
    assert q.grid is not None
    values = (np.asarray(q.grid, dtype=np.float32).reshape(-1) + offset) * times
    return values.astype(np.uint8).view(np.int32).reshape(-1)


TABLES = {
    IQ2_XXS.value: _table(gguf_quants.IQ2_XXS),
    IQ3_XXS.value: _table(gguf_quants.IQ3_XXS),
    IQ3_S.value: _table(gguf_quants.IQ3_S),
    IQ1_S.value: _table(gguf_quants.IQ1_S, 1, 8),  # 8 code (code = value + 1: 0, 8, 16)
}


@triton.constexpr_function
def held(t: int) -> bool:
    """Whether the kernels of type code `t` decode a grid type (a constexpr in a kernel)."""
    return t in HELD


_tables: dict[tuple[int, str], torch.Tensor] = {}


def table(t: int, device: torch.device | str) -> torch.Tensor:
    """The type's grid table on `device` as fp32-typed words (the kernels' `wf`), uploaded once
    per device and shared by every weight of the type."""
    key = (t, str(device))
    if key not in _tables:
        _tables[key] = torch.from_numpy(TABLES[t].copy()).to(device).view(torch.float32)
    return _tables[key]


def row_bytes(t: int, k: int) -> int:
    return k // 256 * BYTES[t]


@triton.jit
def rows(rn, GB):
    """Where output rn's row starts in `wq` (a group of 16 rows is GB bytes)."""
    return rn.to(tl.int64) * (GB // 16)


@triton.jit
def _u8(wq_ptr, at, live):
    return tl.load(wq_ptr + at, mask=live, other=0).to(tl.int32)


@triton.jit
def _block(row, b, WT: tl.constexpr):
    """Where block b's super-block starts (b >> 3 of the rows at `row`)."""
    if WT == IQ2_XXS:
        at = row + (b >> 3) * IQ2_XXS_BYTES
    elif WT == IQ3_XXS:
        at = row + (b >> 3) * IQ3_XXS_BYTES
    elif WT == IQ3_S:
        at = row + (b >> 3) * IQ3_S_BYTES
    else:
        at = row + (b >> 3) * IQ1_S_BYTES
    return at


@triton.jit
def _aux(wq_ptr, at, live):
    """The little-endian u32 at byte `at` (2-byte aligned: four byte loads)."""
    a = _u8(wq_ptr, at, live) | (_u8(wq_ptr, at + 1, live) << 8) | (_u8(wq_ptr, at + 2, live) << 16)
    return a | (_u8(wq_ptr, at + 3, live) << 24)


@triton.jit
def _d(wq_ptr, blk, live):
    bits = (_u8(wq_ptr, blk, live) | (_u8(wq_ptr, blk + 1, live) << 8)).to(tl.int16)
    return bits.to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def scale(wq_ptr, row, b, live, WT: tl.constexpr):
    """Block b's fp32 scale of the rows at `row`: grid_group's operations, each exact."""
    blk = _block(row, b, WT)
    j = b & 7
    d = _d(wq_ptr, blk, live)
    if WT == IQ3_S:
        s = (_u8(wq_ptr, blk + 106 + (j >> 1), live) >> ((j & 1) * 4)) & 15
        ws = d * (1.0 + 2.0 * s.to(tl.float32))
    elif WT == IQ1_S:
        s = (_u8(wq_ptr, blk + 35 + 2 * j, live) >> 4) & 7
        ws = d * (2.0 * s.to(tl.float32) + 1.0) * 0.125
    elif WT == IQ2_XXS:
        s = (_u8(wq_ptr, blk + 9 + 8 * j, live) >> 4) & 15
        ws = d * (0.5 + s.to(tl.float32)) * 0.25
    else:
        s = (_u8(wq_ptr, blk + 69 + 4 * j, live) >> 4) & 15
        ws = d * (0.5 + s.to(tl.float32)) * 0.5
    return ws


@triton.jit
def scales(wq_ptr, row, b, live, WT: tl.constexpr):
    """packed.scales' four values for a grid type: (scale, scale, 0, 0), Q8_0's."""
    ws = scale(wq_ptr, row, b, live, WT)
    zero = tl.zeros_like(ws)
    return ws, ws, zero, zero


@triton.jit
def _parity_signs(aux, k):
    """Sign set k of an aux word: its 7 bits and their parity as the eighth (gguf-py's ksigns)."""
    s7 = (aux >> (7 * k)) & 127
    p = s7 ^ (s7 >> 4)
    p = p ^ (p >> 2)
    p = p ^ (p >> 1)
    return s7 | ((p & 1) << 7)


@triton.jit
def _word(wq_ptr, wf_ptr, row, b, w, live, WT: tl.constexpr):
    """(values, signs) of word w (0 to 7: values 4 w .. 4 w + 3) of block b: the entry's 4 bytes
    (IQ1_S: q + 128 each, with its sign flipped by the caller's ^ 0x80 as for the others none),
    and the 4 values' sign bits (IQ1_S: 0)."""
    blk = _block(row, b, WT)
    j = b & 7
    k = w >> 1  # the 8-value set (IQ2_XXS, IQ1_S entries; the XXS types' sign sets)
    if WT == IQ3_S:
        index = _u8(wq_ptr, blk + 2 + 8 * j + w, live) | (((_u8(wq_ptr, blk + 66 + j, live) >> w) & 1) << 8)
        signs = _u8(wq_ptr, blk + 74 + 4 * j + k, live) >> ((w & 1) * 4)
        entry = tl.load(wf_ptr + index, mask=live, other=0.0).to(tl.int32, bitcast=True)
    elif WT == IQ1_S:
        qh = _u8(wq_ptr, blk + 34 + 2 * j, live) | (_u8(wq_ptr, blk + 35 + 2 * j, live) << 8)
        index = _u8(wq_ptr, blk + 2 + 4 * j + k, live) | (((qh >> (3 * k)) & 7) << 8)
        entry = tl.load(wf_ptr + 2 * index + (w & 1), mask=live, other=0.0).to(tl.int32, bitcast=True)
        # q + 128 = 8 code + 121 (+1) or + 119 (-1): no carry between bytes
        entry = entry + tl.where((qh & 0x8000) != 0, 0x77777777, 0x79797979)
        signs = w & 0
    else:
        qs = blk + 2 + 8 * j
        if WT == IQ2_XXS:  # 4 indices of 8 values, then aux
            aux = _aux(wq_ptr, qs + 4, live)
            at = 2 * _u8(wq_ptr, qs + k, live) + (w & 1)
        else:  # 8 indices of 4 values; aux after qs[64]
            aux = _aux(wq_ptr, blk + 66 + 4 * j, live)
            at = _u8(wq_ptr, qs + w, live)
        signs = _parity_signs(aux, k) >> ((w & 1) * 4)
        entry = tl.load(wf_ptr + at, mask=live, other=0.0).to(tl.int32, bitcast=True)
    return entry, signs & 15


@triton.jit
def quants(wq_ptr, wf_ptr, row, b, k, live, WT: tl.constexpr):
    """Signed q of element k of block b of the rows at `row` (broadcast against k), one at a time
    (the tile path, a tied head's rows): grid_group's integers."""
    entry, signs = _word(wq_ptr, wf_ptr, row, b, k >> 2, live, WT)
    v = (entry >> ((k & 3) * 8)) & 255
    if WT == IQ1_S:
        v = v - 128
    return tl.where(((signs >> (k & 3)) & 1) != 0, -v, v)


@triton.jit
def _u16(wq_ptr, at, live):
    """The little-endian u16 at byte `at` (2-byte aligned: rows, super-blocks and fields are)."""
    return tl.load((wq_ptr + at).to(tl.pointer_type(tl.uint16)), mask=live, other=0).to(tl.int32)


@triton.jit
def _pairs(lo, hi):
    """[BN, 8] from two [BN, 4]: column 2 k + h is lo's column k (h 0) or hi's (h 1)."""
    bn: tl.constexpr = lo.shape[0]
    return tl.join(lo, hi).reshape(bn, 8)


@triton.jit
def _words(wq_ptr, wf_ptr, row, b, live, WT: tl.constexpr):
    """`_word`'s (values, signs) of words 0-7 of block b for the rows at `row` [BN] (IQ3_S, IQ1_S):
    [BN, 8] each, every field byte read once (a pair of words' fields taken as [BN, 4] and paired:
    fewer instructions there; for the XXS types, whose signs come from one aux word, `_word` on
    [BN, 8] compiles shorter)."""
    blk = _block(row, b, WT)[:, None]
    j = b & 7
    k = tl.arange(0, 4)[None, :]
    w = tl.arange(0, 8)[None, :]
    lv = live[:, None]
    if WT == IQ3_S:  # 8 one-byte indices (2 a u16) with a ninth bit from qh[j], 4 sign bytes
        q2 = _u16(wq_ptr, blk + 2 + 8 * j + 2 * k, lv)
        at = _pairs(q2 & 255, q2 >> 8) | (((_u8(wq_ptr, blk + 66 + j, lv) >> w) & 1) << 8)
        sg = _u8(wq_ptr, blk + 74 + 4 * j + k, lv)
        signs = _pairs(sg & 15, sg >> 4)
        entry = tl.load(wf_ptr + at, mask=lv, other=0.0).to(tl.int32, bitcast=True)
    else:  # IQ1_S: 4 indices of 8 values with 3 bits of qh each
        qh = _u16(wq_ptr, blk + 34 + 2 * j, lv)
        i2 = 2 * (_u8(wq_ptr, blk + 2 + 4 * j + k, lv) | (((qh >> (3 * k)) & 7) << 8))
        entry = tl.load(wf_ptr + _pairs(i2, i2 + 1), mask=lv, other=0.0).to(tl.int32, bitcast=True)
        entry = entry + tl.where((qh & 0x8000) != 0, 0x77777777, 0x79797979)  # q + 128 (see _word)
        signs = w & 0
    return entry, signs


@triton.jit
def weights(wq_ptr, wf_ptr, row, b, live, WT: tl.constexpr):
    """int8 [BN, 32]: block b's q of the rows at `row` [BN], in element order (the decode MMA's
    operand): word w's 4 values gathered as one 32-bit entry, signs applied bytewise (no carries)."""
    if WT == IQ3_S or WT == IQ1_S:  # noqa: SIM109 (constexpr tests)
        word, nib = _words(wq_ptr, wf_ptr, row, b, live, WT)
    else:
        word, nib = _word(wq_ptr, wf_ptr, row[:, None], b, tl.arange(0, 8)[None, :], live[:, None], WT)
    if WT == IQ1_S:  # q + 128 a byte: the top bits flipped give q
        word = word ^ -0x7F7F7F80
    else:  # v or 256 - v a byte: -v as int8 where its sign bit is set
        m = (-(nib & 1) & 0xFF) | (-((nib >> 1) & 1) & 0xFF00) | (-((nib >> 2) & 1) & 0xFF0000)
        m = m | (-((nib >> 3) & 1) << 24)
        word = (word ^ m) + (m & 0x01010101)
    e0 = word.to(tl.int8)
    e1 = (word >> 8).to(tl.int8)
    e2 = (word >> 16).to(tl.int8)
    e3 = (word >> 24).to(tl.int8)
    bn: tl.constexpr = word.shape[0]
    return tl.join(tl.join(e0, e2), tl.join(e1, e3)).reshape(bn, 32)  # byte i of word w: 4 w + i
