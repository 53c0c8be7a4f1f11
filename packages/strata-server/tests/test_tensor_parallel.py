"""`--tensor-parallel 2` over HTTP: two real ranks (gloo) on the default model, started with the
variables torchrun sets. The same request gives the same bits alone and under load; a rank
that dies turns the server red at once (503 for the request in flight, for `/health` and for
every later request) instead of hanging; a worker does not outlive its server.

The 2-rank vs 1-rank values are checked at the engine level (strata-engine's
test_tensor_parallel.py).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from strata_server.launch import ServerProcess, tensor_parallel_server

ARGS = (
    "--model",
    "default",
    "--served-model-name",
    "default",
    "--threads",
    "1",
    "--parallel",
    "4",
    "--log-level",
    "warning",
)
QUESTION = {"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0, "logprobs": 5}
OTHERS = [
    {"prompt": "def fibonacci(n):", "max_tokens": 12, "temperature": 0, "logprobs": 2},
    {"prompt": "Once upon a time", "max_tokens": 10, "temperature": 0, "echo": True, "logprobs": 1},
]
FAILURE_WITHIN_S = 15.0  # a dead rank is seen at the next collective, or by the 1 s heartbeat


@pytest.fixture(scope="module")
def tp_server() -> Iterator[tuple[ServerProcess, list[Any]]]:
    with tensor_parallel_server(2, *ARGS) as running:
        yield running


def complete(url: str, body: dict[str, Any], timeout: float = 120.0) -> httpx.Response:
    return httpx.post(f"{url}/v1/completions", json={"model": "default", **body}, timeout=timeout)


def logprobs_of(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["logprobs"]


def test_two_ranks_give_the_same_bits_alone_and_under_load(
    tp_server: tuple[ServerProcess, list[Any]],
) -> None:
    server, _ = tp_server
    alone = logprobs_of(complete(server.url, QUESTION))
    with ThreadPoolExecutor(4) as pool:
        replies = list(pool.map(lambda body: complete(server.url, body), [*OTHERS, QUESTION, QUESTION]))
    assert [logprobs_of(r) for r in replies[-2:]] == [alone, alone]
    assert all(r.status_code == 200 for r in replies)
    health = httpx.get(f"{server.url}/health").json()
    assert health["status"] == "ok"


def test_a_dead_rank_fails_loudly_and_does_not_hang() -> None:
    """On a server of its own (it kills the worker rank), so no test depends on running after it."""
    with tensor_parallel_server(2, *ARGS) as (server, workers):
        _kill_a_rank_mid_request(server, workers)


def _running(url: str) -> bool:
    """Whether /metrics shows a request in the engine's running batch."""
    for line in httpx.get(f"{url}/metrics", timeout=5).text.splitlines():
        if line.startswith("strata:num_requests_running"):
            return float(line.rsplit(" ", 1)[1]) >= 1
    raise AssertionError("strata:num_requests_running not in /metrics")


def _kill_a_rank_mid_request(server: ServerProcess, workers: list[Any]) -> None:
    reply: list[httpx.Response] = []
    long = {"prompt": "Write a long story.", "max_tokens": 2000, "ignore_eos": True, "temperature": 0}
    thread = threading.Thread(target=lambda: reply.append(complete(server.url, long)))
    thread.start()
    deadline = time.monotonic() + FAILURE_WITHIN_S
    while not _running(server.url):  # polled: the kill must land mid-request
        assert time.monotonic() < deadline and thread.is_alive(), "the long request never ran"
        time.sleep(0.05)
    workers[0].send_signal(signal.SIGKILL)
    started = time.monotonic()
    thread.join(FAILURE_WITHIN_S)
    assert not thread.is_alive(), "the request in flight hangs after a rank died"
    assert reply[0].status_code == 503, reply[0].text
    assert reply[0].json()["error"]["code"] == "engine_unavailable"

    health = httpx.get(f"{server.url}/health", timeout=5)
    assert health.status_code == 503 and health.json()["status"] == "failed"
    assert "rank" in health.json()["error"]
    refused = complete(server.url, QUESTION, timeout=5)
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "engine_unavailable"
    assert time.monotonic() - started < FAILURE_WITHIN_S
    assert server.process.poll() is None  # rank 0 stays up to say so (a supervisor restarts it)


def test_an_idle_server_turns_red_when_a_rank_dies() -> None:
    """No request runs: the heartbeat finds the lost rank; and a worker exits once rank 0 is gone."""
    with tensor_parallel_server(2, *ARGS) as (server, workers):
        workers[0].send_signal(signal.SIGKILL)
        deadline = time.monotonic() + FAILURE_WITHIN_S
        while httpx.get(f"{server.url}/health", timeout=5).status_code == 200:
            assert time.monotonic() < deadline, "/health stays green after a rank died"
            time.sleep(0.2)
        assert complete(server.url, QUESTION, timeout=5).status_code == 503


def test_a_worker_exits_when_rank_zero_dies() -> None:
    with tensor_parallel_server(2, *ARGS) as (server, workers):
        server.process.send_signal(signal.SIGKILL)
        assert workers[0].wait(timeout=FAILURE_WITHIN_S) != 0  # loudly, not lingering
