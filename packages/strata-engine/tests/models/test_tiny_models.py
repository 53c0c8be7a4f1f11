"""Every architecture end to end: the engine's logprobs at every position of a tiny random
model equal the float64 reference forward's. A wrong RoPE pairing, a missing bias or q/k norm,
or a tied/untied head mix-up moves these numbers far beyond fp32 rounding."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from strata_engine.api import LogprobParams, PromptScores, Request, SamplingParams, Step
from strata_engine.engine import LLMEngine
from strata_engine.testing.reference_forward import ReferenceModel
from strata_engine.testing.tiny_models import TINY_SPECS, VOCAB_SIZE, write_tiny_model

PROMPT_LEN = 41  # crosses two 16-token KV blocks
GENERATED = 4
TOLERANCE = 1e-4  # fp32 engine vs fp64 reference


@pytest.fixture(scope="module", params=TINY_SPECS, ids=lambda s: s.name)
def tiny_model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    path = write_tiny_model(tmp_path_factory.mktemp("tiny") / "model.gguf", request.param, seed=7)
    return request.param, path, ReferenceModel(str(path))


def engine_rows(path: Path, invariant: bool, prompt: list[int]) -> tuple[np.ndarray, list[Step]]:
    """Full-vocabulary logprobs at every position the engine computes, and the greedy steps."""
    engine = LLMEngine(path, num_threads=2, kv_cache_mb=16, kernels="native" if invariant else "torch")
    request = Request(
        tuple(prompt),
        SamplingParams(max_tokens=GENERATED, temperature=0.0, ignore_eos=True),
        LogprobParams(top_n=5, prompt_logprobs=True, named_ids=tuple(range(VOCAB_SIZE))),
    )
    events = engine.generate(request)
    scores = next(e for e in events if isinstance(e, PromptScores))
    steps = [e for e in events if isinstance(e, Step)]
    rows = [r for r in scores.rows if r is not None] + [s.logprobs for s in steps]
    assert len(rows) == PROMPT_LEN - 1 + GENERATED
    for row in rows:
        assert row.logprob == row.named[row.token_id]  # one value wherever it is reported
    matrix = np.array([[row.named[i] for i in range(VOCAB_SIZE)] for row in rows])
    return matrix, steps


@pytest.mark.parametrize("invariant", [True, False], ids=["native", "torch"])
def test_logprobs_match_float64_reference(tiny_model, invariant: bool) -> None:
    spec, path, reference = tiny_model
    rng = np.random.default_rng(11)
    prompt = rng.integers(0, VOCAB_SIZE - 3, size=PROMPT_LEN).tolist()  # no special tokens
    got, steps = engine_rows(path, invariant, prompt)
    generated = [s.token_id for s in steps]
    want = reference.logprobs(prompt + generated[:-1]).numpy()
    assert got.shape == want.shape
    err = np.abs(got - want).max(axis=1)
    assert err.max() <= TOLERANCE, f"{spec.name}: worst position {err.argmax()} off by {err.max():.3g}"
    np.testing.assert_array_equal(got.argmax(axis=1), want.argmax(axis=1))
    # greedy decoding through the KV cache picks the reference's best token at every step
    assert generated == want[PROMPT_LEN - 1 :].argmax(axis=1).tolist()
    assert [s.finish_reason for s in steps] == [None] * (GENERATED - 1) + ["length"]


def test_reference_sees_each_architectural_switch(tiny_model) -> None:
    """The comparison above can fail: dropping what makes the architecture differ moves it."""
    spec, _, reference = tiny_model
    prompt = list(range(20, 40))
    want = reference.logprobs(prompt)
    w = reference.w
    if spec.arch == "qwen2":
        saved = {k: w.pop(k) for k in [k for k in w if k.endswith(".bias")]}
    elif spec.arch == "qwen3":
        saved = {k: w.pop(k) for k in [k for k in w if k.endswith(("q_norm.weight", "k_norm.weight"))]}
    else:
        reference.arch, saved = "qwen2", {}  # neox RoPE pairs instead of llama's interleaved
    try:
        changed = reference.logprobs(prompt)
    finally:
        w.update(saved)
        reference.arch = spec.arch
    assert float((changed - want).abs().max()) > 100 * TOLERANCE
    assert torch.equal(reference.logprobs(prompt), want)
