"""K-quant blocks (Q4_K, Q5_K, Q6_K) rearranged, exactly, into the layout the C kernels read.

Most published GGUFs are Q4_K_M (Q4_K and Q6_K blocks) or Q5_K_M. A super-block holds 256
weights in 8 sub-blocks of 32; the kernels dequantise one sub-block at a time, so each is
given its quants contiguously, with fp16 scales widened to fp32 (exact). The values the
kernels produce are gguf-py's, bit for bit: the same float32 products in the same order
(Q4_K/Q5_K: (d * sc) * q - (dmin * m); Q6_K: (d * sc) * q), tested in test_quants.py.

Layouts (per super-block of 256 weights):
  Q4_K (152 bytes, file 144): d f32, dmin f32, sc u8[8], m u8[8], then per sub-block 16
       bytes of nibbles: byte i holds element i (low) and element i + 16 (high).
  Q5_K (184 bytes, file 176): as Q4_K, then per sub-block 4 bytes: bit i of that 32-bit
       little-endian word is element i's fifth bit.
  Q6_K (276 bytes, file 210): d f32, sc i8[16], then q - 32 as int8 for all 256 elements.
"""

from __future__ import annotations

import numpy as np
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as QT

QK_K = 256
PACKED_BYTES = {QT.Q4_K: 152, QT.Q5_K: 184, QT.Q6_K: 276}


def _scale_min(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 8 six-bit scales and mins packed in 12 bytes (llama.cpp's get_scale_min_k4)."""
    d, m, m_d = (scales[:, i : i + 4] for i in (0, 4, 8))
    sc = np.concatenate([d & 0x3F, (m_d & 0x0F) | ((d >> 2) & 0x30)], axis=1)
    mn = np.concatenate([m & 0x3F, (m_d >> 4) | ((m >> 2) & 0x30)], axis=1)
    return sc, mn


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """[n, 128] bytes -> [n, 8, 32] 4-bit values: sub-block 2c takes the low nibbles of bytes
    32c..32c+31, sub-block 2c+1 their high nibbles."""
    q = qs.reshape(-1, 4, 1, 32) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
    return (q & 0x0F).reshape(-1, 8, 32)


def _pack_nibbles(q: np.ndarray) -> np.ndarray:
    """[n, 8, 32] 4-bit values -> [n, 8, 16] bytes: element i low, element i + 16 high."""
    return (q[:, :, :16] | (q[:, :, 16:] << 4)).astype(np.uint8)


def _widen(halves: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(halves).view(np.float16).astype(np.float32).view(np.uint8)


def _q4_k(blocks: np.ndarray) -> list[np.ndarray]:
    sc, mn = _scale_min(blocks[:, 4:16])
    q = _nibbles(blocks[:, 16:144])
    return [_widen(blocks[:, 0:2]), _widen(blocks[:, 2:4]), sc, mn, _pack_nibbles(q).reshape(-1, 128)]


def _q5_k(blocks: np.ndarray) -> list[np.ndarray]:
    sc, mn = _scale_min(blocks[:, 4:16])
    qh = blocks[:, 16:48]  # bit j of byte t: element t of sub-block j, fifth bit
    q = _nibbles(blocks[:, 48:176])
    high = (qh[:, None, :] >> np.arange(8, dtype=np.uint8)[None, :, None]) & 1  # [n, 8, 32]
    words = (high.astype(np.uint32) << np.arange(32, dtype=np.uint32)).sum(axis=2, dtype=np.uint32)
    return [
        _widen(blocks[:, 0:2]),
        _widen(blocks[:, 2:4]),
        sc,
        mn,
        _pack_nibbles(q).reshape(-1, 128),
        words.astype("<u4").view(np.uint8).reshape(-1, 32),
    ]


def _q6_k(blocks: np.ndarray) -> list[np.ndarray]:
    ql, qh, scales, d = blocks[:, :128], blocks[:, 128:192], blocks[:, 192:208], blocks[:, 208:210]
    shifted_low = ql.reshape(-1, 2, 1, 64) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
    low = (shifted_low & 0x0F).reshape(-1, 8, 32)
    shifted_high = qh.reshape(-1, 2, 1, 32) >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
    high = (shifted_high & 0x03).reshape(-1, 8, 32)
    q = ((low | (high << 4)).astype(np.int16) - 32).astype(np.int8)
    return [_widen(d), scales, q.view(np.uint8).reshape(-1, 256)]


PACKERS = {QT.Q4_K: _q4_k, QT.Q5_K: _q5_k, QT.Q6_K: _q6_k}


CHUNK_BLOCKS = 4096  # super-blocks repacked at a time: the temporaries stay small and in cache


def pack(data: np.ndarray, qtype: QT) -> np.ndarray:
    """The raw GGUF bytes of a K-quant tensor in the kernels' layout (uint8, 1-D).

    Repacked a chunk at a time into one output array, so a large tensor (a 49152 x 2048
    embedding) never has full-size temporaries beside it.
    """
    blocks = np.asarray(data, dtype=np.uint8).reshape(-1, GGML_QUANT_SIZES[qtype][1])
    out = np.empty((len(blocks), PACKED_BYTES[qtype]), dtype=np.uint8)
    for start in range(0, len(blocks), CHUNK_BLOCKS):
        chunk = blocks[start : start + CHUNK_BLOCKS]
        column = 0
        for part in PACKERS[qtype](chunk):
            flat = part.reshape(len(chunk), -1)
            out[start : start + len(chunk), column : column + flat.shape[1]] = flat
            column += flat.shape[1]
        assert column == PACKED_BYTES[qtype]
    return out.reshape(-1)
