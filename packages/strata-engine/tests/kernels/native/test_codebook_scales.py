"""IQ4_NL and MXFP4 held as the file stores them: IQ4_NL's fp16 d, MXFP4's e8m0 byte (WT_HALF_SCALES).

Why: the kernels once held each block of 32 of a codebook type as an fp32 scale and 16 bytes of
indices (20 bytes; the file's IQ4_NL block is 18, MXFP4's 17), which put the server's peak memory
over llama.cpp's by more than issue 40 (item 3) allows. Held as stored, the scale is converted to
fp32 where a kernel reads it, exactly: IQ4_NL's d as any fp16 (f16_at; F16C's vcvtph2ps on x86),
MXFP4's 2^(E - 128) built from E's bits (gguf-py's e8m0_to_fp32_half: its codebook is e2m1's
doubled), so every arithmetic gives the bits of the fp32-scale layout (transcode.codebook_blocks).

Checked here against independent references: the fp32-scale blocks (numpy's float16 -> float32,
gguf-py's e8m0_to_fp32_half) in every arithmetic and target, gguf-py's dequantisation for the rows,
every one of the 65,536 halves as IQ4_NL's d and all 256 bytes as MXFP4's E.
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

HELD = (QT.IQ4_NL, QT.MXFP4)
# fp32, q8 (8-bit activations), three and two limbs (the default and native-limb2)
MODES = {"fp32": {}, "q8": {"q8": True}, "limb3": {"limbs": 3}, "limb2": {"limbs": 2}}
N, K = 37, 256  # a partial group of 16 outputs
# IQ4_NL's d: +-0, the smallest and largest subnormals, the smallest normal, +-the largest finite,
# +-inf and NaNs (a quiet one, and a signalling one with a payload); MXFP4's E: both subnormal
# scales, 2^-126, 1/2, 1, the two largest
EXTREMES = {
    QT.IQ4_NL: np.array(
        [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7E00, 0x7C01],
        np.uint16,
    ).view(np.uint8),
    QT.MXFP4: np.array([0, 1, 2, 127, 128, 254, 255], np.uint8),
}


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def stored_blocks(qtype: QT, rng: np.random.Generator, extremes: bool = False) -> np.ndarray:
    """Random [N, K] blocks of `qtype` as a file stores them, ordinary scales, every other block's
    scale one of EXTREMES (cycled) where `extremes`."""
    size, head = TYPES[qtype].stored_bytes, 1 if qtype == QT.MXFP4 else 2
    nb = N * K // 32
    blocks = rng.integers(0, 256, size=(nb, size), dtype=np.uint8)
    if qtype == QT.MXFP4:
        blocks[:, 0] = rng.integers(118, 130, size=nb)
    else:
        blocks[:, :2] = rng.uniform(-0.05, 0.05, size=(nb, 1)).astype(np.float16).view(np.uint8)
    if extremes:
        blocks[::2, :head] = np.resize(EXTREMES[qtype], (len(blocks[::2]) * head,)).reshape(-1, head)
    return blocks.reshape(-1)


def gguf_values(stored: np.ndarray, qtype: QT, shape: tuple[int, int]) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):  # 2^127 * 12: inf, as the kernels give
        return np.asarray(quants.dequantize(stored, qtype), np.float32).reshape(shape)


def assert_same_values(got: np.ndarray, want: np.ndarray) -> None:
    """Bit for bit, a NaN any NaN (a payload is not a value)."""
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(bits(got)[~nan], bits(want)[~nan])


@pytest.mark.parametrize("qtype", HELD, ids=lambda q: q.name)
def test_held_as_the_files_bytes(qtype: QT) -> None:
    stored = stored_blocks(qtype, np.random.default_rng(int(qtype)))
    w = Weight.from_info(TensorInfo("w", (N, K), qtype, stored))
    assert w.kernel_type == TYPES[qtype].code | HALF_SCALES
    assert np.shares_memory(w.raw, stored) and w.raw.nbytes == stored.nbytes  # no copy
    for limbs in (0, 3):
        packed = NativeOps(1, q8=True, limbs=limbs).pack(w)  # the packed groups: the file's size
        assert packed.raw.nbytes == -(-N // 16) * 16 * K // 32 * TYPES[qtype].stored_bytes
    wide = widened(w)  # the device's layout: the fp32 scale, as the kernels once held them
    assert wide.kernel_type == TYPES[qtype].code
    np.testing.assert_array_equal(wide.raw, transcode.codebook_blocks(stored, qtype))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("target", targets_to_test())
@pytest.mark.parametrize("qtype", HELD, ids=lambda q: q.name)
def test_every_arithmetic_gives_the_fp32_scale_layouts_bits(qtype: QT, target: str, mode: str) -> None:
    """Extreme and non-finite scales included: every output bit for bit (a NaN is the one
    canonical NaN either way), every row-tile remainder, with and without a bias; the rows
    gathered (packed or not) are gguf-py's values."""
    rng = np.random.default_rng(int(qtype) + 7)
    stored = stored_blocks(qtype, rng, extremes=True)
    held = Weight.from_info(TensorInfo("w", (N, K), qtype, stored))
    wide = Weight("w", N, K, TYPES[qtype].code, transcode.codebook_blocks(stored, qtype))
    ops = NativeOps(2, target, **MODES[mode])  # type: ignore[arg-type]
    a, b = ops.pack(held), ops.pack(wide)
    assert_layouts_give_the_same_bits(ops, a, b, rng)
    assert_same_values(ops.embed(a, np.arange(N)), gguf_values(stored, qtype, (N, K)))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("target", targets_to_test())
@pytest.mark.parametrize("qtype", HELD, ids=lambda q: q.name)
def test_every_scale(qtype: QT, target: str, mode: str) -> None:
    """All 65,536 halves as IQ4_NL's d, all 256 bytes as MXFP4's E, one a row, the indices
    0 .. 15 twice: the rows are gguf-py's values, every arithmetic's matmul the fp32-scale
    layout's bits."""
    size = TYPES[qtype].stored_bytes
    if qtype == QT.MXFP4:
        heads = np.arange(256, dtype=np.uint8).reshape(-1, 1)
    else:
        heads = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.uint8).reshape(-1, 2)
    blocks = np.zeros((len(heads), size), np.uint8)
    blocks[:, : heads.shape[1]] = heads
    blocks[:, heads.shape[1] :] = np.arange(16, dtype=np.uint8) | np.arange(16, dtype=np.uint8)[::-1] << 4
    stored = blocks.reshape(-1)
    held = Weight.from_info(TensorInfo("w", (len(heads), 32), qtype, stored))
    wide = Weight("w", len(heads), 32, TYPES[qtype].code, transcode.codebook_blocks(stored, qtype))
    ops = NativeOps(2, target, **MODES[mode])  # type: ignore[arg-type]
    a, b = ops.pack(held), ops.pack(wide)
    x = np.zeros((2, 32), np.float32)
    x[0, 9], x[1, 16], x[1, 3] = 1.0, 1.0, -0.75
    np.testing.assert_array_equal(bits(ops.linear(x, a)), bits(ops.linear(x, b)))
    assert_same_values(ops.embed(a, np.arange(len(heads))), gguf_values(stored, qtype, (len(heads), 32)))
