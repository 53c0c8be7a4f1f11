"""The async client behaves like the sync one on the paths that matter most."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio

from strata_client import (
    APITimeoutError,
    AsyncStrataClient,
    AsyncStream,
    BadRequestError,
    ChatCompletionChunk,
    Completion,
    UnprocessableEntityError,
)

pytestmark = pytest.mark.asyncio


class TrackedAsyncStream(httpx.AsyncByteStream):
    """An async response body that records whether the client closed it."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for i in range(0, len(self.body), 7):
            yield self.body[i : i + 7]

    async def aclose(self) -> None:
        self.closed = True


@pytest_asyncio.fixture
async def aclient(base_url) -> AsyncIterator[AsyncStrataClient]:
    async with AsyncStrataClient(base_url=base_url, max_retries=2) as client:
        yield client


async def test_completion_parses_and_model_is_looked_up_once(aclient, mock, models_body, id_mode_completion):
    models = mock.get("/v1/models").respond(200, json=models_body)
    route = mock.post("/v1/completions").respond(200, json=id_mode_completion)
    first = await aclient.completions.create(prompt=[1, 2], logprobs=3, max_tokens=1)
    await aclient.completions.create(prompt=[3])
    assert isinstance(first, Completion)
    assert first.choices[0].logprobs.values_of(0, [1770, 5]) == {1770: -1.7132616281509399, 5: None}
    assert models.call_count == 1
    assert json.loads(route.calls[1].request.content)["model"] == "SmolLM2-135M-Instruct"


async def test_503_then_200_takes_two_calls(aclient, mock, sleeps):
    route = mock.get("/v1/models")
    route.side_effect = [
        httpx.Response(503, headers={"Retry-After": "0.5"}),
        httpx.Response(200, json={"data": [{"id": "m"}]}),
    ]
    assert (await aclient.models.list()).data[0].id == "m"
    assert route.call_count == 2 and sleeps == [0.5]


async def test_400_is_raised_after_one_call(aclient, mock, sleeps):
    body = {"error": {"message": "bad", "type": "invalid_request_error", "param": "n"}}
    route = mock.post("/v1/completions").respond(400, json=body)
    with pytest.raises(BadRequestError) as info:
        await aclient.completions.create(model="m", prompt="x")
    assert info.value.param == "n" and route.call_count == 1 and sleeps == []


async def test_typed_decision_422_shape(aclient, mock):
    body = {"detail": [{"type": "missing", "loc": ["body", "prompt"], "msg": "required"}]}
    mock.post("/tokenize").respond(422, json=body)
    with pytest.raises(UnprocessableEntityError, match=r"body\.prompt: required"):
        await aclient.tokenize(messages=[{"role": "user", "content": "x"}])


async def test_read_timeout_surfaces_as_api_timeout_error(aclient, mock, sleeps):
    route = mock.post("/v1/chat/completions").mock(side_effect=httpx.ReadTimeout("slow"))
    with pytest.raises(APITimeoutError):
        await aclient.chat.completions.create(model="m", messages=[], timeout=0.5)
    assert route.call_count == 1
    assert route.calls[0].request.extensions["timeout"]["read"] == 0.5


async def test_chat_stream_parses_and_closes(aclient, mock, chat_stream):
    body = TrackedAsyncStream(chat_stream)
    mock.post("/v1/chat/completions").mock(return_value=httpx.Response(200, stream=body))
    stream = await aclient.chat.completions.create(
        model="m", messages=[], logprobs=True, top_logprobs=1, stream=True
    )
    assert isinstance(stream, AsyncStream)
    chunks = [chunk async for chunk in stream]
    assert all(isinstance(chunk, ChatCompletionChunk) for chunk in chunks)
    assert [c.choices[0].logprobs.content[0].logprob for c in chunks[1:]] == [-0.25, -0.5]
    assert body.closed


async def test_stopping_early_inside_async_with_closes(aclient, mock, completion_stream):
    body = TrackedAsyncStream(completion_stream)
    mock.post("/v1/completions").mock(return_value=httpx.Response(200, stream=body))
    async with await aclient.completions.create(model="m", prompt="x", stream=True) as stream:
        async for chunk in stream:
            assert chunk.choices[0].text == " Paris"
            break
    assert body.closed and stream.response.is_closed


async def test_small_routes(aclient, mock):
    mock.post("/detokenize").respond(200, json={"prompt": "Hi"})
    mock.get("/health").respond(200)
    mock.get("/tokenizer_info").respond(200, json={"eos_token": "<|im_end|>"})
    assert (await aclient.detokenize([1])).prompt == "Hi"
    assert await aclient.health() is True
    assert (await aclient.tokenizer_info()).eos_token == "<|im_end|>"
