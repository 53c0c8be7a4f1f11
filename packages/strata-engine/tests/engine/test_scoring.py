"""Candidate scoring on the real model: each candidate's bits equal echo-scoring it alone,
the prompt is computed once (the others read it from the prefix cache), and the totals
and renormalised values agree with an independent float64 computation."""

from __future__ import annotations

import math
import struct
from pathlib import Path

import pytest

from strata_engine.api import LogprobParams, LogprobRow, PromptScores, Request, SamplingParams
from strata_engine.engine import BLOCK_SIZE, LLMEngine
from strata_engine.scoring import alone_ids, candidate_requests, continuation_ids

PROMPT = (
    "Ticket 4411. The customer wrote: my parcel never arrived and the tracking page has said "
    "'pending' for nine days. I want to know where it is. The team that should handle this is"
)
WORDS = [" billing", " shipping", " technical support", " the returns desk"]


def bits(value: float) -> bytes:
    return struct.pack("<d", value)


def row_bits(row: LogprobRow) -> tuple[object, ...]:
    """Everything a row reports, with floats as their exact bits."""
    return (
        row.token_id,
        bits(row.logprob),
        tuple((i, bits(v)) for i, v in row.top),
        tuple((i, bits(v)) for i, v in row.listed),
    )


def echo_alone(engine: LLMEngine, ids: list[int], top_n: int) -> PromptScores:
    """The reference: `ids` echo-scored alone, every prompt row computed, no cache used."""
    request = Request(
        tuple(ids), SamplingParams(max_tokens=0), LogprobParams(top_n=top_n, prompt_logprobs=True)
    )
    events = engine.generate(request)
    assert isinstance(events[0], PromptScores)
    return events[0]


@pytest.fixture(scope="module")
def fresh(model_path: Path) -> LLMEngine:
    """An engine of this module's own, so cache hits come only from the requests made here."""
    return LLMEngine(model_path, num_threads=2)


def test_each_candidate_is_bitwise_its_echo_alone(fresh: LLMEngine) -> None:
    tok = fresh.tokenizer
    prompt_ids = tok.encode(PROMPT)
    candidates = [continuation_ids(tok, PROMPT, word) for word in WORDS]
    assert any(len(c) > 1 for c in candidates)  # the point: answers longer than one token
    scores = fresh.score(prompt_ids, candidates, top_n=3)
    for candidate, score in zip(candidates, scores, strict=True):
        alone = echo_alone(fresh, prompt_ids + candidate, top_n=3)
        assert alone.num_cached_tokens == 0
        expected = alone.rows[len(prompt_ids) :]
        assert [row_bits(r) for r in score.rows] == [row_bits(r) for r in expected if r is not None]
        assert [r.token_id for r in score.rows] == candidate


def test_prompt_is_computed_once_and_shared(fresh: LLMEngine) -> None:
    tok = fresh.tokenizer
    prompt = "A different prompt, long enough to fill more than two blocks of sixteen tokens: " * 2
    prompt_ids = tok.encode(prompt)
    candidates = [alone_ids(tok, word) for word in ("yes", "no", "not sure at all")]
    scores = fresh.score(prompt_ids, candidates)
    shared = (len(prompt_ids) - 1) // BLOCK_SIZE * BLOCK_SIZE
    assert shared >= 2 * BLOCK_SIZE
    assert [s.num_cached for s in scores] == [0, shared, shared]


def test_chunked_prefill_and_other_requests_change_no_bits(model_path: Path, fresh: LLMEngine) -> None:
    """A prompt longer than a step (chunked), scored beside an unrelated generation: the same
    bits as in the module's engine, and the later candidates still read the cached prompt."""
    small_steps = LLMEngine(model_path, num_threads=2, step_tokens=24)
    tok = small_steps.tokenizer
    prompt_ids = tok.encode(PROMPT)
    candidates = [continuation_ids(tok, PROMPT, word) for word in WORDS]
    other = Request(tuple(tok.encode("Once upon a time")), SamplingParams(max_tokens=6, temperature=0))
    events = small_steps.generate_batch([other, *candidate_requests(prompt_ids, candidates)])
    chunked = [next(e for e in own if isinstance(e, PromptScores)) for own in events[1:]]
    reference = fresh.score(prompt_ids, candidates)
    for got, want in zip(chunked, reference, strict=True):
        rows = [r for r in got.rows[len(prompt_ids) :] if r is not None]
        assert [bits(r.logprob) for r in rows] == [bits(r.logprob) for r in want.rows]
    shared = (len(prompt_ids) - 1) // BLOCK_SIZE * BLOCK_SIZE
    assert [s.num_cached_tokens for s in chunked[1:]] == [shared] * (len(WORDS) - 1)


def test_totals_and_renormalised_values_are_float64_sums_of_the_echo_rows(fresh: LLMEngine) -> None:
    """A candidate's total is the float64 sum of its rows when echoed alone, and the renormalised
    values are those totals' log-softmax (the rows themselves meet the float64 reference
    forward in test_real_model.py)."""
    tok = fresh.tokenizer
    prompt_ids = tok.encode(PROMPT)
    candidates = [continuation_ids(tok, PROMPT, word) for word in WORDS]
    scores = fresh.score(prompt_ids, candidates)
    totals = []
    for candidate, score in zip(candidates, scores, strict=True):
        alone = echo_alone(fresh, prompt_ids + candidate, top_n=0)
        total = 0.0
        for row in alone.rows[len(prompt_ids) :]:
            assert row is not None
            total += row.logprob
        assert score.logprob == pytest.approx(total, abs=1e-12)
        totals.append(total)
    log_z = math.log(sum(math.exp(t) for t in totals))
    for score, total in zip(scores, totals, strict=True):
        assert score.normalized == pytest.approx(total - log_z, abs=1e-12)
    assert math.fsum(math.exp(s.normalized) for s in scores) == pytest.approx(1.0, abs=1e-14)


def test_text_candidates_continue_the_prompt(fresh: LLMEngine) -> None:
    """Tokens after the prompt's own when those are a prefix; the candidate alone otherwise."""
    tok = fresh.tokenizer
    prompt = "The answer is"
    ids = continuation_ids(tok, prompt, " technical support")
    assert tok.encode(prompt) + ids == tok.encode(prompt + " technical support")
    assert tok.decode(ids) == " technical support"
    merged = "The answer is "  # the trailing space merges with "yes" into one token " yes"
    assert tok.encode(merged + "yes")[: len(tok.encode(merged))] != tok.encode(merged)
    assert continuation_ids(tok, merged, "yes") == tok.encode("yes", add_special=False)
