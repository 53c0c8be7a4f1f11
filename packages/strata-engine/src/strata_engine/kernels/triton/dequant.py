"""Dequantisation of GGUF weight blocks inside Triton kernels, one tile at a time.

`dequant_tile` turns the bytes of rows `rows` and columns `ks` of a stored weight into fp32,
computing each value with the same float operations, in the same order, as gguf-py's numpy
dequantiser (`gguf.quants`), so the values are gguf-py's bits (when the compiler does not fuse
a multiply-add; the dequantise kernel below is launched with fusion off).

Layouts (`kt`, the kernel type code):
- 0 F32: `wf` is the fp32 tensor itself, `row_bytes` unused.
- 2 Q4_0, 3 Q4_1, 8 Q8_0: the engine's layout (`weights.widen_scales`): the fp16 scale (and
  Q4_1's min) widened to fp32 at the start of each 32-value block; `wf` is a fp32 view.
- 12 Q4_K, 13 Q5_K, 14 Q6_K: the raw GGUF super-blocks of 256 values; `wf` is a fp16 view.
"""

from __future__ import annotations

import triton
import triton.language as tl

F32, Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K = 0, 2, 3, 8, 12, 13, 14
BLOCK_VALUES = {F32: 1, Q4_0: 32, Q4_1: 32, Q8_0: 32, Q4_K: 256, Q5_K: 256, Q6_K: 256}
BLOCK_BYTES = {F32: 4, Q4_0: 20, Q4_1: 24, Q8_0: 36, Q4_K: 144, Q5_K: 176, Q6_K: 210}  # in the stored layout


def row_bytes(kt: int, in_features: int) -> int:
    """Bytes of one stored row of `in_features` values."""
    return in_features // BLOCK_VALUES[kt] * BLOCK_BYTES[kt]


@triton.jit
def _u8(wq_ptr, offs, mask):
    return tl.load(wq_ptr + offs, mask=mask, other=0).to(tl.int32)


@triton.jit
def dequant_tile(wq_ptr, wf_ptr, rows, ks, K, row_bytes, mask, KT: tl.constexpr):
    """fp32 values [len(rows), len(ks)] of the stored weight (0 where `mask` is false)."""
    r = rows.to(tl.int64)[:, None]
    k = ks.to(tl.int64)[None, :]
    if KT == 0:
        val = tl.load(wf_ptr + r * K + k, mask=mask, other=0.0)
    elif KT == 2 or KT == 3 or KT == 8:
        blk = k // 32
        j = k % 32
        if KT == 2:
            base = r * row_bytes + blk * 20
            d = tl.load(wf_ptr + base // 4, mask=mask, other=0.0)
            q = (_u8(wq_ptr, base + 4 + j % 16, mask) >> (4 * (j // 16))) & 15
            val = d * (q - 8).to(tl.float32)
        elif KT == 3:
            base = r * row_bytes + blk * 24
            d = tl.load(wf_ptr + base // 4, mask=mask, other=0.0)
            m = tl.load(wf_ptr + base // 4 + 1, mask=mask, other=0.0)
            q = (_u8(wq_ptr, base + 8 + j % 16, mask) >> (4 * (j // 16))) & 15
            val = d * q.to(tl.float32) + m
        else:
            base = r * row_bytes + blk * 36
            d = tl.load(wf_ptr + base // 4, mask=mask, other=0.0)
            q = _u8(wq_ptr, base + 4 + j, mask)
            q = tl.where(q >= 128, q - 256, q)
            val = q.to(tl.float32) * d
    else:
        sb = k // 256
        e = k % 256
        s = e // 32  # sub-block of 32 values (K-quants Q4_K/Q5_K)
        if KT == 12 or KT == 13:
            base = r * row_bytes + sb * (144 if KT == 12 else 176)
            d = tl.load(wf_ptr + base // 2, mask=mask, other=0.0).to(tl.float32)
            dmin = tl.load(wf_ptr + base // 2 + 1, mask=mask, other=0.0).to(tl.float32)
            b_s = _u8(wq_ptr, base + 4 + s, mask)
            b_s4 = _u8(wq_ptr, base + 4 + s + 4, mask)
            b_sm4 = _u8(wq_ptr, base + 4 + tl.where(s >= 4, s - 4, s), mask)
            sc = tl.where(s < 4, b_s & 63, (b_s4 & 15) | ((b_sm4 >> 6) << 4))
            mn = tl.where(s < 4, b_s4 & 63, (b_s4 >> 4) | ((b_s >> 6) << 4))
            qs_at = 16 if KT == 12 else 48
            q = (_u8(wq_ptr, base + qs_at + (e // 64) * 32 + e % 32, mask) >> (4 * (s % 2))) & 15
            if KT == 13:
                q = q | (((_u8(wq_ptr, base + 16 + e % 32, mask) >> s) & 1) << 4)
            val = (d * sc.to(tl.float32)) * q.to(tl.float32) - dmin * mn.to(tl.float32)
        else:
            base = r * row_bytes + sb * 210
            d = tl.load(wf_ptr + (base + 208) // 2, mask=mask, other=0.0).to(tl.float32)
            sc = _u8(wq_ptr, base + 192 + e // 16, mask)
            sc = tl.where(sc >= 128, sc - 256, sc)
            ql = (_u8(wq_ptr, base + (e // 128) * 64 + e % 64, mask) >> (4 * ((e // 64) % 2))) & 15
            qh = (_u8(wq_ptr, base + 128 + (e // 128) * 32 + e % 32, mask) >> (2 * (s % 4))) & 3
            q = (ql | (qh << 4)) - 32
            val = (d * sc.to(tl.float32)) * q.to(tl.float32)
    return tl.where(mask, val, 0.0)
