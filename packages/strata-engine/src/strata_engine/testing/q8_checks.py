"""Quantised weights and activations for the integer kernels' tests (every stored type, every row-tile remainder) and gguf-py's values for them."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf import quants

from strata_engine.gguf_loader import TensorInfo
from strata_engine.kernels.weights import Weight
from strata_engine.testing.tiny_models import encode_tensor

TYPES = (QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0, QT.Q2_K, QT.Q4_K, QT.Q5_K, QT.Q6_K)


ROWS = (1, 3, 8, 9, 17)  # every row-tile remainder: avx512 tiles 8 rows, avx2 4 (Q5_K, bytes: 3), portable 4


N = 37  # odd: the last group of 16 outputs is partial


class Quantised(NamedTuple):
    """A weight as loaded, and gguf-py's fp32 values of it and of its per-block min (0 if none)."""

    weight: Weight
    values: np.ndarray
    mins: np.ndarray


def dequantized(data: np.ndarray, qtype: QT, shape: tuple[int, int]) -> np.ndarray:
    return np.asarray(quants.dequantize(data, qtype), dtype=np.float32).reshape(shape)


def quantised_weight(qtype: QT, n: int, k: int, rng: np.random.Generator, extreme: bool = False) -> Quantised:
    """A real GGUF [n, k] weight (Weight.from_info), with gguf-py's values. Q8_0 also gets quants
    of -128 (valid in the format, never written by the quantiser). The mins are the values of
    the same blocks with every quant bit cleared. `extreme`: every quant at its largest
    magnitude (EXTREME_BYTES), the scales as encoded."""
    values = rng.normal(0, 0.05, size=(n, k)).astype(np.float32)
    data = np.ascontiguousarray(encode_tensor(values, qtype, rng))
    if extreme:
        size, start, end, byte = EXTREME_BYTES[qtype]
        data.reshape(-1, size)[:, start:end] = byte
    elif qtype == QT.Q8_0:
        blocks = data.reshape(-1, 34)
        blocks[::3, 2 + rng.integers(0, 32)] = 0x80
    info = TensorInfo("w", (n, k), qtype, data.reshape(-1))
    mins = np.zeros((n, k), dtype=np.float32)
    if qtype in QUANT_BYTES:
        size, start, end = QUANT_BYTES[qtype]
        cleared = data.reshape(-1, size).copy()
        cleared[:, start:end] = 0
        mins = dequantized(cleared, qtype, (n, k))
    return Quantised(Weight.from_info(info), dequantized(data, qtype, (n, k)), mins)


def activations(m: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """Rows of mixed scales: normal values, blocks of very different magnitudes, an outlier."""
    x = rng.normal(0, 1, size=(m, k)).astype(np.float32)
    block_scale = rng.choice(np.array([1e-3, 1.0, 30.0], dtype=np.float32), size=(m, k // 32))
    x *= np.repeat(block_scale, 32, axis=1)
    x[m // 2, k // 3] = 5e3
    return x


# Types whose value is scale * q + min: the stored bytes of the quants, in gguf-py's block layout
QUANT_BYTES = {
    QT.Q4_1: (20, 4, 20),
    QT.Q5_1: (24, 4, 24),
    QT.Q4_K: (144, 16, 144),
    QT.Q5_K: (176, 16, 176),
    QT.Q2_K: (84, 16, 80),
}


# Every type's quant bytes (block size, start, end) and the byte that gives each weight the
# largest magnitude the dot step multiplies (all bits set; Q8_0: -128, the sign trick's 128)
EXTREME_BYTES = {
    QT.Q4_0: (18, 2, 18, 0xFF),
    QT.Q4_1: (20, 4, 20, 0xFF),
    QT.Q5_0: (22, 2, 22, 0xFF),
    QT.Q5_1: (24, 4, 24, 0xFF),
    QT.Q8_0: (34, 2, 34, 0x80),
    QT.Q2_K: (84, 16, 80, 0xFF),
    QT.Q4_K: (144, 16, 144, 0xFF),
    QT.Q5_K: (176, 16, 176, 0xFF),
    QT.Q6_K: (210, 0, 192, 0xFF),
}


def extreme_activations(m: int, k: int, seed: int) -> np.ndarray:
    """Rows with blocks of very different magnitudes, a zero block, a tiny one, a NaN (k >= 320):
    the inputs a held type's kernels must take as its Q8_0 blocks' do."""
    x = np.random.default_rng(seed).normal(0, 1, (m, k)).astype(np.float32)
    x.reshape(m, -1, 32)[:, 1] *= 4e4
    x.reshape(m, -1, 32)[:, 3] *= 1e-3
    x[:, 64:96] = 0
    x[:, 96:128] *= 1e-36
    if m > 2:
        x[1, 300] = np.nan
    return x


# Every arithmetic as NativeOps' (q8, limbs): the fp32 matmul, q8's 8-bit rule, two and three limbs
MODES = {"fp32": (False, 0), "q8": (True, 0), "limb2": (True, 2), "limb3": (True, 3)}
HELD_ROWS = (1, 2, 3, 4, 5, 9, 17, 33)  # every row-tile remainder of every target


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def assert_layouts_give_the_same_bits(ops: Any, a: Weight, b: Weight, rng: np.random.Generator) -> None:
    """Two layouts of one weight, each packed by `ops` (a NativeOps), give the same output bits at
    every row-tile remainder, with and without a bias (a NaN is the one canonical NaN either way)."""
    n, k = a.out_features, a.in_features
    bias = rng.normal(0, 1, n).astype(np.float32)
    for m in (1, 2, 3, 4, 5, 9, 17):
        x = rng.normal(0, 1, (m, k)).astype(np.float32)
        for bb in (None, bias):
            np.testing.assert_array_equal(
                bits(ops.linear(x, a, bb)), bits(ops.linear(x, b, bb)), err_msg=f"{m} rows"
            )


def assert_held_gives_the_q8_0_bits(
    held: Weight, q8: Weight, values: np.ndarray, target: str, mode: str
) -> None:
    """A type held in its own form (codebook or grid) gives, in `mode` on `target`, the bits of the
    Q8_0 blocks with its values (`q8`) at every row count, with and without a bias; and its
    packed copy's rows (embed) are `values`' own."""
    from strata_engine.kernels.native.backend import NativeOps

    q8_mode, limbs = MODES[mode]
    ops = NativeOps(2, target, q8=q8_mode, limbs=limbs)
    a, b = ops.pack(held), ops.pack(q8)
    k = held.in_features
    bias = np.random.default_rng(1).normal(0, 1, held.out_features).astype(np.float32)
    for m in HELD_ROWS:
        x = extreme_activations(m, k, seed=m)
        for bb in (None, bias):
            got, want = ops.linear(x, a, bb), ops.linear(x, b, bb)
            np.testing.assert_array_equal(bits(got), bits(want), err_msg=f"{m} rows")
    ids = np.array([36, 0, 5, 16, 15, 20])
    np.testing.assert_array_equal(bits(ops.embed(a, ids)), bits(values[ids]))
