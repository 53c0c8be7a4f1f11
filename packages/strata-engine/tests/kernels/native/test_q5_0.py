"""Q5_0 held at about its file's size (issue 40) and read directly by every arithmetic.

A Q5_0 value is d * (q - 16), q in 0..31, d fp16: exactly the Q8_0 block (fp32 d, int8 q - 16)
the loader once rewrote it as. Every arithmetic reads the held Q5_0 (fp32 layout: d f32, qh, qs;
the integer packing: nibbles, a plane of fifth bits, offset 16) with that block's integer sums
and float sequence, so its results must be the Q8_0 block's bit for bit, on every target this
host runs, at fp16's extreme scales and the extreme quants 0 and 31. The Q8_0 reference is built
here from the format's bits alone (not by the engine's code), and its values are checked against
gguf-py's dequantiser.
"""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT
from gguf import quants

from strata_engine.gguf_loader import TensorInfo
from strata_engine.kernels.native import targets_to_test
from strata_engine.kernels.native.backend import NativeOps
from strata_engine.kernels.weight_types import HALF_SCALES, TYPES
from strata_engine.kernels.weights import Weight
from strata_engine.testing.extreme_blocks import extreme_blocks
from strata_engine.testing.q8_checks import extreme_activations

N, K = 37, 512  # 37 outputs: a part group of 16 in the packing
BLOCK = 22  # the file's bytes per 32 values: d f16, qh u32, qs[16]
MODES = {"fp32": (False, 0), "q8": (True, 0), "limb2": (True, 2), "limb3": (True, 3)}
ROWS = (1, 2, 3, 4, 5, 9, 17, 33)  # every row-tile remainder of every target


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def q5_0_blocks(seed: int) -> np.ndarray:
    """[N, K] Q5_0 bytes: extreme fp16 scales (largest, subnormal, +-0, random), random quants, and
    whole blocks of q = 0 and of q = 31."""
    data = extreme_blocks(QT.Q5_0, N, K, seed=seed).reshape(-1, BLOCK)
    data[7::11, 2:] = 0  # q = 0 everywhere: qh and the nibbles clear
    data[9::11, 2:] = 0xFF  # q = 31
    data[13, :2] = data[0, :2]  # a block of q = 0 ... 31 at d = 0 and at the largest d, too
    data[15, :2] = np.array([0x7BFF], np.uint16).view(np.uint8)
    for blk in (13, 15):
        data[blk, 2:6] = np.array([0xFFFF0000], np.uint32).view(np.uint8)
        data[blk, 6:] = (np.arange(16, dtype=np.uint8) * 17) & 0xFF  # nibble k, k: q = k, 16 + k
    return data.reshape(-1)


def q8_0_of(stored: np.ndarray) -> np.ndarray:
    """The Q8_0 blocks in the kernels' layout (fp32 d, int8 q - 16) of Q5_0 bytes, from the format:
    value k of a block is nibble k % 16 of qs (low for k < 16) with bit k of qh above it."""
    b = stored.reshape(-1, BLOCK)
    d = b[:, :2].copy().view(np.float16).astype(np.float32)
    qh = b[:, 2:6].copy().view(np.uint32)
    k = np.arange(32)
    low = (b[:, 6 + k % 16] >> (4 * (k // 16)).astype(np.uint8)) & 15
    q = low.astype(np.int16) | (((qh >> k.astype(np.uint32)) & 1) << 4).astype(np.int16)
    out = np.empty((len(b), 36), np.uint8)
    out[:, :4] = d.view(np.uint8)
    out[:, 4:] = (q - 16).astype(np.int8).view(np.uint8)
    return out.reshape(-1)


@pytest.fixture(scope="module")
def weights() -> tuple[Weight, Weight, np.ndarray]:
    stored = q5_0_blocks(seed=5)
    q5 = Weight.from_info(TensorInfo("w", (N, K), QT.Q5_0, stored))
    q8 = Weight("w8", N, K, TYPES[QT.Q8_0].code, q8_0_of(stored))
    values = np.asarray(quants.dequantize(stored, QT.Q5_0), dtype=np.float32).reshape(N, K)
    return q5, q8, values


def test_the_reference_blocks_are_gguf_pys_values(weights: tuple[Weight, Weight, np.ndarray]) -> None:
    _, q8, values = weights
    blocks = q8.raw.reshape(-1, 36)
    d = blocks[:, :4].copy().view(np.float32)
    assert {0, 31} <= set((blocks[:, 4:].view(np.int8).astype(int) + 16).ravel().tolist())
    assert np.isin([0x7BFF, 0x0001, 0x0000, 0x8000], d.astype(np.float16).view(np.uint16)).all()
    np.testing.assert_array_equal(bits(d * blocks[:, 4:].view(np.int8)), bits(values.reshape(-1, 32)))


def test_q5_0_is_held_as_the_files_blocks_not_as_q8_0(weights: tuple[Weight, Weight, np.ndarray]) -> None:
    q5, _, _ = weights
    assert q5.kernel_type == TYPES[QT.Q5_0].code | HALF_SCALES
    assert q5.raw.nbytes * 32 == 22 * N * K  # the file's 22 bytes a block of 32 (d fp16): 5.5 bits
    packed = NativeOps(1, limbs=3).pack(q5)
    assert packed.raw.nbytes * 32 == 22 * -(-N // 16) * 16 * K  # whole groups of 16 outputs, d fp16


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("target", targets_to_test())
def test_every_arithmetic_gives_the_q8_0_blocks_bits(
    target: str, mode: str, weights: tuple[Weight, Weight, np.ndarray]
) -> None:
    q5, q8, values = weights
    q8_mode, limbs = MODES[mode]
    ops = NativeOps(2, target, q8=q8_mode, limbs=limbs)
    a, b = ops.pack(q5), ops.pack(q8)
    bias = np.random.default_rng(1).normal(0, 1, N).astype(np.float32)
    for m in ROWS:
        x = extreme_activations(m, K, seed=m)
        for bb in (None, bias):
            np.testing.assert_array_equal(
                bits(ops.linear(x, a, bb)), bits(ops.linear(x, b, bb)), err_msg=f"{m}"
            )
    ids = np.array([36, 0, 5, 16, 15, 20])
    np.testing.assert_array_equal(bits(ops.embed(a, ids)), bits(values[ids]))  # the packed copy too
