"""The codebook types (IQ4_NL, IQ4_XS, MXFP4) looked up in registers, at their extreme values.

Why: on AVX-512 the default (limb) kernels map each 4-bit index through the codebook with a byte
shuffle inside the tile, and form each block's scale from the file's fields there, instead of
reading back a Q8_0 group expanded in scratch each call. A wrong table byte, a swapped nibble half,
or a scale built from the wrong bits of IQ4_XS's header or MXFP4's exponent would change the
products; the layout tests (test_codebook_types.py) compare against the Q8_0 path, and here each
output is checked against the float64 product of gguf-py's dequantised values instead, at one row
and at many (several row tiles and a remainder), on every target: every index in every position,
IQ4_NL's and IQ4_XS's largest and smallest fp16 d (subnormals, both signs), every IQ4_XS ls, and
MXFP4's exponents E = 0, 1, 2 and 252 .. 254.

The activations are small integers times a power of two, so the limbs hold them exactly and each
block's integer sum is exact: each output then differs from the exact product only by the float
sequence's roundings, at most (blocks + 2) * 2^-23 times the sum of |w x|.
"""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, quants
from gguf import GGMLQuantizationType as QT

from strata_engine.gguf_loader import TensorInfo
from strata_engine.kernels.native import targets_to_test
from strata_engine.kernels.native.backend import NativeOps
from strata_engine.kernels.weights import Weight

N, K = 48, 512  # three groups of 16 outputs, two IQ4_XS super-blocks a row
# fp16 d: the smallest subnormal (both signs), the largest subnormal, the smallest normal, the largest
# finite (both signs), 1
HALF_D = np.array([0x0001, 0x8001, 0x03FF, 0x0400, 0x7BFF, 0xFBFF, 0x3C00], np.uint16)
SMALL_E, LARGE_E = (0, 1, 2), (252, 253, 254)


def every_index(n_blocks: int, nbytes: int) -> np.ndarray:
    """Index bytes with every index in every nibble position over the blocks (a rotation a block),
    each byte's two nibbles different."""
    j = np.arange(2 * nbytes)[None, :]
    idx = (3 * np.arange(n_blocks)[:, None] + 7 * j + 5 * (j >= nbytes)) % 16
    return (idx[:, :nbytes] | idx[:, nbytes:] << 4).astype(np.uint8)


def stored(qtype: QT) -> tuple[np.ndarray, np.ndarray]:
    """[N, K] blocks of qtype as the file stores them, and each output row's exponent class
    (MXFP4: 0 small E, 1 large E; others all 0)."""
    block, size = GGML_QUANT_SIZES[qtype]
    rows = np.repeat(np.arange(N), K // block)  # each block's output row
    data = np.zeros((N * K // block, size), np.uint8)
    if qtype == QT.MXFP4:
        e = np.array(SMALL_E + LARGE_E, np.uint8)[rows % 6]
        data[:, 0], data[:, 1:] = e, every_index(len(data), 16)
        return data.reshape(-1), (np.arange(N) % 6 >= 3).astype(int)
    data[:, :2] = HALF_D[rows % len(HALF_D)].view(np.uint8).reshape(-1, 2)
    if qtype == QT.IQ4_NL:
        data[:, 2:] = every_index(len(data), 16)
    else:  # IQ4_XS: ls = 0 .. 63 over the super-blocks (scales_l nibble j, scales_h bits 2j, 2j + 1)
        ls = (8 * np.arange(len(data))[:, None] + np.arange(8)[None, :]) % 64
        low = (ls & 15).astype(np.uint32) << (4 * np.arange(8, dtype=np.uint32))
        high = (ls >> 4).astype(np.uint32) << (2 * np.arange(8, dtype=np.uint32))
        data[:, 2:4] = np.bitwise_or.reduce(high, axis=1).astype("<u2").view(np.uint8).reshape(-1, 2)
        data[:, 4:8] = np.bitwise_or.reduce(low, axis=1).astype("<u4").view(np.uint8).reshape(-1, 4)
        data[:, 8:] = every_index(len(data) * 8, 16).reshape(len(data), 128)
    return data.reshape(-1), np.zeros(N, int)


def exact_values(data: np.ndarray, qtype: QT) -> np.ndarray:
    """gguf-py's values in float64. MXFP4: dequantised with every E set to 127 (scale 2^-1, no
    overflow), times 2^(E - 127) (its scale is 2^(E - 128) for every E), checked against gguf-py's
    own values wherever those are finite."""
    if qtype != QT.MXFP4:
        return np.asarray(quants.dequantize(data, qtype), np.float64).reshape(N, K)
    blocks = data.reshape(-1, 17)
    at_127 = blocks.copy()
    at_127[:, 0] = 127
    unit = np.asarray(quants.dequantize(at_127.reshape(-1), qtype), np.float64).reshape(-1, 32)
    values = (unit * np.exp2(blocks[:, :1].astype(np.float64) - 127)).reshape(N, K)
    with np.errstate(over="ignore"):
        direct = np.asarray(quants.dequantize(data, qtype), np.float64).reshape(N, K)
    finite = np.isfinite(direct)
    np.testing.assert_array_equal(values[finite], direct[finite])
    return values


def activations(m: int, scale: float, rng: np.random.Generator) -> np.ndarray:
    """Integers in [-127, 127] times a power of two (held exactly by the limbs), some blocks zero.
    Each row has its own power (scale times 1, 2, 4 or 8), so that a row given another row's block
    scales gives other values."""
    x = rng.integers(-127, 128, size=(m, K)).astype(np.float64) * scale * 2.0 ** (np.arange(m) % 4)[:, None]
    x[:, 32:64] = 0
    return x.astype(np.float32)


@pytest.mark.parametrize("limbs", (3, 2))
@pytest.mark.parametrize("rows", (1, 21))
@pytest.mark.parametrize("target", targets_to_test())
@pytest.mark.parametrize("qtype", (QT.IQ4_NL, QT.IQ4_XS, QT.MXFP4), ids=lambda q: q.name)
def test_extreme_values_against_a_float64_product(qtype: QT, target: str, rows: int, limbs: int) -> None:
    data, cls = stored(qtype)
    ops = NativeOps(2, target, limbs=limbs)
    w = ops.pack(Weight.from_info(TensorInfo("w", (N, K), qtype, data)))
    values = exact_values(data, qtype)
    rng = np.random.default_rng(rows + 10 * limbs)
    # MXFP4's small E with large activations, its large E with tiny ones: each class's outputs in
    # fp32's normal range (the others' may overflow or underflow: not compared)
    for c, scale in enumerate((2.0**20, 2.0**-40) if qtype == QT.MXFP4 else (2.0**-7,)):
        x = activations(rows, scale, rng)
        got = np.asarray(ops.linear(x, w), np.float64)[:, cls == c]
        x64 = x.astype(np.float64)
        want = x64 @ values[cls == c].T
        bound = (K // 32 + 2) * 2.0**-23 * (np.abs(x64) @ np.abs(values[cls == c]).T)
        assert np.all(np.abs(got - want) <= bound), (
            f"{np.max(np.abs(got - want) / np.maximum(bound, 1e-300))}"
        )
        assert np.count_nonzero(want) > want.size // 2  # the scales (not zeros) are what is checked
