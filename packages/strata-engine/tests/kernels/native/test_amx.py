"""The integer-limb kernels' AMX tiles (native/amx.h) against their vpdpbusd steps, bit for bit.

On a CPU with AMX-INT8 the AVX-512 build takes the integer sums of calls of 16 rows or more on
tiles; the vector steps (the reference here: STRATA_AMX=0's path, itself held to the portable
build's bits by test_limb.py) take the same exact sums, and both run the same float sequence, so
every output must have the same bits: each weight type that reaches the many-row path (its own
packed form, Q5_K/Q6_K/Q4_K unpacked to bytes, the codebook and grid types expanded to Q8_0),
2 and 3 limbs, 1 to 40 rows (tiles of 16 and a last tile that overlaps the one before), N not a
multiple of 16, with a bias, on 1 and 2 threads; weights at their extreme quants and scales,
activations whose every limb is at its extreme, NaN, zero and tiny blocks; and a tiny model's
full-vocabulary log-probabilities. A wrong offset, limb plane, row, half or block order is off
in the first bits.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from strata_engine import LLMEngine
from strata_engine.gguf_loader import TensorInfo
from strata_engine.kernels.native import NativeUnavailable, in_use, runnable_targets
from strata_engine.kernels.native.backend import NativeOps
from strata_engine.kernels.weights import Weight
from strata_engine.testing.extreme_blocks import extreme_blocks
from strata_engine.testing.q8_checks import TYPES, N, activations, bits, extreme_activations, quantised_weight
from strata_engine.testing.tiny_models import (
    TINY_SPECS,
    VOCAB_SIZE,
    encode_tensor,
    vocab_logprobs,
    write_tiny_model,
)

HELD = (QT.IQ4_NL, QT.IQ4_XS, QT.MXFP4, QT.IQ2_XXS, QT.IQ3_XXS, QT.IQ3_S, QT.IQ1_S)  # expanded to Q8_0
K = 512
ROWS = tuple(range(1, 41))


@pytest.fixture(scope="module")
def lib() -> Iterator[ctypes.CDLL]:
    """The AVX-512 kernels with AMX usable (else the test skips); the AMX state put back after."""
    try:
        if "avx512" not in runnable_targets():
            pytest.skip("no AMX: the host CPU has no AVX-512 target")
        ops = NativeOps(1, "avx512", limbs=3)
    except NativeUnavailable as exc:
        pytest.skip(f"no AMX: the kernels do not build here ({exc})")
    saved = ops.lib.strata_amx_use(-1)
    if not ops.lib.strata_amx_use(1):
        pytest.skip("no AMX: the host CPU has no AMX-INT8 (or the OS does not grant its tiles)")
    yield ops.lib
    ops.lib.strata_amx_use(saved)


def _both(
    lib: ctypes.CDLL, ops: NativeOps, x: np.ndarray, w: Weight, bias: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """ops.linear with AMX on, then off (the vector steps)."""
    lib.strata_amx_use(1)
    on = ops.linear(x, w, bias)
    lib.strata_amx_use(0)
    off = ops.linear(x, w, bias)
    lib.strata_amx_use(1)
    return on, off


def _weight(qtype: QT, rng: np.random.Generator, extreme: bool) -> Weight:
    if qtype in HELD:  # extreme: every grid index, sign and sub-scale, scales subnormal to the largest
        data = (
            extreme_blocks(qtype, N, K, seed=int(qtype))
            if extreme
            else encode_tensor(rng.normal(0, 0.05, (N, K)), qtype, rng)
        )
        return Weight.from_info(TensorInfo("w", (N, K), qtype, np.ascontiguousarray(data).reshape(-1)))
    return quantised_weight(qtype, N, K, rng, extreme=extreme).weight


def _limb_rows(limbs: int, m: int) -> np.ndarray:
    """Rows whose every limb is at an extreme (+127, -127, -128), by block, and blocks of both signs."""
    big = (8355711.0 * 2.0**-20, -8355711.0 * 2.0**-20, 8290176.0 * 2.0**-18, -8290432.0 * 2.0**-18)
    if limbs == 2:
        big = (32639.0 * 2.0**-12, -32639.0 * 2.0**-12, 32384.0 * 2.0**-10, -32384.0 * 2.0**-10)
    x = np.empty((m, K), dtype=np.float32)
    for i in range(m):
        x[i] = big[i % 4]
        if i % 3 == 1:
            x[i] *= np.repeat(np.resize(np.array([1.0, -1.0], dtype=np.float32), K // 32), 32)
    return x


@pytest.mark.parametrize("limbs", (3, 2))
@pytest.mark.parametrize("qtype", TYPES + HELD, ids=lambda t: t.name)
def test_tiles_give_the_vector_steps_bits(lib: ctypes.CDLL, qtype: QT, limbs: int) -> None:
    rng = np.random.default_rng(100 + int(qtype) + limbs)
    bias = rng.uniform(-1, 1, N).astype(np.float32)
    for threads in (1, 2):
        ops = NativeOps(threads, "avx512", limbs=limbs)
        for extreme in (False, True):
            w = ops.pack(_weight(qtype, rng, extreme))
            for m in ROWS if threads == 1 and not extreme else (16, 17, 33, 40):
                xs = [activations(m, K, rng), extreme_activations(m, K, seed=m), _limb_rows(limbs, m)]
                for i, x in enumerate(xs):
                    on, off = _both(lib, ops, x, w, bias if m % 2 else None)
                    np.testing.assert_array_equal(
                        bits(on),
                        bits(off),
                        err_msg=f"{threads} threads, extreme {extreme}, {m} rows, input {i}",
                    )


def test_a_call_spanning_many_groups_and_tiles(lib: ctypes.CDLL) -> None:
    """Q4_K over K = 2048 (64 blocks, the Q5_K unpack from 64 rows) and 100 rows (7 tiles), N = 200."""
    rng = np.random.default_rng(7)
    ops = NativeOps(2, "avx512", limbs=3)
    for qtype in (QT.Q4_K, QT.Q6_K, QT.Q8_0):
        w = ops.pack(quantised_weight(qtype, 200, 2048, rng).weight)
        for m in (63, 64, 100):
            on, off = _both(lib, ops, activations(m, 2048, rng), w, None)
            np.testing.assert_array_equal(bits(on), bits(off), err_msg=f"{qtype.name}, {m} rows")


def test_tiny_model_logprobs_are_the_same_with_tiles(lib: ctypes.CDLL, tmp_path: Path) -> None:
    """A whole model (its prefill of 41 tokens on tiles): every vocabulary id's log-probability at
    every position, with AMX on and off, in engines of their own (no prefix cache between them)."""
    spec = next(s for s in TINY_SPECS if s.name == "qwen3-untied")
    path = write_tiny_model(tmp_path / "model.gguf", spec, seed=3)
    prompt = np.random.default_rng(5).integers(0, VOCAB_SIZE - 3, size=41).tolist()
    got = []
    for amx in (1, 0):
        lib.strata_amx_use(amx)
        engine = LLMEngine(path, num_threads=2, kv_cache_mb=16, kernels="native")
        got.append(vocab_logprobs(engine, prompt))
    lib.strata_amx_use(1)
    np.testing.assert_array_equal(bits(got[0]), bits(got[1]))


def test_the_kernels_say_when_tiles_run(lib: ctypes.CDLL) -> None:
    lib.strata_amx_use(0)
    assert in_use(lib, "avx512") == "avx512"
    lib.strata_amx_use(1)
    assert in_use(lib, "avx512") == "avx512+amx"
