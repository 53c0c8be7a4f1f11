"""The KV cache stored as bf16, fp16 or q8_0 (`kv_cache_dtype`, kernels/kv_types.py): close to
the float64 forward, the same bits on every CPU target, a request's bits whatever runs beside it,
and a half (q8_0: 34/128) of fp32's memory a block. (fp32, the default, is held to its old bits by test_golden.py;
Triton's 2-byte cache to C's bits by test_triton_kv_dtype.py.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType, quants

from strata_engine import LLMEngine, LogprobParams, PromptScores, Request, SamplingParams, Step
from strata_engine.api import ModelLoadError
from strata_engine.kernels.base import AttentionMeta
from strata_engine.kernels.kv_types import kv_head_width
from strata_engine.kernels.native import targets_to_test
from strata_engine.kernels.native.backend import NativeOps
from strata_engine.testing.compare import run_alone, run_batch, signature
from strata_engine.testing.reference_forward import ReferenceModel
from strata_engine.testing.tiny_models import TINY_SPECS, VOCAB_SIZE, write_tiny_model

DTYPES = {"bf16": np.uint16, "fp16": np.float16, "q8_0": np.uint8}
# max |logprob - float64's| over the vocabulary and 42 positions of the tiny models (nats);
# measured 0.040 (bf16), 0.0042 (fp16) and 0.12 (q8_0), fp32's 7e-6 (docs/engine.md's table)
TOLERANCE = {"bf16": 0.1, "fp16": 0.01, "q8_0": 0.25}


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = next(s for s in TINY_SPECS if s.name == "qwen2-untied")
    return write_tiny_model(tmp_path_factory.mktemp("kv") / "model.gguf", spec, seed=7)


def _prompt(seed: int, n: int) -> tuple[int, ...]:
    return tuple(np.random.default_rng(seed).integers(0, VOCAB_SIZE - 3, size=n).tolist())


def _request(prompt: tuple[int, ...], max_tokens: int = 4) -> Request:
    return Request(
        prompt,
        SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True),
        LogprobParams(top_n=5, prompt_logprobs=True),
    )


@pytest.mark.parametrize(
    ("spec", "kernels"),
    [(s, "native") for s in TINY_SPECS] + [(TINY_SPECS[0], "torch")],  # the fallback's cache too
    ids=lambda x: getattr(x, "name", x),
)
@pytest.mark.parametrize("dtype", DTYPES)
def test_within_bound_of_float64(spec, kernels: str, dtype: str, tmp_path: Path) -> None:
    path = write_tiny_model(tmp_path / "model.gguf", spec, seed=7)
    engine = LLMEngine(path, num_threads=2, kv_cache_mb=16, kernels=kernels, kv_cache_dtype=dtype)
    prompt = _prompt(11, 41)
    events = engine.generate(
        Request(
            prompt,
            SamplingParams(max_tokens=1, temperature=0.0),
            LogprobParams(top_n=1, prompt_logprobs=True, named_ids=tuple(range(VOCAB_SIZE))),
        )
    )
    scores = next(e for e in events if isinstance(e, PromptScores))
    (step,) = [e for e in events if isinstance(e, Step)]
    rows = [r for r in scores.rows if r is not None] + [step.logprobs]
    got = np.array([[row.named[i] for i in range(VOCAB_SIZE)] for row in rows])
    err = np.abs(got - ReferenceModel(str(path)).logprobs(list(prompt)).numpy()).max()
    assert err <= TOLERANCE[dtype], f"{spec.name} {dtype}: off by {err:.3g}"
    assert err > 1e-4  # the values really were rounded (fp32's error is below 1e-5)


def _attention_outputs(ops: NativeOps, name: str) -> list[np.ndarray]:
    """Paged attention over a 2-byte or q8_0 cache: heads alone and in tiles, a window, a soft cap."""
    rng = np.random.default_rng(5)
    outs = []
    odd = 96 if name == "q8_0" else 24  # a head size past the vector paths (q8_0: a multiple of 32)
    for h, kvh, d, t in ((6, 2, 64, 40), (8, 2, 128, 24), (4, 4, odd, 9)):
        bs, blocks = 16, 8
        order = rng.permutation(blocks).astype(np.int32)
        k = (rng.standard_normal((t, kvh, d)) * 3).astype(np.float32)
        v = rng.standard_normal((t, kvh, d)).astype(np.float32)
        shape = (blocks, bs, kvh, kv_head_width(name, d))
        kc, vc = np.zeros(shape, DTYPES[name]), np.zeros(shape, DTYPES[name])
        slots = np.array([order[p // bs] * bs + p % bs for p in range(t)], dtype=np.int64)
        meta = AttentionMeta(np.arange(t, dtype=np.int32), np.zeros(t, np.int32), order[None], slots, bs)
        ops.kv_write(k, v, kc, vc, slots)
        outs += [kc.view(np.uint8).copy(), vc.view(np.uint8).copy()]
        q = rng.standard_normal((t, h, d)).astype(np.float32)
        for kw in ({}, {"window": 5}, {"softcap": 2.5, "scale": 0.2}):
            outs.append(ops.attention(q, kc, vc, meta, **kw))
    return outs


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_target_and_thread_count_gives_the_same_bits(dtype: str) -> None:
    want = _attention_outputs(NativeOps(1, "portable"), dtype)
    for target in targets_to_test():
        for threads in (1, 3):
            got = _attention_outputs(NativeOps(threads, target), dtype)
            for i, (a, b) in enumerate(zip(got, want, strict=True)):
                assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), f"{target}, {threads}: output {i}"


@pytest.mark.parametrize("dtype", DTYPES)
def test_batch_chunks_and_decode_give_a_request_its_bits_alone(tiny_path: Path, dtype: str) -> None:
    engine = LLMEngine(tiny_path, num_threads=2, kernels="native", kv_cache_dtype=dtype, parallel=8)
    requests = [_request(_prompt(seed, 9 + 9 * seed)) for seed in range(4)]
    alone = [run_alone(engine, r) for r in requests]
    assert run_batch(engine, requests) == alone
    assert run_batch(engine, requests[::-1])[::-1] == alone
    chunked = LLMEngine(tiny_path, num_threads=2, kernels="native", kv_cache_dtype=dtype, step_tokens=7)
    assert run_alone(chunked, requests[3]) == alone[3]
    # a decode step's row is the row of the same position scored in a prefill (echo)
    steps = [e for e in engine.generate(requests[2]) if isinstance(e, Step)]
    prompt = requests[2].prompt_ids + tuple(s.token_id for s in steps)
    echo = engine.generate(
        Request(prompt, SamplingParams(max_tokens=0), LogprobParams(top_n=5, prompt_logprobs=True))
    )
    assert signature([echo[0]])[-1] == signature([steps[-1]])[-1]


def test_smaller_values_buy_more_blocks(tiny_path: Path) -> None:
    blocks = {
        dtype: LLMEngine(tiny_path, num_threads=1, kv_cache_mb=4, kv_cache_dtype=dtype).blocks.num_blocks
        for dtype in ("fp32", "bf16", "fp16", "q8_0")
    }
    assert blocks["bf16"] == blocks["fp16"] == 2 * blocks["fp32"]
    assert blocks["q8_0"] in (
        128 * blocks["fp32"] // 34,
        128 * blocks["fp32"] // 34 - 1,
    )  # 34 bytes per 32 values


def test_an_unknown_dtype_is_refused(tiny_path: Path) -> None:
    with pytest.raises(
        ModelLoadError, match="unknown KV cache dtype 'fp8': choose one of fp32, bf16, fp16, q8_0"
    ):
        LLMEngine(tiny_path, num_threads=1, kv_cache_dtype="fp8")


def _q8_rows(rng: np.random.Generator, t: int, kvh: int, d: int) -> np.ndarray:
    """K/V rows with blocks at the edges: zeros, one nonzero, ties (x * (1 / d) at .5), fp16's
    largest and subnormal scales, a block of -0."""
    x = (rng.standard_normal((t, kvh, d)) * rng.choice([1e-3, 1.0, 300.0], size=(t, kvh, 1))).astype(
        np.float32
    )
    flat = x.reshape(-1, 32)
    flat[0] = 0.0
    flat[1] = -0.0
    flat[2] = 0.0
    flat[2, 5] = -7.5
    flat[3] = np.arange(32, dtype=np.float32) - 15.5  # halves everywhere
    flat[4] *= 8e6 / np.abs(flat[4]).max()  # scale near fp16's largest (65504 * 127 = 8.3e6)
    flat[5] *= 1e-5 / np.abs(flat[5]).max()  # scale a subnormal fp16
    return x


def test_q8_0_writes_gguf_py_blocks_and_reads_their_values() -> None:
    rng = np.random.default_rng(3)
    t, kvh, d = 5, 2, 64
    k, v = _q8_rows(rng, t, kvh, d), _q8_rows(rng, t, kvh, d)
    want_k = quants.quantize(k.reshape(t, -1), GGMLQuantizationType.Q8_0).reshape(t, kvh, -1)
    slots = np.arange(t, dtype=np.int64)[::-1].copy()
    for target in targets_to_test():
        kc = np.zeros((1, 16, kvh, kv_head_width("q8_0", d)), np.uint8)
        vc = np.zeros_like(kc)
        NativeOps(2, target).kv_write(k, v, kc, vc, slots)
        assert np.array_equal(kc[0, slots], want_k), target
    # the read: attention on the q8_0 cache equals attention on an fp32 cache of gguf-py's values
    values = quants.dequantize(want_k.reshape(t, -1), GGMLQuantizationType.Q8_0).reshape(t, kvh, d)
    vq = quants.quantize(v.reshape(t, -1), GGMLQuantizationType.Q8_0)
    v_values = quants.dequantize(vq, GGMLQuantizationType.Q8_0).reshape(t, kvh, d)
    q = rng.standard_normal((t, 4, d)).astype(np.float32)
    meta = AttentionMeta(
        np.arange(t, dtype=np.int32), np.zeros(t, np.int32), np.zeros((1, 1), np.int32), slots, 16
    )
    ops = NativeOps(2)
    kc, vc = np.zeros((1, 16, kvh, kv_head_width("q8_0", d)), np.uint8), np.zeros((1, 16, kvh, 68), np.uint8)
    ops.kv_write(k, v, kc, vc, slots)
    kf, vf = np.zeros((1, 16, kvh, d), np.float32), np.zeros((1, 16, kvh, d), np.float32)
    ops.kv_write(values.astype(np.float32), v_values.astype(np.float32), kf, vf, slots)
    assert np.array_equal(ops.attention(q, kc, vc, meta), ops.attention(q, kf, vf, meta))


def test_q8_0_in_torch_is_the_same_rule() -> None:
    import torch

    from strata_engine.kernels.torch_backend import q8_0_blocks

    x = _q8_rows(np.random.default_rng(4), 6, 2, 64)
    want = quants.quantize(x.reshape(6, -1), GGMLQuantizationType.Q8_0).reshape(6, 2, -1)
    assert np.array_equal(q8_0_blocks(torch.from_numpy(x)).numpy(), want)


def test_a_q8_0_block_with_a_nan_reads_as_nan_and_leaves_its_neighbours() -> None:
    x = np.ones((1, 1, 64), np.float32)
    x[0, 0, 3] = np.nan
    kc, vc = np.zeros((1, 16, 1, 68), np.uint8), np.zeros((1, 16, 1, 68), np.uint8)
    ops = NativeOps(1)
    ops.kv_write(x, x, kc, vc, np.zeros(1, np.int64))
    meta = AttentionMeta(
        np.zeros(1, np.int32), np.zeros(1, np.int32), np.zeros((1, 1), np.int32), np.zeros(1, np.int64), 16
    )
    out = ops.attention(np.ones((1, 1, 64), np.float32), kc, vc, meta)
    assert np.isnan(out[..., :32]).all()  # the value's NaN block
    assert np.array_equal(out[..., 32:], np.full((1, 1, 32), np.float16(1 / 127) * np.float32(127)))
    assert kc[0, 0, 0, :2].view(np.float16)[0] != kc[0, 0, 0, :2].view(np.float16)[0]  # a NaN scale
    assert np.array_equal(kc[0, 0, 0, 36:].view(np.int8), np.full(32, 127, np.int8))  # the next block kept


def test_q8_0_needs_a_head_size_in_blocks_of_32(tmp_path: Path) -> None:
    spec = next(s for s in TINY_SPECS if s.head_dim == 64)
    path = write_tiny_model(tmp_path / "model.gguf", spec, seed=7)
    LLMEngine(path, num_threads=1, kv_cache_dtype="q8_0")  # 64: loads
    with pytest.raises(ValueError, match="multiple of 32, not 24"):
        kv_head_width("q8_0", 24)


def test_q8_0_on_the_gpu_backend_is_refused_before_loading(tiny_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="q8_0 KV cache runs on the CPU kernels only"):
        LLMEngine(tiny_path, num_threads=1, device="cuda", kv_cache_dtype="q8_0")
