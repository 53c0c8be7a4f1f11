"""Under `--parallel 2`, overlapping requests each get exactly the rows they get alone.

Overlap is made, then checked, before any bits are compared: the long request is a stream
read up to its first chunk (so it is generating), the other request runs to its end meanwhile,
and `/metrics` must still show the long one running afterwards. A host fast enough to finish
the long request first fails the overlap check instead of passing without testing anything.
Both directions: a request that joins the long one's batch and leaves it, and the long one
joining a batch that already runs a request which then leaves it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from strata_server.launch import running_server

# Long by construction: ignore_eos and far more tokens than the other request takes.
LONG = {"prompt": "Write a long story about a dragon who", "max_tokens": 300, "ignore_eos": True}
SHORT = {"prompt": "The three primary colours are", "max_tokens": 3}
SAMPLED = {"prompt": "My favourite food is", "max_tokens": 12, "temperature": 0.9, "seed": 3}
# Runs far longer than any test here (it is left, and so aborted, by the client).
ENDLESS = {"prompt": "Count forever: 1, 2, 3,", "max_tokens": 4000, "ignore_eos": True}
DEADLINE_S = 30.0

Rows = tuple[str, list[Any], list[Any], list[Any], list[Any]]


def metric(http: httpx.Client, name: str) -> float:
    """One series of /metrics; a missing series fails the test (a renamed metric is a bug here)."""
    for family in text_string_to_metric_families(http.get("/metrics").text):
        for sample in family.samples:
            if sample.name == name:
                return sample.value
    raise AssertionError(f"{name} not in /metrics")


def running(http: httpx.Client) -> float:
    return metric(http, "strata:num_requests_running")


def wait_until_idle(http: httpx.Client, within_s: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + within_s
    while running(http):
        assert time.monotonic() < deadline, f"a request still runs after {within_s} s"
        time.sleep(0.05)


def assemble(lines: Iterator[str]) -> Rows:
    """A streamed completion's text and logprob rows, joined in order."""
    text, tokens, values, tops, offsets = "", [], [], [], []
    for line in lines:
        if not line.startswith("data: {"):
            continue
        choice = json.loads(line[6:])["choices"][0]
        text += choice["text"]
        lp = choice["logprobs"]
        tokens += lp["tokens"]
        values += lp["token_logprobs"]
        tops += lp["top_logprobs"]
        offsets += lp["text_offset"]
    return text, tokens, values, tops, offsets


def poll(condition: Callable[[], bool], what: str, within_s: float = DEADLINE_S) -> None:
    """Wait until `condition()` holds; fail naming `what` at the deadline."""
    deadline = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {within_s} s: {what}"
        time.sleep(0.02)


def streamed(
    http: httpx.Client,
    body: dict,
    during: Callable[[], None] | None = None,
    read_timeout: float | None = None,
) -> Rows:
    """`body` streamed with 5 alternatives per token; `during` runs once its first chunk is read.

    `read_timeout`: the longest wait for any one chunk (default: the client's)."""
    payload = {"temperature": 0, **body, "logprobs": 5, "stream": True}
    timeout = http.timeout if read_timeout is None else httpx.Timeout(read_timeout)
    with http.stream("POST", "/v1/completions", json=payload, timeout=timeout) as response:
        assert response.status_code == 200
        lines = response.iter_lines()
        first = next(lines)
        assert first.startswith("data: {")
        if during is not None:
            during()
        return assemble(iter([first, *lines]))


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    """Its own server: no other module's requests share the batch, and one kernel thread
    (a busy-waiting thread pool on a shared CI machine slows each step by orders of magnitude)."""
    with running_server("--parallel", "2", "--threads", "1", "--log-level", "warning") as url:
        yield url


@pytest.fixture
def http(server_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server_url, timeout=300) as client:
        wait_until_idle(client)  # nothing from an earlier test shares the batch unplanned
        yield client


def overlapped(http: httpx.Client, other: dict) -> tuple[Rows, Rows]:
    """LONG streamed, with `other` run to its end while LONG is generating; (long, other)."""
    seen: list[Rows] = []

    def run_other() -> None:
        seen.append(streamed(http, other))
        assert running(http) >= 1, "LONG ended before the other request did: no overlap to test"

    long_rows = streamed(http, LONG, during=run_other)
    return long_rows, seen[0]


def test_overlapping_requests_get_their_own_rows(http: httpx.Client) -> None:
    long_alone, short_alone = streamed(http, LONG), streamed(http, SHORT)
    long_both, short_both = overlapped(http, SHORT)  # overlap asserted inside
    assert len(long_both[1]) == len(long_alone[1]) == LONG["max_tokens"]
    assert short_both == short_alone
    assert long_both == long_alone


def test_sampled_requests_with_seeds_are_independent_of_company(http: httpx.Client) -> None:
    alone = streamed(http, SAMPLED)
    _, together = overlapped(http, SAMPLED)
    assert together == alone


def test_a_request_that_leaves_during_a_long_one_changes_none_of_its_rows(http: httpx.Client) -> None:
    """The other direction: LONG joins a batch where another request is generating (so LONG
    prefills and decodes in the batch's second place), that request leaves while LONG runs, and
    LONG ends alone in the first place. Its rows are the ones it gets alone."""
    alone = streamed(http, LONG)
    with http.stream("POST", "/v1/completions", json={**ENDLESS, "stream": True}) as first:
        first_lines = first.iter_lines()  # held: a dropped line iterator closes the response
        assert next(first_lines).startswith("data: {")  # generating, for far longer than LONG

        def leave() -> None:
            assert running(http) == 2, "LONG did not join the running request"
            first.close()  # the client leaves: the server aborts it at the engine's next step
            poll(lambda: running(http) < 2, "the request that left is gone from the batch")
            # 0: LONG ended first (no overlap to test) or was dropped from the batch with the other
            assert running(http) == 1, "LONG no longer runs once the other request left"

        # every chunk comes within the deadline: a LONG dropped from the batch fails, not hangs
        joined = streamed(http, LONG, during=leave, read_timeout=DEADLINE_S)
    assert len(joined[1]) == LONG["max_tokens"]
    assert joined == alone


def test_a_client_that_gives_up_frees_its_slot(http: httpx.Client) -> None:
    body = {"prompt": "Count forever: 1, 2, 3,", "max_tokens": 4000, "ignore_eos": True}
    with pytest.raises(httpx.ReadTimeout):
        http.post("/v1/completions", json=body, timeout=1.0)
    wait_until_idle(http)
    assert metric(http, "strata:kv_blocks_used") == 0


def test_a_disconnected_stream_frees_its_slot(http: httpx.Client) -> None:
    body = {"prompt": "Count forever: 1, 2, 3,", "max_tokens": 4000, "ignore_eos": True, "stream": True}
    with http.stream("POST", "/v1/completions", json=body) as response:
        lines = response.iter_lines()
        assert next(lines).startswith("data: ")
        assert running(http) == 1
    # the connection is closed; the engine must abort the request (4000 tokens would take minutes)
    wait_until_idle(http)
    assert http.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 1}).status_code == 200
