"""Operations around the fake engine: admission bound, timeouts, operator limits, draining,
request ids and the access log, fault locality, metrics, API keys and CORS."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar import Litestar
from litestar.testing import TestClient

import strata_server.completions as completions_module
from strata_server import ServerSettings, create_app
from strata_server.admission import Admission
from strata_server.errors import ApiError
from strata_server.plan import Plan, max_new_tokens
from strata_server.settings import API_KEY_ENV, api_keys, build_parser
from strata_server.shutdown import Drain, GracefulServer
from strata_server.testing import sample

SLOW = {"prompt": "hi", "max_tokens": 40}  # 40 fake steps


def assert_envelope(response: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["request_id"] == response.headers["x-request-id"]
    if code is not None:
        assert body["error"]["code"] == code
    return body["error"]


async def _concurrently(app: Litestar, bodies: list[dict[str, Any]]) -> list[httpx.Response]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        return list(await asyncio.gather(*(http.post("/v1/completions", json=b) for b in bodies)))


# ---------------------------------------------------------------- admission and limits


def test_admission_counts_and_refuses_beyond_the_bound() -> None:
    admission = Admission(slots=1, max_queue=1)
    first, second = admission.enter(1), admission.enter(1)
    with pytest.raises(ApiError):
        admission.check_room()  # full: refused before the body is read
    with pytest.raises(ApiError) as refused:
        admission.enter(1)
    assert refused.value.status == 429 and refused.value.headers == {"Retry-After": "1"}
    first.release()
    first.release()  # idempotent
    assert admission.in_flight == 1
    second.release()
    assert admission.enter(5).size == 5  # alone, a large request is still admitted


def test_beyond_the_queue_bound_is_a_429_with_retry_after(make_engine) -> None:
    engine = make_engine(step_delay=0.01)
    app = create_app(engine, ServerSettings(slots=1, max_queue=1))
    responses = asyncio.run(_concurrently(app, [SLOW] * 4))
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200, 200, 429, 429]
    refused = next(r for r in responses if r.status_code == 429)
    assert_envelope(refused, 429, "queue_full")
    assert refused.headers["retry-after"] == "1"
    assert app.state.ctx.admission.in_flight == 0


def test_a_request_past_its_timeout_is_cancelled_with_504(make_engine) -> None:
    engine = make_engine(step_delay=0.001, ctx_size=200_000)
    settings = ServerSettings(request_timeout=0.2)
    endless = {"prompt": "hi", "max_tokens": 100_000}  # 100 s of fake steps: only the timeout ends it
    with TestClient(create_app(engine, settings)) as client:
        started = time.monotonic()
        response = client.post("/v1/completions", json=endless)
        assert time.monotonic() - started < 5
        assert_envelope(response, 504, "timeout")
        stream = client.post("/v1/completions", json={**endless, "stream": True})
        events = [line for line in stream.text.splitlines() if line.startswith("data: {")]
        assert json.loads(events[-1][6:])["error"]["code"] == "timeout"
        assert stream.text.rstrip().endswith("data: [DONE]")
        assert client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2}).status_code == 200
        assert engine.aborted == 2 and engine.active == 0
        assert client.app.state.ctx.admission.in_flight == 0


@pytest.mark.parametrize(
    ("settings", "body", "param"),
    [
        ({"max_n": 2}, {"prompt": "hi", "max_tokens": 1, "n": 3}, "n"),
        ({"max_n": 2}, {"prompt": ["a", "b", "c"], "max_tokens": 1}, "n"),
        ({"max_tokens_limit": 5}, {"prompt": "hi", "max_tokens": 6}, "max_tokens"),
        ({"max_prompt_tokens": 3}, {"prompt": "long prompt", "max_tokens": 1}, "prompt"),
    ],
)
def test_operator_limits_are_400s_naming_the_field(make_engine, settings, body, param) -> None:
    with TestClient(create_app(make_engine(), ServerSettings(**settings))) as client:
        assert assert_envelope(client.post("/v1/completions", json=body), 400)["param"] == param


def test_max_tokens_limit_caps_the_default() -> None:
    """Chat without `max_tokens` runs to the context's end; the operator's limit caps that."""
    plan = Plan(prompts=[[1, 2]], max_tokens=None)
    assert max_new_tokens(plan, 2, ctx_size=64) == 62
    assert max_new_tokens(plan, 2, ctx_size=64, limit=5) == 5


# ---------------------------------------------------------------- shutdown


def test_draining_turns_health_503_and_refuses_new_requests(make_engine) -> None:
    with TestClient(create_app(make_engine())) as client:
        assert client.get("/health").status_code == 200
        client.app.state.ctx.drain.draining = True
        assert client.get("/health").status_code == 503
        response = client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 1})
        assert_envelope(response, 503, "shutting_down")
        assert client.get("/metrics").status_code == 200


def test_the_first_signal_drains_then_stops(monkeypatch) -> None:
    import uvicorn

    drain = Drain(in_flight=1)
    server = GracefulServer(uvicorn.Config(app=None), drain, grace_s=2.0)  # type: ignore[arg-type]
    server.handle_exit(signal.SIGTERM, None)
    assert drain.draining and not server.should_exit
    time.sleep(0.1)
    assert not server.should_exit  # still one in flight
    drain.in_flight = 0
    deadline = time.monotonic() + 1
    while not server.should_exit and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.should_exit
    assert not server._captured_signals  # uvicorn would re-raise them (exit -15, not 0)
    exits: list[int] = []
    monkeypatch.setattr("os._exit", exits.append)
    server.handle_exit(signal.SIGINT, None)
    assert exits == [1]


# ---------------------------------------------------------------- faults stay local


def test_a_bug_in_one_request_is_its_own_500(make_engine, monkeypatch, caplog) -> None:
    real_step = completions_module.LegacyBuilder.step

    def buggy_step(self, event):
        if event.token_id == ord("z"):
            raise ZeroDivisionError("simulated formatting bug")
        return real_step(self, event)

    monkeypatch.setattr(completions_module.LegacyBuilder, "step", buggy_step)
    engine = make_engine(step_delay=0.005)
    app = create_app(engine)
    bad = {"prompt": "hi", "max_tokens": 5, "allowed_token_ids": [ord("z")], "logprobs": 1}
    good = {"prompt": "hi", "max_tokens": 5, "logprobs": 1}
    with caplog.at_level(logging.ERROR, logger="strata_server"):
        responses = asyncio.run(_concurrently(app, [good, bad, good]))
    assert [r.status_code for r in responses] == [200, 500, 200]
    assert_envelope(responses[1], 500)
    assert "ZeroDivisionError" in caplog.text and responses[1].headers["x-request-id"] in caplog.text
    assert engine.active == 0 and app.state.ctx.admission.in_flight == 0


# ---------------------------------------------------------------- request ids and the log


def test_request_ids_are_echoed_and_used(make_engine, caplog) -> None:
    settings = ServerSettings(api_key="sekrit-key")
    auth = {"authorization": "Bearer sekrit-key"}
    engine = make_engine(chat_template=None)  # the chat request gets an error body, with its id
    with TestClient(create_app(engine, settings)) as client, caplog.at_level(logging.INFO):
        reply = client.post(
            "/v1/completions", json={"prompt": "hi", "max_tokens": 2}, headers={**auth, "x-request-id": "r-1"}
        )
        assert reply.headers["x-request-id"] == "r-1" and reply.json()["id"] == "cmpl-r-1"
        chat = client.post(
            "/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]}, headers=auth
        )
        generated = chat.headers["x-request-id"]
        assert len(generated) == 32 and chat.json()["request_id"] == generated
        weird = client.get("/health", headers={"x-request-id": "bad\x01id"})
        assert weird.headers["x-request-id"] != "bad\x01id"
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "strata_server.access"]
    first = next(line for line in lines if line["request_id"] == "r-1")
    assert first["route"] == "/v1/completions" and first["status"] == 200
    assert first["prompt_tokens"] == 2 and first["completion_tokens"] == 2 and first["cached_tokens"] == 0
    assert first["queue_s"] is not None and first["ttft_s"] is not None and first["total_s"] > 0
    assert any(line["request_id"] == generated and line["status"] == 400 for line in lines)
    assert "sekrit-key" not in caplog.text


# ---------------------------------------------------------------- metrics


def test_metrics_have_the_operator_series(make_engine) -> None:
    with TestClient(create_app(make_engine(), ServerSettings(max_queue=7))) as client:
        client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 3})
        text = client.get("/metrics").text
    vllm = {"model_name": "fake-model", "engine": "0"}
    for name in (
        "strata:num_requests_waiting",
        "strata:num_requests_running",
        "strata:kv_cache_usage_perc",
        "strata:gpu_cache_usage_perc",
        "strata:prefix_cache_hit_rate",
        "strata:prefix_cache_queries_total",
        "strata:prefix_cache_hits_total",
    ):
        assert sample(text, name, **vllm) >= 0
    assert sample(text, "strata:time_to_first_token_seconds_count", **vllm) == 1
    assert sample(text, "strata:inter_token_latency_seconds_count", **vllm) == 2
    assert sample(text, "strata:max_queue", **vllm) == 7
    assert sample(text, "strata_requests_total", route="/v1/completions", status="200") == 1
    assert sample(text, "strata_kernels_info", kernels="fake", model_name="fake-model") == 1


# ---------------------------------------------------------------- access


def test_several_api_keys_from_flags_file_and_environment(tmp_path: Path, monkeypatch) -> None:
    key_file = tmp_path / "keys"
    key_file.write_text("# team keys\nfile-key\n\n")
    monkeypatch.setenv(API_KEY_ENV, "env-key")
    args = build_parser().parse_args(["--api-key", "a", "--api-key", "b", "--api-key-file", str(key_file)])
    assert api_keys(args) == ("a", "b", "file-key", "env-key")


def test_every_configured_key_is_accepted(make_engine) -> None:
    with TestClient(create_app(make_engine(), ServerSettings(api_keys=("k1", "k2")))) as client:
        for key in ("k1", "k2"):
            assert client.get("/v1/models", headers={"authorization": f"Bearer {key}"}).status_code == 200
        assert_envelope(client.get("/v1/models", headers={"authorization": "Bearer k3"}), 401)
        assert client.get("/health").status_code == 200  # not under /v1


@pytest.mark.parametrize(
    ("origins", "allowed"), [((), None), (("https://app.example",), "https://app.example")]
)
def test_cors_is_off_unless_configured(make_engine, origins, allowed) -> None:
    app: Callable[..., Litestar] = create_app
    with TestClient(app(make_engine(), ServerSettings(cors_origins=origins))) as client:
        response = client.get("/v1/models", headers={"origin": "https://app.example"})
        assert response.headers.get("access-control-allow-origin") == allowed
