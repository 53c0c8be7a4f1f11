"""A hybrid recurrent file (`qwen35`, `qwen35moe` and `qwen3next`, tiny and generated) served over HTTP by the real app on the
real engine: /health, a completion with `n = 2` (each choice from its own recurrent state, the
same bits as one) and its `system_fingerprint`, and the states all given back afterwards."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from strata_engine import AsyncEngine, LLMEngine
from strata_engine.testing.tiny_hybrid_models import SPEC, SPEC_MOE, SPEC_NEXT, write_qwen35
from strata_server.app import create_app
from strata_server.context import ServerSettings
from strata_server.launch import in_process_server


@pytest.fixture(scope="module", params=[SPEC, SPEC_MOE, SPEC_NEXT], ids=lambda s: s.arch)
def served(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[tuple[str, LLMEngine]]:
    path = write_qwen35(tmp_path_factory.mktemp("hybrid") / "hybrid.gguf", request.param, seed=1)
    sync = LLMEngine(path, num_threads=2, parallel=2, kv_cache_mb=16)
    engine = AsyncEngine(sync)
    try:
        with in_process_server(create_app(engine, ServerSettings(slots=2))) as url:
            yield url, sync
    finally:
        engine.shutdown()


def test_the_hybrid_file_is_served(served: tuple[str, LLMEngine]) -> None:
    url, sync = served
    health = httpx.get(f"{url}/health", timeout=30).json()
    assert health["status"] == "ok" and health["invariant"] is True
    body = {"prompt": "hello world", "max_tokens": 6, "temperature": 0, "logprobs": 2, "n": 2}
    reply = httpx.post(f"{url}/v1/completions", json=body, timeout=60)
    assert reply.status_code == 200
    data = reply.json()
    assert data["system_fingerprint"].startswith("fp_")
    first, second = data["choices"]
    assert len(first["logprobs"]["tokens"]) == 6
    assert first["logprobs"] == second["logprobs"] and first["text"] == second["text"]
    assert sync.blocks.states is not None and sync.blocks.states.live == 0
