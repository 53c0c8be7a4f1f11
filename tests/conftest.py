"""Integration fixtures: the real `strata-server` on the real default model, over HTTP.

`server_url` starts `python -m strata_server --model default --port <free> --parallel 2` once
per test session, waits for `/health`, yields its base URL ("http://127.0.0.1:<port>",
without `/v1`) and stops it afterwards. Other packages' integration tests reuse it; keep its
name and behaviour stable.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from openai import OpenAI

from strata_server.launch import running_server


@pytest.fixture(scope="session")
def engine_model_path() -> Path:
    """The default model's GGUF file (downloaded once into the cache if missing)."""
    from strata_engine.model_store import resolve_model

    return Path(resolve_model("default"))


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    """Base URL of a real server on the default model (`--parallel 2`)."""
    with running_server("--model", "default", "--parallel", "2", "--log-level", "warning") as url:
        yield url


@pytest.fixture(scope="session")
def client(server_url: str) -> OpenAI:
    """The official `openai` SDK pointed at the real server (no retries hide a failure)."""
    return OpenAI(base_url=f"{server_url}/v1", api_key="unused", timeout=120.0, max_retries=0)


@pytest.fixture(scope="session")
def model(client: OpenAI) -> str:
    """The served model's name, as `/v1/models` reports it."""
    return client.models.list().data[0].id
