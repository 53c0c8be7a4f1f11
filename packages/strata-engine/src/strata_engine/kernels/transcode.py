"""Weight types the kernels have no unpacking of, rewritten exactly as Q8_0 blocks at load; the
checks and reference blocks of the types the kernels read as held.

TQ1_0 and TQ2_0 store, for every 32 values, one float scale s and small integers q, with value =
s * q exactly (an fp16 scale times a few-bit integer: no rounding in gguf-py's dequantisation).
Each 32 values therefore become one block of the kernels' Q8_0 layout (fp32 scale, 32 int8),
which every arithmetic reads exactly (fp32, q8, integer limbs; CPU and Triton): 9 bits a weight
instead of the 32 an fp32 copy takes (`to_q8_0`).

The types the kernels read as held, with the bits of the blocks this module makes of them
(strata_kernels.h's table):
- the 4-bit codebook types IQ4_NL, IQ4_XS and MXFP4, held as stored (`HELD_CODEBOOK`), their
  reference each 32 values' fp32 scale and 4-bit indices (`codebook_blocks`: 5 bits a weight, the
  layout the GPU reads), the bits of their Q8_0 blocks (`to_q8_0`);
- the grid types IQ2_XXS, IQ3_XXS, IQ3_S and IQ1_S as stored (`grid_blocks`), native/grids.c
  decoding each 32 values into their Q8_0 block (`to_q8_0`, also the GPU's form of them);
- the K-grid types IQ2_XS, IQ2_S, Q3_K and IQ1_M as stored (`grid_blocks`: 1.75 to 3.44 bits a
  weight): each 16 values are a small integer scale times one fp16-derived d a super-block, with
  small integer quants, as Q6_K's are. grids.c decodes them into a one-byte-a-weight K-quant
  group; Q3_K and IQ1_M, whose integers fit Q6_K's 6 bits, give the bits of the GGUF Q6_K blocks
  `to_q6_k` makes (the GPU's form of them), and are held only where those blocks are exact.

A scale comes from the block's own bits (`_SCALES`); the integers are gguf-py's values divided
by it, and a block is kept only if scale * q gives gguf-py's fp32 values bit for bit (signed
zeros included): a tensor with any other block (a non-finite scale, an integer out of range)
is widened to fp32, never approximated.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from gguf import GGML_QUANT_SIZES, quants
from gguf import GGMLQuantizationType as QT

Q8_0_KERNEL_BYTES = 36  # fp32 scale + 32 int8 (strata_wtypes' kernel bytes of WT_Q8_0)
GROUP = 32
CHUNK_VALUES = 1 << 20  # values transcoded at once: bounds the fp32 scratch to 4 MiB


def _f16(blocks: np.ndarray, at: int) -> np.ndarray:
    return blocks[:, at : at + 2].copy().view(np.float16).astype(np.float32)


def _repeat(scale: np.ndarray, groups: int) -> np.ndarray:
    """One scale per block made one per 32-value group."""
    return np.repeat(scale.reshape(-1, 1), groups, axis=1)


def _iq4_xs(b: np.ndarray) -> np.ndarray:
    d = _f16(b, 0)
    high = b[:, 2:4].copy().view(np.uint16).reshape(-1, 1) >> (2 * np.arange(8, dtype=np.uint16))
    low = (b[:, 4:8].reshape(-1, 4, 1) >> np.array([0, 4], dtype=np.uint8)).reshape(-1, 8) & 15
    ls = (low | ((high & 3).astype(np.uint8) << 4)).astype(np.int8) - np.int8(32)
    return d * ls.astype(np.float32)


def _top_nibble_scales(b: np.ndarray, at: int, step: int) -> np.ndarray:
    """The 4-bit scale in the top bits of the u32 at `at + step * group` (IQ2_XXS, IQ3_XXS)."""
    words = np.stack(
        [b[:, at + step * g : at + step * g + 4].copy().view(np.uint32)[:, 0] for g in range(8)], 1
    )
    return (words >> 28).astype(np.float32)


def _iq3_xxs(b: np.ndarray) -> np.ndarray:
    return _f16(b, 0) * (np.float32(0.5) + _top_nibble_scales(b, 66, 4)) * np.float32(0.5)


def _iq2_xxs(b: np.ndarray) -> np.ndarray:
    return _f16(b, 0) * (np.float32(0.5) + _top_nibble_scales(b, 2 + 4, 8)) * np.float32(0.25)


def _iq3_s(b: np.ndarray) -> np.ndarray:
    nibbles = (b[:, 106:110].reshape(-1, 4, 1) >> np.array([0, 4], dtype=np.uint8)).reshape(-1, 8) & 15
    return _f16(b, 0) * (1 + 2 * nibbles.astype(np.float32))


def _iq1_s(b: np.ndarray) -> np.ndarray:
    qh = b[:, 34:50].copy().view(np.uint16)
    # value = d * (2 ls + 1) * (grid +- 1/8): eighths of d * (2 ls + 1) are integers up to 9
    return _f16(b, 0) * (2 * ((qh >> 12) & 7).astype(np.float32) + 1) * np.float32(0.125)


def _mxfp4(b: np.ndarray) -> np.ndarray:
    # gguf-py's e8m0 halved (its codebook holds twice e2m1's values)
    return np.asarray(quants.MXFP4.e8m0_to_fp32_half(b[:, 0].astype(np.uint32)), np.float32).reshape(-1, 1)


# GGML type -> the fp32 scale of each 32 values, from the blocks' bytes ([n_blocks, groups])
_SCALES: dict[QT, Callable[[np.ndarray], np.ndarray]] = {
    QT.IQ4_NL: lambda b: _f16(b, 0).reshape(-1, 1),
    QT.MXFP4: _mxfp4,
    QT.IQ4_XS: _iq4_xs,
    QT.IQ3_XXS: _iq3_xxs,
    QT.IQ3_S: _iq3_s,
    QT.IQ2_XXS: _iq2_xxs,
    QT.IQ1_S: _iq1_s,
    QT.TQ1_0: lambda b: _repeat(_f16(b, 52), 8),
    QT.TQ2_0: lambda b: _repeat(_f16(b, 64), 8),
}
CODEBOOK_TYPES = frozenset({QT.IQ4_NL, QT.IQ4_XS, QT.MXFP4})  # read as held (codebook_blocks)
HELD_CODEBOOK = frozenset({QT.IQ4_NL, QT.IQ4_XS, QT.MXFP4})  # held as the file's blocks (WT_HALF_SCALES)
GRID_TYPES = frozenset({QT.IQ2_XXS, QT.IQ3_XXS, QT.IQ3_S, QT.IQ1_S})  # read as stored (grid_blocks)
TYPES = frozenset(_SCALES) - CODEBOOK_TYPES - GRID_TYPES


def _integers(values: np.ndarray, scale: np.ndarray) -> np.ndarray | None:
    """int8 q with scale * q == values bit for bit ([groups, 32] each), or None."""
    if not np.all(np.isfinite(scale)):
        return None
    zero = scale == 0
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.rint(np.where(zero, 0, values / np.where(zero, 1, scale)))
    # a zero scale gives a zero whose sign is the scale's times q's: pick q = +-1 to match
    q = np.where(zero, np.where(np.signbit(values) == np.signbit(scale), 1, -1), q)
    if q.min(initial=0) < -128 or q.max(initial=0) > 127:
        return None
    q8 = q.astype(np.int8)
    same = (scale * q8.astype(np.float32)).view(np.uint32) == values.view(np.uint32)
    return q8 if bool(same.all()) else None


IQ4_VALUES = np.array(quants.IQ4_NL.kvalues, np.int8)  # gguf-py's codebooks
MXFP4_VALUES = np.array(quants.MXFP4.kvalues, np.int8)
# nibble-coded types: (where the nibbles start in a block, their codebook); 32 values a group as
# 16 bytes, low nibbles first (gguf-py's order)
_NIBBLES: dict[QT, tuple[int, np.ndarray]] = {
    QT.IQ4_NL: (2, IQ4_VALUES),
    QT.IQ4_XS: (8, IQ4_VALUES),
    QT.MXFP4: (1, MXFP4_VALUES),
}


def _from_nibbles(blocks: np.ndarray, qtype: QT) -> np.ndarray:
    """Q8_0 blocks of a nibble-coded type straight from its bits: its codebook value of each
    nibble and its group's scale. Value = scale * code is the one product gguf-py computes, so
    no check is needed (test_transcode.py compares with gguf-py)."""
    start, codebook = _NIBBLES[qtype]
    scale = _SCALES[qtype](blocks).astype(np.float32).reshape(-1)
    nibbles = blocks[:, start:].reshape(len(scale), 16)
    out = np.empty((len(scale), Q8_0_KERNEL_BYTES), dtype=np.uint8)
    out[:, :4].view(np.float32)[:, 0] = scale
    out[:, 4:20] = codebook[nibbles & 15].view(np.uint8)
    out[:, 20:36] = codebook[nibbles >> 4].view(np.uint8)
    return out


def codebook_blocks(data: np.ndarray, qtype: QT) -> np.ndarray:
    """A 4-bit codebook type's bytes in the kernels' layout (uint8, 1-D): per 32 values the fp32
    scale of their Q8_0 block (`_SCALES`) and their 16 bytes of indices as stored (index k in the
    low nibble of byte k, 16 + k in its high nibble), 20 bytes."""
    start, _ = _NIBBLES[qtype]
    blocks = np.ascontiguousarray(data).view(np.uint8).reshape(-1, GGML_QUANT_SIZES[qtype][1])
    scale = _SCALES[qtype](blocks).astype(np.float32).reshape(-1)
    out = np.empty((len(scale), 20), dtype=np.uint8)
    out[:, :4] = scale.view(np.uint8).reshape(-1, 4)
    out[:, 4:] = blocks[:, start:].reshape(len(scale), 16)
    return out.reshape(-1)


def grid_blocks(data: np.ndarray, qtype: QT) -> np.ndarray | None:
    """A grid type's bytes as the kernels hold them (uint8, 1-D): its blocks as stored, which
    native/grids.c decodes into the Q8_0 blocks `to_q8_0` makes; None where some scale is not
    finite (no such block: the caller widens the tensor to fp32, as `to_q8_0` refuses it)."""
    blocks = np.ascontiguousarray(data).view(np.uint8).reshape(-1, GGML_QUANT_SIZES[qtype][1])
    if qtype in Q6_K_TYPES:  # held where the Q6_K rewrite is exact: the bits it gave, no others
        return None if to_q6_k(blocks, qtype) is None else np.array(blocks).reshape(-1)
    if not bool(np.isfinite(_f16(blocks, 0)).all()):  # every scale is d times a finite factor
        return None
    return np.array(blocks).reshape(-1)


# The K-grid types: each 16 values a small integer scale times one fp16-derived d a super-block
# (native/grids.c's kgrid_block), held as stored (`grid_blocks`)
KGRID_TYPES = frozenset({QT.IQ2_XS, QT.IQ2_S, QT.Q3_K, QT.IQ1_M})


def to_q8_0(data: np.ndarray, qtype: QT) -> np.ndarray | None:
    """A tensor's stored bytes as the kernels' Q8_0 blocks (uint8, 1-D), or None when some block
    is not exactly scale times int8 (the caller then widens it to fp32)."""
    block_values, block_bytes = GGML_QUANT_SIZES[qtype]
    blocks = np.ascontiguousarray(data).view(np.uint8).reshape(-1, block_bytes)
    if qtype in _NIBBLES:
        return _from_nibbles(blocks, qtype).reshape(-1)
    groups = block_values // GROUP
    out = np.empty((len(blocks) * groups, Q8_0_KERNEL_BYTES), dtype=np.uint8)
    step = max(1, CHUNK_VALUES // block_values)
    for start in range(0, len(blocks), step):
        chunk = blocks[start : start + step]
        values = np.asarray(quants.dequantize(chunk.reshape(-1), qtype), dtype=np.float32).reshape(-1, GROUP)
        scale = np.broadcast_to(_SCALES[qtype](chunk).astype(np.float32), (len(chunk), groups)).reshape(-1, 1)
        q = _integers(values, scale)
        if q is None:
            return None
        rows = out[start * groups : (start + len(chunk)) * groups]
        rows[:, :4].view(np.float32)[:] = scale
        rows[:, 4:] = q.view(np.uint8)
    return out.reshape(-1)


Q6_K_BLOCK_BYTES = 210  # GGUF Q6_K: ql[128], qh[64], scales int8[16], d fp16


def _q3_k_scales(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q3_K's fp16 d and its 16 six-bit scales less 32 (gguf-py's unpacking)."""
    s = b[:, 96:108]
    low = (s[:, :8].reshape(-1, 1, 8) >> np.array([0, 4], dtype=np.uint8).reshape(1, 2, 1)).reshape(-1, 16)
    high = (s[:, 8:].reshape(-1, 1, 4) >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 4, 1)).reshape(
        -1, 16
    )
    scales = ((low & 15) | ((high & 3) << 4)).astype(np.int8) - np.int8(32)
    return b[:, 108:110].copy().view(np.float16)[:, 0], scales


