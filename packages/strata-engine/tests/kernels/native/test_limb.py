"""The integer-limb kernels (the default "native", and "native-limb2"; native/limb.c) against their contract.

- every target gives the portable build's bits (any row tile remainder, bias, thread count);
- the output is the contract's arithmetic: checked against an independent numpy reference
  (each block of 32 activations as a power-of-two scale times integers of 8k - 1 bits, the sum
  in float64), and against the exact product within the bound the limbs' rounding allows;
- the integer sums reach their bounds (every quant at its largest, every limb at +127 or -128)
  and stay exact; NaN and infinity propagate; a row's bits do not depend on the other rows;
- end to end: a tiny model's full-vocabulary logprobs within 1e-4 of the float64 reference
  forward, and on the real model a batch, a chunked prefill and a decode step give each
  request's bits alone.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, quants
from gguf import GGMLQuantizationType as QT

from strata_engine import LLMEngine, LogprobParams, Request, SamplingParams, Step
from strata_engine.gguf_loader import TensorInfo
from strata_engine.kernels.native import targets_to_test
from strata_engine.kernels.native.backend import NativeOps
from strata_engine.kernels.weights import Weight
from strata_engine.testing.compare import run_alone, run_batch
from strata_engine.testing.extreme_blocks import SCALE_AT, extreme_blocks
from strata_engine.testing.prompts import PROMPTS, text_request
from strata_engine.testing.q8_checks import (
    ROWS,
    TYPES,
    N,
    Quantised,
    activations,
    dequantized,
    quantised_weight,
)
from strata_engine.testing.reference_forward import ReferenceModel
from strata_engine.testing.tiny_models import (
    TINY_SPECS,
    VOCAB_SIZE,
    encode_tensor,
    vocab_logprobs,
    write_tiny_model,
)

LIMBS = (3, 2)
XMAX = {3: 8355711, 2: 32639}  # 127 (256^k - 1) / 255: the largest X with k balanced int8 digits
# |kernel - float64 reference on the limbs| <= REL * sum_k |w_k * s * X_k| (as test_q8's REL: a
# conversion and an fma per block, each 2^-24 of terms at most a few times the elementwise sum).
REL = 1e-5


def _limb_ops(limbs: int, target: str | None = None, threads: int = 1) -> NativeOps:
    return NativeOps(threads, target, limbs=limbs)


def reference_limbs(x: np.ndarray, limbs: int) -> np.ndarray:
    """x as the limbs hold it, in float64: per block of 32, s = the smallest power of two with
    every |round-half-even(x / s)| <= XMAX, at least amax / 2^(8k-1); blocks whose largest |x| is
    below 2^-100 are zero."""
    m, k = x.shape
    blocks = x.reshape(m, k // 32, 32).astype(np.float64)
    amax = np.abs(blocks).max(axis=2)
    _, exp = np.frexp(amax)  # amax = f * 2^exp, f in [0.5, 1): floor(log2(amax)) = exp - 1
    shift = (exp - 1 - (8 * limbs - 2)).astype(np.float64)
    ints = np.rint(blocks / 2.0 ** shift[..., None])
    over = np.abs(ints).max(axis=2) > XMAX[limbs]
    shift += over
    ints = np.rint(blocks / 2.0 ** shift[..., None])
    held = ints * 2.0 ** shift[..., None]
    held[amax < 2.0**-100] = 0.0
    assert np.abs(ints).max() <= XMAX[limbs]
    return held.reshape(m, k)


def reference_linear(x: np.ndarray, w: Quantised, limbs: int) -> tuple[np.ndarray, np.ndarray]:
    """sum_k w_k * (s X)_k in float64, and sum_k (|w_k - min_k| + |min_k|) * |s X_k| for the bound."""
    held = reference_limbs(x, limbs)
    values, mins = w.values.astype(np.float64), w.mins.astype(np.float64)
    return held @ values.T, np.abs(held) @ (np.abs(values - mins) + np.abs(mins)).T


def _all_outputs(limbs: int, ops: NativeOps, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    outs = []
    for qtype in TYPES:
        packed = ops.pack(quantised_weight(qtype, N, 256, rng).weight)
        bias = rng.uniform(-1, 1, N).astype(np.float32)
        # 6, 7: the unpacked Q5_K/Q6_K's tiles with 2, 3 left (avx512 before its two-group tiles; its
        # Q6_K of 3 limbs unpacks from 16 rows, so 6, 7, 10 take the packed 4-row tiles with 2, 3, 2 left);
        # 10, 67 (Q4_K unpacked too): avx512's two-group tiles (2 rows of 3 limbs, 3 of 2) with 1 left
        for m in (*ROWS, 2, 4, 6, 7, 10, 67):
            x = activations(m, 256, rng)
            outs += [ops.linear(x, packed), ops.linear(x, packed, bias)]
        x = activations(33, 1024, rng)  # enough work for the limbs to be formed on threads too
        outs.append(ops.linear(x, ops.pack(quantised_weight(qtype, 53, 1024, rng).weight)))
    return outs


@pytest.mark.parametrize("limbs", LIMBS)
def test_every_target_and_thread_count_equals_portable(limbs: int) -> None:
    want = _all_outputs(limbs, _limb_ops(limbs, "portable"), seed=4)
    for target in targets_to_test():
        for threads in (1, 3):
            got = _all_outputs(limbs, _limb_ops(limbs, target, threads), seed=4)
            for i, (a, b) in enumerate(zip(got, want, strict=True)):
                assert np.array_equal(a, b, equal_nan=True), (
                    f"{target}, {threads} threads: output {i} differs"
                )


@pytest.mark.parametrize("limbs", LIMBS)
@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_output_is_the_contract_arithmetic(qtype: QT, limbs: int) -> None:
    """Against the independent reference: a wrong limb order, a lost carry, an offset taken back
    from the wrong limb or a scale off by a power of two is off by far more than REL. And the
    limbs are the activations to within half their step: |y - x W| <= sum_b s_b / 2 sum |w|."""
    rng = np.random.default_rng(int(qtype) + 10 * limbs)
    w = quantised_weight(qtype, N, 512, rng)
    x = activations(17, 512, rng)
    x[2, :32] = np.arange(32, dtype=np.float32) - 15.5  # halves: ties at k = 2
    bias = rng.uniform(-1, 1, N).astype(np.float32)
    want, scale = reference_linear(x, w, limbs)
    blocks = np.abs(x.reshape(17, 16, 32)).max(axis=2).astype(np.float64)
    step = 2.0 ** (np.frexp(blocks)[1] - 1 - (8 * limbs - 2) + 1)  # s, at most twice the first guess
    bound = (step / 2) @ np.abs(w.values.astype(np.float64)).reshape(N, 16, 32).sum(axis=2).T
    exact = x.astype(np.float64) @ w.values.astype(np.float64).T
    for target in targets_to_test():
        ops = _limb_ops(limbs, target, threads=2)
        got = ops.linear(x, ops.pack(w.weight), bias).astype(np.float64) - bias.astype(np.float64)
        err = np.abs(got - want) / scale
        assert err.max() <= REL, f"{target}: relative error {err.max():.3g}"
        assert np.all(np.abs(got - exact) <= bound + REL * scale), target


def _extreme_rows(limbs: int, m: int) -> np.ndarray:
    """Rows whose every limb is at its extreme: all +127, all -127, (-128, -128, 127) and
    (-128, -128, -126) (k = 2: (-128, 127), (-128, -126)), and blocks of alternating sign; scaled
    by powers of two (which leave the limbs as they are)."""
    if limbs == 3:
        values = (8355711.0 * 2.0**-20, -8355711.0 * 2.0**-20, 8290176.0 * 2.0**-18, -8290432.0 * 2.0**-18)
    else:
        values = (32639.0 * 2.0**-12, -32639.0 * 2.0**-12, 32384.0 * 2.0**-10, -32384.0 * 2.0**-10)
    x = np.empty((m, 512), dtype=np.float32)
    for i in range(m):
        x[i] = values[i % 4]
        if i % 5 == 4:
            x[i] *= np.repeat(np.resize(np.array([1.0, -1.0], dtype=np.float32), 16), 32)
    return x


@pytest.mark.parametrize("limbs", LIMBS)
@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_largest_quants_and_limbs_sum_exactly(qtype: QT, limbs: int) -> None:
    """Every weight at its largest quant and every limb at +-127 or -128: the integer sums reach
    their bounds (AVX2 keeps int16 partial sums over several steps; Q8_0's bytes reach 255), so a
    step that saturates or a sum that overflows is off by far more than REL. 5 rows take the
    tile path, 17 the many-row one (Q5_K/Q6_K unpacked), 66 on AVX-512 Q4_K's unpacked one."""
    rng = np.random.default_rng(40 + int(qtype))
    w = quantised_weight(qtype, N, 512, rng, extreme=True)
    for m in (5, 17, 66):
        x = _extreme_rows(limbs, m)
        want, scale = reference_linear(x, w, limbs)
        assert np.array_equal(reference_limbs(x, limbs), x.astype(np.float64))  # held exactly
        for target in targets_to_test():
            ops = _limb_ops(limbs, target, threads=2)
            got = ops.linear(x, ops.pack(w.weight)).astype(np.float64)
            err = np.abs(got - want) / scale
            assert err.max() <= REL, f"{target}, {m} rows: relative error {err.max():.3g}"


@pytest.mark.parametrize("qtype", (QT.Q4_1, QT.Q4_K), ids=lambda t: t.name)
def test_limb_sums_near_the_int32_bound(qtype: QT) -> None:
    """Every quant at its largest (15); in each block one element at XMAX (every limb 127, which
    sets s = 2^-20) and 31 at X = l2 * 65536 + 127 * 257, l2 from 30 to 70 (and all negated): the
    top limb's sum S_2 = 15 * (127 + 31 * l2) crosses 2^14 (l2 = 31 to 32), where the kernels turn
    from the int32 combine to the double one, and at l2 = 66 is 32,595, below 2^15, where
    S_2 * 65536 + L passes 2^31. A bound set one bit too high overflows there, off by far more
    than REL; every target gives the portable build's bits."""
    rng = np.random.default_rng(60 + int(qtype))
    w = quantised_weight(qtype, N, 256, rng, extreme=True)
    l2 = np.arange(30, 71, dtype=np.float64)
    sign = np.concatenate([np.ones_like(l2), -np.ones_like(l2)])[:, None]
    X = np.repeat((np.concatenate([l2, l2]) * 65536 + 127 * 257)[:, None], 256, axis=1)
    X[:, ::32] = XMAX[3]
    x = (sign * X * 2.0**-20).astype(np.float32)
    want, scale = reference_linear(x, w, 3)
    assert np.array_equal(reference_limbs(x, 3), x.astype(np.float64))  # held exactly
    portable = _limb_ops(3, "portable", threads=2)
    expect = portable.linear(x, portable.pack(w.weight))
    for target in targets_to_test():
        ops = _limb_ops(3, target, threads=2)
        got = ops.linear(x, ops.pack(w.weight))
        err = np.abs(got.astype(np.float64) - want) / scale
        assert err.max() <= REL, f"{target}: relative error {err.max():.3g}"
        assert np.array_equal(got, expect), target


ONE_ROW_TYPES = (QT.Q5_0, QT.Q5_1, QT.Q5_K, QT.Q6_K, QT.Q2_K)


@pytest.mark.parametrize("limbs", LIMBS)
@pytest.mark.parametrize("qtype", ONE_ROW_TYPES, ids=lambda t: t.name)
def test_one_row_at_the_bounds_gives_portable_bits(qtype: QT, limbs: int) -> None:
    """A decode step's one row, which AVX2 and AVX-VNNI take 8 outputs at a time (Q6_K: its own
    tile), each limb's chains ending as L = S_0 + 256 S_1 plus the offset's starts, then S_2's combine:
    every quant at its largest, and quantiser's quants; rows whose every limb is at its extreme
    (|S_2| far past 2^14: the double combine) and ordinary rows (the int32 one), each called
    alone. A lost start, a wrong limb weight or a chain past its int16 bound is off by far more
    than REL; every target gives the portable build's bits."""
    rng = np.random.default_rng(90 + int(qtype))
    x = np.concatenate([_extreme_rows(limbs, 5), activations(2, 512, rng)])
    portable = _limb_ops(limbs, "portable")
    for w in (quantised_weight(qtype, N, 512, rng, extreme=True), quantised_weight(qtype, N, 512, rng)):
        want, scale = reference_linear(x, w, limbs)
        expect = [portable.linear(x[i : i + 1], portable.pack(w.weight)) for i in range(len(x))]
        for target in targets_to_test():
            ops = _limb_ops(limbs, target)
            packed = ops.pack(w.weight)
            for i in range(len(x)):
                got = ops.linear(x[i : i + 1], packed)
                err = np.abs(got[0].astype(np.float64) - want[i]) / np.maximum(scale[i], 1e-30)
                assert err.max() <= REL, f"{target}, row {i}: relative error {err.max():.3g}"
                assert np.array_equal(got, expect[i]), (target, i)


def test_q8_0_wide_limb_sums_at_their_bounds() -> None:
    """AVX2 takes Q8_0 as int16 weights times X split into 12-bit limbs, X = 4096 hi + lo with
    lo in [-2048, 2047], and forms S = 4096 S_hi + S_lo by one float fma, exact only while
    |S_hi|, |S_lo| <= 2^24. Every quant -128 but element 0's (odd, so the sums have low bits to
    lose); in each block element 0 at XMAX (sets s = 2^-20) and the rest at random X whose low
    limb lies in the outer quarter of its range for a split of 12, 14 or 16 bits: |S| passes 2^35,
    and the 12-bit split's |S_lo| comes within 4% of 2^23. A split two bits wider (|S_lo| past 2^24,
    rounded before the fma: twice in all) or an int32 combine (overflow) differs from the portable
    build's bits. 5 rows take the tile path, 48 the group widened once for many rows."""
    rng = np.random.default_rng(70)
    data = np.ascontiguousarray(encode_tensor(rng.normal(0, 0.05, (N, 256)), QT.Q8_0, rng))
    blocks = data.reshape(-1, 34)  # a Q8_0 block: the f16 scale, then 32 int8 quants
    blocks[:, 2:] = 0x80
    blocks[:, 2] = (2 * rng.integers(-64, 64, len(blocks)) + 1).astype(np.int8).view(np.uint8)
    values = dequantized(data, QT.Q8_0, (N, 256))
    w = Quantised(Weight.from_info(TensorInfo("w", (N, 256), QT.Q8_0, data.reshape(-1))), values, 0 * values)
    rows = []
    for r in range(48):
        bits, sign = (12, 14, 16)[r % 3], (1, -1)[r // 3 % 2]
        lo = sign * rng.integers(2 ** (bits - 2), 2 ** (bits - 1), 256)  # the outer quarter
        rows.append(((XMAX[3] >> bits) - 1) * 2**bits + lo)  # at most XMAX
    X = np.array(rows, dtype=np.float64) * np.where(np.arange(48) % 4 == 3, -1.0, 1.0)[:, None]
    X[:, ::32] = XMAX[3]
    x = (X * 2.0**-20).astype(np.float32)
    want, scale = reference_linear(x, w, 3)
    assert np.array_equal(reference_limbs(x, 3), x.astype(np.float64))  # held exactly
    portable = _limb_ops(3, "portable")
    for m in (5, 48):
        expect = portable.linear(x[:m], portable.pack(w.weight))
        for target in targets_to_test():
            ops = _limb_ops(3, target, threads=2)
            got = ops.linear(x[:m], ops.pack(w.weight))
            err = np.abs(got.astype(np.float64) - want[:m]) / scale[:m]
            assert err.max() <= REL, f"{target}, {m} rows: relative error {err.max():.3g}"
            assert np.array_equal(got, expect), (target, m)


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_edge_rows(qtype: QT) -> None:
    """A zero row gives exactly the bias; a NaN or an infinity makes its own row NaN (as fp32
    would) and no other; a row of one huge value gives that value times the weight's column;
    a row's bits do not depend on the rows beside it."""
    rng = np.random.default_rng(50 + int(qtype))
    w = quantised_weight(qtype, N, 256, rng)
    bias = rng.uniform(-1, 1, N).astype(np.float32)
    x = activations(21, 256, rng)
    x[1] = 0.0
    x[3, 77] = np.nan
    x[4, 200] = np.inf
    x[5] = 0.0
    x[5, 37] = 3e37
    for target in targets_to_test():
        ops = _limb_ops(3, target, threads=2)
        packed = ops.pack(w.weight)
        y = ops.linear(x, packed, bias)
        assert np.array_equal(y[1], bias)
        assert np.all(np.isnan(y[3])) and np.all(np.isnan(y[4]))
        others = np.delete(np.arange(21), [3, 4])
        assert np.all(np.isfinite(y[others]))
        column = w.values[:, 37].astype(np.float64) * np.float32(3e37)
        assert np.allclose(y[5].astype(np.float64) - bias, column, rtol=1e-5, atol=0), target
        for at in (0, 6, 20):
            alone = ops.linear(x[at : at + 1].copy(), packed, bias)
            assert np.array_equal(y[at : at + 1], alone), (target, at)


def test_other_limb_counts_are_refused() -> None:
    """Each mode's name and limbs: test_kernel_choice.py::test_each_mode_is_named_by_its_arithmetic."""
    with pytest.raises(ValueError, match="limbs"):
        NativeOps(1, limbs=4)


# Q8_0 as stored and a type decoded to each byte type the two-group tiles take: the grid types' and
# the codebook types' Q8_0 bytes (IQ3_S, IQ4_XS), the K-grid types' Q6_K bytes (Q3_K), the IQ2 bytes (IQ2_S)
PAIR_TYPES = (QT.Q8_0, QT.IQ3_S, QT.IQ4_XS, QT.Q3_K, QT.IQ2_S)


def _decoded_weight(qtype: QT, n: int, k: int, rng: np.random.Generator) -> Quantised:
    """A weight of qtype as the file stores it (Q8_0 from the quantiser), with gguf-py's values; the
    decoded types' arbitrary codes with normal fp16 scales of either sign (a subnormal scale's
    products underflow, outside REL's relative bound)."""
    if qtype == QT.Q8_0:
        return quantised_weight(qtype, n, k, rng)
    block = GGML_QUANT_SIZES[qtype][1]
    data = extreme_blocks(qtype, n, k, seed=int(rng.integers(1 << 30))).reshape(-1, block)
    scale = rng.uniform(0.5, 2.0, len(data)) * rng.choice([-1.0, 1.0], len(data)) / 64
    data[:, SCALE_AT[qtype] : SCALE_AT[qtype] + 2] = scale.astype(np.float16).view(np.uint8).reshape(-1, 2)
    values = np.asarray(quants.dequantize(data.reshape(-1), qtype), dtype=np.float32).reshape(n, k)
    info = TensorInfo("w", (n, k), qtype, data.reshape(-1))
    return Quantised(Weight.from_info(info), values, 0 * values)


@pytest.mark.parametrize("limbs", LIMBS)
@pytest.mark.parametrize("qtype", PAIR_TYPES, ids=lambda t: t.name)
def test_two_group_tiles_are_the_contract_arithmetic(qtype: QT, limbs: int) -> None:
    """From 9 rows avx512 takes Q8_0 and the decoded types two groups of 16 outputs a tile (the held
    codebook types from 12), 2 rows of 3 limbs, 3 of 2: 12 to 14 rows leave 0, 1 (13) and 2 (14, two
    limbs). 37 outputs: an odd group count, the last
    (part) group alone; 20: one pair whose second group is a part one. A group given its
    neighbour's scales, bytes or outputs is off by far more than REL from the float64 reference on
    gguf-py's values; every target gives the portable build's bits."""
    rng = np.random.default_rng(80 + int(qtype) + limbs)
    portable = _limb_ops(limbs, "portable")
    for n in (37, 20):
        w = _decoded_weight(qtype, n, 512, rng)
        bias = rng.uniform(-1, 1, n).astype(np.float32)
        for m in (12, 13, 14):
            x = activations(m, 512, rng)
            want, scale = reference_linear(x, w, limbs)
            expect = portable.linear(x, portable.pack(w.weight), bias)
            for target in targets_to_test():
                ops = _limb_ops(limbs, target, threads=2)
                got = ops.linear(x, ops.pack(w.weight), bias)
                err = np.abs(got.astype(np.float64) - bias - want) / scale
                assert err.max() <= REL, f"{target}, {n} outputs, {m} rows: relative error {err.max():.3g}"
                assert np.array_equal(got, expect), (target, n, m)


# ---- end to end ---------------------------------------------------------------------------

TINY_PROMPT = 41
TINY_TOLERANCE = 1e-4  # nats, any token of the vocabulary, any position


@pytest.mark.parametrize("spec", TINY_SPECS, ids=lambda s: s.name)
def test_tiny_model_within_1e4_of_float64(spec, tmp_path: Path) -> None:
    path = write_tiny_model(tmp_path / "model.gguf", spec, seed=7)
    engine = LLMEngine(path, num_threads=2, kv_cache_mb=16, kernels="native")
    prompt = np.random.default_rng(11).integers(0, VOCAB_SIZE - 3, size=TINY_PROMPT).tolist()
    got = vocab_logprobs(engine, prompt)
    want = ReferenceModel(str(path)).logprobs(prompt).numpy()
    err = np.abs(got - want).max()
    assert err <= TINY_TOLERANCE, f"{spec.name}: off by {err:.3g}"


@pytest.fixture(scope="module")
def limb_engine(model_path) -> LLMEngine:
    return LLMEngine(model_path, num_threads=2, kernels="native", parallel=16)


def test_batch_equals_each_alone(limb_engine: LLMEngine) -> None:
    requests = [text_request(limb_engine, p, max_tokens=4) for p in PROMPTS[:8]]
    alone = [run_alone(limb_engine, r) for r in requests]
    assert run_batch(limb_engine, requests) == alone
    assert run_batch(limb_engine, requests[::-1])[::-1] == alone


def test_chunks_and_decode_equal_one_prefill(model_path) -> None:
    """A prompt prefilled in chunks of 7 gives the one-shot prefill's bits, and a decode step's
    row equals the same position scored with echo."""
    text = " ".join(PROMPTS[:6])
    results = []
    for step_tokens in (512, 7):
        engine = LLMEngine(model_path, num_threads=2, kernels="native", step_tokens=step_tokens)
        results.append(run_alone(engine, text_request(engine, text, max_tokens=3, echo=False)))
    assert results[0] == results[1]
    prompt = tuple(engine.tokenizer.encode(text))
    greedy = SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True)
    steps = [
        e for e in engine.generate(Request(prompt, greedy, LogprobParams(top_n=5))) if isinstance(e, Step)
    ]
    tokens = tuple(s.token_id for s in steps)  # step 1 comes from a decode step through the KV cache
    echo = engine.generate(
        Request(prompt + tokens, SamplingParams(max_tokens=0), LogprobParams(top_n=5, prompt_logprobs=True))
    )
    row, decoded = echo[0].rows[len(prompt) + 1], steps[1].logprobs
    assert (row.token_id, row.logprob, row.top) == (decoded.token_id, decoded.logprob, decoded.top)
