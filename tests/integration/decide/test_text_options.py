"""Choices answered by their options' names, each name scored whole, on the real server.

The reference is computed here from the server's plainest route: the rendered prompt plus
the option's tokens echoed on `/v1/completions`, summed, then softmaxed in float64.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator

import httpx
import pytest

from strata_client import AsyncStrataClient
from strata_decide import questions
from strata_decide.decider import DecideOptions, Decider
from strata_decide.gateway import GatewayConfig
from strata_decide.gateway.serve import background
from strata_decide.prompts import messages

STATE = (
    "Hello, my parcel never arrived. The tracking page has said 'pending' for nine days and "
    "nobody answers the phone. Where is it?"
)
CRITERIA = {
    "billing": "Payments, charges, refunds",
    "shipping": "Deliveries and parcels",
    "technical support": "The website or the app does not work",
}


def decide(server_url: str, question: questions.Question, options: DecideOptions):
    async def go():
        async with AsyncStrataClient(base_url=server_url, timeout=300) as client:
            return await Decider(client, options=options).decide(STATE, question)

    return asyncio.run(go())


def reference(server_url: str, question: questions.Question) -> list[float]:
    """P(name + end of turn | prompt) for each option, renormalised, via echoes of each alone."""
    chat = messages(STATE, question, list(question.options), None)
    prompt = httpx.post(f"{server_url}/tokenize", json={"messages": chat}).json()["tokens"]
    eos = httpx.get(f"{server_url}/tokenizer_info").json()["eos_token"]
    totals = []
    for option in question.options:
        tail = httpx.post(
            f"{server_url}/tokenize", json={"prompt": option.name + eos, "add_special_tokens": False}
        ).json()["tokens"]
        echo = httpx.post(
            f"{server_url}/v1/completions",
            json={"prompt": prompt + tail, "max_tokens": 0, "echo": True, "logprobs": 0},
            timeout=300,
        ).json()
        totals.append(math.fsum(echo["choices"][0]["logprobs"]["token_logprobs"][len(prompt) :]))
    log_z = math.log(math.fsum(math.exp(t) for t in totals))
    return [math.exp(t - log_z) for t in totals]


def test_text_answers_are_the_names_scored_whole(server_url: str) -> None:
    question = questions.choice("Which team should handle the message?", CRITERIA)
    decision = decide(server_url, question, DecideOptions(answers="text"))
    expected = reference(server_url, question)
    assert decision.distribution.probabilities == pytest.approx(expected, abs=1e-12)
    assert decision.answer == question.names[expected.index(max(expected))]
    assert 0 < decision.distribution.mass <= 1  # the names' share of the whole distribution
    assert decision.completion_tokens == 0


def test_the_question_overrides_the_default_and_labels_stay_one_read(server_url: str) -> None:
    text = questions.choice("Which team should handle the message?", CRITERIA, answers="text")
    labels = questions.choice("Which team should handle the message?", CRITERIA, answers="labels")
    by_text = decide(server_url, text, DecideOptions(answers="labels"))
    by_labels = decide(server_url, labels, DecideOptions(answers="text"))
    assert by_text.distribution.probabilities == pytest.approx(reference(server_url, text), abs=1e-12)
    assert by_labels.completion_tokens == 1 and by_labels.reads == 1  # the one-token read


@pytest.fixture(scope="module")
def gateway(server_url: str) -> Iterator[str]:
    with background(GatewayConfig(upstream=server_url, upstream_timeout=300)) as url:
        yield url


def test_gateway_choice_accepts_either_form(gateway: str, server_url: str) -> None:
    question = {
        "type": "choice",
        "instructions": "Which team should handle the message?",
        "criteria": CRITERIA,
    }
    body = {
        "model": "jev-latest",
        "state": STATE,
        "questions": {"as_text": {**question, "x_answers": "text"}, "as_labels": question},
    }
    reply = httpx.post(f"{gateway}/v1/systemone", json=body, timeout=600)
    assert reply.status_code == 200, reply.text
    answers = reply.json()["answers"]
    for answer in answers.values():
        assert list(answer["probabilities"]) == list(CRITERIA)
        assert math.fsum(answer["probabilities"].values()) == pytest.approx(1.0, abs=1e-12)
    expected = reference(server_url, questions.choice(question["instructions"], CRITERIA))
    assert list(answers["as_text"]["probabilities"].values()) == pytest.approx(expected, abs=1e-12)
    bad = {**body, "questions": {"q": {**question, "x_answers": "words"}}}
    refused = httpx.post(f"{gateway}/v1/systemone", json=bad, timeout=600)
    assert refused.status_code == 422
    assert refused.json()["detail"][0]["loc"][:3] == ["body", "questions", "q"]
