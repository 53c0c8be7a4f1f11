"""The grid types (IQ2_XXS, IQ3_XXS, IQ3_S, IQ1_S) held as stored (issue 40) and read by every
arithmetic with the bits of the Q8_0 blocks they were rewritten as.

Each 32 values are scale * grid entry * sign (IQ1_S: scale * (entry +- 1/8)), exactly a scale
times small integers: the loader keeps the file's blocks (its own 1.56 to 3.44 bits a weight),
and native/grids.c decodes each 32 into the Q8_0 block that `transcode.to_q8_0` makes (9 bits
held), whose results every arithmetic must give bit for bit, on every target this host runs, at
extreme scales (fp16's largest, subnormals, +-0), every grid entry and every sign pattern. Their
values are gguf-py's; a non-finite scale widens the tensor to gguf-py's fp32 values.
"""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, quants
from gguf import GGMLQuantizationType as QT

from strata_engine.gguf_loader import TensorInfo
from strata_engine.kernels import transcode
from strata_engine.kernels.native import targets_to_test
from strata_engine.kernels.native.backend import NativeOps
from strata_engine.kernels.weight_types import PACK_GRID, TYPES
from strata_engine.kernels.weights import Weight
from strata_engine.testing.extreme_blocks import extreme_blocks
from strata_engine.testing.q8_checks import MODES, assert_held_gives_the_q8_0_bits, bits

N, K = 37, 512  # 37 outputs: a part group of 16 in the packing; 74 blocks of 256
GRID = (QT.IQ2_XXS, QT.IQ3_XXS, QT.IQ3_S, QT.IQ1_S)
ENTRIES = {QT.IQ2_XXS: 256, QT.IQ3_XXS: 256, QT.IQ3_S: 512, QT.IQ1_S: 2048}  # gguf-py's grid_shape
SIGN_PATTERNS = {QT.IQ2_XXS: 128, QT.IQ3_XXS: 128, QT.IQ3_S: 256, QT.IQ1_S: 2}


def every_entry(qtype: QT, seed: int) -> np.ndarray:
    """extreme_blocks whose grid indices name every entry of the type's grid, in order, again and
    again (the sign bits, sub-scales and fp16 scales as extreme_blocks draws them)."""
    blocks = extreme_blocks(qtype, N, K, seed=seed).reshape(-1, GGML_QUANT_SIZES[qtype][1])
    n = len(blocks)
    if qtype == QT.IQ2_XXS:  # per 32: 4 index bytes, then the signs and sub-scale
        at = (2 + 8 * np.arange(8)[:, None] + np.arange(4)).reshape(-1)
        blocks[:, at] = (np.arange(n * 32) % 256).reshape(n, 32)
    elif qtype == QT.IQ3_XXS:  # 64 index bytes
        blocks[:, 2:66] = (np.arange(n * 64) % 256).reshape(n, 64)
    elif qtype == QT.IQ3_S:  # 64 low bytes, then qh: bit k of byte j is index 8j + k's ninth
        index = (np.arange(n * 64) % 512).reshape(n, 64)
        blocks[:, 2:66] = index & 255
        blocks[:, 66:74] = ((index >> 8).reshape(n, 8, 8) << np.arange(8)).sum(axis=-1)
    else:  # IQ1_S: 32 low bytes; per 32 a u16 with 3 high bits of each of its 4 indices at 3k
        index = (np.arange(n * 32) % 2048).reshape(n, 8, 4)
        blocks[:, 2:34] = (index & 255).reshape(n, 32)
        qh = blocks[:, 34:50].copy().view(np.uint16) & np.uint16(0xF000)
        qh |= ((index >> 8) << np.array([0, 3, 6, 9])).sum(axis=-1).astype(np.uint16)
        blocks[:, 34:50] = qh.view(np.uint8)
    return blocks.reshape(-1)


