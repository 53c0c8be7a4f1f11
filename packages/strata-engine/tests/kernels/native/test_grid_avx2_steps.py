"""The avx2 and avxvnni builds' fused one- to four-row steps (decode) for the grid and K-grid types
(native/grids.c's grid_rows8 and kgrid_fused8): each block decoded in registers straight into the
limbs' integer steps must give the bits of the Q8_0 blocks the grid types were rewritten as, and the
portable build's bits for the K-grid types, with AVX2's int16 chains at their bounds."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, quants
from gguf import GGMLQuantizationType as QT

from strata_engine.gguf_loader import TensorInfo
from strata_engine.kernels import transcode
from strata_engine.kernels.native import targets_to_test
from strata_engine.kernels.native.backend import NativeOps
from strata_engine.kernels.weight_types import TYPES
from strata_engine.kernels.weights import Weight
from strata_engine.testing.extreme_blocks import extreme_blocks
from strata_engine.testing.grid_blocks import KGRID, kgrid_stored, kgrid_table, set_kgrid_indices
from strata_engine.testing.q8_checks import bits, extreme_activations

N, K = 37, 512  # 37 outputs: a part group of 16 in the packing
GRID = (QT.IQ2_XXS, QT.IQ3_XXS, QT.IQ3_S, QT.IQ1_S)
ENTRIES = {QT.IQ2_XXS: 256, QT.IQ3_XXS: 256, QT.IQ3_S: 512, QT.IQ1_S: 2048}  # gguf-py's grid_shape


# ---- avx2's and avxvnni's fused 1-4-row grid steps (grids.c's grid_rows8): AVX2's int16 chains at their bounds

BIG_X = 8290432.0  # its limbs -128, -128, -126: with the largest grid values, every chain at its bound


def _largest_everywhere(qtype: QT, seed: int) -> np.ndarray:
    """extreme_blocks (their scales) with every index the entry of the largest values and every
    sign positive (IQ1_S: delta +1/8): q = 15 (IQ3_S), 62 (IQ3_XXS), 43 (IQ2_XXS), 9 (IQ1_S)."""
    getattr(quants, qtype.name).init_grid()
    grid = np.asarray(getattr(quants, qtype.name).grid).reshape(ENTRIES[qtype], -1)
    top = int(np.argmax(grid.sum(axis=1)))
    blocks = extreme_blocks(qtype, N, K, seed=seed).reshape(-1, GGML_QUANT_SIZES[qtype][1])
    if qtype == QT.IQ2_XXS:  # per 32: 4 indices, a u32 of signs under the 4-bit sub-scale
        words = blocks[:, 2:66].copy().view(np.uint32)
        words[:, 0::2], words[:, 1::2] = top * 0x01010101, words[:, 1::2] & np.uint32(0xF0000000)
        blocks[:, 2:66] = words.view(np.uint8)
    elif qtype == QT.IQ3_XXS:  # 64 indices, then a u32 a 32 as IQ2_XXS's
        blocks[:, 2:66] = top
        blocks[:, 66:98] = (blocks[:, 66:98].copy().view(np.uint32) & np.uint32(0xF0000000)).view(np.uint8)
    elif qtype == QT.IQ3_S:  # low bytes, ninth bits, sign bytes
        blocks[:, 2:66] = top & 255
        blocks[:, 66:74] = 255 if top >> 8 else 0
        blocks[:, 74:106] = 0
    else:  # IQ1_S: low bytes; per 32 a u16 of 4 x 3 high bits, the sub-scale, the delta's sign
        blocks[:, 2:34] = top & 255
        qh = blocks[:, 34:50].copy().view(np.uint16) & np.uint16(0x7000)
        blocks[:, 34:50] = (qh | np.uint16((top >> 8) * 0o1111)).view(np.uint8)
    return blocks.reshape(-1)


@pytest.mark.parametrize("target", [t for t in ("avx2", "avxvnni") if t in targets_to_test()])
@pytest.mark.parametrize("qtype", GRID, ids=lambda q: q.name)
def test_avx2_fused_rows_at_their_int16_bounds_give_the_q8_0_blocks_bits(qtype: QT, target: str) -> None:
    """Every value the type's largest against limbs -128, -128, -126 (and the negated row's): each
    int16 chain at its bound, |S_2| past 2^14; 1 to 4 rows (the fused steps) and 5: the Q8_0 blocks'
    bits (AVX2: int16 steps on wide limbs) and within limb3's bound of float64."""
    stored = _largest_everywhere(qtype, seed=int(qtype) + 7)
    held = Weight.from_info(TensorInfo("w", (N, K), qtype, stored))
    q8 = transcode.to_q8_0(stored, qtype)
    assert q8 is not None
    w64 = np.asarray(quants.dequantize(stored, qtype), dtype=np.float64).reshape(N, K)
    ops = NativeOps(1, target, q8=True, limbs=3)
    a, b = ops.pack(held), ops.pack(Weight("w8", N, K, TYPES[QT.Q8_0].code, q8))
    big = np.repeat(BIG_X * np.exp2(np.arange(K // 32) % 9 - 30.0), 32).astype(np.float32)  # X = +-BIG_X
    rows = np.vstack([-big, big, np.where(np.arange(K) % 64 < 32, -big, big), extreme_activations(2, K, 9)])
    for m in (1, 2, 3, 4, 5):
        x = rows[:m]
        got = ops.linear(x, a)
        np.testing.assert_array_equal(bits(got), bits(ops.linear(x, b)), err_msg=f"{m} rows")
        ok = np.isfinite(x).all(axis=1) & np.isfinite(w64).all()
        x64 = x[ok].astype(np.float64)
        assert np.all(np.abs(got[ok] - x64 @ w64.T) <= 1e-6 * (np.abs(x64) @ np.abs(w64).T) + 1e-30)


# ---- the avx2 and avxvnni builds' fused one- to four-row steps for the K-grid types (grids.c's kgrid_fused8)

AVX2_BUILDS = ("avx2", "avxvnni")


@pytest.mark.parametrize("qtype", KGRID, ids=lambda q: q.name)
def test_avx2_fused_k_grid_rows_give_the_portable_bits(qtype: QT) -> None:
    """1 to 4 rows take the fused steps on avxvnni (all four types; avx2: IQ1_M at one row): every
    entry and sign set with extreme_blocks' d (zeros, subnormals, fp16's largest) and sub-scales, and
    for the IQ2 types blocks of their 43-heaviest entries, against a row of an output's own values (each
    half's |S_2| near 16 * 43 * 128: the double combine), normal values and extreme_activations: each
    must give the portable build's bits (the expanded group's steps)."""
    builds = [t for t in AVX2_BUILDS if t in targets_to_test()]
    if not builds:
        pytest.skip("this CPU runs neither the avx2 nor the avxvnni kernels")
    stores = [kgrid_stored(qtype, seed=11, n=N, k=K)]
    if qtype in (QT.IQ2_XS, QT.IQ2_S):
        blocks = kgrid_stored(qtype, seed=5, n=N, k=K).reshape(-1, GGML_QUANT_SIZES[qtype][1])
        big = np.argsort(-(kgrid_table(qtype) == 43).sum(axis=1))[:7]
        set_kgrid_indices(qtype, blocks, big[np.arange(blocks.shape[0] * 32).reshape(-1, 32) % len(big)])
        stores.append(blocks.reshape(-1))
    for stored in stores:
        held = Weight.from_info(TensorInfo("w", (N, K), qtype, stored))
        w64 = np.asarray(quants.dequantize(stored, qtype), dtype=np.float64).reshape(N, K)
        plain = np.flatnonzero(np.abs(w64).max(axis=1) < 1)  # extreme_blocks' other rows: zero or huge d
        own = w64[plain[np.argmax((w64[plain] != 0).sum(axis=1))]][None].astype(np.float32)
        normal = np.random.default_rng(2).normal(0, 1, (1, K)).astype(np.float32)
        inputs = [own, np.vstack([own, normal]), np.vstack([own, normal, extreme_activations(1, K, seed=4)])]
        inputs.append(extreme_activations(4, K, seed=9))
        for x in inputs:
            want = (ops := NativeOps(1, "portable", q8=True, limbs=3)).linear(x, ops.pack(held))
            for target in builds:
                got = (ops := NativeOps(1, target, q8=True, limbs=3)).linear(x, ops.pack(held))
                np.testing.assert_array_equal(bits(got), bits(want), err_msg=f"{target} {len(x)} rows")
