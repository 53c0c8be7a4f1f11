"""Faults stay local, over HTTP (issue 14): a bug inside one request's processing gives that
request a 500 in the error envelope, the request batched with it is answered normally, and
the next request is served.

The server is the real app on the real engine and model, run in this process (uvicorn on
a socket bound on 127.0.0.1) so that the bug can be planted: no input from outside can trigger one.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

import strata_engine.engine as engine_module
from strata_engine import AsyncEngine, LLMEngine
from strata_engine.model_store import resolve_model
from strata_server.app import create_app
from strata_server.context import ServerSettings
from strata_server.launch import in_process_server

POISON_LOGPROBS = 3  # the request asking for 3 alternatives meets the planted bug


@pytest.fixture(scope="module")
def in_process_url() -> Iterator[str]:
    engine = AsyncEngine(LLMEngine(resolve_model("default"), num_threads=2, parallel=2))
    try:
        with in_process_server(create_app(engine, ServerSettings(slots=2))) as url:
            yield url  # healthy, or the launcher raised
    finally:
        engine.shutdown()


def _complete(url: str, logprobs: int) -> httpx.Response:
    body = {"prompt": "Hello there", "max_tokens": 4, "temperature": 0, "logprobs": logprobs}
    return httpx.post(f"{url}/v1/completions", json=body, timeout=60)


def test_a_bug_in_one_request_is_a_500_for_it_alone(in_process_url, monkeypatch) -> None:
    real_build_row = engine_module.build_row

    def buggy_build_row(lp, token, params):
        if params.top_n == POISON_LOGPROBS:
            raise ValueError("simulated listing bug")
        return real_build_row(lp, token, params)

    monkeypatch.setattr(engine_module, "build_row", buggy_build_row)
    with ThreadPoolExecutor(2) as pool:
        good, bad = pool.map(lambda n: _complete(in_process_url, n), [1, POISON_LOGPROBS])
    assert good.status_code == 200 and len(good.json()["choices"][0]["logprobs"]["tokens"]) == 4
    assert bad.status_code == 500
    error = bad.json()["error"]
    assert set(error) >= {"message", "type", "param", "code"}
    again = _complete(in_process_url, 1)  # the engine still serves, with the same bits
    assert again.status_code == 200 and again.json()["choices"] == good.json()["choices"]
