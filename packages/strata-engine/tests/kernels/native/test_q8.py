"""The opt-in 8-bit-activation kernels ("native-q8", native/q8.c) against their contract.

- every target gives the portable build's bits (any row tile remainder, bias, thread count);
- the output is the contract's arithmetic: checked against an independent numpy reference
  (activations quantised per block of 32 by llama.cpp's Q8_0 rule, weights dequantised by
  gguf-py, the sum taken in float64), and the packed weight is the same matrix as the fp32
  path's, within the error 8-bit activations allow;
- a row's bits do not depend on the other rows of the call; edge rows (all zero, one huge value);
- on the real model: a batch equals each request alone, bit for bit, and the logprobs stay
  within a measured distance of the float64 reference forward.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as QT
from gguf import quants

from strata_engine import LLMEngine, LogprobParams, PromptScores, Request, SamplingParams, Step
from strata_engine.gguf_loader import TensorInfo
from strata_engine.kernels.base import Q8_PACKED
from strata_engine.kernels.choice import make_ops
from strata_engine.kernels.native import targets_to_test
from strata_engine.kernels.native.backend import NativeOps
from strata_engine.kernels.torch_backend import TorchOps
from strata_engine.kernels.weights import Weight
from strata_engine.testing.compare import run_alone, run_batch
from strata_engine.testing.prompts import PROMPTS, prompt_ids, text_request
from strata_engine.testing.q8_checks import (
    ROWS,
    TYPES,
    N,
    Quantised,
    activations,
    quantised_weight,
)
from strata_engine.testing.reference_forward import ReferenceModel

# |kernel - float64 reference| <= REL * sum_k |w_k * d * q_k|. The kernel's float work per
# output is one fp32 product (scale * d) and one fma per block (and per half, and per min):
# about 2 + 2 * K/32 roundings of 2^-24 of terms that are, block by block, at most a few times
# the elementwise magnitude (a min splits a weight into scale * q + min). K = 512: < 2e-6.
REL = 1e-5


def reference_quantize(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """llama.cpp's Q8_0 rule in numpy float32, per block of 32: d = amax / 127 and
    q = round-half-even(x * (127 / amax)); 0 where that product is not finite (amax 0 or so
    tiny that 127 / amax overflows). Returns q [M, K] and d [M, K/32]."""
    m, k = x.shape
    blocks = x.reshape(m, k // 32, 32).astype(np.float32)
    amax = np.abs(blocks).max(axis=2)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        inv = np.where(amax > 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
        v = blocks * inv[..., None]
        q = np.where(np.isfinite(v), np.rint(v), 0)
    return q.reshape(m, k), (amax / np.float32(127)).astype(np.float32)


def reference_q8_linear(x: np.ndarray, w: Quantised) -> tuple[np.ndarray, np.ndarray]:
    """sum_k w_k * d * q_k in float64, and the scale of the kernel's terms for the error bound:
    sum_k (|w_k - min_k| + |min_k|) * |d * q_k| (the kernel adds scale * q and min separately)."""
    q, d = reference_quantize(x)
    xq = q * np.repeat(d.astype(np.float64), 32, axis=1)
    values, mins = w.values.astype(np.float64), w.mins.astype(np.float64)
    return xq @ values.T, np.abs(xq) @ (np.abs(values - mins) + np.abs(mins)).T


def _q8(target: str | None = None, threads: int = 1) -> NativeOps:
    return NativeOps(threads, target, q8=True)


def _all_q8_outputs(ops: NativeOps, seed: int) -> list[np.ndarray]:
    """q8 matmuls of every type on odd shapes, every row count, with and without bias."""
    rng = np.random.default_rng(seed)
    outs = []
    for qtype in TYPES:
        for k in (256, 512):
            packed = ops.pack(quantised_weight(qtype, N, k, rng).weight)
            bias = rng.uniform(-1, 1, N).astype(np.float32)
            for m in ROWS:
                x = activations(m, k, rng)
                outs += [ops.linear(x, packed), ops.linear(x, packed, bias)]
        x = activations(33, 1024, rng)  # enough work for the quantisation to run on threads too
        outs.append(ops.linear(x, ops.pack(quantised_weight(qtype, 53, 1024, rng).weight)))
    return outs


@pytest.fixture(scope="module")
def portable_outputs() -> list[np.ndarray]:
    return _all_q8_outputs(_q8("portable"), seed=3)


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("target", targets_to_test())
def test_every_target_equals_portable_bit_for_bit(target: str, threads: int, portable_outputs) -> None:
    got = _all_q8_outputs(_q8(target, threads), seed=3)
    assert len(got) == len(portable_outputs)
    for i, (a, b) in enumerate(zip(got, portable_outputs, strict=True)):
        assert np.array_equal(a, b), f"output {i} differs from the portable build"


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_output_is_the_contract_arithmetic(qtype: QT) -> None:
    """Independent reference (see reference_quantize); a wrong nibble order, offset, half scale
    or a missing min is off by orders of magnitude more than REL."""
    rng = np.random.default_rng(int(qtype))
    w = quantised_weight(qtype, N, 512, rng)
    x = activations(17, 512, rng)
    half_ties = np.arange(32, dtype=np.float32) - 15.5  # one block with amax 127: id 1, x.5 ties
    half_ties[0] = 127.0
    x[1, :32] = half_ties
    bias = rng.uniform(-1, 1, N).astype(np.float32)
    want, scale = reference_q8_linear(x, w)
    for target in targets_to_test():
        ops = _q8(target, threads=2)
        got = ops.linear(x, ops.pack(w.weight), bias).astype(np.float64) - bias.astype(np.float64)
        err = np.abs(got - want) / scale
        where = np.unravel_index(err.argmax(), err.shape)
        assert err.max() <= REL, f"{target}: relative error {err.max():.3g} at {where}"


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_packed_weight_is_the_fp32_paths_matrix(qtype: QT) -> None:
    """q8 against the default (fp32) kernels on the same loaded weight: apart from fp32 rounding,
    they differ only by the activations' rounding, at most d/2 = amax/254 per element, so
    |y_q8 - y_fp32| <= sum over blocks of amax_b / 254 * sum_{k in b} |w_k|."""
    rng = np.random.default_rng(100 + int(qtype))
    w = quantised_weight(qtype, N, 512, rng)
    x = activations(9, 512, rng)
    exact = NativeOps(1).linear(x, w.weight).astype(np.float64)
    got = _q8(threads=1).linear(x, _q8().pack(w.weight)).astype(np.float64)
    amax = np.abs(x.reshape(9, 16, 32)).max(axis=2).astype(np.float64)
    block_w = np.abs(w.values.astype(np.float64)).reshape(N, 16, 32).sum(axis=2)
    bound = amax / 254 @ block_w.T
    fp32 = REL * reference_q8_linear(x, w)[1]  # both paths' own fp32 rounding
    assert np.all(np.abs(got - exact) <= bound + fp32)
    assert np.abs(got - exact).max() > 0  # activations were rounded: not the fp32 path itself


def test_block_maximum_is_quantised_to_127_not_dropped() -> None:
    """The largest |x| of a block must become +-127. x * (127 / amax) is often one ulp above 127
    in fp32 (amax = 7.296825: 127.00001); the quantised block must not lose that element."""
    ops = _q8()
    ones = np.ones((16, 32), dtype=np.float32)
    data = quants.quantize(ones, QT.Q8_0)
    w = Weight.from_info(TensorInfo("w", (16, 32), QT.Q8_0, data.reshape(-1)))
    x = np.zeros((1, 32), dtype=np.float32)
    x[0, 0] = 7.296825
    x[0, 1] = 1.0
    want = float(x.sum())  # the weight is all ones: y = sum of the quantised x, ~8.2963
    got = ops.linear(x, ops.pack(w))[0]
    assert np.allclose(got, np.full(16, want), rtol=1e-2), f"got {got[0]:.6g}, want ~{want:.6g}"


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_packed_rows_are_the_dequantised_rows(qtype: QT) -> None:
    """A tied LM head's packed copy also serves as the embedding: each row read back from it is
    gguf-py's dequantised row, bit for bit, on every target (edge rows of a partial group too)."""
    rng = np.random.default_rng(200 + int(qtype))
    w = quantised_weight(qtype, N, 512, rng)
    ids = np.array([0, 1, 15, 16, N - 2, N - 1, 7, 7])
    for target in targets_to_test():
        ops = _q8(target)
        got = ops.embed(ops.pack(w.weight), ids)
        assert np.array_equal(got.view(np.uint32), w.values[ids].astype(np.float32).view(np.uint32)), target