def _iq1_m_scales(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """IQ1_M's d / 8 (its values are eighths: grid +- 1/8) and the odd scales 2 s + 1."""
    words = b[:, 48:56].copy().view(np.uint16)
    d = (words & np.uint16(0xF000)) >> np.array([12, 8, 4, 0], dtype=np.uint16)
    d16 = (d[:, 0] | d[:, 1] | d[:, 2] | d[:, 3]).view(np.float16)
    scales = ((words.reshape(-1, 4, 1) >> np.array([0, 3, 6, 9], dtype=np.uint16)) & 7).reshape(-1, 16)
    return (d16.astype(np.float32) * np.float32(0.125)).astype(np.float16), (2 * scales + 1).astype(np.int8)


# GGML type -> each super-block's fp16 d and int8 scale of each 16 values, for Q6_K blocks
_SUPER_SCALES: dict[QT, Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]] = {
    QT.Q3_K: _q3_k_scales,
    QT.IQ1_M: _iq1_m_scales,
}
Q6_K_TYPES = frozenset(_SUPER_SCALES)


def _q6_k_blocks(d: np.ndarray, scales: np.ndarray, q: np.ndarray) -> np.ndarray:
    """GGUF Q6_K blocks of fp16 `d`, int8 `scales` [n, 16] and q in [-32, 31] [n, 256]: value
    256 n + 128 h + 32 s + l keeps its low nibble in ql[64 h + 32 (s & 1) + l] (high half when
    s >= 2) and its two high bits in qh[32 h + l] at bit 2 s."""
    u = (q.astype(np.int16) + 32).astype(np.uint8).reshape(-1, 2, 4, 32)  # [n, h, s, l]
    ql = (u[:, :, 0:2] & 15) | ((u[:, :, 2:4] & 15) << 4)  # [n, h, s & 1, l]
    qh = (u[:, :, 0] >> 4) | (u[:, :, 1] >> 4) << 2 | (u[:, :, 2] >> 4) << 4 | (u[:, :, 3] >> 4) << 6
    out = np.empty((len(q), Q6_K_BLOCK_BYTES), dtype=np.uint8)
    out[:, :128] = ql.reshape(-1, 128)
    out[:, 128:192] = qh.reshape(-1, 64)
    out[:, 192:208] = scales.view(np.uint8)
    out[:, 208:210] = d.astype(np.float16).reshape(-1, 1).view(np.uint8)
    return out


