"""IQ2_XS and IQ2_S for the device's integer kernels: rewritten once at load into the bytes the CPU's
kernels expand them to on every call (native/q8.h's WT_IQ2_BYTES, grids.c's expand_group).

The C packer keeps these types as stored (a group is its 16 rows' super-blocks) and each call
decodes a group into a K-quant group of one byte a weight: before every 8th block the super-block's
d f32[16] (the file's fp16 d times 0.125, exact), per block of 32 an int8 scale a half of 16 and
output (2 s + 1, s the file's 4-bit scale), then 8 x 64 bytes, byte 4o + c of row r holding
w(o, 4r + c) + 64 (the quants are grid values 8, 25, 43 with their signs: |w| <= 43). The CPU's
integer kernels read that group as they read Q6_K's unpacked bytes: per half its exact integer sum
and acc = fma((d * sc_h) * s, (float)S_h, acc), no min. The device receives that same group here,
once, and its kernels take the same sums and float steps: the CPU's bits. The quants come from
gguf-py's dequantisation of the blocks with d = 1 and every scale 0 (each value then q / 8,
exact), so the grids are gguf-py's, not a copy.

On the device this costs 544 bytes a block of 32 for 16 outputs and 64 a super-block's header:
8.6 bits a weight, against the file's 2.31 (IQ2_XS) and 2.56 (IQ2_S).
"""

from __future__ import annotations

import numpy as np
from gguf import GGML_QUANT_SIZES, quants
from gguf import GGMLQuantizationType as QT

GROUP = 16
OFFSET = 64  # WT_IQ2_BYTES' offset: w + 64 in [21, 107]
SCALES_AT = {QT.IQ2_XS: 66, QT.IQ2_S: 74}  # the super-block's 8 bytes of 4-bit scales
CHUNK = 64  # groups expanded at a time: the dequantised values of 1,024 rows, not of the whole weight


def _integers(blocks: np.ndarray, qtype: QT) -> np.ndarray:
    """The signed grid quants w of every value (int32 [..., 256]): gguf-py's values with d = 1 and
    every scale 0, whose factor d (0.5 + 0) / 4 = 1 / 8 makes each value w / 8 exactly."""
    unit = blocks.copy()
    unit[..., 0:2] = np.array([1.0], np.float16).view(np.uint8)
    unit[..., SCALES_AT[qtype] : SCALES_AT[qtype] + 8] = 0
    values = quants.dequantize(unit.reshape(-1), qtype) * np.float32(8)  # w / 8 * 8: exact in fp32
    w = np.rint(values).astype(np.int32)
    assert np.array_equal(w, values) and np.abs(w).max(initial=0) <= 43  # exact: grid values 8, 25, 43
    return w.reshape(*blocks.shape[:-1], 256)


def expand(raw: np.ndarray, qtype: QT, n: int, k: int) -> np.ndarray:
    """An [n, k] IQ2_XS or IQ2_S weight as the C packer holds it (`raw`: groups of 16 rows' super-
    blocks as stored, the last group's rows past n unused) as the groups of WT_IQ2_BYTES the
    device's kernels read (packed.py's K-quant layout for these types; rows past n zero)."""
    nsb, groups = k // 256, -(-n // GROUP)
    rows = raw.reshape(groups * GROUP, nsb, GGML_QUANT_SIZES[qtype][1]).copy()
    rows[n:] = 0
    blocks = rows.reshape(groups, GROUP, nsb, -1)
    return np.concatenate([_groups(blocks[g : g + CHUNK], qtype) for g in range(0, groups, CHUNK)])


def _groups(blocks: np.ndarray, qtype: QT) -> np.ndarray:
    """`expand` of the stored super-blocks [groups, 16 rows, nsb, bytes]: each group's bytes in turn."""
    groups, _, nsb, _ = blocks.shape
    at = SCALES_AT[qtype]
    d = blocks[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32) * np.float32(0.125)
    s = blocks[..., at : at + 8].astype(
        np.int32
    )  # [group, row, nsb, 8 blocks]: half 0 low, half 1 high nibble
    sc = (2 * np.stack([s & 15, s >> 4], axis=-1) + 1).astype(np.int8)  # [group, row, nsb, 8, 2]
    w = (_integers(blocks, qtype) + OFFSET).astype(np.uint8)  # [group, row, nsb, 256]
    nb = 8 * nsb
    # quants: [group, block, row r, output o, c] = w(16 group + o, 32 block + 4 r + c)
    q = w.reshape(groups, GROUP, nb, 8, 4).transpose(0, 2, 3, 1, 4).reshape(groups, nb, 512)
    scales = sc.reshape(groups, GROUP, nb, 2).transpose(0, 2, 3, 1).reshape(groups, nb, 32).view(np.uint8)
    body = np.concatenate([scales, q], axis=2).reshape(groups, nsb, 8 * 544)
    head = d.reshape(groups, GROUP, nsb).transpose(0, 2, 1).copy().view(np.uint8)  # [group, nsb, 64]
    out = np.concatenate([head, body], axis=2).reshape(groups, -1)
    tail = np.zeros((groups, 64), np.uint8)  # block_at(nb): the header of a super-block past the last
    return np.concatenate([out, tail], axis=1).reshape(-1)