def sign_patterns(qtype: QT, stored: np.ndarray) -> int:
    """How many distinct sign sets (7 stored bits, or IQ3_S's 8; IQ1_S: its delta's sign) the
    blocks hold."""
    blocks = stored.reshape(-1, GGML_QUANT_SIZES[qtype][1])
    if qtype == QT.IQ1_S:
        return len(np.unique(blocks[:, 34:50].copy().view(np.uint16) >> 15))
    if qtype == QT.IQ3_S:
        return len(np.unique(blocks[:, 74:106]))
    if qtype == QT.IQ2_XXS:  # the second u32 of each 32's 8 bytes
        words = blocks[:, 2:66].copy().view(np.uint32)[:, 1::2]
    else:
        words = blocks[:, 66:98].copy().view(np.uint32)
    return len(np.unique((words.reshape(-1, 1) >> np.array([0, 7, 14, 21], dtype=np.uint32)) & 127))


def weights(qtype: QT) -> tuple[Weight, Weight, np.ndarray]:
    """The weight as loaded, the Q8_0 weight of its values (the former rewrite), gguf-py's values."""
    stored = every_entry(qtype, seed=int(qtype))
    held = Weight.from_info(TensorInfo("w", (N, K), qtype, stored))
    q8 = transcode.to_q8_0(stored, qtype)
    assert q8 is not None
    values = np.asarray(quants.dequantize(stored, qtype), dtype=np.float32).reshape(N, K)
    return held, Weight("w8", N, K, TYPES[QT.Q8_0].code, q8), values


@pytest.mark.parametrize("qtype", GRID, ids=lambda q: q.name)
def test_held_as_stored_with_gguf_pys_values_for_every_entry_and_sign(qtype: QT) -> None:
    held, _, values = weights(qtype)
    stored = every_entry(qtype, seed=int(qtype))
    assert TYPES[qtype].pack == PACK_GRID and held.kernel_type == TYPES[qtype].code
    np.testing.assert_array_equal(held.raw, stored)  # the file's bytes: its own bits a weight
    per_block = 32 if qtype in (QT.IQ2_XXS, QT.IQ1_S) else 64  # grid indices a block of 256
    assert N * K // 256 * per_block >= ENTRIES[qtype]  # every entry named
    assert sign_patterns(qtype, stored) == SIGN_PATTERNS[qtype]
    for target in targets_to_test():
        got = NativeOps(1, target).embed(held, np.arange(N))
        np.testing.assert_array_equal(bits(got), bits(values), err_msg=target)
    packed = NativeOps(1, limbs=3).pack(held)
    assert packed.raw.nbytes == -(-N // 16) * 16 * held.raw.nbytes // N  # whole groups of 16 rows


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("target", targets_to_test())
@pytest.mark.parametrize("qtype", GRID, ids=lambda q: q.name)
def test_every_arithmetic_gives_the_q8_0_blocks_bits(qtype: QT, target: str, mode: str) -> None:
    assert_held_gives_the_q8_0_bits(*weights(qtype), target, mode)


@pytest.mark.parametrize("qtype", GRID, ids=lambda q: q.name)
def test_a_non_finite_scale_widens_the_tensor_to_gguf_pys_fp32(qtype: QT) -> None:
    """No Q8_0 block holds an infinite or NaN scale's values: the tensor is gguf-py's fp32, as
    when the loader rewrote these types."""
    for bad in (0x7C00, 0xFE01):  # inf, a NaN
        stored = extreme_blocks(qtype, 4, 256)
        stored.reshape(4, -1)[2, 0:2] = np.array([bad], np.uint16).view(np.uint8)
        weight = Weight.from_info(TensorInfo("w", (4, 256), qtype, stored))
        assert weight.kernel_type == 0 and transcode.to_q8_0(stored, qtype) is None
        want = np.asarray(quants.dequantize(stored, qtype), dtype=np.float32).reshape(4, 256)
        np.testing.assert_array_equal(bits(weight.dense()), bits(want))
