"""strata-client's `candidates.score` (sync and async) against the real server and model."""

from __future__ import annotations

import asyncio
from typing import cast

import pytest

from strata_client import AsyncStrataClient, BadRequestError, Completion, StrataClient

PROMPT = "Q: Which colour is the sky on a clear day?\nA: The sky is"
CANDIDATES = [" blue", " green", " dark grey"]


def test_sync_scores_equal_echoing_each_candidate_alone(server_url: str) -> None:
    with StrataClient(base_url=server_url, timeout=120.0) as client:
        scores = client.candidates.score(prompt=PROMPT, candidates=CANDIDATES)
        prompt_ids = client.tokenize(PROMPT).tokens
        assert scores.best.text == " blue"
        for candidate in scores.candidates:
            echo = cast(
                Completion,
                client.completions.create(
                    prompt=prompt_ids + candidate.token_ids, max_tokens=0, echo=True, logprobs=0
                ),
            )
            logprobs = echo.choices[0].logprobs
            assert logprobs is not None
            assert candidate.token_logprobs == logprobs.token_logprobs[len(prompt_ids) :]
        with pytest.raises(BadRequestError) as refused:
            client.candidates.score(prompt=PROMPT, candidates=[""])
        assert refused.value.param == "candidates"


def test_async_gives_the_same_bits_as_sync(server_url: str) -> None:
    async def scored() -> list[float]:
        async with AsyncStrataClient(base_url=server_url, timeout=120.0) as client:
            return (await client.candidates.score(prompt=PROMPT, candidates=CANDIDATES)).probabilities

    with StrataClient(base_url=server_url, timeout=120.0) as client:
        expected = client.candidates.score(prompt=PROMPT, candidates=CANDIDATES).probabilities
    assert asyncio.run(scored()) == expected
