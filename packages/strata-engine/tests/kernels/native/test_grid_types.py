"""The grid types (IQ2_XXS, IQ3_XXS, IQ3_S, IQ1_S) held as stored (issue 40) and read by every
arithmetic with the bits of the Q8_0 blocks they were rewritten as.

Each 32 values are scale * grid entry * sign (IQ1_S: scale * (entry +- 1/8)), exactly a scale
times small integers: the loader keeps the file's blocks (its own 1.56 to 3.44 bits a weight),
and native/grids.c decodes each 32 into the Q8_0 block that `transcode.to_q8_0` makes (9 bits
held), whose results every arithmetic must give bit for bit, on every target this host runs, at
extreme scales (fp16's largest, subnormals, +-0), every grid entry and every sign pattern. Their
values are gguf-py's; a non-finite scale widens the tensor to gguf-py's fp32 values.

The K-grid types (IQ2_XS, IQ2_S, Q3_K, IQ1_M) scale each 16 values by a small integer times the
super-block's d: held as stored too, they are read as a one-byte-a-weight K-quant group. Q3_K and
IQ1_M must give the bits of the Q6_K blocks they were rewritten as (transcode.to_q6_k); IQ2_XS
and IQ2_S those of explicit Q6_K blocks of their values where their integers fit Q6_K (no grid
value 43), and everywhere the same bits on every host target within each arithmetic's float64
bound.
"""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, quants
from gguf import GGMLQuantizationType as QT

from strata_engine.gguf_loader import TensorInfo
from strata_engine.kernels import kquants, transcode
from strata_engine.kernels.native import targets_to_test
from strata_engine.kernels.native.backend import NativeOps
from strata_engine.kernels.weight_types import PACK_GRID, TYPES
from strata_engine.kernels.weights import Weight
from strata_engine.testing.extreme_blocks import extreme_blocks
from strata_engine.testing.grid_blocks import (
    KGRID,
    KGRID_ENTRIES,
    kgrid_stored,
    kgrid_table,
    set_kgrid_indices,
)
from strata_engine.testing.q8_checks import (
    HELD_ROWS,
    MODES,
    assert_held_gives_the_q8_0_bits,
    bits,
    extreme_activations,
)

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


# ---- the K-grid types (IQ2_XS, IQ2_S, Q3_K, IQ1_M): each 16 values a small integer scale times the
# super-block's d, held as stored (grids.c's kgrid_block) and read as a one-byte-a-weight K-quant group


def as_q6_k(stored: np.ndarray, qtype: QT) -> Weight:
    """The Q6_K weight (the C kernels' layout) of `stored`'s values: Q3_K and IQ1_M's rewrite
    (transcode.to_q6_k); an IQ2 type's as explicit Q6_K blocks, d / 8, scale 2 s + 1 and q =
    value / (d / 8 (2 s + 1)), where every q is within Q6_K's 6 bits (no grid value 43)."""
    if qtype in transcode.Q6_K_TYPES:
        q6 = transcode.to_q6_k(stored, qtype)
    else:
        blocks = stored.reshape(-1, GGML_QUANT_SIZES[qtype][1])
        d = transcode._f16(blocks, 0).reshape(-1) * np.float32(0.125)
        at = 66 if qtype == QT.IQ2_XS else 74
        s = (blocks[:, at : at + 8].reshape(-1, 8, 1) >> np.array([0, 4], dtype=np.uint8)).reshape(
            -1, 16
        ) & 15
        scales = (2 * s + 1).astype(np.int8)
        values = np.asarray(quants.dequantize(stored, qtype), np.float32).reshape(-1, 16)
        q = transcode._integers(values, (d.reshape(-1, 1) * scales.astype(np.float32)).reshape(-1, 1))
        assert q is not None and np.abs(q).max() <= 31
        q6 = transcode._q6_k_blocks(d.astype(np.float16), scales, q.reshape(-1, 256)).reshape(-1)
        assert np.array_equal(bits(quants.dequantize(q6, QT.Q6_K)), bits(values.reshape(-1)))
    assert q6 is not None
    return Weight("w6", N, K, TYPES[QT.Q6_K].code, kquants.pack(q6, QT.Q6_K))


