"""IQ4_XS held as the file stores it: super-blocks of 256 values, 136 bytes each (WT_HALF_SCALES).

Why: the kernels once held each 32 values of IQ4_XS as an fp32 scale and 16 bytes of indices (160
bytes a super-block against the file's 136), which kept the server's peak memory over llama.cpp's
by more than issue 40 (item 3) allows. Held as stored (fp16 d, u16 scales_h, 4 bytes scales_l, 128
bytes of indices), each 32's scale d * (ls - 32) is computed where a kernel reads it, ls the 6-bit
scale (scales_l's nibble, scales_h's two bits above it): an fp16 times a small integer, exact in
fp32, so every arithmetic gives the bits of the fp32-scale layout (transcode.codebook_blocks).

Checked here against independent references: those fp32-scale blocks (numpy's products) in every
arithmetic and target, gguf-py's dequantisation for the rows, at extreme d (+-0, subnormals, the
largest, +-inf, NaNs) with every ls 0 .. 63.
"""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT
from gguf import quants

from strata_engine.gguf_loader import TensorInfo
from strata_engine.kernels import transcode
from strata_engine.kernels.native import targets_to_test
from strata_engine.kernels.native.backend import NativeOps
from strata_engine.kernels.weight_types import HALF_SCALES, TYPES
from strata_engine.kernels.weights import Weight, widened
from strata_engine.testing.q8_checks import assert_layouts_give_the_same_bits

XS = QT.IQ4_XS
SIZE = TYPES[XS].stored_bytes  # 136
# fp32, q8 (8-bit activations), three and two limbs (the default and native-limb2)
MODES = {"fp32": {}, "q8": {"q8": True}, "limb3": {"limbs": 3}, "limb2": {"limbs": 2}}
N, K = 37, 512  # a partial group of 16 outputs, two super-blocks a row
# d: +-0, the smallest and largest subnormals, the smallest normal, +-the largest finite, +-inf,
# NaNs (a quiet one, a signalling one with a payload); then ordinary ones
EXTREMES = [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7E00, 0x7C01]
ORDINARY = [0x3C00, 0xBC00, 0x2E66, 0x1800]


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def set_ls(blocks: np.ndarray, ls: np.ndarray) -> None:
    """Super-blocks' 6-bit scales ls [n, 8] written into scales_l (nibble j) and scales_h (bits 2j)."""
    low = (ls & 15).astype(np.uint32) << (4 * np.arange(8, dtype=np.uint32))
    high = (ls >> 4).astype(np.uint32) << (2 * np.arange(8, dtype=np.uint32))
    blocks[:, 4:8] = np.bitwise_or.reduce(low, axis=1).astype("<u4").view(np.uint8).reshape(-1, 4)
    blocks[:, 2:4] = np.bitwise_or.reduce(high, axis=1).astype("<u2").view(np.uint8).reshape(-1, 2)


