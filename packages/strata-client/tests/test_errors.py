"""Every error status maps to its exception, with the server's message and param."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from strata_client import (
    APIStatusError,
    AuthenticationError,
    BadRequestError,
    InternalServerError,
    NotFoundError,
    RateLimitError,
    StrataClient,
    UnprocessableEntityError,
)


def openai_envelope(message: str, param: str | None, code: int) -> dict[str, Any]:
    return {"error": {"message": message, "type": "BadRequestError", "param": param, "code": code}}


STATUS_CASES = [
    (400, BadRequestError),
    (401, AuthenticationError),
    (404, NotFoundError),
    (422, UnprocessableEntityError),
    (429, RateLimitError),
    (500, InternalServerError),
    (503, InternalServerError),
]


@pytest.mark.parametrize(("status", "error_class"), STATUS_CASES)
def test_openai_envelope_maps_status_and_fields(status, error_class, client, mock, sleeps):
    body = openai_envelope(f"problem {status}", "logprobs", status)
    mock.post("/v1/completions").respond(status, json=body)
    with pytest.raises(error_class) as info:
        client.completions.create(model="m", prompt="x")
    error = info.value
    assert isinstance(error, APIStatusError)
    assert error.status_code == status
    assert error.message == f"problem {status}"
    assert error.param == "logprobs"
    assert error.error_type == "BadRequestError"
    assert error.code == status
    assert error.body == body
    assert error.response.status_code == status


@pytest.mark.parametrize(("status", "error_class"), STATUS_CASES)
def test_typed_decision_detail_maps_status_and_fields(status, error_class, client, mock, sleeps):
    body = {"detail": {"error_type": "tokens_exceeded", "message": f"too long ({status})"}}
    mock.get("/v1/models").respond(status, json=body)
    with pytest.raises(error_class) as info:
        client.models.list()
    assert info.value.status_code == status
    assert info.value.message == f"too long ({status})"
    assert info.value.error_type == "tokens_exceeded"
    assert info.value.param is None


def test_validation_list_names_each_field(client, mock):
    body = {
        "detail": [
            {"type": "missing", "loc": ["body", "question"], "msg": "Field required", "input": {}},
            {
                "type": "int_type",
                "loc": ["body", "n", 0],
                "msg": "Input should be an integer",
                "input": "a",
            },
        ]
    }
    mock.post("/tokenize").respond(422, json=body)
    with pytest.raises(UnprocessableEntityError) as info:
        client.tokenize("hi")
    error = info.value
    assert error.message == "body.question: Field required; body.n.0: Input should be an integer"
    assert error.param == "body.question"
    assert error.error_type == "missing"
    assert [item["input"] for item in error.errors] == [{}, "a"]


def test_non_json_error_body_keeps_the_text(client, mock):
    mock.post("/detokenize").respond(400, text="plain failure")
    with pytest.raises(BadRequestError) as info:
        client.detokenize([1, 2])
    assert info.value.message == "plain failure"
    assert info.value.body == "plain failure"


def test_plain_detail_string_and_unmapped_status(client, mock):
    mock.post("/detokenize").respond(413, json={"status_code": 413, "detail": "too big"})
    with pytest.raises(APIStatusError) as info:
        client.detokenize([1])
    assert type(info.value) is APIStatusError
    assert (info.value.status_code, info.value.message) == (413, "too big")


def test_context_overflow_message_is_matchable(client, mock):
    message = "This model's maximum context length is 8192 tokens."
    mock.post("/v1/completions").respond(400, json=openai_envelope(message, "prompt", 400))
    with pytest.raises(BadRequestError, match="maximum context length"):
        client.completions.create(model="m", prompt=[1] * 9000)


def test_client_stays_usable_after_an_error(client, mock):
    mock.post("/detokenize").side_effect = [
        httpx.Response(400, json=openai_envelope("bad id", "tokens", 400)),
        httpx.Response(200, json={"prompt": "ok"}),
    ]
    with pytest.raises(BadRequestError):
        client.detokenize([-1])
    assert client.detokenize([5]).prompt == "ok"


def test_retryable_status_is_raised_at_once_without_retries(base_url, mock):
    route = mock.get("/v1/models").respond(503, json=openai_envelope("loading", None, 503))
    client = StrataClient(base_url=base_url, max_retries=0)
    with client, pytest.raises(InternalServerError, match="loading"):
        client.models.list()
    assert route.call_count == 1