def small_grid_stored(qtype: QT, seed: int) -> np.ndarray:
    """An IQ2 type's blocks whose entries hold no 43 (their q fit Q6_K), with d whose eighth fp16
    holds (the reference's d)."""
    blocks = kgrid_stored(qtype, seed, n=N, k=K).reshape(-1, GGML_QUANT_SIZES[qtype][1])
    small = np.flatnonzero((kgrid_table(qtype) < 40).all(axis=1))
    set_kgrid_indices(qtype, blocks, small[np.arange(blocks.shape[0] * 32).reshape(-1, 32) % len(small)])
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
    bad = (d * np.float32(0.125)).astype(np.float16).astype(np.float32) * 8 != d
    blocks[bad.reshape(-1), 0:2] = np.array([0x3C00], np.uint16).view(np.uint8)
    return blocks.reshape(-1)


@pytest.mark.parametrize("qtype", KGRID, ids=lambda q: q.name)
def test_k_grid_types_are_held_as_stored_with_gguf_pys_values(qtype: QT) -> None:
    stored = kgrid_stored(qtype, seed=int(qtype), n=N, k=K)
    held = Weight.from_info(TensorInfo("w", (N, K), qtype, stored))
    assert TYPES[qtype].pack == PACK_GRID and held.kernel_type == TYPES[qtype].code
    np.testing.assert_array_equal(held.raw, stored)  # the file's own bits a weight
    if qtype in KGRID_ENTRIES:  # every entry named
        assert KGRID_ENTRIES[qtype] <= N * K // 256 * 32
    values = np.asarray(quants.dequantize(stored, qtype), dtype=np.float32).reshape(N, K)
    for target in targets_to_test():
        for q8, limbs in MODES.values():
            ops = NativeOps(1, target, q8=q8, limbs=limbs)
            got = ops.embed(ops.pack(held), np.arange(N))
            np.testing.assert_array_equal(bits(got), bits(values), err_msg=target)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("target", targets_to_test())