@pytest.mark.parametrize("target", targets_to_test())
def test_row_bits_independent_of_the_other_rows(target: str) -> None:
    rng = np.random.default_rng(8)
    ops = _q8(target, threads=2)
    for qtype in TYPES:
        w = ops.pack(quantised_weight(qtype, N, 256, rng).weight)
        batch = activations(21, 256, rng)  # 16 rows or more: Q6_K's unpacked path (q8.c)
        for at in (0, 5, 20):
            alone = ops.linear(batch[at : at + 1].copy(), w)
            assert np.array_equal(ops.linear(batch, w)[at : at + 1], alone), (qtype.name, at)
            assert np.array_equal(ops.linear(batch[at:].copy(), w)[:1], alone), (qtype.name, at)


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_zero_row_gives_exactly_the_bias(qtype: QT) -> None:
    rng = np.random.default_rng(21)
    w = quantised_weight(qtype, N, 256, rng).weight
    x = activations(3, 256, rng)
    x[1] = 0.0
    bias = rng.uniform(-1, 1, N).astype(np.float32)
    for target in targets_to_test():
        ops = _q8(target)
        packed = ops.pack(w)
        assert np.array_equal(ops.linear(x, packed)[1], np.zeros(N, dtype=np.float32))
        assert np.array_equal(ops.linear(x, packed, bias)[1], bias)


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_one_huge_value_row(qtype: QT) -> None:
    """A row that is zero but for one huge value (1e30, and 3e37 near fp32's top) gives that
    value times the weight's column: its block's d * 127 is the value again, within fp32."""
    rng = np.random.default_rng(22)
    w = quantised_weight(qtype, N, 256, rng)
    for target in targets_to_test():
        ops = _q8(target)
        packed = ops.pack(w.weight)
        for huge, col in ((1e30, 37), (-3e37, 200)):
            x = np.zeros((2, 256), dtype=np.float32)
            x[0, col] = huge
            x[1] = rng.normal(0, 1, 256).astype(np.float32)
            x[1, col] = huge  # the other values of its block quantise to 0 next to it
            want, scale = reference_q8_linear(x, w)
            got = ops.linear(x, packed).astype(np.float64)
            assert np.all(np.abs(got - want) <= REL * scale), (target, huge)
            column = w.values[:, col].astype(np.float64) * np.float32(huge)
            assert np.all(np.abs(got[0] - column) <= REL * scale[0]), (target, huge)


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_largest_quants_and_activations_sum_exactly(qtype: QT) -> None:
    """Every weight at its largest quant and every activation at +-127 (rows of all 1, all -1,
    and blocks of alternating sign): the integer sums reach their bounds, so a step that
    saturates or a partial sum that overflows (AVX2 keeps int16 sums over several steps) is off
    by far more than REL. 3 rows take the one-row path, 17 the many-row one (Q5_K/Q6_K unpack)."""
    rng = np.random.default_rng(30 + int(qtype))
    w = quantised_weight(qtype, N, 512, rng, extreme=True)
    for m in (3, 17):
        signs = np.resize(np.array([1.0, -1.0, 1.0], dtype=np.float32), m)[:, None]
        x = np.ones((m, 512), dtype=np.float32) * signs
        x[2] *= np.repeat(np.resize(np.array([1.0, -1.0], dtype=np.float32), 16), 32)
        want, scale = reference_q8_linear(x, w)
        for target in targets_to_test():
            ops = _q8(target, threads=2)
            got = ops.linear(x, ops.pack(w.weight)).astype(np.float64)
            err = np.abs(got - want) / scale
            assert err.max() <= REL, f"{target}, {m} rows: relative error {err.max():.3g}"


