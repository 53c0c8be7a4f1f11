"""Engine and llama.cpp log-probabilities on one file, and the bitwise signature of a request's events: what the family, RoPE and KV tests compare."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from strata_engine import LLMEngine, LogprobParams, PromptScores, Request, SamplingParams, Step
from strata_engine.testing.tiny_arch_models import CTX


def engine_logprobs(path: Path, prompt: list[int], kernels: str = "native") -> np.ndarray:
    """Full-vocabulary logprobs at every prompt position (row p predicts token p+1), [T-1, V]."""
    engine = LLMEngine(path, num_threads=2, kv_cache_mb=16, kernels=kernels)
    n_vocab = engine.vocab_size
    request = Request(
        tuple(prompt),
        SamplingParams(max_tokens=0),
        LogprobParams(prompt_logprobs=True, named_ids=tuple(range(n_vocab))),
    )
    scores = next(e for e in engine.generate(request) if isinstance(e, PromptScores))
    rows = [r for r in scores.rows if r is not None]
    return np.array([[row.named[i] for i in range(n_vocab)] for row in rows])


def llama_cpp_logprobs(
    llama_cpp, path: Path, prompt: list[int], n_ctx: int = CTX, n_batch: int = 512
) -> np.ndarray:
    """llama.cpp's logprobs at every prompt position, from its fp32 logits (fp32 KV cache), the
    prompt evaluated `n_batch` tokens at a time."""
    f32 = 0  # GGML_TYPE_F32
    # YaRN betas -1: the file's (llama.cpp's own default context parameters); the Python binding's
    # defaults (32, 1) would override what a mistral3 file sets
    llm = llama_cpp.Llama(
        str(path), n_ctx=n_ctx, logits_all=True, n_threads=2, type_k=f32, type_v=f32, verbose=False,
        yarn_beta_fast=-1.0, yarn_beta_slow=-1.0, n_batch=n_batch,
    )  # fmt: skip
    llm.eval(prompt)
    logits = np.array(llm.scores[: len(prompt) - 1], dtype=np.float64)
    shifted = logits - logits.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def signature(events) -> list:
    """Every token id and every float a request got back, in order (compared with ==, i.e. bitwise)."""
    out: list[tuple] = []
    for ev in events:
        rows = ev.rows if isinstance(ev, PromptScores) else (ev.logprobs,)
        if isinstance(ev, Step):
            out.append(("step", ev.token_id, ev.text))
        for row in rows:
            if row is not None:
                out.append((row.token_id, row.logprob, row.top))
    return out


def run_batch(engine: LLMEngine, requests: list[Request]) -> list[list]:
    """Submit all requests at once and step until every one has finished."""
    return [signature(e) for e in engine.generate_batch(requests)]


def run_alone(engine: LLMEngine, request: Request) -> list:
    return run_batch(engine, [request])[0]


def golden_targets() -> list[str]:
    """The kernel targets a golden hash is checked on: every vector target, and the portable
    build too where it has hardware FMA (AArch64): on x86 its fmaf is a software routine, too
    slow for a model (the kernel tests cover it)."""
    import platform

    from strata_engine.kernels.native import targets_to_test

    targets = targets_to_test()
    return targets if platform.machine() in ("aarch64", "arm64") else [t for t in targets if t != "portable"]


def full_vocab_rows(engine: LLMEngine, prompts: list[list[int]], vocab_size: int) -> bytes:
    """Every prompt position's log-probabilities over the whole vocabulary (fp32 bytes, prompts
    in order), the prompts submitted together: what a golden hash is taken of."""
    requests = [
        Request(
            tuple(p),
            SamplingParams(max_tokens=0),
            LogprobParams(prompt_logprobs=True, named_ids=tuple(range(vocab_size))),
        )
        for p in prompts
    ]
    out = []
    for events in engine.generate_batch(requests):
        scores = next(e for e in events if isinstance(e, PromptScores))
        rows = [r for r in scores.rows if r is not None]
        out.append(np.array([[row.named[i] for i in range(vocab_size)] for row in rows], dtype=np.float32))
    return b"".join(a.tobytes() for a in out)


def assert_a_prefix_hit_is_cold(
    make_engine: Callable[[], LLMEngine], request: Request, first: Request
) -> None:
    """`request` on an engine whose prefix cache holds `first` (a prompt it starts with) reads
    cached blocks and gets the bits it gets on a fresh engine."""
    cold = run_alone(make_engine(), request)
    warm = make_engine()
    run_alone(warm, first)
    events = warm.generate(request)
    steps = [e for e in events if isinstance(e, Step)]
    assert steps[0].num_cached_tokens > 0, "the second request should reuse the first one's blocks"
    assert signature(events) == cold
