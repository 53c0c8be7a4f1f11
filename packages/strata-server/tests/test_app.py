"""The HTTP layer around a stand-in engine: envelopes, framing, auth, cancellation.

Values and real model behaviour are tested against the real server in tests/test_server_*.py.
"""

from __future__ import annotations

import asyncio

import msgspec
import pytest
from litestar.testing import TestClient

from strata_engine.api import Request, SamplingParams
from strata_engine.protocol import EngineClient
from strata_server import ServerSettings, create_app
from strata_server.disconnect import ClientDisconnected, until_disconnect
from strata_server.testing import sample


@pytest.fixture
def engine(make_engine):
    return make_engine()


@pytest.fixture
def client(engine):
    with TestClient(create_app(engine, ServerSettings(max_logprobs=5))) as c:
        yield c


def test_the_fake_engine_honours_the_engine_contract(engine) -> None:
    assert isinstance(engine, EngineClient)


def assert_envelope(response, status: int) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]
    return error


@pytest.mark.parametrize(
    ("content", "headers", "status"),
    [
        (b"{not json", {"content-type": "application/json"}, 400),
        (b"prompt=hi", {"content-type": "application/x-www-form-urlencoded"}, 415),
        (
            b'{"prompt": "hi", "max_tokens": "3"}',
            {"content-type": "application/json"},
            400,
        ),
        (b'{"prompt": "hi", "n": 1e400}', {"content-type": "application/json"}, 400),
        (b'{"prompt": [[[1]]]}', {"content-type": "application/json"}, 400),
        (
            b'{"prompt": "hi", "model": "other"}',
            {"content-type": "application/json"},
            404,
        ),
        (b'{"prompt": [1, 300]}', {"content-type": "application/json"}, 400),
    ],
)
def test_bad_bodies_get_the_envelope(client, content, headers, status) -> None:
    response = client.post("/v1/completions", content=content, headers=headers)
    assert_envelope(response, status)
    good = client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2})
    assert good.status_code == 200 and good.json()["choices"][0]["text"] == "aa"


def test_unknown_route_and_method_get_the_envelope(client) -> None:
    assert_envelope(client.get("/v1/nothing"), 404)
    assert_envelope(client.get("/v1/completions"), 405)


def test_non_streamed_completion_shape(client) -> None:
    body = client.post(
        "/v1/completions", json={"prompt": ["hi", "yo"], "max_tokens": 2, "logprobs": 1}
    ).json()
    assert body["object"] == "text_completion" and body["model"] == "fake-model"
    assert [c["index"] for c in body["choices"]] == [0, 1]
    lp = body["choices"][0]["logprobs"]
    assert lp["tokens"] == ["a", "a"] and lp["text_offset"] == [0, 1]
    assert body["usage"]["prompt_tokens"] == 4 and body["usage"]["completion_tokens"] == 4


def test_streamed_completion_with_logprobs_and_usage(client) -> None:
    payload = {
        "prompt": "hi",
        "max_tokens": 3,
        "logprobs": 2,
        "echo": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with client.stream("POST", "/v1/completions", json=payload) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    chunks = [msgspec.json.decode(line.removeprefix("data: ")) for line in lines[:-1]]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 3
    pieces = [c["choices"][0] for c in chunks[:-1]]
    assert "".join(p["text"] for p in pieces) == "hiaaa"
    offsets = [o for p in pieces for o in p["logprobs"]["text_offset"]]
    assert offsets == [0, 1, 2, 3, 4]
    assert pieces[-1]["finish_reason"] == "length"


def test_echo_with_zero_max_tokens_scores_the_prompt_only(client) -> None:
    body = client.post(
        "/v1/completions",
        json={"prompt": "abc", "max_tokens": 0, "echo": True, "logprobs": 0},
    ).json()
    choice = body["choices"][0]
    assert choice["text"] == "abc" and choice["finish_reason"] == "length"
    assert choice["logprobs"]["token_logprobs"][0] is None
    assert len(choice["logprobs"]["tokens"]) == 3


def test_chat_without_template_is_a_clear_400(make_engine) -> None:
    with TestClient(create_app(make_engine(chat_template=None), ServerSettings())) as client:
        response = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]})
        error = assert_envelope(response, 400)
    assert "chat template" in error["message"]


