"""Operations on the real server and model: the queue bound, timeouts, disconnects, request
ids and the access log, metrics, keys, CORS, operator limits, and graceful shutdown.

No test races the clock: a request that must still be running is long by construction
(`ignore_eos`, thousands of tokens, far more than any host generates while the test looks),
and a test polls `/metrics`, `/health` or the log for the state it needs, with a deadline.
"""

from __future__ import annotations

import json
import re
import signal
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from strata_server.launch import ServerProcess, server_process
from strata_server.testing import sample

KEYS = {"flag": "flag-key", "env": "env-key"}
AUTH = {"authorization": f"Bearer {KEYS['flag']}"}
TIMEOUT_S = 1.5
ISO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ")
LONG = {"prompt": "Once upon a time", "max_tokens": 3000, "ignore_eos": True, "temperature": 0}
DEADLINE_S = 30.0  # for a state the server reaches at once on any host; only a bug waits it out
# Every server here runs one kernel thread: on a shared CI machine a busy-waiting thread pool
# slows a step by orders of magnitude, and nothing here measures speed.


@pytest.fixture(scope="module")
def ops_server() -> Iterator[ServerProcess]:
    """One slot, one queue place, two keys, an operator `n` limit."""
    args = (
        "--parallel",
        "1",
        "--threads",
        "1",
        "--max-queue",
        "1",
        "--max-n",
        "2",
        "--api-key",
        KEYS["flag"],
    )
    with server_process(*args, "--log-level", "info", env={"STRATA_API_KEY": KEYS["env"]}) as server:
        yield server


