"""The parity check on the fake upstream: equal values pass, a drift fails."""

from __future__ import annotations

import asyncio

import pytest

from strata_client import AsyncStrataClient
from strata_decide.parity import run_parity
from strata_decide.samples import QUESTIONS, STATES


def parity(tolerance=1e-6):
    async def run():
        async with AsyncStrataClient() as client:
            return await run_parity(client, "fake-model", STATES[:2], QUESTIONS, tolerance)

    return asyncio.run(run())


def test_identical_values_give_zero_difference(fake):
    fake.preference = {"Can wait": 1.0}
    report = parity()
    assert len(report.cases) == 6
    assert report.max_abs_diff == 0.0 and report.argmax_agreement == 1.0
    assert report.passed
    plain = [call for call in fake.completion_calls if "allowed_token_ids" not in call]
    assert len(plain) == 6 and all(call["logprobs"] == 20 for call in plain)


def test_a_drift_above_tolerance_fails(fake):
    original = fake.raw_logprobs

    def drifting(prompt_ids, allowed):
        values = original(prompt_ids, allowed)
        named = len(fake.completion_calls) % 2 == 1  # named reads come first in each case
        return {i: v + (1e-4 if named else 0.0) for i, v in values.items()}

    fake.raw_logprobs = drifting
    report = parity()
    assert report.max_abs_diff == pytest.approx(1e-4)
    assert not report.passed
    assert parity(tolerance=1e-3).passed