def test_pack_and_make_ops_edges() -> None:
    rng = np.random.default_rng(5)
    values = rng.normal(size=(19, 64)).astype(np.float32)
    dense = Weight("d", 19, 64, 0, values.view(np.uint8).reshape(-1))
    q4 = quantised_weight(QT.Q4_0, N, 256, rng).weight
    q8 = _q8()
    assert q8.name.endswith("-q8")
    assert q8.pack(dense) is dense  # fp32 weights: as loaded
    packed = q8.pack(q4)
    assert packed.kernel_type == q4.kernel_type | Q8_PACKED
    assert packed.raw.size == q8.lib.strata_q8_packed_bytes(q4.kernel_type, N, 256)
    assert NativeOps(1).pack(q4) is q4  # the default kernels read the blocks as loaded
    assert TorchOps().pack(q4) is q4
    ops = make_ops("native-q8", device="cpu", num_threads=1)
    assert ops.name.endswith("-q8") and ops.invariant


# ---- the real model ----------------------------------------------------------------------

# Measured on ACCURACY_PROMPTS (121 positions) with the block maximum kept (see
# test_block_maximum_is_quantised_to_127_not_dropped): |q8 - float64 reference| over the
# reference's top-20 tokens: mean 0.131, 99th percentile 0.53, max 1.42 nats; of the top-1 token
# alone: mean 0.042, max 0.27; top-1 differs at 4 positions, where the reference's lead was at most
# 0.19 nats. The maximum is noisy by nature: perturbing the activations of a float64 forward with
# 8-bit activations by a relative 1e-7 moves its top-20 logprobs by 1.3 nats (rounding flips).
MAX_TOP20_DIFF = 2.5  # nats, any of the top-20
MEAN_TOP20_DIFF = 0.25  # nats, the mean over all positions and top-20 tokens
MAX_TOP1_DIFF = 0.6  # nats, the reference's top-1 token
TOP1_MARGIN = 0.5  # nats: where the reference's top-1 leads by more, q8 picks the same token
ACCURACY_PROMPTS = ("sentence", "python", "json", "chat-france")


