"""Every bad request gets a 4xx in the OpenAI envelope, and the next good request still works."""

from __future__ import annotations

import httpx
import openai
import pytest
from openai import OpenAI

VOCAB_SIZE = 49152  # SmolLM2


@pytest.fixture(scope="module")
def http(server_url: str):
    with httpx.Client(base_url=server_url, timeout=60.0) as client:
        yield client


def assert_refused(response: httpx.Response, status: int = 400) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    return error


def assert_still_serving(http: httpx.Client) -> None:
    good = http.post("/v1/completions", json={"prompt": "Hello", "max_tokens": 1, "logprobs": 1})
    assert good.status_code == 200
    assert len(good.json()["choices"][0]["logprobs"]["tokens"]) == 1


COMPLETION_REFUSALS = {
    "wrong type for max_tokens": ({"prompt": "x", "max_tokens": "3"}, "max_tokens"),
    "bool for an int": ({"prompt": "x", "max_tokens": True}, "max_tokens"),
    "empty prompt": ({"prompt": ""}, "prompt"),
    "empty prompt list": ({"prompt": []}, "prompt"),
    "empty token list": ({"prompt": [[]]}, "prompt"),
    "negative max_tokens": ({"prompt": "x", "max_tokens": -1}, "max_tokens"),
    "max_tokens 0 without echo": ({"prompt": "x", "max_tokens": 0}, "max_tokens"),
    "float token id": ({"prompt": [1, 2.5]}, "prompt"),
    "string in token ids": ({"prompt": [1, "a"]}, "prompt"),
    "nested junk": ({"prompt": [[1, [2, [3]]]]}, "prompt"),
    "object prompt": ({"prompt": {"text": "x"}}, "prompt"),
    "top_logprobs without logprobs": (
        {"prompt": "x", "top_logprobs": 2},
        "top_logprobs",
    ),
    "too many logprobs": ({"prompt": "x", "logprobs": 21}, "logprobs"),
    "negative logprobs": ({"prompt": "x", "logprobs": -1}, "logprobs"),
    "huge n": ({"prompt": "x", "n": 10**12}, "n"),
    "float overflow": (b'{"prompt": "x", "temperature": 1e400}', "temperature"),
    "integer overflow": (b'{"prompt": "x", "max_tokens": 1' + b"0" * 400 + b"}", "max_tokens"),
    "negative temperature": ({"prompt": "x", "temperature": -1}, "temperature"),
    "empty allowed ids": (
        {"prompt": "x", "allowed_token_ids": []},
        "allowed_token_ids",
    ),
    "logit_bias out of range": ({"prompt": "x", "logit_bias": {"5": 101}}, "logit_bias"),
}


@pytest.mark.parametrize("case", list(COMPLETION_REFUSALS))
def test_completion_refusals(http: httpx.Client, case: str) -> None:
    body, param = COMPLETION_REFUSALS[case]
    content = body if isinstance(body, bytes) else httpx.Request("POST", "/", json=body).content
    error = assert_refused(
        http.post(
            "/v1/completions",
            content=content,
            headers={"content-type": "application/json"},
        )
    )
    assert error["param"] == param
    assert_still_serving(http)


@pytest.mark.parametrize(
    "content",
    [
        b"{",
        b'{"prompt": "x",}',
        b"",
        b"null",
        b"[]",
        b"\xff\xfe\x00",
        b'{"prompt": "x"} trailing',
    ],
)
def test_malformed_json(http: httpx.Client, content: bytes) -> None:
    assert_refused(
        http.post(
            "/v1/completions",
            content=content,
            headers={"content-type": "application/json"},
        )
    )
    assert_still_serving(http)


def test_wrong_content_type(http: httpx.Client) -> None:
    assert_refused(http.post("/v1/completions", data={"prompt": "x"}), 415)
    assert_refused(
        http.post(
            "/v1/chat/completions",
            content=b"\x00\x01",
            headers={"content-type": "application/octet-stream"},
        ),
        415,
    )
    assert_still_serving(http)


