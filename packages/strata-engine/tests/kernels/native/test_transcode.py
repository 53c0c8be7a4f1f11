"""Weight types rewritten at load as Q8_0 blocks, or held where their Q6_K rewrite is exact (Q3_K,
IQ1_M; kernels/transcode.py): the values the kernels read are gguf-py's bit for bit at extreme
scales, every arithmetic reads them, and the memory held is at most a byte and a bit a weight
instead of fp32's four bytes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, quants
from gguf import GGMLQuantizationType as QT

from strata_engine import LLMEngine
from strata_engine.gguf_loader import TensorInfo
from strata_engine.kernels import transcode
from strata_engine.kernels.native.backend import NativeOps
from strata_engine.kernels.weight_types import HALF_SCALES, TYPES
from strata_engine.kernels.weights import Weight
from strata_engine.testing.extreme_blocks import SCALE_AT, extreme_blocks
from strata_engine.testing.reference_forward import ReferenceModel
from strata_engine.testing.tiny_models import TINY_SPECS, VOCAB_SIZE, vocab_logprobs, write_tiny_model

ROWS, COLS = 48, 512

ALL = sorted(transcode.TYPES | transcode.Q6_K_TYPES, key=lambda q: q.name)


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


@pytest.fixture(scope="module")
def native() -> NativeOps:
    return NativeOps(num_threads=2)


@pytest.mark.parametrize("qtype", ALL, ids=lambda q: q.name)
def test_the_kernels_read_gguf_pys_values_at_extreme_scales(qtype: QT, native: NativeOps) -> None:
    stored = extreme_blocks(qtype, ROWS, COLS, seed=int(qtype))
    want = np.asarray(quants.dequantize(stored, qtype), dtype=np.float32).reshape(ROWS, COLS)
    weight = Weight.from_info(TensorInfo("w", (ROWS, COLS), qtype, stored))
    # Q3_K, IQ1_M: held as stored where their Q6_K rewrite is exact (test_grid_types)
    target = qtype if qtype in transcode.Q6_K_TYPES else QT.Q8_0
    assert weight.kernel_type == TYPES[target].code, "kept as fp32: some block did not transcode"
    if qtype in transcode.Q6_K_TYPES:
        q6 = transcode.to_q6_k(stored, qtype)
        assert q6 is not None
        np.testing.assert_array_equal(bits(quants.dequantize(q6, QT.Q6_K)), bits(want.reshape(-1)))
    assert weight.raw.nbytes <= ROWS * COLS * 9 // 8  # 9 bits a weight at most, not fp32's 32
    np.testing.assert_array_equal(bits(native.embed(weight, np.arange(ROWS))), bits(want))
    np.testing.assert_array_equal(bits(weight.dense()), bits(want))


@pytest.mark.parametrize("qtype", [QT.IQ3_S, QT.Q3_K, QT.IQ1_M], ids=lambda q: q.name)
def test_a_block_that_is_not_scale_times_integers_keeps_the_tensor_exact_as_fp32(qtype: QT) -> None:
    """A non-finite scale (a hostile or broken file), or IQ1_M's smallest subnormal d (whose
    eighth fp16 cannot hold), cannot be rewritten: the tensor is widened to gguf-py's fp32
    values, never approximated."""
    stored = extreme_blocks(qtype, 4, 256)
    block = stored.reshape(-1, GGML_QUANT_SIZES[qtype][1])
    if qtype == QT.IQ1_M:  # d = 0x0001: its low nibble is in the top of the first scale word
        block[1, 48:56] = (block[1, 48:56].copy().view(np.uint16) & np.uint16(0x0FFF)).view(np.uint8)
        block[1, 49] |= 0x10
    else:
        at = SCALE_AT[qtype]
        block[1, at : at + 2] = np.array([0x7C00], np.uint16).view(np.uint8)
    weight = Weight.from_info(TensorInfo("w", (4, 256), qtype, stored))
    assert weight.kernel_type == 0
    want = np.asarray(quants.dequantize(stored, qtype), dtype=np.float32).reshape(4, 256)
    np.testing.assert_array_equal(bits(weight.dense()), bits(want))


TOLERANCE = {"native": 1e-4, "native-fp32": 1e-4}  # nats, as test_limb's tiny models


@pytest.mark.parametrize("kernels", list(TOLERANCE))
def test_every_arithmetic_reads_them_within_its_accuracy_of_the_float64_forward(
    kernels: str, tmp_path: Path
) -> None:
    """A tiny llama whose projections are transcoded types: every prompt position's logprobs over
    the whole vocabulary against a float64 forward of gguf-py's values."""
    overrides = {
        "blk.0.attn_q.weight": QT.IQ4_XS,
        "blk.0.attn_k.weight": QT.IQ4_NL,
        "blk.0.attn_v.weight": QT.Q5_0,
        "blk.0.attn_output.weight": QT.Q3_K,
        "blk.0.ffn_gate.weight": QT.IQ3_S,
        "blk.0.ffn_up.weight": QT.IQ2_XXS,
        "blk.0.ffn_down.weight": QT.MXFP4,
        "blk.1.attn_q.weight": QT.IQ3_XXS,
        "blk.1.attn_k.weight": QT.IQ1_S,
        "blk.1.ffn_up.weight": QT.TQ2_0,
        "blk.1.ffn_down.weight": QT.TQ1_0,
    }
    path = write_tiny_model(tmp_path / "m.gguf", TINY_SPECS[0], seed=5, overrides=overrides)
    engine = LLMEngine(path, num_threads=2, kv_cache_mb=16, kernels=kernels)
    prompt = np.random.default_rng(3).integers(0, VOCAB_SIZE - 3, size=17).tolist()
    got = vocab_logprobs(engine, prompt)
    want = ReferenceModel(str(path)).logprobs(prompt).numpy()
    err = float(np.abs(got - want).max())
    assert err <= TOLERANCE[kernels], f"{kernels}: off by {err:.3g}"


