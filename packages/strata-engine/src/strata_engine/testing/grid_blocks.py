"""Weight blocks for the grid and K-grid types' tests: gguf-py's grids, every entry named in turn."""

from __future__ import annotations

import numpy as np
from gguf import GGML_QUANT_SIZES, quants
from gguf import GGMLQuantizationType as QT

from strata_engine.testing.extreme_blocks import extreme_blocks

KGRID = (QT.IQ2_XS, QT.IQ2_S, QT.Q3_K, QT.IQ1_M)
KGRID_ENTRIES = {QT.IQ2_XS: 512, QT.IQ2_S: 1024, QT.IQ1_M: 2048}


def kgrid_table(qtype: QT) -> np.ndarray:
    """gguf-py's grid of the type ([entries, 8] values)."""
    q = {QT.IQ2_XS: quants.IQ2_XS, QT.IQ2_S: quants.IQ2_S, QT.IQ1_M: quants.IQ1_M}[qtype]
    q.init_grid()
    return np.asarray(q.grid).reshape(-1, 8)


def set_kgrid_indices(qtype: QT, blocks: np.ndarray, index: np.ndarray) -> None:
    """Grid index of group of 8 g of each block ([n, 32]), the other bits kept."""
    if qtype == QT.IQ2_XS:  # u16 a group: 9 bits of index under 7 sign bits
        words = blocks[:, 2:66].copy().view(np.uint16)
        blocks[:, 2:66] = ((words & np.uint16(0xFE00)) | index.astype(np.uint16)).view(np.uint8)
    elif qtype == QT.IQ2_S:  # the low bytes, then 2 high bits a group in qh (4 groups a byte)
        blocks[:, 2:34] = index & 255
        blocks[:, 66:74] = ((index >> 8).reshape(-1, 8, 4) << np.array([0, 2, 4, 6])).sum(axis=-1)
    else:  # IQ1_M: the low bytes, then 3 high bits in each nibble of qh (its bit 3 the delta's sign)
        blocks[:, 0:32] = index & 255
        nib = (blocks[:, 32:48].reshape(-1, 16, 1) >> np.array([0, 4], dtype=np.uint8)) & 8
        nib = nib.reshape(-1, 32) | (index >> 8)
        blocks[:, 32:48] = (nib[:, 0::2] | nib[:, 1::2] << 4).astype(np.uint8)


def kgrid_stored(qtype: QT, seed: int, n: int, k: int) -> np.ndarray:
    """extreme_blocks whose grid indices (the grid types) name every entry, in order, again and
    again (the signs, scales and fp16 d as extreme_blocks draws them)."""
    blocks = extreme_blocks(qtype, n, k, seed=seed).reshape(-1, GGML_QUANT_SIZES[qtype][1])
    if qtype in KGRID_ENTRIES:
        set_kgrid_indices(
            qtype, blocks, (np.arange(blocks.shape[0] * 32) % KGRID_ENTRIES[qtype]).reshape(-1, 32)
        )
    return blocks.reshape(-1)