@pytest.fixture(scope="module")
def timeout_http() -> Iterator[httpx.Client]:
    """A server of its own with a short --request-timeout (others' requests never hit it)."""
    with (
        server_process(
            "--parallel", "1", "--threads", "1", "--request-timeout", str(TIMEOUT_S), "--log-level", "warning"
        ) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        yield client


@pytest.fixture
def http(ops_server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=ops_server.url, headers=AUTH, timeout=30) as client:
        yield client


def metric(http: httpx.Client, name: str, **labels: str) -> float:
    """One series' value from the server's /metrics."""
    return sample(http.get("/metrics").text, name, **labels)


def poll(condition: Callable[[], bool], what: str, within_s: float = DEADLINE_S) -> None:
    """Wait until `condition()` holds; fail naming `what` at the deadline."""
    deadline = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {within_s} s: {what}"
        time.sleep(0.02)


def wait_idle(http: httpx.Client, within_s: float = DEADLINE_S) -> None:
    poll(
        lambda: not metric(http, "strata:num_requests_running") and not metric(http, "strata:kv_blocks_used"),
        "the engine frees its slot and blocks",
        within_s,
    )


def first_chunk(stream: httpx.Response) -> Iterator[str]:
    """The stream's lines, after checking its first event is a chunk (the request is generating).

    Hold the iterator while the request must keep running: once it is dropped, httpx closes
    the response and the server aborts the request."""
    lines = stream.iter_lines()
    assert next(lines).startswith("data: {")
    return lines


def assert_envelope(response: httpx.Response, status: int, code: str | None = None) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["request_id"] == response.headers["x-request-id"]
    if code is not None:
        assert body["error"]["code"] == code
    return body["error"]


def test_beyond_the_queue_bound_is_429_with_retry_after(http: httpx.Client) -> None:
    """--parallel 1 --max-queue 1: with one request running and one waiting, every further one
    is refused at once, and both held requests are then served."""
    stream_body = {**LONG, "stream": True}
    with ThreadPoolExecutor(1) as pool:
        with http.stream("POST", "/v1/completions", json=stream_body) as running:
            lines = first_chunk(running)  # held: a dropped line iterator closes the response
            queued = pool.submit(http.post, "/v1/completions", json={**LONG, "max_tokens": 2})
            poll(lambda: metric(http, "strata:num_requests_admitted") == 2, "the second request is held")
            refused = [http.post("/v1/completions", json=LONG) for _ in range(3)]
            for reply in refused:
                assert_envelope(reply, 429, "queue_full")
                assert reply.headers["retry-after"] == "1"
            assert metric(http, "strata:num_requests_admitted") == 2  # nothing refused was queued
            assert next(lines) == ""  # the first request was still being served throughout
        assert queued.result().status_code == 200  # it got the slot once the stream was left
    wait_idle(http)


def test_a_request_past_the_timeout_is_cancelled_and_its_blocks_freed(timeout_http: httpx.Client) -> None:
    started = time.monotonic()
    reply = timeout_http.post("/v1/completions", json=LONG)
    assert time.monotonic() - started < TIMEOUT_S + 10  # cut by the timeout, not run to its end
    assert_envelope(reply, 504, "timeout")
    with timeout_http.stream("POST", "/v1/completions", json={**LONG, "stream": True}) as stream:
        assert stream.status_code == 200
        lines = [line for line in stream.iter_lines() if line.startswith("data: {")]
    assert json.loads(lines[-1][6:])["error"]["code"] == "timeout"
    wait_idle(timeout_http)  # aborted at the engine's next step: no slot or block left held


def test_a_client_leaving_a_stream_frees_its_slot_within_a_few_steps(http: httpx.Client) -> None:
    """The engine stops within the step in progress and one more, plus the steps it runs while
    the disconnect travels: bounded here by two /metrics round trips' worth, measured on the spot."""
    started = metric(http, "strata_engine_steps")
    with http.stream("POST", "/v1/completions", json={**LONG, "stream": True}) as stream:
        lines = first_chunk(stream)
        for _ in range(3):
            next(lines)
        before = metric(http, "strata_engine_steps")
        steps_at_close = metric(http, "strata_engine_steps")
        per_round_trip = steps_at_close - before
    # the yardstick counts: a prefill step and a decode step at least made the two tokens read
    assert steps_at_close - started >= 2
    wait_idle(http)
    extra_steps = metric(http, "strata_engine_steps") - steps_at_close
    print(f"disconnect: slot freed after {extra_steps:.0f} more steps ({per_round_trip:.0f} per round trip)")
    assert extra_steps <= 2 + 2 * per_round_trip
    assert extra_steps < LONG["max_tokens"] / 2  # stopped, not run out


def test_request_ids_are_echoed_in_the_reply_and_the_json_log(ops_server, http: httpx.Client) -> None:
    reply = http.post(
        "/v1/completions", json={"prompt": "Hi", "max_tokens": 2}, headers={"x-request-id": "ops-42"}
    )
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-request-id"] == "ops-42" and reply.json()["id"] == "cmpl-ops-42"
    refused = http.post("/v1/completions", json={"prompt": "Hi", "n": 3, "max_tokens": 1})
    assert assert_envelope(refused, 400)["param"] == "n"  # --max-n 2

    def logged() -> list[dict]:
        # text format: `2026-12-01T15:40:00.123Z INFO strata_server.access: {"event":"request",...}`
        access = [line for line in ops_server.log().splitlines() if " INFO strata_server.access: " in line]
        assert all(ISO_TIME.match(line) for line in access)
        return [json.loads(line.split(": ", 1)[1]) for line in access]

    wanted = {"ops-42", refused.headers["x-request-id"]}
    poll(lambda: wanted <= {entry["request_id"] for entry in logged()}, "both requests are logged")
    lines, log = logged(), ops_server.log()
    line = next(entry for entry in lines if entry["request_id"] == "ops-42")
    assert line["route"] == "/v1/completions" and line["status"] == 200
    assert line["prompt_tokens"] >= 1 and line["completion_tokens"] == 2 and line["cached_tokens"] is not None
    assert line["queue_s"] is not None and line["ttft_s"] is not None and line["total_s"] > 0
    assert any(e["request_id"] == refused.headers["x-request-id"] and e["status"] == 400 for e in lines)
    assert KEYS["flag"] not in log and KEYS["env"] not in log


def test_metrics_carry_the_operator_series(http: httpx.Client) -> None:
    """Every operator series is there, and the counters move by exactly this test's own reply."""
    wait_idle(http)  # nothing else adds to the counters meanwhile
    model_name = http.get("/v1/models").json()["data"][0]["id"]
    vllm = {"model_name": model_name, "engine": "0"}  # vLLM's label set
    before = http.get("/metrics").text
    reply = http.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 1})
    assert reply.status_code == 200, reply.text
    usage, finish = reply.json()["usage"], reply.json()["choices"][0]["finish_reason"]
    text = http.get("/metrics").text
    for name in (
        "strata:num_requests_waiting",
        "strata:num_requests_running",
        "strata:kv_blocks_free",
        "strata:kv_cache_usage_perc",
        "strata:prefix_cache_hit_rate",
        "strata:time_to_first_token_seconds_bucket",
        "strata:inter_token_latency_seconds_bucket",
        "strata:e2e_request_latency_seconds_bucket",
    ):
        assert sample(text, name, **vllm) >= 0

    def moved(name: str, **labels: str) -> float:
        """How far a counter moved over the reply (a series first made by the reply was 0)."""
        try:
            earlier = sample(before, name, **labels)
        except AssertionError:
            earlier = 0.0
        return sample(text, name, **labels) - earlier

    assert moved("strata:prompt_tokens_total", **vllm) == usage["prompt_tokens"] > 0
    assert moved("strata:generation_tokens_total", **vllm) == usage["completion_tokens"] == 1
    assert moved("strata:request_success_total", **vllm, finished_reason=finish) == 1
    completions = {"model_name": model_name, "route": "/v1/completions", "status": "200"}
    assert moved("strata_requests_total", **completions) == 1
    assert sample(text, "strata:max_queue", **vllm) == 1
    assert sample(text, "strata_kernels_info", model_name=model_name, invariant="true") == 1