@pytest.mark.parametrize("qtype", [QT.IQ4_XS, QT.IQ2_XXS, QT.Q3_K, QT.IQ1_M], ids=lambda q: q.name)
def test_native_q8_reads_them_within_its_bound(qtype: QT) -> None:
    """8-bit activations against the float64 product of gguf-py's values: off by at most the
    activations' rounding, amax / 254 per element of each block (test_q8's bound), plus fp32's."""
    rows, cols, m = 40, 512, 9
    stored = extreme_blocks(qtype, rows, cols, seed=3)
    w = Weight.from_info(TensorInfo("w", (rows, cols), qtype, stored))
    assert w.kernel_type != 0
    w64 = np.asarray(quants.dequantize(stored, qtype), dtype=np.float64).reshape(rows, cols)
    x = np.random.default_rng(4).normal(0, 1, size=(m, cols)).astype(np.float32)
    ops = NativeOps(1, q8=True)
    got = ops.linear(x, ops.pack(w)).astype(np.float64)
    amax = np.abs(x.reshape(m, -1, 32)).max(axis=2).astype(np.float64)
    bound = amax / 254 @ np.abs(w64).reshape(rows, -1, 32).sum(axis=2).T
    bound += 1e-5 * (np.abs(x.astype(np.float64)) @ np.abs(w64).T)
    assert np.all(np.abs(got - x.astype(np.float64) @ w64.T) <= bound)


def test_a_nibble_type_with_an_infinite_scale_keeps_gguf_pys_infinities() -> None:
    """IQ4_XS is held as the file's super-blocks, each 32 values' scale d * (ls - 32) computed where
    read (codebook value times scale, gguf-py's one product): an infinite d gives gguf-py's
    infinities, not a refusal or a NaN."""
    stored = extreme_blocks(QT.IQ4_XS, 4, 256)
    stored.reshape(4, -1)[1, 0:2] = np.array([0x7C00], np.uint16).view(np.uint8)
    weight = Weight.from_info(TensorInfo("w", (4, 256), QT.IQ4_XS, stored))
    want = np.asarray(quants.dequantize(stored, QT.IQ4_XS), dtype=np.float32).reshape(4, 256)
    assert weight.kernel_type == TYPES[QT.IQ4_XS].code | HALF_SCALES and np.isinf(want[1]).any()
    np.testing.assert_array_equal(bits(NativeOps(1).embed(weight, np.arange(4))), bits(want))
