"""Sampling and logprob rows on the real model: seeds repeat, restrictions hold, stops stop,
and one token's value is the same number wherever a row reports it."""

from __future__ import annotations

import math

import pytest

from strata_engine.api import LogprobParams, Request, SamplingParams, Step
from strata_engine.engine import LLMEngine

STORY = "Once upon a time, in a small village by the sea,"
FRANCE = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"


def run(engine: LLMEngine, text: str, logprobs: LogprobParams | None = None, **sampling) -> list[Step]:
    ids = engine.tokenizer.encode(text, add_special=False)
    request = Request(tuple(ids), SamplingParams(**sampling), logprobs or LogprobParams(top_n=5))
    return [e for e in engine.generate(request) if isinstance(e, Step)]


def tokens(steps: list[Step]) -> list[int]:
    return [s.token_id for s in steps]


def test_same_seed_repeats_tokens_and_logprobs(engine: LLMEngine) -> None:
    first = run(engine, STORY, max_tokens=30, temperature=1.0, seed=1234, ignore_eos=True)
    second = run(engine, STORY, max_tokens=30, temperature=1.0, seed=1234, ignore_eos=True)
    assert len(first) == 30
    assert tokens(first) == tokens(second)
    assert [s.logprobs for s in first] == [s.logprobs for s in second]
    assert [s.text for s in first] == [s.text for s in second]


def test_different_seeds_differ(engine: LLMEngine) -> None:
    a = run(engine, STORY, max_tokens=30, temperature=1.0, seed=1, ignore_eos=True)
    b = run(engine, STORY, max_tokens=30, temperature=1.0, seed=2, ignore_eos=True)
    assert tokens(a) != tokens(b)


def test_temperature_one_is_not_greedy(engine: LLMEngine) -> None:
    greedy = run(engine, STORY, max_tokens=30, temperature=0.0, ignore_eos=True)
    sampled = run(engine, STORY, max_tokens=30, temperature=1.0, seed=5, ignore_eos=True)
    assert tokens(sampled) != tokens(greedy)


def test_allowed_token_ids_restrict_every_token(engine: LLMEngine) -> None:
    allowed = tuple(engine.tokenizer.encode(" yes no maybe Paris London 42"))
    steps = run(
        engine,
        STORY,
        max_tokens=12,
        temperature=1.0,
        seed=3,
        ignore_eos=True,
        allowed_token_ids=allowed,
    )
    assert len(steps) == 12
    assert set(tokens(steps)) <= set(allowed)
    assert any(s.logprobs.top[0][0] not in allowed for s in steps)  # the restriction mattered


def test_greedy_with_allowed_ids_takes_the_best_allowed(engine: LLMEngine) -> None:
    allowed = tuple(engine.tokenizer.encode(" London Berlin Madrid"))
    lp = LogprobParams(top_n=0, named_ids=allowed)
    (step,) = run(engine, FRANCE, lp, max_tokens=1, temperature=0.0, allowed_token_ids=allowed)
    assert step.token_id == max(allowed, key=lambda i: (step.logprobs.named[i], -i))
    assert step.logprobs.logprob == step.logprobs.named[step.token_id]  # still the raw value


@pytest.mark.parametrize("options", [{"top_k": 1}, {"top_p": 1e-6}], ids=["top_k=1", "tiny top_p"])
def test_narrow_sampling_equals_greedy(engine: LLMEngine, options: dict) -> None:
    greedy = run(engine, STORY, max_tokens=20, temperature=0.0, ignore_eos=True)
    narrow = run(engine, STORY, max_tokens=20, temperature=1.0, seed=9, ignore_eos=True, **options)
    assert tokens(narrow) == tokens(greedy)


def test_stop_token_ids_end_with_that_token(engine: LLMEngine) -> None:
    greedy = run(engine, FRANCE, max_tokens=32, temperature=0.0)
    stop_at = next(i for i, s in enumerate(greedy) if i >= 2 and s.token_id not in tokens(greedy)[:i])
    stop_id = greedy[stop_at].token_id
    steps = run(engine, FRANCE, max_tokens=32, temperature=0.0, stop_token_ids=(stop_id,))
    assert tokens(steps) == tokens(greedy)[: stop_at + 1]
    assert steps[-1].finish_reason == "stop"
    assert all(s.finish_reason is None for s in steps[:-1])
    before = engine.tokenizer.decode(tokens(greedy)[:stop_at])
    assert "".join(s.text for s in steps) == before  # the stop token's own text is not returned


def test_max_tokens_ends_with_length(engine: LLMEngine) -> None:
    steps = run(engine, STORY, max_tokens=5, temperature=0.0, ignore_eos=True)
    assert len(steps) == 5
    assert [s.finish_reason for s in steps] == [None, None, None, None, "length"]


def test_end_of_generation_stops_unless_ignored(engine: LLMEngine) -> None:
    stopped = run(engine, FRANCE, max_tokens=32, temperature=0.0)
    assert stopped[-1].token_id in engine.tokenizer.eog_ids
    ignored = run(engine, FRANCE, max_tokens=len(stopped) + 3, temperature=0.0, ignore_eos=True)
    assert len(ignored) == len(stopped) + 3
    assert ignored[-1].finish_reason == "length"


def test_chosen_value_equals_its_top_entry(engine: LLMEngine) -> None:
    steps = run(engine, STORY, LogprobParams(top_n=10), max_tokens=20, temperature=1.0, seed=11)
    seen = 0
    for step in steps:
        top = dict(step.logprobs.top)
        assert step.logprobs.token_id == step.token_id
        assert len(top) == 10
        assert list(top.values()) == sorted(top.values(), reverse=True)
        if step.token_id in top:
            assert step.logprobs.logprob == top[step.token_id]
            seen += 1
    assert seen > 0


def test_named_values_are_raw_and_equal_top_values(engine: LLMEngine) -> None:
    top_read = run(engine, STORY, LogprobParams(top_n=20), max_tokens=8, temperature=0.0)
    named_ids = tuple(sorted({i for s in top_read for i, _ in s.logprobs.top}))
    named_read = run(
        engine, STORY, LogprobParams(top_n=0, named_ids=named_ids), max_tokens=8, temperature=0.0
    )
    assert tokens(named_read) == tokens(top_read)
    for a, b in zip(top_read, named_read, strict=True):
        for token, value in a.logprobs.top:
            assert b.logprobs.named[token] == value
        # raw full-vocabulary values: over this subset the probabilities sum below 1
        assert sum(math.exp(v) for v in b.logprobs.named.values()) < 1.0


def test_renormalized_values_sum_to_one_over_the_set(engine: LLMEngine) -> None:
    labels = tuple(engine.tokenizer.encode(" Paris London Berlin"))
    lp = LogprobParams(top_n=0, named_ids=labels, renormalize_over=labels)
    (step,) = run(engine, FRANCE, lp, max_tokens=1, temperature=0.0)
    renorm, raw = step.logprobs.renormalized, step.logprobs.named
    assert renorm is not None and set(renorm) == set(labels)
    assert math.fsum(math.exp(v) for v in renorm.values()) == pytest.approx(1.0, abs=1e-12)
    assert sum(math.exp(v) for v in raw.values()) < 0.999  # the raw values were not renormalised
    for i in labels:  # renormalising shifts every value by one constant
        assert renorm[i] - raw[i] == pytest.approx(renorm[labels[0]] - raw[labels[0]], abs=1e-6)
