"""Payloads shaped like real vLLM / OpenAI / Strata answers, and a client fixture.

The bodies follow the wire facts in shared/reference/openai-logprobs.md: token_id keys,
echo with a null first position, -9999.0 for minus infinity, chat content logprobs,
SSE streams with logprobs and a final usage chunk.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import respx

from strata_client import StrataClient

BASE = "http://strata.test"
MODEL = "SmolLM2-135M-Instruct"


def sse(*events: dict[str, Any] | str) -> bytes:
    """An SSE body: each event as a ``data:`` line and a blank line."""
    lines = [f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n" for e in events]
    return "".join(lines).encode()


@pytest.fixture
def models_body() -> dict[str, Any]:
    return {
        "object": "list",
        "data": [
            {
                "id": MODEL,
                "object": "model",
                "created": 1732900000,
                "owned_by": "strata",
                "root": "/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                "parent": None,
                "max_model_len": 8192,
                "permission": [],
            }
        ],
    }


@pytest.fixture
def id_mode_completion() -> dict[str, Any]:
    """A one-token label read: allowed_token_ids + return_tokens_as_token_ids, logprobs=3."""
    return {
        "id": "cmpl-5f0c2a",
        "object": "text_completion",
        "created": 1732900001,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "text": " Yes",
                "logprobs": {
                    "tokens": ["token_id:7084"],
                    "token_logprobs": [-0.31326162815093994],
                    "top_logprobs": [
                        {
                            "token_id:7084": -0.31326162815093994,
                            "token_id:1770": -1.7132616281509399,
                            "token_id:9998": -9999.0,
                        }
                    ],
                    "text_offset": [0],
                },
                "finish_reason": "length",
                "stop_reason": None,
                "prompt_logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": 42,
            "completion_tokens": 1,
            "total_tokens": 43,
            "prompt_tokens_details": {"cached_tokens": 32},
        },
        "system_fingerprint": None,
    }


@pytest.fixture
def echo_completion() -> dict[str, Any]:
    """lm-eval's loglikelihood read: echo, max_tokens=1, logprobs=1, text tokens."""
    return {
        "id": "cmpl-echo",
        "object": "text_completion",
        "created": 1732900002,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "text": "The cat sat.",
                "logprobs": {
                    "tokens": ["The", " cat", " sat", "."],
                    "token_logprobs": [None, -7.25, -3.5, -0.75],
                    "top_logprobs": [
                        None,
                        {" cat": -7.25, " first": -2.5},
                        {" sat": -3.5, " is": -1.25},
                        {".": -0.75},
                    ],
                    "text_offset": [0, 3, 7, 11],
                },
                "finish_reason": "length",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }


@pytest.fixture
def chat_completion() -> dict[str, Any]:
    return {
        "id": "chatcmpl-91ab",
        "object": "chat.completion",
        "created": 1732900003,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Hi!",
                    "tool_calls": [],
                    "reasoning_content": None,
                },
                "logprobs": {
                    "content": [
                        {
                            "token": "Hi",
                            "logprob": -0.125,
                            "bytes": [72, 105],
                            "top_logprobs": [
                                {"token": "Hi", "logprob": -0.125, "bytes": [72, 105]},
                                {
                                    "token": "Hello",
                                    "logprob": -2.25,
                                    "bytes": [72, 101, 108, 108, 111],
                                },
                            ],
                        },
                        {
                            "token": "!",
                            "logprob": -0.5,
                            "bytes": [33],
                            "top_logprobs": [{"token": "!", "logprob": -0.5, "bytes": [33]}],
                        },
                    ],
                    "refusal": None,
                },
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 20, "completion_tokens": 3, "total_tokens": 23},
    }


def completion_chunk(text: str, token_id: int, value: float, offset: int) -> dict[str, Any]:
    return {
        "id": "cmpl-stream",
        "object": "text_completion",
        "created": 1732900004,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "text": text,
                "logprobs": {
                    "tokens": [f"token_id:{token_id}"],
                    "token_logprobs": [value],
                    "top_logprobs": [{f"token_id:{token_id}": value}],
                    "text_offset": [offset],
                },
                "finish_reason": None,
            }
        ],
        "usage": None,
    }


@pytest.fixture
def completion_stream() -> bytes:
    """Two tokens with logprobs, then the usage chunk (stream_options.include_usage), [DONE]."""
    usage_chunk = {
        "id": "cmpl-stream",
        "object": "text_completion",
        "created": 1732900004,
        "model": MODEL,
        "choices": [],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
    }
    return sse(
        completion_chunk(" Paris", 7042, -0.0625, 0),
        completion_chunk(".", 30, -1.5, 6),
        usage_chunk,
        "[DONE]",
    )


@pytest.fixture
def chat_stream() -> bytes:
    def chunk(delta: dict[str, Any], logprobs: Any, finish: str | None) -> dict[str, Any]:
        return {
            "id": "chatcmpl-s",
            "object": "chat.completion.chunk",
            "created": 1732900005,
            "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}],
        }

    def token(text: str, value: float) -> dict[str, Any]:
        entry = {"token": text, "logprob": value, "bytes": list(text.encode())}
        return {"content": [{**entry, "top_logprobs": [entry]}], "refusal": None}

    return sse(
        chunk({"role": "assistant", "content": ""}, None, None),
        chunk({"content": "Hel"}, token("Hel", -0.25), None),
        chunk({"content": "lo"}, token("lo", -0.5), "stop"),
        "[DONE]",
    )


@pytest.fixture
def base_url() -> str:
    return BASE


@pytest.fixture
def make_sse():
    return sse


@pytest.fixture
def mock() -> Iterator[respx.MockRouter]:
    """Routes for the test server; every request must match one."""
    with respx.mock(base_url=BASE, assert_all_called=False) as router:
        yield router


@pytest.fixture
def client() -> Iterator[StrataClient]:
    with StrataClient(base_url=BASE, max_retries=2) as c:
        yield c


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Record retry waits instead of sleeping (sync and async)."""
    waited: list[float] = []

    async def fake_async_sleep(seconds: float) -> None:
        waited.append(seconds)

    monkeypatch.setattr("strata_client._sync.client.time.sleep", waited.append)
    monkeypatch.setattr("strata_client._async.client.asyncio.sleep", fake_async_sleep)
    return waited
