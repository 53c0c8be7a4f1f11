"""Hostile requests against the real server on the real model: each is a clear 4xx naming its
field (and the flag that lifts the bound), the event loop keeps answering `/health` within
100 ms while the request is handled, the log stays small, and slow clients are cut off.

A server of its own (module scope) with short connection timeouts, so the slow-client tests
run in seconds and its log can be read.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from strata_server.launch import ServerProcess, server_process

# The target is 100 ms (tools/hostile.py reports the figure); a test on a shared, loaded
# machine allows scheduling noise on top. A blocked event loop adds the request's whole
# duration: seconds for every row here.
HEALTH_BUDGET_S = 0.5
HEADER_TIMEOUT_S = 2.0
BODY_TIMEOUT_S = 3.0
MAX_CONNECTIONS = 64
MAX_CLIENT_CONNECTIONS = 24
ANSWER_BYTES = 2**19  # between the old estimate of 500 prompt_logprobs rows (352 KB) and their size


@pytest.fixture(scope="module")
def hostile_server() -> Iterator[ServerProcess]:
    with server_process(
        "--model",
        "default",
        "--parallel",
        "2",
        "--header-timeout",
        str(HEADER_TIMEOUT_S),
        "--body-timeout",
        str(BODY_TIMEOUT_S),
        "--trust-request-chat-template",  # the opt-in flag's templates are attacked too
        "--max-answer-bytes",
        str(ANSWER_BYTES),
        "--max-connections",
        str(MAX_CONNECTIONS),
        "--max-client-connections",
        str(MAX_CLIENT_CONNECTIONS),
    ) as server:
        yield server


class HealthPoller:
    """Polls /health from its own thread while a request runs; keeps the worst latency."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.worst = 0.0
        self.polls = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=30.0) as client:
            client.get(f"{self.url}/health")  # connect once, outside the measurement
            while not self._stop.is_set():
                started = time.perf_counter()
                assert client.get(f"{self.url}/health").status_code == 200
                self.worst = max(self.worst, time.perf_counter() - started)
                self.polls += 1
                time.sleep(0.01)

    def __enter__(self) -> HealthPoller:
        self._thread.start()
        time.sleep(0.05)
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def post(url: str, path: str, body: dict[str, Any] | bytes) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(
        f"{url}{path}", content=content, headers={"content-type": "application/json"}, timeout=120.0
    )


def refused(reply: httpx.Response, param: str, flag: str | None = None) -> dict[str, Any]:
    assert reply.status_code == 400, reply.text[:500]
    error = reply.json()["error"]
    assert error["param"] == param, error
    if flag is not None:
        assert flag in error["message"], error
    return error


def during_health(url: str, request: Callable[[], httpx.Response]) -> tuple[httpx.Response, float]:
    """The reply, and how much the request added to the worst /health latency: the worst poll
    while it ran less the worst of an idle second before (a busy test machine delays every
    poll alike; a blocked event loop delays them by the request's whole duration)."""
    with HealthPoller(url) as idle:
        time.sleep(1.0)
    with HealthPoller(url) as poller:
        reply = request()
    return reply, max(poller.worst - idle.worst, 0.0)


def test_a_huge_tokenize_prompt_is_refused_by_its_limit(hostile_server: ServerProcess) -> None:
    url = hostile_server.url
    reply, added = during_health(url, lambda: post(url, "/tokenize", {"prompt": "hello world " * 825_000}))
    refused(reply, "prompt", "--max-prompt-chars")
    assert added < HEALTH_BUDGET_S


def test_tokenizing_a_large_prompt_leaves_health_answering(hostile_server: ServerProcess) -> None:
    url = hostile_server.url
    text = "hello world " * 80_000  # 960,000 characters: under the limit, seconds of tokenizing
    reply, added = during_health(url, lambda: post(url, "/tokenize", {"prompt": text}))
    assert reply.status_code == 200
    assert reply.json()["count"] == 160_001  # BOS-free model: 2 tokens per repeat, + 1 for the first
    assert added < HEALTH_BUDGET_S, added