def stored_blocks(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    """Random [n, k] IQ4_XS super-blocks, every other one's d one of EXTREMES (cycled)."""
    blocks = rng.integers(0, 256, size=(n * k // 256, SIZE), dtype=np.uint8)
    blocks[:, :2] = rng.uniform(-0.05, 0.05, size=(len(blocks), 1)).astype(np.float16).view(np.uint8)
    ext = np.resize(np.array(EXTREMES, np.uint16), len(blocks[::2]))
    blocks[::2, :2] = ext.view(np.uint8).reshape(-1, 2)
    return blocks.reshape(-1)


def gguf_values(stored: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(quants.dequantize(stored, XS), np.float32).reshape(shape)


def assert_same_values(got: np.ndarray, want: np.ndarray) -> None:
    """Bit for bit (signed zeros too), a NaN any NaN (a payload is not a value)."""
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(bits(got)[~nan], bits(want)[~nan])


def weights(stored: np.ndarray, n: int, k: int) -> tuple[Weight, Weight]:
    """The weight as the loader holds it, and the fp32-scale layout of the same blocks."""
    held = Weight.from_info(TensorInfo("w", (n, k), XS, stored))
    with np.errstate(invalid="ignore"):  # an inf d times ls - 32 = 0: NaN, as the kernels give
        wide = transcode.codebook_blocks(stored, XS)
    return held, Weight("w", n, k, TYPES[XS].code, wide)


def test_held_as_the_files_bytes() -> None:
    stored = stored_blocks(np.random.default_rng(1), N, K)
    held, wide = weights(stored, N, K)
    assert held.kernel_type == TYPES[XS].code | HALF_SCALES
    assert np.shares_memory(held.raw, stored) and held.raw.nbytes == stored.nbytes  # no copy
    for q8, limbs in ((True, 0), (False, 3), (False, 2)):
        packed = NativeOps(1, q8=q8, limbs=limbs).pack(held)  # the packed groups: the file's size
        assert packed.raw.nbytes == -(-N // 16) * 16 * K // 256 * SIZE
    np.testing.assert_array_equal(widened(held).raw, wide.raw)  # the device's layout
    assert widened(held).kernel_type == TYPES[XS].code


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("target", targets_to_test())
def test_every_arithmetic_gives_the_fp32_scale_layouts_bits(target: str, mode: str) -> None:
    """Extreme and non-finite d on every other super-block, random ls and indices: every output
    bit for bit, every row-tile remainder, with and without a bias; the rows gathered (packed or
    not) are gguf-py's values."""
    rng = np.random.default_rng(7)
    stored = stored_blocks(rng, N, K)
    held, wide = weights(stored, N, K)
    ops = NativeOps(2, target, **MODES[mode])  # type: ignore[arg-type]
    a, b = ops.pack(held), ops.pack(wide)
    assert_layouts_give_the_same_bits(ops, a, b, rng)
    assert_same_values(ops.embed(a, np.arange(N)), gguf_values(stored, (N, K)))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("target", targets_to_test())
def test_every_ls_at_extreme_d(target: str, mode: str) -> None:
    """Each d of EXTREMES and ORDINARY with every ls 0 .. 63 (8 rows of one super-block each),
    the indices 0 .. 15 twice a 32: the rows are gguf-py's values (-0 where d = -0 or ls = 32 with
    d < 0, NaN where d is inf and ls = 32), and each 32's products alone (an activation row a 32)
    the fp32-scale layout's bits."""
    heads = np.repeat(np.array(EXTREMES + ORDINARY, np.uint16), 8)
    blocks = np.zeros((len(heads), SIZE), np.uint8)
    blocks[:, :2] = heads.view(np.uint8).reshape(-1, 2)
    set_ls(blocks, (8 * (np.arange(len(heads)) % 8)).reshape(-1, 1) + np.arange(8))
    blocks[:, 8:] = np.tile(np.arange(16, dtype=np.uint8) | np.arange(16, dtype=np.uint8)[::-1] << 4, 8)
    stored = blocks.reshape(-1)
    n = len(heads)
    held, wide = weights(stored, n, 256)
    one = wide.raw.reshape(n, 8, 20)[:, :, :4].copy().view(np.float32)[heads == 0x3C00]  # d = 1
    np.testing.assert_array_equal(np.sort(one.ravel()), np.arange(-32, 32))  # every ls - 32
    ops = NativeOps(2, target, **MODES[mode])  # type: ignore[arg-type]
    a, b = ops.pack(held), ops.pack(wide)
    x = np.zeros((16, 256), np.float32)
    for g in range(8):
        x[2 * g, 32 * g + 9] = 1.0
        x[2 * g + 1, 32 * g + 16], x[2 * g + 1, 32 * g + 3] = 1.0, -0.75
    np.testing.assert_array_equal(bits(ops.linear(x, a)), bits(ops.linear(x, b)))
    assert_same_values(ops.embed(a, np.arange(n)), gguf_values(stored, (n, 256)))
