"""The client's surface: URLs, settings from the environment, headers, request bodies."""

from __future__ import annotations

import json

import httpx
import pytest
import respx

from strata_client import (
    ChatCompletion,
    Completion,
    StrataClient,
    StrataError,
    __version__,
)


def sent_json(route: respx.Route, index: int = 0) -> dict:
    return json.loads(route.calls[index].request.content)


@pytest.mark.parametrize(
    "given",
    ["http://host:9000", "http://host:9000/", "http://host:9000/v1", "http://host:9000/v1/"],
)
def test_base_url_with_or_without_v1_reaches_both_route_families(given: str):
    with respx.mock(base_url="http://host:9000") as mock, StrataClient(base_url=given) as client:
        models = mock.get("/v1/models").respond(200, json={"data": [{"id": "m"}]})
        tokenize = mock.post("/tokenize").respond(200, json={"tokens": [1], "count": 1, "max_model_len": 10})
        client.models.list()
        client.tokenize("a")
        assert models.call_count == 1 and tokenize.call_count == 1


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("STRATA_BASE_URL", "http://envhost:1234/v1")
    monkeypatch.setenv("STRATA_API_KEY", "sk-env")
    with StrataClient() as client:
        assert client.base_url == "http://envhost:1234"
        assert client.api_key == "sk-env"
    with StrataClient(base_url="http://arg:1", api_key="sk-arg") as client:
        assert (client.base_url, client.api_key) == ("http://arg:1", "sk-arg")


def test_defaults_without_environment(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("STRATA_BASE_URL", raising=False)
    monkeypatch.delenv("STRATA_API_KEY", raising=False)
    with StrataClient() as client:
        assert client.base_url == "http://127.0.0.1:8000"
        assert client.api_key is None
        assert client.timeout == 60.0 and client.max_retries == 2


def test_headers_name_the_package_and_carry_the_key(base_url, mock):
    route = mock.get("/v1/models").respond(200, json={"data": []})
    with StrataClient(base_url=base_url, api_key="sk-test") as client:
        client.models.list()
    headers = route.calls[0].request.headers
    assert headers["user-agent"] == f"strata-client/{__version__}"
    assert headers["authorization"] == "Bearer sk-test"


def test_no_authorization_header_without_a_key(base_url, mock, monkeypatch):
    monkeypatch.delenv("STRATA_API_KEY", raising=False)
    route = mock.get("/v1/models").respond(200, json={"data": []})
    with StrataClient(base_url=base_url) as client:
        client.models.list()
    assert "authorization" not in route.calls[0].request.headers


def test_completion_body_sends_given_fields_only(client, mock, id_mode_completion):
    route = mock.post("/v1/completions").respond(200, json=id_mode_completion)
    result = client.completions.create(
        model="m",
        prompt=[[1, 2, 3]],
        max_tokens=1,
        logprobs=3,
        allowed_token_ids=[7084, 1770, 9998],
        return_tokens_as_token_ids=True,
        temperature=0.0,
        extra_body={"logit_bias": {"5": -100}, "max_tokens": 2},
    )
    assert isinstance(result, Completion)
    assert sent_json(route) == {
        "model": "m",
        "prompt": [[1, 2, 3]],
        "max_tokens": 2,  # extra_body overrides
        "logprobs": 3,
        "allowed_token_ids": [7084, 1770, 9998],
        "return_tokens_as_token_ids": True,
        "temperature": 0.0,
        "stream": False,
        "logit_bias": {"5": -100},
    }


def test_chat_body_and_parse(client, mock, chat_completion):
    route = mock.post("/v1/chat/completions").respond(200, json=chat_completion)
    messages = [{"role": "user", "content": "Say hi"}]
    result = client.chat.completions.create(
        model="m", messages=messages, logprobs=True, top_logprobs=2, max_completion_tokens=3
    )
    assert isinstance(result, ChatCompletion)
    assert result.choices[0].logprobs.content[1].token == "!"
    assert sent_json(route) == {
        "model": "m",
        "messages": messages,
        "logprobs": True,
        "top_logprobs": 2,
        "max_completion_tokens": 3,
        "stream": False,
    }


def test_missing_model_is_fetched_once_and_reused(
    client, mock, models_body, id_mode_completion, chat_completion
):
    models = mock.get("/v1/models").respond(200, json=models_body)
    completions = mock.post("/v1/completions").respond(200, json=id_mode_completion)
    chat = mock.post("/v1/chat/completions").respond(200, json=chat_completion)
    client.completions.create(prompt="a")
    client.completions.create(prompt="b")
    client.chat.completions.create(messages=[{"role": "user", "content": "c"}])
    assert models.call_count == 1
    sent_models = [sent_json(completions, 0)["model"], sent_json(completions, 1)["model"]]
    assert [*sent_models, sent_json(chat)["model"]] == ["SmolLM2-135M-Instruct"] * 3


def test_an_explicit_model_skips_the_lookup(client, mock, id_mode_completion):
    models = mock.get("/v1/models").respond(200, json={"data": [{"id": "other"}]})
    mock.post("/v1/completions").respond(200, json=id_mode_completion)
    client.completions.create(model="mine", prompt="a")
    assert models.call_count == 0


def test_a_server_without_models_is_a_clear_error(client, mock):
    mock.get("/v1/models").respond(200, json={"object": "list", "data": []})
    with pytest.raises(StrataError, match="no models"):
        client.completions.create(prompt="a")


def test_tokenize_prompt_and_messages(client, mock):
    route = mock.post("/tokenize").respond(200, json={"tokens": [1, 2, 3], "count": 3, "max_model_len": 8192})
    result = client.tokenize("abc", add_special_tokens=False)
    assert (result.tokens, result.count, result.max_model_len) == ([1, 2, 3], 3, 8192)
    messages = [{"role": "user", "content": "hi"}]
    client.tokenize(messages=messages, model="m")
    assert sent_json(route, 0) == {"prompt": "abc", "add_special_tokens": False}
    assert sent_json(route, 1) == {
        "messages": messages,
        "add_generation_prompt": True,
        "model": "m",
    }


@pytest.mark.parametrize("arguments", [{}, {"prompt": "a", "messages": []}])
def test_tokenize_needs_exactly_one_input(client, arguments):
    with pytest.raises(ValueError, match="exactly one"):
        client.tokenize(**arguments)


def test_detokenize_and_tokenizer_info(client, mock):
    route = mock.post("/detokenize").respond(200, json={"prompt": "Hello"})
    mock.get("/tokenizer_info").respond(200, json={"eos_token": "<|im_end|>", "bos_token": None})
    assert client.detokenize([19556]).prompt == "Hello"
    assert sent_json(route) == {"tokens": [19556]}
    assert client.tokenizer_info().eos_token == "<|im_end|>"


def test_health_is_true_only_on_200(client, mock, sleeps):
    route = mock.get("/health")
    route.side_effect = [
        httpx.Response(200),
        httpx.Response(503),
        httpx.ConnectError("refused"),
    ]
    assert client.health() is True
    assert client.health() is False
    assert client.health() is False
    assert route.call_count == 3 and sleeps == []  # a probe is never retried


def test_one_connection_pool_serves_every_call_and_close_ends_it(base_url, mock):
    mock.get("/v1/models").respond(200, json={"data": []})
    client = StrataClient(base_url=base_url)
    pool = client._http
    client.models.list()
    client.models.list()
    assert client._http is pool and not pool.is_closed
    with client:
        pass
    assert pool.is_closed


def test_negative_retries_are_refused():
    with pytest.raises(ValueError):
        StrataClient(max_retries=-1)
