"""The decide library on the real server: labels, shared prefix, reads, rotations."""

from __future__ import annotations

import asyncio
import math

import pytest

from strata_client import AsyncStrataClient
from strata_decide import questions
from strata_decide.decider import DecideOptions, Decider
from strata_decide.labels import LabelBook
from strata_decide.prompts import messages, render, state_prefix
from strata_decide.samples import QUESTIONS, STATES


def run(server_url: str, work):
    async def go():
        async with AsyncStrataClient(base_url=server_url, timeout=300) as client:
            return await work(client)

    return asyncio.run(go())


def test_255_labels_are_distinct_single_tokens_of_the_served_tokenizer(server_url: str):
    async def work(client):
        labels = await LabelBook(client).labels_for("choice", 255)
        checks = [await client.tokenize(label.form) for label in labels[::17]]
        return labels, checks

    labels, checks = run(server_url, work)
    assert len({label.token_id for label in labels}) == 255
    assert [label.text for label in labels[:3]] == ["A", "B", "C"]
    for label, check in zip(labels[::17], checks, strict=True):
        assert check.tokens == [label.token_id]


def test_every_question_about_a_state_shares_the_state_prefix(server_url: str):
    async def work(client):
        book = LabelBook(client)
        prompts = []
        for wire in QUESTIONS.values():
            question = questions.from_wire(wire)
            labels = await book.labels_for(question.kind, len(question.options))
            prompts.append(
                (await render(client, messages(STATES[0], question, question.options, labels))).token_ids
            )
        return await state_prefix(client, STATES[0]), prompts

    prefix, prompts = run(server_url, work)
    assert len(prefix) > 150  # ~200-token states: the prefix is most of each prompt
    assert all(prompt[: len(prefix)] == prefix for prompt in prompts)
    assert len({tuple(prompt[len(prefix) :]) for prompt in prompts}) == 3


def test_reads_give_a_distribution_and_a_mass(server_url: str):
    question = questions.from_wire(QUESTIONS["topic"])

    async def work(client):
        return await Decider(client).decide(STATES[0], question)

    decision = run(server_url, work)
    assert math.fsum(decision.distribution.probabilities) == pytest.approx(1.0, abs=1e-12)
    assert 0.0 < decision.distribution.mass <= 1.0
    assert decision.reads == 1


def test_rotations_read_every_order_and_stay_deterministic(server_url: str):
    question = questions.from_wire(QUESTIONS["topic"])

    async def work(client):
        decider = Decider(client, options=DecideOptions(rotations=True))
        return [await decider.decide(STATES[3], question) for _ in range(2)]

    first, second = run(server_url, work)
    assert first.reads == len(question.options)
    assert first.distribution == second.distribution
    assert math.fsum(first.distribution.probabilities) == pytest.approx(1.0, abs=1e-12)
