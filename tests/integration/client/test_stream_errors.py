"""strata-client's error contract end to end: streams from the real server on the real model
that fail after their 200 raise the exception class and status docs/client.md promises
(`timeout` -> 504, `engine_unavailable` -> 503, both `InternalServerError`), and a streamed
completion adds up to the non-streamed one.

The failed engine is the real engine with a planted fault (as in test_fault_over_http.py): its
step raises `EngineUnavailable`, the error a lost tensor-parallel rank gives, once the stream
has started; no input from outside can cause one on a single rank.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from strata_client import Completion, InternalServerError, StrataClient
from strata_engine import AsyncEngine, LLMEngine
from strata_engine.api import EngineUnavailable
from strata_engine.model_store import resolve_model
from strata_server.app import create_app
from strata_server.context import ServerSettings
from strata_server.launch import in_process_server, server_process

# Far more tokens than the CPU engine makes in the 1 s timeout (or before the planted fault).
ENDLESS = {"max_tokens": 3000, "ignore_eos": True, "temperature": 0}
MESSAGES = [{"role": "user", "content": "Tell me a very long story."}]


def stream_kinds(client: StrataClient) -> dict[str, Callable[[], Any]]:
    return {
        "completion": lambda: client.completions.create(prompt="Once upon a time", stream=True, **ENDLESS),
        "chat": lambda: client.chat.completions.create(messages=MESSAGES, stream=True, **ENDLESS),
    }


@pytest.fixture(scope="module")
def timeout_client() -> Iterator[StrataClient]:
    args = ("--parallel", "1", "--threads", "1", "--request-timeout", "1", "--log-level", "warning")
    with server_process(*args) as server, StrataClient(base_url=server.url, max_retries=0) as client:
        yield client


@pytest.mark.parametrize("kind", ["completion", "chat"])
def test_a_stream_past_the_request_timeout_raises_504(timeout_client: StrataClient, kind: str) -> None:
    with pytest.raises(InternalServerError) as info:
        list(stream_kinds(timeout_client)[kind]())
    assert info.value.response.status_code == 200  # the 200 went out first: a mid-stream error
    assert (info.value.status_code, info.value.code) == (504, "timeout")


def test_a_whole_reply_past_the_request_timeout_is_504_too(timeout_client: StrataClient) -> None:
    with pytest.raises(InternalServerError) as info:
        timeout_client.completions.create(prompt="Once upon a time", **ENDLESS)
    assert (info.value.status_code, info.value.code) == (504, "timeout")


@pytest.fixture
def failing_engine(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[StrataClient, Callable[[], None]]]:
    """A real server in this process whose engine fails for good when `fail()` is called: its
    next step raises `EngineUnavailable` (the engine's own handling turns it into a failed engine)."""
    llm = LLMEngine(resolve_model("default"), num_threads=1, parallel=1)
    armed = {"now": False}
    real_run = llm.runner.run

    def run(work: Any) -> Any:
        if armed["now"]:
            raise EngineUnavailable("planted: a tensor-parallel rank is gone")
        return real_run(work)

    monkeypatch.setattr(llm.runner, "run", run)
    engine = AsyncEngine(llm)
    try:
        with (
            in_process_server(create_app(engine, ServerSettings(slots=1))) as url,
            StrataClient(base_url=url, max_retries=0) as client,
        ):
            yield client, lambda: armed.update(now=True)
    finally:
        engine.shutdown()


@pytest.mark.parametrize("kind", ["completion", "chat"])
def test_a_stream_whose_engine_fails_raises_503(failing_engine, kind: str) -> None:
    client, fail = failing_engine
    chunks = 0
    with pytest.raises(InternalServerError) as info:
        for _ in stream_kinds(client)[kind]():
            chunks += 1
            fail()
    assert chunks > 0 and info.value.response.status_code == 200  # a mid-stream error
    assert (info.value.status_code, info.value.code) == (503, "engine_unavailable")
    with pytest.raises(InternalServerError) as later:  # refused before a stream starts
        list(stream_kinds(client)[kind]())
    assert (later.value.status_code, later.value.code) == (503, "engine_unavailable")


@pytest.fixture(scope="module")
def client(server_url: str) -> Iterator[StrataClient]:
    with StrataClient(base_url=server_url, timeout=120.0, max_retries=0) as client:
        yield client


@pytest.mark.parametrize("logprobs", [3, None], ids=["with-logprobs", "text-only"])
def test_a_streamed_completion_with_echo_and_usage_equals_the_whole_reply(
    client: StrataClient, logprobs: int | None
) -> None:
    """Both ways an echo is made: from the prompt's scored rows (with logprobs) and from the
    prompt's ids before the engine sends anything (without)."""
    body = {"prompt": "The capital of France is", "max_tokens": 12, "temperature": 0, "echo": True}
    whole = client.completions.create(**body, logprobs=logprobs)
    assert isinstance(whole, Completion)
    chunks = list(
        client.completions.create(
            **body, logprobs=logprobs, stream=True, stream_options={"include_usage": True}
        )
    )
    pieces = [chunk.choices[0] for chunk in chunks if chunk.choices]
    usage = [chunk.usage for chunk in chunks if chunk.usage is not None]
    assert len(pieces) > 2 and len(usage) == 1 and not chunks[-1].choices  # usage comes last, alone
    assert "".join(piece.text for piece in pieces) == whole.choices[0].text
    assert whole.choices[0].text.startswith(body["prompt"])  # echoed
    assert pieces[-1].finish_reason == whole.choices[0].finish_reason
    assert usage[0] == whole.usage
    expected = whole.choices[0].logprobs
    if logprobs is None:
        assert expected is None and all(piece.logprobs is None for piece in pieces)
        return
    assert expected is not None
    for field in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
        streamed = [item for piece in pieces for item in getattr(piece.logprobs, field)]
        assert streamed == getattr(expected, field), field
