"""`strata-server --kernels native-q8` (8-bit activations, opt-in) on the real default model.

The server says which kernels run, serves /v1/completions with logprobs, gives identical
requests identical bits even with other traffic in the batch, and its logprobs are the engine
library's q8 bits (an in-process engine on the same file), not the exact kernels' ones.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from strata_engine import LLMEngine, LogprobParams, Request, SamplingParams, Step
from strata_server.launch import running_server

PROMPT = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
MAX_TOKENS = 6


@pytest.fixture(scope="module")
def q8_url() -> Iterator[str]:
    """A real server on the default model with the q8 kernels (the shared fixture takes no flags)."""
    with running_server(
        "--model", "default", "--kernels", "native-q8", "--parallel", "4", "--threads", "2",
        "--log-level", "warning",
    ) as url:  # fmt: skip
        yield url


def _greedy(engine: LLMEngine, ids: list[int]) -> list[tuple[int, float]]:
    """(token id, logprob) of each greedily generated token, from the engine library."""
    events = engine.generate(
        Request(tuple(ids), SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0), LogprobParams(top_n=1))
    )
    return [(e.token_id, e.logprobs.logprob) for e in events if isinstance(e, Step) and e.logprobs]


def _completion(client: httpx.Client, ids: list[int]) -> dict:
    reply = client.post(
        "/v1/completions",
        json={"prompt": ids, "max_tokens": MAX_TOKENS, "temperature": 0, "logprobs": 5},
    )
    assert reply.status_code == 200, reply.text
    return reply.json()["choices"][0]


def test_health_reports_q8_kernels(q8_url: str) -> None:
    health = httpx.get(f"{q8_url}/health", timeout=30).json()
    assert health["status"] == "ok"
    assert health["kernels"].startswith("native-") and health["kernels"].endswith("-q8")
    assert health["invariant"] is True


def test_completion_logprobs_are_the_librarys_q8_bits(q8_url: str, engine_model_path: Path) -> None:
    q8 = LLMEngine(engine_model_path, num_threads=2, kernels="native-q8")
    exact = LLMEngine(engine_model_path, num_threads=2, kernels="native")
    ids = q8.tokenizer.encode(PROMPT, add_special=False)
    with httpx.Client(base_url=q8_url, timeout=120) as client:
        choice = _completion(client, ids)
    lp = choice["logprobs"]
    assert len(lp["token_logprobs"]) == MAX_TOKENS == len(lp["top_logprobs"])
    assert all(math.isfinite(v) and v <= 0 for v in lp["token_logprobs"])
    for value, top in zip(lp["token_logprobs"], lp["top_logprobs"], strict=True):
        assert len(top) == 5 and max(top.values()) == value  # greedy: the chosen token is the top one
    want = _greedy(q8, ids)
    assert lp["token_logprobs"] == [v for _, v in want]  # bit for bit (JSON keeps a float32 exactly)
    assert choice["text"] == q8.tokenizer.decode([t for t, _ in want])
    assert lp["token_logprobs"] != [v for _, v in _greedy(exact, ids)]  # 8-bit activations did run


async def _same_request_amid_traffic(url: str, body: dict) -> list[dict]:
    async with httpx.AsyncClient(base_url=url, timeout=300) as client:
        others = [
            client.post(
                "/v1/completions", json={"prompt": f"Story {i}: once upon a time", "max_tokens": 2 + i}
            )
            for i in range(3)
        ]
        replies = await asyncio.gather(
            *(client.post("/v1/completions", json=body) for _ in range(3)), *others
        )
    assert all(r.status_code == 200 for r in replies), [r.text for r in replies]
    return [r.json()["choices"][0] for r in replies[:3]]


def test_identical_requests_identical_logprobs(q8_url: str) -> None:
    """Twice alone, then three at once beside other requests: the same logprobs, bit for bit."""
    body = {"prompt": "The capital of Italy is", "max_tokens": MAX_TOKENS, "temperature": 0, "logprobs": 5}
    with httpx.Client(base_url=q8_url, timeout=120) as client:
        first, second = (client.post("/v1/completions", json=body).json()["choices"][0] for _ in range(2))
    assert first["logprobs"] == second["logprobs"] and first["text"] == second["text"]
    assert first["logprobs"]["token_logprobs"]
    for choice in asyncio.run(_same_request_amid_traffic(q8_url, body)):
        assert choice["logprobs"] == first["logprobs"] and choice["text"] == first["text"]
