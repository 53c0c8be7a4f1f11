"""Property-based fuzzing of the real server on the real model (hypothesis over HTTP).

The bodies come from the server's own OpenAPI document and mutations of it, as in the
app-level fuzz test (packages/strata-server/tests/test_fuzz_openapi.py, whose strategies this
reuses), but here every body reaches the real engine: tokenizer, chat template, grammars,
logprob listings. Whatever is sent: never a 5xx, every 4xx in the envelope, and the server
alive and healthy at the end. Bounded: a fixed number of examples per route, and a server
whose limits keep each request small (--max-tokens-limit 4, --max-n 4).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings

from strata_server.launch import ServerProcess, server_process

EXAMPLES_PER_ROUTE = 40
ROUTES = ["/v1/completions", "/v1/chat/completions", "/v1/score_candidates", "/tokenize", "/detokenize"]

# one set of body strategies for both fuzz tests
_spec = importlib.util.spec_from_file_location(
    "fuzz_openapi",
    Path(__file__).resolve().parents[3] / "packages" / "strata-server" / "tests" / "test_fuzz_openapi.py",
)
assert _spec is not None and _spec.loader is not None
fuzz_openapi = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fuzz_openapi)


@pytest.fixture(scope="module")
def fuzzed_server() -> Iterator[ServerProcess]:
    flags = ("--max-tokens-limit", "4", "--max-n", "4", "--request-timeout", "60", "--log-level", "warning")
    with server_process("--model", "default", "--parallel", "2", *flags) as server:
        yield server


@pytest.fixture(scope="module")
def document(fuzzed_server: ServerProcess) -> dict[str, Any]:
    return httpx.get(f"{fuzzed_server.url}/schema/openapi.json", timeout=30).json()


@pytest.mark.parametrize("route", ROUTES)
def test_fuzzed_bodies_on_the_real_model_never_get_a_5xx(
    fuzzed_server: ServerProcess, document: dict[str, Any], route: str
) -> None:
    schema = document["paths"][route]["post"]["requestBody"]["content"]["application/json"]["schema"]

    with httpx.Client(base_url=fuzzed_server.url, timeout=120.0) as client:

        @settings(
            max_examples=EXAMPLES_PER_ROUTE,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(body=fuzz_openapi.mutated(fuzz_openapi.from_schema(schema, document)))
        def fuzz(body: Any) -> None:
            fuzz_openapi.check(client.post(route, json=body))

        fuzz()
    assert fuzzed_server.process.poll() is None
    assert httpx.get(f"{fuzzed_server.url}/health", timeout=10).status_code == 200
    assert "Traceback" not in fuzzed_server.log()