@pytest.mark.parametrize("qtype", KGRID, ids=lambda q: q.name)
def test_every_arithmetic_gives_the_q6_k_blocks_bits(qtype: QT, target: str, mode: str) -> None:
    """Q3_K, IQ1_M: the bits of their former Q6_K rewrite; IQ2_XS, IQ2_S: of the Q6_K blocks of
    their values, where those fit Q6_K (no grid value 43)."""
    stored = (
        small_grid_stored(qtype, int(qtype))
        if qtype in (QT.IQ2_XS, QT.IQ2_S)
        else kgrid_stored(qtype, int(qtype), n=N, k=K)
    )
    held = Weight.from_info(TensorInfo("w", (N, K), qtype, stored))
    values = np.asarray(quants.dequantize(stored, qtype), dtype=np.float32).reshape(N, K)
    assert_held_gives_the_q8_0_bits(held, as_q6_k(stored, qtype), values, target, mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("qtype", (QT.IQ2_XS, QT.IQ2_S), ids=lambda q: q.name)
def test_iq2_gives_the_same_bits_on_every_target_within_the_float64_bound(qtype: QT, mode: str) -> None:
    """Every grid entry (43 too, past Q6_K's 6 bits): the same bits on every host target, and
    within the arithmetic's own bound of the float64 product of gguf-py's values."""
    stored = kgrid_stored(qtype, seed=7, n=N, k=K)
    held = Weight.from_info(TensorInfo("w", (N, K), qtype, stored))
    w64 = np.asarray(quants.dequantize(stored, qtype), dtype=np.float64).reshape(N, K)
    q8, limbs = MODES[mode]
    first = None
    for target in targets_to_test():
        ops = NativeOps(2, target, q8=q8, limbs=limbs)
        packed = ops.pack(held)
        got = [ops.linear(extreme_activations(m, K, seed=m), packed) for m in HELD_ROWS]
        if first is None:
            first = got
        for a, b in zip(got, first, strict=True):
            np.testing.assert_array_equal(bits(a), bits(b), err_msg=target)
    assert first is not None
    for m, y in zip(HELD_ROWS, first, strict=True):
        x = extreme_activations(m, K, seed=m).astype(np.float64)
        ok = np.isfinite(x).all(axis=1)
        scale = np.abs(x[ok]) @ np.abs(w64).T
        rel = {"fp32": 1e-6, "q8": 2e-2, "limb2": 1e-4, "limb3": 1e-6}[mode]
        assert np.all(np.abs(y[ok] - x[ok] @ w64.T) <= rel * scale + 1e-30), (mode, m)


@pytest.mark.parametrize("qtype", KGRID, ids=lambda q: q.name)
def test_a_broken_grid_entry_or_scale_fails_the_comparison(qtype: QT) -> None:
    """The comparison can fail: a reference with one value off in each super-block (one q, as a
    wrong grid entry or field would give) is told apart in every arithmetic."""
    stored = (
        small_grid_stored(qtype, 3) if qtype in (QT.IQ2_XS, QT.IQ2_S) else kgrid_stored(qtype, 3, n=N, k=K)
    )
    held = Weight.from_info(TensorInfo("w", (N, K), qtype, stored))
    ref = as_q6_k(stored, qtype)
    broken = ref.raw.copy()
    broken.reshape(-1, TYPES[QT.Q6_K].kernel_bytes)[:, 20 + 5] ^= 1  # q 5 of each (d f32, 16 scales, int8 q)
    ref = Weight("w6", N, K, ref.kernel_type, broken)
    values = np.asarray(quants.dequantize(stored, qtype), dtype=np.float32).reshape(N, K)
    for mode in MODES:
        with pytest.raises(AssertionError):
            assert_held_gives_the_q8_0_bits(held, ref, values, "portable", mode)


@pytest.mark.parametrize("qtype", KGRID, ids=lambda q: q.name)
def test_a_non_finite_d_widens_a_k_grid_tensor_to_gguf_pys_fp32(qtype: QT) -> None:
    for bad in (0x7C00, 0xFE01):  # inf, a NaN
        stored = extreme_blocks(qtype, 4, 256)
        block = stored.reshape(4, -1)
        if qtype == QT.IQ1_M:  # d's nibbles on top of the four scale words
            words = block[2, 48:56].copy().view(np.uint16) & np.uint16(0x0FFF)
            nibbles = (np.uint16(bad) >> np.arange(0, 16, 4, dtype=np.uint16)) & np.uint16(15)
            block[2, 48:56] = (words | nibbles << np.uint16(12)).view(np.uint8)
        else:
            at = 108 if qtype == QT.Q3_K else 0
            block[2, at : at + 2] = np.array([bad], np.uint16).view(np.uint8)
        weight = Weight.from_info(TensorInfo("w", (4, 256), qtype, stored))
        assert weight.kernel_type == 0
        want = np.asarray(quants.dequantize(stored, qtype), dtype=np.float32).reshape(4, 256)
        np.testing.assert_array_equal(bits(weight.dense()), bits(want))


# ---- the avx512 build's two ways of decoding a group: zmm gathers, or the avx2 build's gather-free
# sequence (grids.c's strata_grid_gather_free: per type, by the CPU's vendor); the same bytes

EVERY_WAY = 0x7FFFFFFF  # every type's bit: gather-free


def _amd() -> bool:
    """Whether /proc/cpuinfo names AMD (the kernels ask cpuid instead)."""
    with open("/proc/cpuinfo", encoding="ascii", errors="replace") as info:
        return any(
            line.split(":")[-1].strip() == "AuthenticAMD" for line in info if line.startswith("vendor_id")
        )


def _avx512() -> NativeOps:
    if "avx512" not in targets_to_test():
        pytest.skip("this CPU does not run the avx512 kernels")
    return NativeOps(2, "avx512")


def test_the_gather_free_types_follow_the_cpus_vendor() -> None:
    lib = _avx512().lib
    amd = {QT.Q3_K, QT.IQ2_S, QT.IQ2_XXS, QT.IQ3_XXS, QT.IQ1_S}  # measured faster so on Zen 5
    default = lib.strata_grid_gather_free(-2)
    assert default == (sum(1 << int(t) for t in amd) if _amd() else 0)
    assert lib.strata_grid_gather_free(-3) == int(_vbmi())  # the byte permutes wherever the CPU has them
    try:
        assert lib.strata_grid_gather_free(0) == 0 and lib.strata_grid_gather_free(-1) == 0  # -1: asks
    finally:
        assert lib.strata_grid_gather_free(-2) == default
    assert NativeOps(1, "avx2").lib.strata_grid_gather_free(-1) == -1  # one way a type there


@pytest.mark.parametrize("way", (0, EVERY_WAY), ids=("gathers", "gather-free"))
@pytest.mark.parametrize("qtype", GRID + KGRID, ids=lambda q: q.name)
def test_both_ways_give_the_reference_bits_and_gguf_pys_values(qtype: QT, way: int) -> None:
    """Each way, whatever this host's default: the Q8_0 (Q6_K) blocks' bits in the integer
    arithmetics (the fp32 matmul decodes row by row either way) and gguf-py's values. In limb3,
    HELD_ROWS' 1 to 4 rows take the fused few-row steps (grids.c's grid_limb_rows, kgrid_limb_rows)
    each way, the other counts the stored group's."""
    lib = _avx512().lib
    if qtype in GRID:
        held, ref, values = weights(qtype)
    else:
        stored = (
            small_grid_stored(qtype, int(qtype))
            if qtype in (QT.IQ2_XS, QT.IQ2_S)
            else kgrid_stored(qtype, int(qtype), n=N, k=K)
        )
        held, ref = Weight.from_info(TensorInfo("w", (N, K), qtype, stored)), as_q6_k(stored, qtype)
        values = np.asarray(quants.dequantize(stored, qtype), dtype=np.float32).reshape(N, K)
    try:
        assert lib.strata_grid_gather_free(way) == way
        for mode in ("q8", "limb3"):
            assert_held_gives_the_q8_0_bits(held, ref, values, "avx512", mode)
    finally:
        lib.strata_grid_gather_free(-2)


# ---- IQ2_XXS, IQ3_XXS and IQ3_S on a CPU with AVX512_VBMI: their few-row steps decode by byte
# permutes (grids.c's iq2xxs16_vbmi, iq3xxs16_vbmi, iq3s16_vbmi) whichever way their bit picks, unless
# mask bit 30 asks for the way without them (EVERY_WAY above sets it: there the plain gather-free way)

NO_VBMI = 1 << 30
VBMI_WAYS = {"vbmi": EVERY_WAY & ~NO_VBMI, "gathers-without-vbmi": NO_VBMI}


def _vbmi() -> bool:
    """Whether /proc/cpuinfo lists avx512vbmi (the kernels ask cpuid instead)."""
    with open("/proc/cpuinfo", encoding="ascii", errors="replace") as info:
        return any(line.startswith("flags") and "avx512vbmi" in line.split() for line in info)


@pytest.mark.parametrize("way", VBMI_WAYS)
@pytest.mark.parametrize("qtype", (QT.IQ2_XXS, QT.IQ3_XXS, QT.IQ3_S), ids=lambda q: q.name)
def test_the_vbmi_decoding_and_the_gathers_without_it_give_the_reference_bits(qtype: QT, way: str) -> None:
    """Every grid entry and sign set through the permute tables, in every entry's place of a block:
    the Q8_0 blocks' bits at HELD_ROWS' 1 to 4 rows (the VBMI steps) and the rest, gguf-py's values;
    and the gathers' steps, which mask 0 no longer reaches on such a CPU."""
    lib = _avx512().lib
    if not _vbmi():
        pytest.skip("this CPU lacks AVX512_VBMI")
    stored = every_entry(qtype, seed=int(qtype))
    if qtype == QT.IQ3_S:  # every_entry's ninth bits change only every 256 indices: each its own too
        blocks = stored.reshape(-1, GGML_QUANT_SIZES[qtype][1])
        blocks[:, 66:74] = np.random.default_rng(3).integers(0, 256, size=(len(blocks), 8), dtype=np.uint8)
    q8 = transcode.to_q8_0(stored, qtype)
    assert q8 is not None
    held = Weight.from_info(TensorInfo("w", (N, K), qtype, stored))
    values = np.asarray(quants.dequantize(stored, qtype), dtype=np.float32).reshape(N, K)
    try:
        assert lib.strata_grid_gather_free(VBMI_WAYS[way]) == VBMI_WAYS[way]
        assert lib.strata_grid_gather_free(-3) == (way == "vbmi")  # the way the steps below take
        assert_held_gives_the_q8_0_bits(
            held, Weight("w8", N, K, TYPES[QT.Q8_0].code, q8), values, "avx512", "limb3"
        )
    finally:
        lib.strata_grid_gather_free(-2)


# ---- the avx512 build's fused one- and two-row steps for IQ2_XS and IQ2_S (grids.c's fused_half_wide)


@pytest.mark.parametrize("qtype", (QT.IQ2_XS, QT.IQ2_S), ids=lambda q: q.name)
def test_iq2_fused_rows_give_the_portable_bits_in_every_combine_tier(qtype: QT) -> None:
    """Entries of 43 (the largest |q|) everywhere, against a row equal to an output's own values
    (each half's |S_2| near 16 * 43 * 128: the double combine), a row of normal values (the int32
    one) and extreme_activations: 1 and 2 rows take the fused steps on avx512, whose bits must be
    the portable build's (the expanded group's steps) and within limb3's bound of float64."""
    if "avx512" not in targets_to_test():
        pytest.skip("this CPU does not run the avx512 kernels")
    blocks = kgrid_stored(qtype, seed=5, n=N, k=K).reshape(-1, GGML_QUANT_SIZES[qtype][1])
    big = np.argsort(-(kgrid_table(qtype) == 43).sum(axis=1))[:7]  # the entries with most 43s
    set_kgrid_indices(qtype, blocks, big[np.arange(blocks.shape[0] * 32).reshape(-1, 32) % len(big)])
    stored = blocks.reshape(-1)
    held = Weight.from_info(TensorInfo("w", (N, K), qtype, stored))
    w64 = np.asarray(quants.dequantize(stored, qtype), dtype=np.float64).reshape(N, K)
    plain = np.flatnonzero(np.abs(w64).max(axis=1) < 1)  # extreme_blocks' other rows: zero or huge d
    own = w64[plain[np.argmax((w64[plain] != 0).sum(axis=1))]][None]  # not row 0: all zeros
    rows = {
        1: own.astype(np.float32),
        2: np.vstack([own, np.random.default_rng(1).normal(0, 1, (1, K))]).astype(np.float32),
    }
    rows[3] = extreme_activations(2, K, seed=3)
    for x in rows.values():
        got = {
            t: (ops := NativeOps(1, t, q8=True, limbs=3)).linear(x, ops.pack(held))
            for t in ("portable", "avx512")
        }
        np.testing.assert_array_equal(bits(got["avx512"]), bits(got["portable"]))
        ok = np.isfinite(x).all(axis=1)
        x64 = x[ok].astype(np.float64)
        assert np.all(np.abs(got["avx512"][ok] - x64 @ w64.T) <= 1e-6 * (np.abs(x64) @ np.abs(w64).T) + 1e-30)
