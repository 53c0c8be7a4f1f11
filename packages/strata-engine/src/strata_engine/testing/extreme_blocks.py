"""Blocks of every transcoded type at its extreme values (largest scales, every code), for the kernels' bit tests on both devices."""

from __future__ import annotations

import numpy as np
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as QT

# where each type keeps its fp16 scale: byte offset in the block (IQ1_M spreads it: below)
SCALE_AT = {
    QT.Q5_0: 0, QT.IQ4_NL: 0, QT.IQ4_XS: 0, QT.IQ3_XXS: 0, QT.IQ3_S: 0, QT.IQ2_XXS: 0, QT.IQ1_S: 0,
    QT.TQ1_0: 52, QT.TQ2_0: 64, QT.Q3_K: 108, QT.IQ2_XS: 0, QT.IQ2_S: 0,
}  # fmt: skip


def extreme_blocks(qtype: QT, rows: int, cols: int, seed: int = 0) -> np.ndarray:
    """Arbitrary quant bytes (every grid index, sign and sub-scale) with extreme finite scales."""
    rng = np.random.default_rng(seed)
    block, size = GGML_QUANT_SIZES[qtype]
    data = rng.integers(0, 256, size=(rows * cols // block, size), dtype=np.uint8)
    scale = _scales(len(data), rng)
    if qtype == QT.MXFP4:
        # exponents from the smallest (subnormal halves) up to where 12 * 2^(e - 128) stays finite
        data[:, 0] = rng.integers(0, 253, size=len(data))
        data[:4, 0] = [0, 1, 2, 252]
    elif qtype == QT.IQ1_M:  # d's four nibbles in the top of the four u16 scale words
        # Q6_K holds its d / 8 as fp16: a subnormal d with bits below 2^-24 * 8 cannot be (below)
        d = scale.view(np.float16).astype(np.float32)
        scale[(d * np.float32(0.125)).astype(np.float16).astype(np.float32) * 8 != d] = 0x3C00
        words = data[:, 48:56].copy().view(np.uint16) & np.uint16(0x0FFF)
        for k in range(4):
            words[:, k] |= ((scale >> (4 * k)) & 15) << 12
        data[:, 48:56] = words.view(np.uint8)
    else:
        data[:, SCALE_AT[qtype] : SCALE_AT[qtype] + 2] = scale.view(np.uint8).reshape(-1, 2)
    return data.reshape(-1)


def _scales(n: int, rng: np.random.Generator) -> np.ndarray:
    """fp16 scale bits: any finite value, and zeros of both signs, subnormals, the largest."""
    scale = rng.integers(0, 1 << 16, size=n, dtype=np.uint16)
    scale[(scale & 0x7C00) == 0x7C00] &= 0x83FF  # inf / NaN exponents made subnormal
    extremes = [0x0000, 0x8000, 0x0001, 0x83FF, 0x7BFF, 0xFBFF]
    scale[: min(n, 6)] = extremes[: min(n, 6)]
    return scale