def test_keys_from_flag_and_environment_and_no_cors(ops_server: ServerProcess) -> None:
    with httpx.Client(base_url=ops_server.url, timeout=10) as client:
        for key in KEYS.values():
            assert client.get("/v1/models", headers={"authorization": f"Bearer {key}"}).status_code == 200
        wrong = client.get("/v1/models", headers={"authorization": "Bearer nope"})
        assert_envelope(wrong, 401, "invalid_api_key")
        reply = client.get("/health", headers={"origin": "https://elsewhere.example"})
        assert reply.status_code == 200 and "access-control-allow-origin" not in reply.headers


def test_sigterm_drains_then_exits_zero() -> None:
    with server_process(
        "--parallel", "1", "--threads", "1", "--shutdown-grace", "600", "--log-level", "warning"
    ) as server:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            body = {**LONG, "max_tokens": 300, "stream": True}  # outlasts the checks (asserted below)
            with http.stream("POST", "/v1/completions", json=body) as stream:
                lines = first_chunk(stream)
                server.process.send_signal(signal.SIGTERM)
                with httpx.Client(base_url=server.url, timeout=5) as other:
                    poll(lambda: other.get("/health").status_code == 503, "/health turns 503")
                    refused = other.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 1})
                    assert_envelope(refused, 503, "shutting_down")
                    running = sample(other.get("/metrics").text, "strata:num_requests_running")
                assert running == 1  # the checks above ran while the request was generating
                rest = list(lines)
            events = [json.loads(line[6:]) for line in rest if line.startswith("data: {")]
            assert "choices" in events[-1], events[-1]
            assert events[-1]["choices"][0]["finish_reason"] == "length"  # finished in full
            assert "data: [DONE]" in rest
        assert server.process.wait(timeout=10) == 0


def test_a_second_signal_exits_at_once() -> None:
    grace = ("--shutdown-grace", "600", "--log-level", "warning")
    with (
        server_process("--parallel", "1", "--threads", "1", *grace) as server,
        httpx.Client(base_url=server.url, timeout=30) as http,
        http.stream("POST", "/v1/completions", json={**LONG, "stream": True}) as stream,
    ):
        lines = first_chunk(stream)  # generating, for far longer than the test (held: see above)
        server.process.send_signal(signal.SIGTERM)
        poll(lambda: http.get("/health").status_code == 503, "draining")
        assert metric(http, "strata:num_requests_running") == 1  # the long request is still running
        assert server.process.poll() is None and next(lines) == ""
        server.process.send_signal(signal.SIGINT)
        assert server.process.wait(timeout=10) == 1
