"""Under `--parallel 2`, overlapping requests each get exactly the rows they get alone."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from openai import AsyncOpenAI

LONG = {"prompt": "Write a long story about a dragon who", "max_tokens": 40}
SHORT = {"prompt": "The three primary colours are", "max_tokens": 3}


def read(result) -> tuple:
    choice = result.choices[0]
    lp = choice.logprobs
    return choice.text, lp.tokens, lp.token_logprobs, lp.top_logprobs, lp.text_offset


async def run(server_url: str, *requests: dict, stagger_s: float = 0.0) -> list[tuple]:
    client = AsyncOpenAI(base_url=f"{server_url}/v1", api_key="unused", max_retries=0, timeout=300)
    model = (await client.models.list()).data[0].id

    async def one(delay: float, body: dict):
        await asyncio.sleep(delay)
        return await client.completions.create(model=model, temperature=0, logprobs=5, echo=False, **body)

    results = await asyncio.gather(*(one(i * stagger_s, b) for i, b in enumerate(requests)))
    await client.close()
    return [read(r) for r in results]


def test_overlapping_requests_get_their_own_rows(server_url: str) -> None:
    long_alone, short_alone = asyncio.run(run(server_url, LONG)) + asyncio.run(run(server_url, SHORT))
    # the short request starts while the long one is decoding, and finishes first
    long_both, short_both = asyncio.run(run(server_url, LONG, SHORT, stagger_s=0.3))
    assert len(long_both[1]) == len(long_alone[1]) and len(short_both[1]) == len(short_alone[1])
    assert long_both == long_alone
    assert short_both == short_alone
    # and the other way round: the short one first, the long one joining
    short_first, long_second = asyncio.run(run(server_url, SHORT, LONG, stagger_s=0.0))
    assert short_first == short_alone and long_second == long_alone


def test_sampled_requests_with_seeds_are_independent_of_company(
    server_url: str,
) -> None:
    sampled = {
        "prompt": "My favourite food is",
        "max_tokens": 12,
        "temperature": 0.9,
        "seed": 3,
    }

    async def sample(*extra: dict) -> list:
        client = AsyncOpenAI(base_url=f"{server_url}/v1", api_key="unused", max_retries=0)
        model = (await client.models.list()).data[0].id
        bodies = [sampled, *extra]
        out = await asyncio.gather(*(client.completions.create(model=model, logprobs=1, **b) for b in bodies))
        await client.close()
        return [read(r) for r in out]

    alone = asyncio.run(sample())[0]
    together = asyncio.run(sample(LONG | {"temperature": 0}))[0]
    assert together == alone


def wait_until_idle(http: httpx.Client, seconds: float) -> float | None:
    deadline = time.monotonic() + seconds
    running = None
    while time.monotonic() < deadline:
        running = metric(http.get("/metrics").text, "strata_engine_running")
        if running == 0:
            break
        time.sleep(0.2)
    return running


def test_a_client_that_gives_up_frees_its_slot(server_url: str) -> None:
    body = {"prompt": "Count forever: 1, 2, 3,", "max_tokens": 4000, "ignore_eos": True}
    with httpx.Client(base_url=server_url, timeout=60) as http:
        with pytest.raises(httpx.ReadTimeout):
            http.post("/v1/completions", json=body, timeout=1.0)
        assert wait_until_idle(http, 5) == 0


def test_a_disconnected_stream_frees_its_slot(server_url: str) -> None:
    body = {
        "prompt": "Count forever: 1, 2, 3,",
        "max_tokens": 400,
        "stream": True,
        "logprobs": 1,
    }
    with httpx.Client(base_url=server_url, timeout=60) as http:
        with http.stream("POST", "/v1/completions", json=body) as response:
            lines = response.iter_lines()
            assert next(lines).startswith("data: ")
            assert next(lines) == ""
            assert next(lines).startswith("data: ")
        # the connection is closed; the engine must abort the request promptly
        assert wait_until_idle(http, 5) == 0
        ok = http.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 1})
        assert ok.status_code == 200


def metric(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    pytest.skip(f"engine.stats() has no `{name.removeprefix('strata_engine_')}`")
    return None
