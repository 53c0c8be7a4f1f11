"""Retries happen exactly on connection failures, 429 and 503; timeouts surface typed."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from strata_client import (
    APIConnectionError,
    APITimeoutError,
    BadRequestError,
    InternalServerError,
    RateLimitError,
    StrataClient,
)
from strata_client._retry import MAX_RETRY_AFTER_S, retry_delay

OK_MODELS = {"object": "list", "data": [{"id": "m"}]}


def test_503_then_200_takes_two_calls(client, mock, sleeps):
    route = mock.get("/v1/models")
    route.side_effect = [httpx.Response(503), httpx.Response(200, json=OK_MODELS)]
    assert client.models.list().data[0].id == "m"
    assert route.call_count == 2
    assert len(sleeps) == 1 and 0.375 <= sleeps[0] <= 0.5  # first backoff, with jitter


def test_400_is_never_retried(client, mock, sleeps):
    route = mock.post("/v1/completions").respond(400, json={"error": {"message": "no"}})
    with pytest.raises(BadRequestError):
        client.completions.create(model="m", prompt="x")
    assert route.call_count == 1 and sleeps == []


def test_500_is_not_retried(client, mock, sleeps):
    route = mock.post("/v1/completions").respond(500, json={"error": {"message": "bug"}})
    with pytest.raises(InternalServerError):
        client.completions.create(model="m", prompt="x")
    assert route.call_count == 1 and sleeps == []


def test_429_honours_retry_after(client, mock, sleeps):
    route = mock.get("/v1/models")
    route.side_effect = [
        httpx.Response(429, headers={"Retry-After": "2"}),
        httpx.Response(429, headers={"Retry-After": "0.25"}),
        httpx.Response(200, json=OK_MODELS),
    ]
    client.models.list()
    assert route.call_count == 3
    assert sleeps == [2.0, 0.25]


def test_retries_stop_after_max_retries_and_raise_the_last_error(client, mock, sleeps):
    route = mock.get("/v1/models").respond(429, json={"error": {"message": "slow down"}})
    with pytest.raises(RateLimitError, match="slow down"):
        client.models.list()
    assert route.call_count == 3  # one try + max_retries=2
    assert len(sleeps) == 2 and sleeps[1] > sleeps[0]  # exponential backoff


def test_connection_errors_are_retried_then_raised(client, mock, sleeps):
    route = mock.get("/v1/models").mock(side_effect=httpx.ConnectError("refused"))
    with pytest.raises(APIConnectionError) as info:
        client.models.list()
    assert not isinstance(info.value, APITimeoutError)
    assert route.call_count == 3


def test_connection_error_then_success(client, mock, sleeps):
    route = mock.get("/v1/models")
    route.side_effect = [httpx.ConnectError("refused"), httpx.Response(200, json=OK_MODELS)]
    assert client.models.list().data[0].id == "m"
    assert route.call_count == 2


def test_read_timeout_is_an_api_timeout_error_and_not_retried(client, mock, sleeps):
    route = mock.post("/v1/completions").mock(side_effect=httpx.ReadTimeout("slow"))
    with pytest.raises(APITimeoutError):
        client.completions.create(model="m", prompt="x")
    assert route.call_count == 1


def test_connect_timeout_is_retried_and_raised_as_timeout(client, mock, sleeps):
    route = mock.get("/v1/models").mock(side_effect=httpx.ConnectTimeout("no route"))
    with pytest.raises(APITimeoutError):
        client.models.list()
    assert route.call_count == 3


def test_per_call_timeout_reaches_the_request(client, mock):
    route = mock.post("/v1/completions").respond(200, json={"choices": []})
    client.completions.create(model="m", prompt="x", timeout=1.5)
    client.completions.create(model="m", prompt="x")
    first, second = (call.request.extensions["timeout"] for call in route.calls)
    assert first["read"] == 1.5
    assert second["read"] == 60.0  # the client default: finite, not httpx's 5 s


def test_retry_after_is_capped_and_http_dates_are_read():
    far = httpx.Response(429, headers={"Retry-After": "86400"})
    assert retry_delay(0, far) == MAX_RETRY_AFTER_S
    past_date = httpx.Response(503, headers={"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"})
    assert retry_delay(0, past_date) == 0.0
    garbage = httpx.Response(503, headers={"Retry-After": "soon"})
    assert 0.375 <= retry_delay(0, garbage) <= 0.5  # falls back to backoff


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A real socket that accepts connections and never answers."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.05)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    listener.close()


def test_a_real_silent_server_times_out_within_the_call_timeout(silent_server):
    with StrataClient(base_url=silent_server, timeout=30.0) as client:
        started = time.monotonic()
        with pytest.raises(APITimeoutError):
            client.completions.create(model="m", prompt="x", timeout=0.2)
        assert time.monotonic() - started < 2.0