def test_chat_renders_through_the_fake_template(client) -> None:
    body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2, "logprobs": True}
    reply = client.post("/v1/chat/completions", json=body)
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["content"] == "aa"
    assert reply.json()["usage"]["prompt_tokens"] == len("<|user|>x\n<|assistant|>")


@pytest.mark.parametrize(
    ("extra", "param", "needle"),
    [
        (
            {"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "strin"}}}},
            "response_format",
            "strin",
        ),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
            "response_format",
            "schema",
        ),
        ({"response_format": {"type": "xml"}}, "response_format", "xml"),
        ({"response_format": "json"}, "response_format", "object"),
        ({"structured_outputs": {"regex": "a(b"}}, "structured_outputs", "unclosed group"),
        ({"structured_outputs": {"regex": "a", "choice": ["b"]}}, "structured_outputs", "exactly one"),
        ({"structured_outputs": {"structural_tag": "{}"}}, "structured_outputs", "structural_tag"),
        ({"structured_outputs": {"json": "{not json"}}, "structured_outputs", "not JSON"),
        ({"guided_grammar": "root ::= nowhere"}, "guided_grammar", "nowhere"),
        ({"guided_choice": []}, "guided_choice", "empty"),
        ({"guided_regex": "a", "guided_json": {"type": "string"}}, "guided_regex", "one"),
        ({"guided_regex": "a", "allowed_token_ids": [97]}, "allowed_token_ids", "allowed token ids"),
    ],
)
def test_bad_structured_output_is_a_400_naming_the_field(client, extra, param, needle) -> None:
    for route, body in (
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]}),
        ("/v1/completions", {"prompt": "x"}),
    ):
        if param == "allowed_token_ids" and route == "/v1/chat/completions":
            continue  # the engine refuses the pair, after rendering: the fake has no chat template
        error = assert_envelope(client.post(route, json={**body, **extra}), 400)
        assert error["param"] == param
        assert needle in error["message"]


def test_a_schema_nested_thousands_deep_is_a_400(client) -> None:
    deep = '{"type": "object", "properties": {"a": ' * 3000 + "{}" + "}}" * 3000
    body = (
        '{"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"schema": ' + deep + "}}}"
    )
    response = client.post("/v1/completions", content=body, headers={"content-type": "application/json"})
    assert assert_envelope(response, 400)["code"] == "invalid_json"
    assert client.post("/v1/completions", json={"prompt": "x", "max_tokens": 1}).status_code == 200


def test_api_key_guards_v1_only(engine) -> None:
    with TestClient(create_app(engine, ServerSettings(api_key="sekrit"))) as c:
        assert_envelope(c.post("/v1/completions", json={"prompt": "x"}), 401)
        bad = {"authorization": "Bearer wrong"}
        assert_envelope(c.post("/v1/completions", json={"prompt": "x"}, headers=bad), 401)
        good = {"authorization": "Bearer sekrit"}
        assert c.post("/v1/completions", json={"prompt": "x"}, headers=good).status_code == 200
        assert c.get("/health").status_code == 200


def test_metrics_count_requests_and_tokens(client) -> None:
    client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 3})
    client.post("/v1/completions", content=b"{", headers={"content-type": "application/json"})
    text = client.get("/metrics").text
    route = {"route": "/v1/completions"}
    assert sample(text, "strata_requests_total", **route, status="200") == 1
    assert sample(text, "strata_requests_total", **route, status="400") == 1
    # vLLM's names and labels, with the strata: prefix
    vllm = {"model_name": "fake-model", "engine": "0"}
    assert sample(text, "strata:generation_tokens_total", **vllm) == 3
    assert sample(text, "strata:prompt_tokens_total", **vllm) == 2
    assert sample(text, "strata:request_success_total", **vllm, finished_reason="length") == 1
    assert sample(text, "strata:e2e_request_latency_seconds_count", **vllm) == 1
    assert sample(text, "strata:request_generation_tokens_sum", **vllm) == 3
    assert sample(text, "strata_engine_waiting", model_name="fake-model") == 0
    assert sample(text, "strata_request_duration_seconds_count", **route) == 2