def test_a_thousand_prompts_times_four_is_refused_on_n(hostile_server: ServerProcess) -> None:
    url = hostile_server.url
    reply = post(url, "/v1/completions", {"prompt": [[1, 2, 3]] * 1000, "n": 4, "max_tokens": 1})
    refused(reply, "n", "--max-n")
    assert httpx.get(f"{url}/health").status_code == 200


def test_every_vocabulary_id_named_with_echo_is_refused(hostile_server: ServerProcess) -> None:
    body = {
        "prompt": list(range(1, 101)),
        "max_tokens": 1,
        "echo": True,
        "logprobs": 0,
        "logprob_token_ids": list(range(49_152)),
    }
    refused(post(hostile_server.url, "/v1/completions", body), "logprob_token_ids", "--max-logprob-ids")


def test_allowed_ids_do_not_lift_the_listing_past_its_limit(hostile_server: ServerProcess) -> None:
    body = {
        "prompt": list(range(1, 101)),
        "max_tokens": 1,
        "echo": True,
        "logprobs": 5000,
        "allowed_token_ids": list(range(5000)),
    }
    refused(post(hostile_server.url, "/v1/completions", body), "logprobs", "--max-logprob-ids")


def test_a_large_answer_is_refused_before_it_runs(hostile_server: ServerProcess) -> None:
    body = {
        "prompt": list(range(1, 2001)),
        "max_tokens": 1,
        "echo": True,
        "logprobs": 1000,
        "allowed_token_ids": list(range(1000)),
        "n": 8,
    }
    refused(post(hostile_server.url, "/v1/completions", body), "logprobs", "--max-answer-bytes")


def test_the_answer_estimate_holds_answers_within_their_bound(hostile_server: ServerProcess) -> None:
    """`prompt_logprobs` take about 65 bytes a value: the estimate's old 32 let a 715 KB answer
    through a 512 KiB bound (and 2.86 MB through 2 MiB); now it is refused, and an answer the
    estimate lets through fits."""
    body = {"prompt": list(range(1000, 1500)), "max_tokens": 1, "prompt_logprobs": 20}
    refused(post(hostile_server.url, "/v1/completions", body), "prompt_logprobs", "--max-answer-bytes")
    body["prompt"] = list(range(1000, 1120))
    reply = post(hostile_server.url, "/v1/completions", body)
    assert reply.status_code == 200 and len(reply.content) <= ANSWER_BYTES, len(reply.content)


def test_two_thousand_long_stop_strings_are_refused(hostile_server: ServerProcess) -> None:
    stops = [f"{i:04d}" + "x" * 996 for i in range(2000)]
    body = {"prompt": "Hello", "max_tokens": 2, "stop": stops}
    refused(post(hostile_server.url, "/v1/completions", body), "stop", "--max-stop-strings")


@pytest.mark.parametrize(("options", "n"), [(30_000, 1), (3_000, 64)])
def test_huge_guided_choice_is_a_400_and_health_answers(hostile_server: ServerProcess, options, n) -> None:
    url = hostile_server.url
    body = {
        "prompt": "Pick:",
        "max_tokens": 4,
        "n": n,
        "guided_choice": [f"option {i}" for i in range(options)],
    }
    reply, added = during_health(url, lambda: post(url, "/v1/completions", body))
    refused(reply, "guided_choice", "--max-choice-options")
    assert added < HEALTH_BUDGET_S


def test_a_grammar_past_llguidance_limits_is_a_400_and_not_logged(hostile_server: ServerProcess) -> None:
    """A grammar within the server's limits but past llguidance's parser limits (a row of 3,000
    items) fails while generating: a 400 naming the field, and the grammar never reaches the log."""
    grammar = "start: " + " | ".join(f'"zq{i}"' for i in range(3000))
    body = {"prompt": "Pick:", "max_tokens": 4, "temperature": 0, "guided_grammar": grammar}
    reply = post(hostile_server.url, "/v1/completions", body)
    error = refused(reply, "guided_grammar")
    assert "zq2999" not in error["message"]
    assert "zq2999" not in hostile_server.log()
    assert "Traceback" not in hostile_server.log()


