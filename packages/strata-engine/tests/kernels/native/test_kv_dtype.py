"""The KV cache stored as bf16 or fp16 (`kv_cache_dtype`, kernels/kv_types.py): close to the
float64 forward, the same bits on every CPU target, a request's bits whatever runs beside it,
and half the memory a block. (fp32, the default, is held to its old bits by test_golden.py;
Triton's 2-byte cache to C's bits by test_triton_kv_dtype.py.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from strata_engine import LLMEngine, LogprobParams, PromptScores, Request, SamplingParams, Step
from strata_engine.api import ModelLoadError
from strata_engine.kernels.base import AttentionMeta
from strata_engine.kernels.native import targets_to_test
from strata_engine.kernels.native.backend import NativeOps
from strata_engine.testing.compare import run_alone, run_batch, signature
from strata_engine.testing.reference_forward import ReferenceModel
from strata_engine.testing.tiny_models import TINY_SPECS, VOCAB_SIZE, write_tiny_model

DTYPES = {"bf16": np.uint16, "fp16": np.float16}
# max |logprob - float64's| over the vocabulary and 42 positions of the tiny models (nats);
# measured 0.040 (bf16) and 0.0042 (fp16), fp32's 7e-6 (docs/engine.md's table)
TOLERANCE = {"bf16": 0.1, "fp16": 0.01}


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


def _attention_outputs(ops: NativeOps, dtype: type[np.generic]) -> list[np.ndarray]:
    """Paged attention over a 2-byte cache: heads alone and in tiles, a window, a soft cap."""
    rng = np.random.default_rng(5)
    outs = []
    for h, kvh, d, t in ((6, 2, 64, 40), (8, 2, 128, 24), (4, 4, 24, 9)):
        bs, blocks = 16, 8
        order = rng.permutation(blocks).astype(np.int32)
        k = (rng.standard_normal((t, kvh, d)) * 3).astype(np.float32)
        v = rng.standard_normal((t, kvh, d)).astype(np.float32)
        kc, vc = np.zeros((blocks, bs, kvh, d), dtype), np.zeros((blocks, bs, kvh, d), dtype)
        slots = np.array([order[p // bs] * bs + p % bs for p in range(t)], dtype=np.int64)
        meta = AttentionMeta(np.arange(t, dtype=np.int32), np.zeros(t, np.int32), order[None], slots, bs)
        ops.kv_write(k, v, kc, vc, slots)
        outs += [kc.view(np.uint16).copy(), vc.view(np.uint16).copy()]
        q = rng.standard_normal((t, h, d)).astype(np.float32)
        for kw in ({}, {"window": 5}, {"softcap": 2.5, "scale": 0.2}):
            outs.append(ops.attention(q, kc, vc, meta, **kw))
    return outs


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_target_and_thread_count_gives_the_same_bits(dtype: str) -> None:
    want = _attention_outputs(NativeOps(1, "portable"), DTYPES[dtype])
    for target in targets_to_test():
        for threads in (1, 3):
            got = _attention_outputs(NativeOps(threads, target), DTYPES[dtype])
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


def test_two_bytes_a_value_buy_twice_the_blocks(tiny_path: Path) -> None:
    blocks = {
        dtype: LLMEngine(tiny_path, num_threads=1, kv_cache_mb=4, kv_cache_dtype=dtype).blocks.num_blocks
        for dtype in ("fp32", "bf16", "fp16")
    }
    assert blocks["bf16"] == blocks["fp16"] == 2 * blocks["fp32"]


def test_an_unknown_dtype_is_refused(tiny_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="unknown KV cache dtype 'fp8': choose one of fp32, bf16, fp16"):
        LLMEngine(tiny_path, num_threads=1, kv_cache_dtype="fp8")
