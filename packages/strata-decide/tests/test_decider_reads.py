"""Decisions through the fake upstream: the request sent, mass, rotations, context, errors."""

from __future__ import annotations

import asyncio
import math

import pytest

from strata_client import AsyncStrataClient
from strata_decide import questions
from strata_decide.decider import DecideOptions, Decider
from strata_decide.errors import ContextOverflowError, UpstreamError
from strata_decide.prompts import state_prefix

STATE = "The customer writes: I was charged twice for one order."
TONE = questions.choice("What is the tone?", {"calm": None, "angry": None, "happy": "glad"})


def decide(question, state=STATE, options=None, model="fake-model"):
    async def run():
        async with AsyncStrataClient() as client:
            return await Decider(client, model, options).decide(state, question)

    return asyncio.run(run())


def softmax(values):
    top = max(values)
    exps = [math.exp(v - top) for v in values]
    return [e / sum(exps) for e in exps]


def test_one_read_with_the_documented_request(fake):
    fake.preference = {"calm": 1.0, "angry": 2.0, "happy: glad": 0.0}
    decision = decide(TONE)
    (body,) = fake.completion_calls
    label_ids = [fake.encode(t)[0] for t in "ABC"]
    assert body["max_tokens"] == 1 and body["temperature"] == 0
    assert body["allowed_token_ids"] == label_ids and body["logprobs"] == 3
    assert body["return_tokens_as_token_ids"] is True
    assert all(isinstance(i, int) for i in body["prompt"])
    assert decision.probabilities == pytest.approx(
        dict(zip(["calm", "angry", "happy"], softmax([1, 2, 0]), strict=True))
    )
    assert decision.answer == "angry"
    assert decision.distribution.mass == pytest.approx(0.8, abs=1e-12)
    assert decision.reads == 1 and decision.prompt_tokens == len(body["prompt"])


def test_prompt_puts_the_state_first_and_never_shows_question_ids(fake):
    decide(TONE)
    decide(questions.noul("Is it about billing?"))
    first, second = (fake.decode(call["prompt"]) for call in fake.completion_calls)
    prefix = asyncio.run(_prefix())
    prefix_text = fake.decode(prefix)
    assert first.startswith(prefix_text) and second.startswith(prefix_text)
    assert STATE in prefix_text and "tone" not in prefix_text
    assert "A) calm" in first and "C) happy: glad" in first


async def _prefix():
    async with AsyncStrataClient() as client:
        return await state_prefix(client, STATE)


def test_json_state_is_read_as_its_json_text(fake):
    decide(TONE, state={"message": "hi", "n": [1, 2]})
    assert '{"message": "hi", "n": [1, 2]}' in fake.decode(fake.completion_calls[0]["prompt"])


def test_position_bias_without_rotations_and_cancelled_with_them(fake):
    fake.preference = {"calm": 0.0, "angry": 1.0, "happy: glad": 0.5}
    fake.position_bias = [2.0, 0.0, -1.0]  # the first listed option is favoured
    plain = decide(TONE)
    assert plain.probabilities == pytest.approx(
        dict(zip(["calm", "angry", "happy"], softmax([2.0, 1.0, -0.5]), strict=True))
    )
    fake.completion_calls.clear()
    rotated = decide(TONE, options=DecideOptions(rotations=True))
    assert len(fake.completion_calls) == 3  # one read per rotation
    # every option sat at every position once: the geometric mean leaves the content only
    expected = dict(zip(["calm", "angry", "happy"], softmax([0.0, 1.0, 0.5]), strict=True))
    assert rotated.probabilities == pytest.approx(expected, abs=1e-12)
    assert rotated.answer == "angry" and plain.answer == "calm"
    assert rotated.reads == 3


def test_temperature_is_applied_to_the_final_distribution(fake):
    fake.preference = {"calm": 0.0, "angry": 1.0, "happy: glad": 0.5}
    hot = decide(TONE, options=DecideOptions(temperature=2.0))
    assert list(hot.probabilities.values()) == pytest.approx(softmax([0.0, 0.5, 0.25]))


def test_prompt_over_the_context_is_refused_before_reading(fake):
    fake.max_model_len = 50
    with pytest.raises(ContextOverflowError) as caught:
        decide(TONE)
    assert caught.value.max_model_len == 50 and caught.value.prompt_tokens > 50
    assert fake.completion_calls == []


def test_upstream_context_error_is_a_context_overflow(fake):
    fake.context_error = True
    with pytest.raises(ContextOverflowError):
        decide(TONE)


def test_upstream_failure_is_an_upstream_error(fake):
    fake.fail_completions_with = 500
    with pytest.raises(UpstreamError, match="500"):
        decide(TONE)


def test_unreachable_upstream_is_an_upstream_error():
    async def run():
        async with AsyncStrataClient(base_url="http://127.0.0.1:9", max_retries=0, timeout=2) as client:
            return await Decider(client, "m").decide(STATE, TONE)

    with pytest.raises(UpstreamError, match="unreachable"):
        asyncio.run(run())