def test_a_five_thousand_digit_bias_key_is_a_400(hostile_server: ServerProcess) -> None:
    body = {"prompt": "Hi", "max_tokens": 1, "logit_bias": {"1" * 5000: 1.0}}
    error = refused(post(hostile_server.url, "/v1/completions", body), "logit_bias")
    assert len(error["message"]) < 200


def test_a_json_string_schema_nested_thousands_deep_is_a_400(hostile_server: ServerProcess) -> None:
    body = {"prompt": "Hi", "max_tokens": 1, "guided_json": "[" * 3000 + "]" * 3000}
    refused(post(hostile_server.url, "/v1/completions", body), "guided_json", "--max-schema-depth")


def test_a_schema_nested_deep_with_closed_objects_is_a_400(hostile_server: ServerProcess) -> None:
    schema = '{"type": "string"}'
    for _ in range(450):  # 900 levels of objects: a property's schema inside `properties`
        schema = '{"type": "object", "properties": {"a": ' + schema + "}}"
    body = (
        '{"prompt": "Hi", "max_tokens": 1, "structured_outputs": {"json": '
        + schema
        + ', "disable_additional_properties": true}}'
    ).encode()
    refused(post(hostile_server.url, "/v1/completions", body), "structured_outputs", "--max-schema-depth")
    assert "Traceback" not in hostile_server.log()


def test_keyless_tokenizing_does_not_hold_up_a_completion(hostile_server: ServerProcess) -> None:
    """Eight keyless /tokenize requests of 60,000 CJK characters at once, then a one-token
    completion: the tokenizer routes have a worker of their own, so the completion is not
    queued behind them on the shared pool (with 150,000 characters it was: 0.16 s became 6.1 s;
    now 0.65 s, the GIL shared with the one tokenizing thread)."""
    url = hostile_server.url
    text = "漢字仮名交じり文" * 7_500  # 60,000 characters
    completion = {"prompt": "Hello", "max_tokens": 1, "temperature": 0}
    started = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        tokenizing = [pool.submit(post, url, "/tokenize", {"prompt": text}) for _ in range(8)]
        time.sleep(0.3)
        sent = time.perf_counter()
        assert post(url, "/v1/completions", completion).status_code == 200
        waited = time.perf_counter() - sent
        statuses = [f.result().status_code for f in tokenizing]
    took = time.perf_counter() - started
    assert set(statuses) <= {200, 429} and 200 in statuses, statuses
    assert waited < 0.5 * took, (waited, took)  # it was 0.8: the completion came last


HOSTILE_TEMPLATES = [
    "{{ (7**12000000) % 10 }}",  # folded while compiling: froze the server for 18.9 s
    "{{ 2**100000 }}",  # a 500 with a traceback
    '{% if messages|length > 5 %}{{ "a" * 10**8 }}{% endif %}',  # 100 MB, then kept in the cache
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",  # never ended
    "{{" * 5000,  # RecursionError while parsing
]


def test_hostile_request_templates_are_400s_naming_chat_template(hostile_server: ServerProcess) -> None:
    url = hostile_server.url
    messages = [{"role": "user", "content": "hi"}] * 6

    def send_all() -> httpx.Response:
        replies = [
            httpx.post(f"{url}/tokenize", json={"messages": messages, "chat_template": t}, timeout=15.0)
            for t in HOSTILE_TEMPLATES
        ]
        for reply, template in zip(replies, HOSTILE_TEMPLATES, strict=True):
            assert reply.status_code == 400, (template[:40], reply.text[:300])
            assert reply.json()["error"]["param"] == "chat_template", reply.text[:300]
        return replies[0]

    _, added = during_health(url, send_all)
    assert added < HEALTH_BUDGET_S, added
    assert "Traceback" not in hostile_server.log()


