"""Operations on the real server and model: the queue bound, timeouts, disconnects, request
ids and the access log, metrics, keys, CORS, operator limits, and graceful shutdown.

Each test waits at most a few seconds for a limit it configured.
"""

from __future__ import annotations

import json
import re
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from strata_server.launch import ServerProcess, server_process

KEYS = {"flag": "flag-key", "env": "env-key"}
AUTH = {"authorization": f"Bearer {KEYS['flag']}"}
TIMEOUT_S = 1.5
ISO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ")
LONG = {"prompt": "Once upon a time", "max_tokens": 400, "ignore_eos": True, "temperature": 0}


@pytest.fixture(scope="module")
def ops_server() -> Iterator[ServerProcess]:
    """One slot, one queue place, two keys, an operator `n` limit."""
    args = ("--parallel", "1", "--max-queue", "1", "--max-n", "2", "--api-key", KEYS["flag"])
    with server_process(*args, "--log-level", "info", env={"STRATA_API_KEY": KEYS["env"]}) as server:
        yield server


@pytest.fixture(scope="module")
def timeout_http() -> Iterator[httpx.Client]:
    """A server of its own with a short --request-timeout (others' requests never hit it)."""
    with (
        server_process(
            "--parallel", "1", "--request-timeout", str(TIMEOUT_S), "--log-level", "warning"
        ) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        yield client


@pytest.fixture
def http(ops_server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=ops_server.url, headers=AUTH, timeout=30) as client:
        yield client


def sample(text: str, name: str, **labels: str) -> float:
    """The value of the sample `name` whose labels include `labels` in an exposition text."""
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    raise AssertionError(f"{name} {labels} not in /metrics")


def metric(http: httpx.Client, name: str, **labels: str) -> float:
    """One series' value from the server's /metrics."""
    return sample(http.get("/metrics").text, name, **labels)


def wait_idle(http: httpx.Client, within_s: float = 3.0) -> None:
    deadline = time.monotonic() + within_s
    while metric(http, "strata:num_requests_running") or metric(http, "strata:kv_blocks_used"):
        assert time.monotonic() < deadline, "the engine did not free its slot and blocks"
        time.sleep(0.02)


def assert_envelope(response: httpx.Response, status: int, code: str | None = None) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["request_id"] == response.headers["x-request-id"]
    if code is not None:
        assert body["error"]["code"] == code
    return body["error"]


def test_beyond_the_queue_bound_is_429_with_retry_after(http: httpx.Client) -> None:
    body = {**LONG, "max_tokens": 12}  # long enough to hold the slot while the others arrive
    with ThreadPoolExecutor(5) as pool:
        replies = list(pool.map(lambda _: http.post("/v1/completions", json=body), range(5)))
    refused = [r for r in replies if r.status_code == 429]
    assert len(refused) == 3  # one running, one waiting, the rest refused at once
    for reply in refused:
        assert_envelope(reply, 429, "queue_full")
        assert reply.headers["retry-after"] == "1"
    assert [r.status_code for r in replies].count(200) == 2
    wait_idle(http)


def test_a_request_past_the_timeout_is_cancelled_and_its_blocks_freed(timeout_http: httpx.Client) -> None:
    started = time.monotonic()
    reply = timeout_http.post("/v1/completions", json=LONG)
    assert time.monotonic() - started < TIMEOUT_S + 1.0
    assert_envelope(reply, 504, "timeout")
    with timeout_http.stream("POST", "/v1/completions", json={**LONG, "stream": True}) as stream:
        lines = [line for line in stream.iter_lines() if line.startswith("data: {")]
    assert json.loads(lines[-1][6:])["error"]["code"] == "timeout"
    wait_idle(timeout_http)  # aborted at the engine's next step: no slot or block left held


def test_a_client_leaving_a_stream_frees_its_slot_within_a_step(http: httpx.Client) -> None:
    with http.stream("POST", "/v1/completions", json={**LONG, "stream": True}) as stream:
        lines = stream.iter_lines()
        for _ in range(4):
            next(lines)
        steps_at_close = metric(http, "strata_engine_steps")
        closed = time.monotonic()
    wait_idle(http)
    freed_s = time.monotonic() - closed
    extra_steps = metric(http, "strata_engine_steps") - steps_at_close
    print(f"disconnect: slot freed after {extra_steps:.0f} more steps, {freed_s * 1000:.0f} ms")
    assert extra_steps <= 2  # the step in progress, at most one more before the abort is seen


def test_request_ids_are_echoed_in_the_reply_and_the_json_log(ops_server, http: httpx.Client) -> None:
    reply = http.post(
        "/v1/completions", json={"prompt": "Hi", "max_tokens": 2}, headers={"x-request-id": "ops-42"}
    )
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-request-id"] == "ops-42" and reply.json()["id"] == "cmpl-ops-42"
    refused = http.post("/v1/completions", json={"prompt": "Hi", "n": 3, "max_tokens": 1})
    assert assert_envelope(refused, 400)["param"] == "n"  # --max-n 2
    time.sleep(0.2)
    log = ops_server.log()
    # text format: `2026-12-01T15:40:00.123Z INFO strata_server.access: {"event":"request",...}`
    access = [line for line in log.splitlines() if " INFO strata_server.access: " in line]
    assert access and all(ISO_TIME.match(line) for line in access)
    lines = [json.loads(line.split(": ", 1)[1]) for line in access]
    line = next(entry for entry in lines if entry["request_id"] == "ops-42")
    assert line["route"] == "/v1/completions" and line["status"] == 200
    assert line["prompt_tokens"] >= 1 and line["completion_tokens"] == 2 and line["cached_tokens"] is not None
    assert line["queue_s"] is not None and line["ttft_s"] is not None and line["total_s"] > 0
    assert any(e["request_id"] == refused.headers["x-request-id"] and e["status"] == 400 for e in lines)
    assert KEYS["flag"] not in log and KEYS["env"] not in log


def test_metrics_carry_the_operator_series(http: httpx.Client) -> None:
    text = http.get("/metrics").text
    model_name = http.get("/v1/models").json()["data"][0]["id"]
    vllm = {"model_name": model_name, "engine": "0"}  # vLLM's label set
    for name in (
        "strata:num_requests_waiting",
        "strata:num_requests_running",
        "strata:kv_blocks_free",
        "strata:kv_cache_usage_perc",
        "strata:prefix_cache_hit_rate",
        "strata:time_to_first_token_seconds_bucket",
        "strata:inter_token_latency_seconds_bucket",
        "strata:e2e_request_latency_seconds_bucket",
        "strata:request_success_total",
        "strata:prompt_tokens_total",
        "strata:generation_tokens_total",
    ):
        assert sample(text, name, **vllm) >= 0
    assert sample(text, "strata:max_queue", **vllm) == 1
    assert sample(text, "strata_requests_total", model_name=model_name) > 0
    assert sample(text, "strata_kernels_info", model_name=model_name, invariant="true") == 1


def test_keys_from_flag_and_environment_and_no_cors(ops_server: ServerProcess) -> None:
    with httpx.Client(base_url=ops_server.url, timeout=10) as client:
        for key in KEYS.values():
            assert client.get("/v1/models", headers={"authorization": f"Bearer {key}"}).status_code == 200
        assert_envelope(client.get("/v1/models", headers={"authorization": "Bearer nope"}), 401)
        reply = client.get("/health", headers={"origin": "https://elsewhere.example"})
        assert reply.status_code == 200 and "access-control-allow-origin" not in reply.headers


def test_sigterm_drains_then_exits_zero() -> None:
    with server_process("--parallel", "1", "--shutdown-grace", "120", "--log-level", "warning") as server:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            body = {
                "prompt": "Hi",
                "max_tokens": 40,
                "ignore_eos": True,
                "stream": True,
            }  # outlasts the checks
            with http.stream("POST", "/v1/completions", json=body) as stream:
                lines = stream.iter_lines()
                assert next(lines).startswith("data: {")  # generating
                server.process.send_signal(signal.SIGTERM)
                time.sleep(0.1)
                with httpx.Client(base_url=server.url, timeout=5) as other:
                    assert other.get("/health").status_code == 503
                    refused = other.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 1})
                    assert_envelope(refused, 503, "shutting_down")
                rest = list(lines)
            events = [json.loads(line[6:]) for line in rest if line.startswith("data: {")]
            assert events[-1]["choices"][0]["finish_reason"] == "length"  # finished in full
            assert "data: [DONE]" in rest
        assert server.process.wait(timeout=10) == 0


def test_a_second_signal_exits_at_once() -> None:
    grace = ("--shutdown-grace", "60", "--log-level", "warning")
    with server_process("--parallel", "1", *grace) as server, ThreadPoolExecutor(1) as pool:
        pool.submit(httpx.post, f"{server.url}/v1/completions", json=LONG, timeout=30)
        time.sleep(0.5)
        server.process.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        assert server.process.poll() is None  # draining: the long request is still running
        started = time.monotonic()
        server.process.send_signal(signal.SIGINT)
        assert server.process.wait(timeout=5) == 1
        assert time.monotonic() - started < 2.0
