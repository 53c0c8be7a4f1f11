"""The grid types (IQ3_S) in the C packer's bytes, decoded on the device by the integer kernels.

strata_q8_pack keeps a grid-type weight as stored (native/q8.h's top comment: a group of 16
outputs is its 16 rows' super-blocks, the last group's missing rows zeros), and every call of the
C kernels decodes each 32 values of a row into the Q8_0 block of the same values (grids.c's
grid_group): int8 q and the fp32 scale of the 32, value = scale * q exactly. The device reads the
same bytes (the file's 3.44 bits a weight for IQ3_S) and decodes them the same way in registers:

- IQ3_S (a super-block of 256: d f16, qs[64], qh[8], signs[32], scales[4]): 32 values j are 8
  groups of 4, group g's grid index qs[8 j + g] with bit g of qh[j] as its ninth, the 4 values the
  entry's bytes (1, 3, .., 15), value i of the 32 negated where bit i & 7 of signs[4 j + i / 8] is
  set; the scale d * (1 + 2 s) (s nibble j & 1 of scales[j / 2]), one exact fp32 product.

A grid entry is one 32-bit word (its values a byte each, grids.c's iq3s_bytes) gathered from the
type's table (2 KB: cached near the SMs), uploaded once per device (`table`) and passed as the
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

from strata_engine.kernels.triton.wtypes import IQ3_S, IQ3_S_BYTES

HELD = (IQ3_S.value,)  # the grid types the device decodes; the others reach it as Q8_0 blocks


def _table(q: Any) -> np.ndarray:
    """gguf-py's grid of a type as int32 words, value k of an entry in byte k (iq3s_bytes)."""
    q.init_grid()
    assert q.grid is not None
    values = np.asarray(q.grid, dtype=np.float32).reshape(-1, 4)
    return values.astype(np.uint8).view(np.int32).reshape(-1)


TABLES = {IQ3_S.value: _table(gguf_quants.IQ3_S)}


_tables: dict[tuple[int, str], torch.Tensor] = {}


def table(t: int, device: torch.device | str) -> torch.Tensor:
    """The type's grid table on `device` as fp32-typed words (the kernels' `wf`), uploaded once
    per device and shared by every weight of the type."""
    key = (t, str(device))
    if key not in _tables:
        _tables[key] = torch.from_numpy(TABLES[t].copy()).to(device).view(torch.float32)
    return _tables[key]


def row_bytes(t: int, k: int) -> int:
    return k // 256 * IQ3_S_BYTES.value


@triton.jit
def rows(rn, GB):
    """Where output rn's row starts in `wq` (a group of 16 rows is GB bytes)."""
    return rn.to(tl.int64) * (GB // 16)


@triton.jit
def _u8(wq_ptr, at, live):
    return tl.load(wq_ptr + at, mask=live, other=0).to(tl.int32)


@triton.jit
def scale(wq_ptr, row, b, live, WT: tl.constexpr):
    """Block b's fp32 scale of the rows at `row` (grid_group's: d * (1 + 2 s), exact)."""
    blk = row + (b >> 3) * IQ3_S_BYTES
    j = b & 7
    bits = (_u8(wq_ptr, blk, live) | (_u8(wq_ptr, blk + 1, live) << 8)).to(tl.int16)
    d = bits.to(tl.float16, bitcast=True).to(tl.float32)
    s = (_u8(wq_ptr, blk + 106 + (j >> 1), live) >> ((j & 1) * 4)) & 15
    return d * (1.0 + 2.0 * s.to(tl.float32))


@triton.jit
def scales(wq_ptr, row, b, live, WT: tl.constexpr):
    """packed.scales' four values for a grid type: (scale, scale, 0, 0), Q8_0's."""
    ws = scale(wq_ptr, row, b, live, WT)
    zero = tl.zeros_like(ws)
    return ws, ws, zero, zero


@triton.jit
def quants(wq_ptr, wf_ptr, row, b, k, live, WT: tl.constexpr):
    """Signed q of element k of block b of the rows at `row` (broadcast against k), one at a time
    (the tile path, a tied head's rows): grid_group's integers."""
    blk = row + (b >> 3) * IQ3_S_BYTES
    j = b & 7
    g = k >> 2
    index = _u8(wq_ptr, blk + 2 + 8 * j + g, live) | (((_u8(wq_ptr, blk + 66 + j, live) >> g) & 1) << 8)
    entry = tl.load(wf_ptr + index, mask=live, other=0.0).to(tl.int32, bitcast=True)
    v = (entry >> ((k & 3) * 8)) & 255
    sign = (_u8(wq_ptr, blk + 74 + 4 * j + (k >> 3), live) >> (k & 7)) & 1
    return tl.where(sign != 0, -v, v)


@triton.jit
def weights(wq_ptr, wf_ptr, row, b, live, WT: tl.constexpr):
    """int8 [BN, 32]: block b's q of the rows at `row` [BN], in element order (the decode MMA's
    operand): a gathered word of 4 values a grid index, its signs applied bytewise (no carries)."""
    blk = row[:, None] + (b >> 3) * IQ3_S_BYTES
    j = b & 7
    g = tl.arange(0, 8)[None, :]
    lv = live[:, None]
    index = _u8(wq_ptr, blk + 2 + 8 * j + g, lv) | (((_u8(wq_ptr, blk + 66 + j, lv) >> g) & 1) << 8)
    entry = tl.load(wf_ptr + index, mask=lv, other=0.0).to(tl.int32, bitcast=True)
    nib = (_u8(wq_ptr, blk + 74 + 4 * j + (g >> 1), lv) >> ((g & 1) * 4)) & 15
    m = (-(nib & 1) & 0xFF) | (-((nib >> 1) & 1) & 0xFF00) | (-((nib >> 2) & 1) & 0xFF0000)
    m = m | (-((nib >> 3) & 1) << 24)
    word = (entry ^ m) + (m & 0x01010101)  # each byte v or 256 - v: -v as int8
    e0 = word.to(tl.int8)
    e1 = (word >> 8).to(tl.int8)
    e2 = (word >> 16).to(tl.int8)
    e3 = (word >> 24).to(tl.int8)
    bn: tl.constexpr = word.shape[0]
    return tl.join(tl.join(e0, e2), tl.join(e1, e3)).reshape(bn, 32)  # byte i of word g: 4 g + i