@pytest.mark.parametrize(
    ("body", "param", "flag"),
    [
        ({"prompt": ["a"] * 1_000_000, "max_tokens": 1}, "n", "--max-n"),  # was 6.4 s of tokenising
        ({"prompt": ["ab " * 333_333] * 10, "max_tokens": 1}, "prompt", "--max-prompt-chars"),  # was 7.2 s
    ],
)
def test_counts_and_characters_are_refused_before_tokenising(
    hostile_server: ServerProcess, body: dict[str, Any], param: str, flag: str
) -> None:
    content = json.dumps(body).encode()
    started = time.perf_counter()
    refused(post(hostile_server.url, "/v1/completions", content), param, flag)
    assert time.perf_counter() - started < 2.5  # decoding the body only


def test_blind_cross_site_requests_and_rebound_hosts_are_refused(hostile_server: ServerProcess) -> None:
    """A page on another site may POST text/plain without a preflight, and may point its own
    name at 127.0.0.1 (DNS rebinding): both were 200s."""
    url = hostile_server.url
    body = json.dumps({"prompt": "Hello", "max_tokens": 1}).encode()
    for path in ("/v1/completions", "/tokenize"):
        headers = {"content-type": "text/plain", "origin": "https://evil.example"}
        reply = httpx.post(f"{url}{path}", content=body, headers=headers, timeout=30)
        assert reply.status_code == 415, (path, reply.text[:200])
    for path in ("/health", "/v1/models"):
        reply = httpx.get(f"{url}{path}", headers={"host": "attacker.example"}, timeout=30)
        assert reply.status_code == 400 and reply.json()["error"]["code"] == "invalid_host"
    assert post(url, "/v1/completions", body).status_code == 200  # JSON to 127.0.0.1 as ever


def test_one_client_cannot_hold_every_connection(hostile_server: ServerProcess) -> None:
    """More idle connections than --max-connections from one address: every request, /health
    too, was a 503 until the header timeout; now past its share they are closed, and another
    client (127.0.0.2, loopback too) is served."""
    url = hostile_server.url
    host, port = url.removeprefix("http://").split(":")
    idle = []
    try:
        for _ in range(MAX_CONNECTIONS + 6):
            idle.append(socket.create_connection((host, int(port)), timeout=5))
        time.sleep(0.3)
        with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"), timeout=10) as other:
            reply = other.get(f"{url}/health")
        assert reply.status_code == 200, reply.text[:200]
    finally:
        for sock in idle:
            sock.close()


def _trickle(url: str, first: bytes, rest: bytes, pause_s: float, give_up_s: float) -> tuple[float, bytes]:
    """Send `first`, then `rest` a byte per `pause_s`; return (seconds until the server closed or
    answered, what it sent)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=give_up_s) as sock:
        sock.settimeout(pause_s)
        started = time.monotonic()
        sock.sendall(first)
        received = b""
        for byte in rest:
            try:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                received += chunk
                break
            except TimeoutError:
                pass
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                break
            if time.monotonic() - started > give_up_s:
                break
        return time.monotonic() - started, received


def test_headers_sent_a_byte_at_a_time_are_cut_off(hostile_server: ServerProcess) -> None:
    request = b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n" + b"X-Slow: " + b"a" * 200 + b"\r\n\r\n"
    elapsed, _ = _trickle(hostile_server.url, b"", request, 0.2, 30.0)
    assert elapsed < HEADER_TIMEOUT_S + 2.0


def test_a_body_sent_a_byte_at_a_time_is_cut_off(hostile_server: ServerProcess) -> None:
    body = json.dumps({"prompt": "Hello " * 50, "max_tokens": 1}).encode()
    head = (
        b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n"
    )
    elapsed, received = _trickle(hostile_server.url, head, body, 0.2, 30.0)
    assert elapsed < BODY_TIMEOUT_S + 2.0
    assert received.startswith(b"HTTP/1.1 408"), received[:200]
    assert httpx.get(f"{hostile_server.url}/health").status_code == 200