def test_out_of_vocabulary_ids_are_named(http: httpx.Client) -> None:
    error = assert_refused(http.post("/v1/completions", json={"prompt": [1, VOCAB_SIZE]}))
    assert str(VOCAB_SIZE) in error["message"] and error["param"] == "prompt"
    error = assert_refused(
        http.post("/v1/completions", json={"prompt": "x", "allowed_token_ids": [5, 123456789]})
    )
    assert "123456789" in error["message"] and error["param"] == "allowed_token_ids"
    error = assert_refused(http.post("/v1/completions", json={"prompt": [-4, 5]}))
    assert "-4" in error["message"]
    assert_still_serving(http)


def test_over_the_context_says_maximum_context_length(http: httpx.Client) -> None:
    ctx = http.get("/v1/models").json()["data"][0]["max_model_len"]
    error = assert_refused(http.post("/v1/completions", json={"prompt": [1] * 10, "max_tokens": ctx}))
    assert "maximum context length" in error["message"]
    error = assert_refused(http.post("/v1/completions", json={"prompt": [1] * (ctx + 1), "max_tokens": 1}))
    assert "maximum context length" in error["message"]
    error = assert_refused(http.post("/v1/completions", json={"prompt": "x", "max_tokens": 10**40}))
    assert "maximum context length" in error["message"]
    assert_still_serving(http)


def test_unknown_model_is_404(http: httpx.Client) -> None:
    error = assert_refused(http.post("/v1/completions", json={"prompt": "x", "model": "gpt-9"}), 404)
    assert error["param"] == "model"
    assert_still_serving(http)


CHAT_REFUSALS = {
    "no messages": ({"messages": []}, "messages"),
    "messages not a list": ({"messages": "hi"}, "messages"),
    "message without role": ({"messages": [{"content": "hi"}]}, "messages"),
    "logprobs as int": ({"logprobs": 3}, "logprobs"),
    "top_logprobs without logprobs": ({"top_logprobs": 3}, "top_logprobs"),
    "too many top_logprobs": ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    "invalid json schema": (
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": {"type": "strin"}},
            }
        },
        "response_format",
    ),
    "image part": (
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
        "messages",
    ),
    "out-of-vocab allowed id": (
        {"allowed_token_ids": [VOCAB_SIZE + 7]},
        "allowed_token_ids",
    ),
    "negative max_tokens": ({"max_tokens": -5}, "max_tokens"),
}


@pytest.mark.parametrize("case", list(CHAT_REFUSALS))
def test_chat_refusals(http: httpx.Client, case: str) -> None:
    extra, param = CHAT_REFUSALS[case]
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, **extra}
    error = assert_refused(http.post("/v1/chat/completions", json=body))
    assert error["param"] == param
    if "allowed" in case:
        assert str(VOCAB_SIZE + 7) in error["message"]
    assert_still_serving(http)


def test_unknown_routes_and_methods(http: httpx.Client) -> None:
    assert_refused(http.get("/v1/engines"), 404)
    assert_refused(http.get("/v1/completions"), 405)
    assert_refused(http.post("/detokenize", json={"tokens": [1, 10**20]}))
    assert_refused(http.post("/tokenize", json={}))
    assert_still_serving(http)


def test_the_sdk_raises_typed_errors(server_url: str) -> None:
    client = OpenAI(base_url=f"{server_url}/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError) as bad:
        client.completions.create(model="ignored", prompt="x", max_tokens=-1, extra_body={"model": None})
    assert "max_tokens" in str(bad.value)
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="no-such-model", prompt="x", max_tokens=1)


def test_an_error_inside_a_stream_request_is_a_plain_400(http: httpx.Client) -> None:
    body = {"prompt": [1, VOCAB_SIZE + 1], "stream": True, "logprobs": 1}
    error = assert_refused(http.post("/v1/completions", json=body))
    assert str(VOCAB_SIZE + 1) in error["message"]
    assert_still_serving(http)
