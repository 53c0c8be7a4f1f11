"""SSE streams parse into typed chunks, end at [DONE], raise on error events and close."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from strata_client import (
    APIStatusError,
    APITimeoutError,
    BadRequestError,
    ChatCompletionChunk,
    CompletionChunk,
    InternalServerError,
    Stream,
)
from strata_client._sync.streaming import iter_sse_data


class TrackedStream(httpx.SyncByteStream):
    """A response body that records whether the client closed it."""

    def __init__(self, body: bytes, piece: int = 7) -> None:
        self.pieces = [body[i : i + piece] for i in range(0, len(body), piece)]
        self.closed = False

    def __iter__(self) -> Iterator[bytes]:
        yield from self.pieces

    def close(self) -> None:
        self.closed = True


def sse_response(body: bytes) -> tuple[httpx.Response, TrackedStream]:
    stream = TrackedStream(body)
    headers = {"content-type": "text/event-stream"}
    return httpx.Response(200, headers=headers, stream=stream), stream


def test_completion_stream_yields_typed_chunks_with_logprobs(client, mock, completion_stream):
    response, body = sse_response(completion_stream)
    route = mock.post("/v1/completions").mock(return_value=response)
    stream = client.completions.create(
        model="m",
        prompt="The capital of France is",
        max_tokens=2,
        logprobs=1,
        return_tokens_as_token_ids=True,
        stream=True,
        stream_options={"include_usage": True},
    )
    assert isinstance(stream, Stream)
    chunks = list(stream)
    assert all(isinstance(chunk, CompletionChunk) for chunk in chunks)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == " Paris."
    ids = [c.choices[0].logprobs.token_ids()[0] for c in chunks if c.choices]
    assert ids == [7042, 30]
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == 7
    sent = json.loads(route.calls[0].request.content)
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert body.closed


def test_chat_stream_carries_logprobs_per_delta(client, mock, chat_stream):
    mock.post("/v1/chat/completions").respond(200, content=chat_stream)
    chunks = list(
        client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "hi"}],
            logprobs=True,
            top_logprobs=1,
            stream=True,
        )
    )
    assert all(isinstance(chunk, ChatCompletionChunk) for chunk in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "Hello"
    tokens = [c.choices[0].logprobs.content[0] for c in chunks if c.choices[0].logprobs]
    assert [(t.token, t.logprob, t.bytes) for t in tokens] == [
        ("Hel", -0.25, [72, 101, 108]),
        ("lo", -0.5, [108, 111]),
    ]
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_breaking_out_early_closes_the_response(client, mock, completion_stream):
    response, body = sse_response(completion_stream)
    mock.post("/v1/completions").mock(return_value=response)
    stream = client.completions.create(model="m", prompt="x", stream=True)
    for _chunk in stream:
        break
    assert body.closed
    assert stream.response.is_closed


def test_leaving_the_with_block_closes_an_unread_stream(client, mock, completion_stream):
    response, body = sse_response(completion_stream)
    mock.post("/v1/completions").mock(return_value=response)
    with client.completions.create(model="m", prompt="x", stream=True) as stream:
        pass
    assert body.closed and stream.response.is_closed


def test_events_after_done_are_ignored(client, mock, make_sse, completion_stream):
    late = make_sse({"choices": [{"index": 0, "text": "late"}]})
    mock.post("/v1/completions").respond(200, content=completion_stream + late)
    texts = [
        c.choices[0].text for c in client.completions.create(prompt="x", model="m", stream=True) if c.choices
    ]
    assert "late" not in texts


def test_an_error_event_raises_and_closes(client, mock, make_sse):
    error = {
        "error": {
            "message": "prompt too long",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }
    }
    chunk = {"choices": [{"index": 0, "text": "a"}]}
    response, body = sse_response(make_sse(chunk, error, "[DONE]"))
    mock.post("/v1/completions").mock(return_value=response)
    stream = client.completions.create(model="m", prompt="x", stream=True)
    seen = []
    with pytest.raises(BadRequestError, match="prompt too long") as info:
        for c in stream:
            seen.append(c.choices[0].text)
    assert seen == ["a"]
    assert info.value.status_code == 400
    assert body.closed


def test_an_error_event_without_a_status_code_is_a_server_error(client, mock, make_sse):
    mock.post("/v1/completions").respond(200, content=make_sse({"error": {"message": "oom"}}))
    with pytest.raises(InternalServerError, match="oom") as info:
        list(client.completions.create(model="m", prompt="x", stream=True))
    assert info.value.status_code == 500


def test_an_error_event_with_a_string_code_takes_its_status_from_the_type(client, mock, make_sse):
    error = {"message": "bad stop", "type": "invalid_request_error", "param": "stop", "code": None}
    mock.post("/v1/completions").respond(200, content=make_sse({"error": error}))
    with pytest.raises(BadRequestError) as info:
        list(client.completions.create(model="m", prompt="x", stream=True))
    assert (info.value.status_code, info.value.param) == (400, "stop")


@pytest.mark.parametrize(
    ("code", "status"), [("timeout", 504), ("engine_unavailable", 503), ("out_of_memory", 503)]
)
def test_strata_codes_mid_stream_keep_their_documented_status(client, mock, make_sse, code, status):
    """The server's own frame (type "server_error", a string code): the status the same failure
    has as a whole reply, not a 500 (end to end: tests/integration/client/test_stream_errors.py)."""
    error = {"message": "stopped", "type": "server_error", "param": None, "code": code}
    chunk = {"choices": [{"index": 0, "text": "a"}]}
    mock.post("/v1/completions").respond(200, content=make_sse(chunk, {"error": error}, "[DONE]"))
    with pytest.raises(InternalServerError) as info:
        list(client.completions.create(model="m", prompt="x", stream=True))
    assert (info.value.status_code, info.value.code) == (status, code)


def test_an_http_error_on_a_stream_request_raises_before_streaming(client, mock):
    body = {"error": {"message": "logprobs too large", "param": "logprobs", "code": 400}}
    mock.post("/v1/chat/completions").respond(400, json=body)
    with pytest.raises(APIStatusError) as info:
        client.chat.completions.create(model="m", messages=[], stream=True)
    assert info.value.param == "logprobs"


def test_sse_decoding_rules():
    lines = [
        ": keep-alive comment",
        "event: completion",
        'data: {"a":',
        "data:1}",
        "",
        "",
        "id: 7",
        "data: last-without-blank-line",
    ]
    assert list(iter_sse_data(lines)) == ['{"a":\n1}', "last-without-blank-line"]


def test_crlf_line_endings_parse(client, mock, make_sse):
    body = make_sse({"choices": [{"index": 0, "text": "ok"}]}, "[DONE]").replace(b"\n", b"\r\n")
    mock.post("/v1/completions").respond(200, content=body)
    chunks = list(client.completions.create(model="m", prompt="x", stream=True))
    assert [c.choices[0].text for c in chunks] == ["ok"]


class StallingStream(TrackedStream):
    """Delivers its first event, then the read times out."""

    def __iter__(self) -> Iterator[bytes]:
        yield self.pieces[0]
        raise httpx.ReadTimeout("stalled")


def test_a_stall_mid_stream_is_an_api_timeout_error_and_closes(client, mock, make_sse):
    body = StallingStream(make_sse({"choices": [{"index": 0, "text": "a"}]}), piece=10_000)
    mock.post("/v1/completions").mock(return_value=httpx.Response(200, stream=body))
    stream = client.completions.create(model="m", prompt="x", stream=True)
    seen = []
    with pytest.raises(APITimeoutError):
        for chunk in stream:
            seen.append(chunk.choices[0].text)
    assert seen == ["a"] and body.closed