def test_tokenize_detokenize_round_trip(client) -> None:
    ids = client.post("/tokenize", json={"prompt": "hé"}).json()
    assert ids["tokens"] == list("hé".encode()) and ids["count"] == 3
    assert client.post("/detokenize", json={"tokens": ids["tokens"]}).json() == {"prompt": "hé"}
    error = assert_envelope(client.post("/detokenize", json={"tokens": [1, 9999]}), 400)
    assert "9999" in error["message"]


# ---------------------------------------------------------------- cancellation


LONG_RUN = 100_000  # fake steps: never over before the test's deadline, so only an abort ends it


def test_leaving_the_event_stream_aborts_every_choice(make_engine, wait_until) -> None:
    engine = make_engine(step_delay=0.001, ctx_size=2 * LONG_RUN)
    requests = [Request(prompt_ids=(1,), sampling=SamplingParams(max_tokens=LONG_RUN))] * 3

    async def read_two() -> None:
        events = aiter(engine.submit(requests))
        seen = 0
        async for _ in events:
            seen += 1
            if seen == 2:
                break
        assert engine.active == 3
        await events.aclose()  # type: ignore[attr-defined]
        await wait_until(lambda: engine.aborted == 3)  # seen while the loop still runs
        assert engine.active == 0 and engine.cancelled == 0

    asyncio.run(read_two())


def test_a_disconnect_cancels_a_non_streamed_generation(make_engine, wait_until) -> None:
    engine = make_engine(step_delay=0.001, ctx_size=2 * LONG_RUN)
    request = Request(prompt_ids=(1,), sampling=SamplingParams(max_tokens=LONG_RUN))

    async def consume() -> int:
        return sum([1 async for _ in engine.submit([request])])

    async def receive() -> dict:
        await wait_until(lambda: engine.steps >= 5)  # generating
        return {"type": "http.disconnect"}

    async def run() -> None:
        with pytest.raises(ClientDisconnected):
            await until_disconnect(receive, consume())
        await wait_until(lambda: engine.aborted == 1)
        assert engine.active == 0 and engine.cancelled == 0

    asyncio.run(run())


# ------------------------------------------------ documented refusals (docs/DETAILS.md)

CHAT = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 1}


@pytest.mark.parametrize("key", ["messages", "add_generation_prompt", "chat_template"])
def test_chat_template_kwargs_may_not_set_the_servers_variables(client, key) -> None:
    body = {**CHAT, "chat_template_kwargs": {key: "x"}}
    error = assert_envelope(client.post("/v1/chat/completions", json=body), 400)
    assert error["param"] == "chat_template_kwargs" and key in error["message"]
    extra = {**CHAT, "chat_template_kwargs": {"unused_variable": 1}}  # any other name is passed on
    assert client.post("/v1/chat/completions", json=extra).status_code == 200


def test_chat_logprob_token_ids_with_allowed_token_ids_is_a_400(client) -> None:
    body = {**CHAT, "logprobs": True, "logprob_token_ids": [97], "allowed_token_ids": [97, 98]}
    error = assert_envelope(client.post("/v1/chat/completions", json=body), 400)
    assert error["param"] == "logprob_token_ids"
    alone = {**CHAT, "logprobs": True, "logprob_token_ids": [97]}
    assert client.post("/v1/chat/completions", json=alone).status_code == 200


@pytest.mark.parametrize(
    ("route", "body"), [("/v1/completions", {"prompt": "x"}), ("/v1/chat/completions", CHAT)]
)
def test_spaces_between_special_tokens_only_true(client, route: str, body: dict) -> None:
    """The default (true) is accepted and changes nothing; false is a 400 naming the field."""
    plain = client.post(route, json={**body, "max_tokens": 2})
    spaced = client.post(route, json={**body, "max_tokens": 2, "spaces_between_special_tokens": True})
    assert plain.status_code == spaced.status_code == 200
    assert plain.json()["choices"] == spaced.json()["choices"]
    refused = client.post(route, json={**body, "max_tokens": 2, "spaces_between_special_tokens": False})
    error = assert_envelope(refused, 400)
    assert error["type"] == "invalid_request_error" and error["code"] == "unsupported"
    assert error["param"] == "spaces_between_special_tokens"
    assert "does not insert spaces between special tokens" in error["message"]