@pytest.fixture(scope="module")
def q8_engine(model_path) -> LLMEngine:
    return LLMEngine(model_path, num_threads=2, kernels="native-q8", parallel=16)


def test_engine_reports_q8_kernels(q8_engine: LLMEngine) -> None:
    assert q8_engine.kernels.endswith("-q8") and q8_engine.invariant


def test_batch_equals_each_alone(q8_engine: LLMEngine) -> None:
    requests = [text_request(q8_engine, p, max_tokens=4) for p in PROMPTS[:8]]
    alone = [run_alone(q8_engine, r) for r in requests]
    assert run_batch(q8_engine, requests) == alone
    reordered = run_batch(q8_engine, requests[::-1])[::-1]
    assert reordered == alone


def q8_prompt_logprobs(
    engine: LLMEngine, ids: list[int], named: list[int]
) -> list[tuple[int, dict[int, float]]]:
    """Row p: the engine's top-1 token after position p, and its logprobs of `named` tokens
    (as in test_real_model)."""
    request = Request(
        tuple(ids),
        SamplingParams(max_tokens=1, temperature=0.0),
        LogprobParams(top_n=1, prompt_logprobs=True, named_ids=tuple(sorted(set(named)))),
    )
    events = engine.generate(request)
    scores = next(e for e in events if isinstance(e, PromptScores))
    (step,) = [e for e in events if isinstance(e, Step)]
    rows = [*scores.rows[1:], step.logprobs]
    assert len(rows) == len(ids)
    out = []
    for row in rows:
        assert row is not None
        out.append((row.top[0][0], dict(row.named)))
    return out


def test_logprobs_near_the_float64_reference(q8_engine: LLMEngine, reference: ReferenceModel) -> None:
    """8-bit activations move logprobs by a bounded amount (bounds above, set from measurement):
    at every position of a few prompts, over the reference's top-20 tokens; and q8 picks the
    reference's top-1 wherever that leads its runner-up by more than TOP1_MARGIN."""
    diffs, top1_diffs, top1_checked = [], [], 0
    for name in ACCURACY_PROMPTS:
        ids = prompt_ids(q8_engine, name)
        want = reference.logprobs(ids)  # [T, vocab] float64
        top = torch.topk(want, 20)
        rows = q8_prompt_logprobs(q8_engine, ids, top.indices.flatten().tolist())
        for p, (best, named) in enumerate(rows):
            row = [abs(named[t] - float(want[p, t])) for t in top.indices[p].tolist()]
            diffs += row
            top1_diffs.append(row[0])
            if float(top.values[p, 0] - top.values[p, 1]) > TOP1_MARGIN:
                top1_checked += 1
                assert best == int(top.indices[p, 0]), f"{name} position {p}: top-1 differs"
    worst, mean, worst_top1 = max(diffs), sum(diffs) / len(diffs), max(top1_diffs)
    print(f"q8 vs float64 over the top-20: max {worst:.3f}, mean {mean:.4f}; top-1 max {worst_top1:.3f} nats")
    assert top1_checked >= 60
    assert mean <= MEAN_TOP20_DIFF, f"mean top-20 logprob difference {mean:.3g} nats"
    assert worst_top1 <= MAX_TOP1_DIFF, f"max top-1 logprob difference {worst_top1:.3g} nats"
    assert worst <= MAX_TOP20_DIFF, f"max top-20 logprob difference {worst:.3g} nats"