def to_q6_k(data: np.ndarray, qtype: QT) -> np.ndarray | None:
    """A Q3_K or IQ1_M tensor's bytes as GGUF Q6_K blocks (uint8, 1-D) whose gguf-py values are
    the tensor's bit for bit, or None when some block cannot be (the caller widens it)."""
    blocks = np.ascontiguousarray(data).view(np.uint8).reshape(-1, GGML_QUANT_SIZES[qtype][1])
    out = np.empty((len(blocks), Q6_K_BLOCK_BYTES), dtype=np.uint8)
    step = max(1, CHUNK_VALUES // 256)
    for start in range(0, len(blocks), step):
        chunk = blocks[start : start + step]
        values = np.asarray(quants.dequantize(chunk.reshape(-1), qtype), dtype=np.float32).reshape(-1, 16)
        d, scales = _SUPER_SCALES[qtype](chunk)
        scale = (d.astype(np.float32).reshape(-1, 1) * scales.astype(np.float32)).reshape(-1, 1)
        q = _integers(values, scale)
        if q is None or q.min(initial=0) < -32 or q.max(initial=0) > 31:
            return None
        part = _q6_k_blocks(d, scales, q.reshape(-1, 256))
        again = np.asarray(quants.dequantize(part.reshape(-1), QT.Q6_K), dtype=np.float32).reshape(-1, 16)
        if not bool((again.view(np.uint32) == values.view(np.uint32)).all()):
            return None
        out[start : start + len(chunk)] = part
    return out.reshape(-1)