def test_best_of_other_than_n_is_refused(client) -> None:
    error = assert_envelope(client.post("/v1/completions", json={"prompt": "x", "best_of": 2}), 400)
    assert (error["param"], error["code"]) == ("best_of", "unsupported")
    same = {"prompt": "x", "best_of": 2, "n": 2, "max_tokens": 1}
    assert client.post("/v1/completions", json=same).status_code == 200


def test_a_prompt_over_max_prompt_tokens_is_prompt_too_long(engine) -> None:
    with TestClient(create_app(engine, ServerSettings(max_prompt_tokens=3))) as c:
        error = assert_envelope(c.post("/v1/completions", json={"prompt": "abcd", "max_tokens": 1}), 400)
        assert (error["param"], error["code"]) == ("prompt", "prompt_too_long")
        assert c.post("/v1/completions", json={"prompt": "abc", "max_tokens": 1}).status_code == 200


def test_a_wrong_key_is_invalid_api_key(engine) -> None:
    with TestClient(create_app(engine, ServerSettings(api_key="sekrit"))) as c:
        for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": "sekrit"}):
            error = assert_envelope(c.post("/v1/completions", json={"prompt": "x"}, headers=headers), 401)
            assert error["code"] == "invalid_api_key"


def test_a_draining_server_answers_503_with_connection_close(client) -> None:
    client.app.state.ctx.drain.draining = True
    reply = client.post("/v1/completions", json={"prompt": "x", "max_tokens": 1})
    assert assert_envelope(reply, 503)["code"] == "shutting_down"
    assert reply.headers["connection"] == "close"  # the client reconnects elsewhere
    assert client.get("/health").status_code == 503 and client.get("/metrics").status_code == 200


def test_chat_allowed_token_ids_with_logprobs_lists_the_renormalised_row(client) -> None:
    """allowed_token_ids with logprobs on chat: the reply lists the sampled token's row (which the
    fake builds with the engine's own listing rules over numpy values, as the engine does)."""
    body = {**CHAT, "max_tokens": 2, "logprobs": True, "top_logprobs": 2, "allowed_token_ids": [97, 98]}
    reply = client.post("/v1/chat/completions", json=body, timeout=10)
    assert reply.status_code == 200, reply.text
    content = reply.json()["choices"][0]["logprobs"]["content"]
    assert [entry["token"] for entry in content] == ["a", "a"]
    assert all(len(entry["top_logprobs"]) == 2 for entry in content)


def test_a_fake_engine_failure_fails_the_request_instead_of_hanging(make_engine, monkeypatch) -> None:
    """The stand-in fails a request whose events raise, as the real engine fails one whose step
    raises (503 engine_unavailable): a broken stand-in must not turn tests into hangs."""
    engine = make_engine()

    def broken(request):
        raise AttributeError("planted")
        yield  # a generator, as _events is

    monkeypatch.setattr(engine, "_events", broken)
    with TestClient(create_app(engine, ServerSettings())) as c:
        reply = c.post("/v1/completions", json={"prompt": "x", "max_tokens": 1}, timeout=10)
    assert reply.status_code == 503, reply.text


@pytest.mark.parametrize("stream", [False, True])
def test_a_worker_thread_that_cannot_start_is_a_503_with_retry_after(engine, monkeypatch, stream) -> None:
    """Under memory pressure Python cannot map a new thread's stack ("can't start new thread"):
    the machine's fault and passing, so a 503 `out_of_memory` the client retries, not a 500."""

    async def no_thread(*args, **kwargs):
        raise RuntimeError("can't start new thread")

    with TestClient(create_app(engine, ServerSettings())) as c:
        monkeypatch.setattr(asyncio, "to_thread", no_thread)
        reply = c.post("/v1/completions", json={"prompt": "x", "max_tokens": 1, "stream": stream}, timeout=10)
    assert reply.status_code == 503, reply.text
    assert reply.headers["Retry-After"] == "2"
    assert reply.json()["error"]["code"] == "out_of_memory"
    assert "can't start new thread" in reply.json()["error"]["message"]
