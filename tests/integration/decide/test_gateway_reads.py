"""The gateway in front of the real server: a caller that leaves stops its reads.

The gateway runs in-process on a free port in front of the `server_url` fixture's server.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import httpx
import pytest

from strata_decide.gateway import GatewayConfig
from strata_decide.gateway.serve import background

OPTIONS = {f"option {k}": None for k in range(5)}


@pytest.fixture(scope="module")
def gateway(server_url: str) -> Iterator[str]:
    with background(GatewayConfig(upstream=server_url)) as url:
        yield url


def completions_seen(server_url: str) -> int:
    """Completions the server has answered (any status), from its metrics."""
    text = httpx.get(f"{server_url}/metrics", timeout=30).text
    pattern = r'^strata_requests_total\{[^}]*route="/v1/completions"[^}]*\} ([0-9.e+]+)$'
    return int(sum(float(v) for v in re.findall(pattern, text, re.M)))


def test_reads_stop_when_the_caller_leaves(gateway: str, server_url: str) -> None:
    """40 questions x 5 rotations is 200 reads; the caller leaves after 1 s. Its reads went on
    (58 of them 20 s later, and a SIGTERM waited for them); now at most those in flight end."""
    questions = {
        f"q{i}": {"type": "choice", "instructions": f"Which {i}?", "criteria": OPTIONS} for i in range(40)
    }
    body = {
        "model": "jev-latest",
        "state": "A customer writes.",
        "questions": questions,
        "x_strata": {"rotations": True},
    }
    one = {**body, "questions": {"q0": questions["q0"]}, "x_strata": {}}
    assert httpx.post(f"{gateway}/v1/systemone", json=one, timeout=120).status_code == 200  # labels fetched
    before = completions_seen(server_url)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{gateway}/v1/systemone", json=body, timeout=1.0)
    time.sleep(1.0)  # reads in flight when it left end (or are aborted) within this
    left = completions_seen(server_url)
    time.sleep(1.5)
    after = completions_seen(server_url)
    assert after == left, (before, left, after)
    assert 0 < after - before < 200
