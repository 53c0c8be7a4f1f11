"""Integration fixtures: the real `strata-server` on the real default model, over HTTP.

`server_url` starts `python -m strata_server --model default --port <free> --parallel 2` once
per test session, waits for `/health`, yields its base URL ("http://127.0.0.1:<port>",
without `/v1`) and stops it afterwards. Other packages' integration tests reuse it; keep its
name and behaviour stable.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

STARTUP_TIMEOUT_S = 120.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def engine_model_path() -> Path:
    """The default model's GGUF file (downloaded once into the cache if missing)."""
    from strata_engine.model_store import resolve_model

    return Path(resolve_model("default"))


def _wait_for_health(url: str, process: subprocess.Popen, log_path: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"strata-server exited early:\n{log_path.read_text()[-4000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=2.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.25)
    pytest.fail(f"strata-server not healthy after {STARTUP_TIMEOUT_S}s:\n{log_path.read_text()[-4000:]}")


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    """Base URL of a real server on the default model (`--parallel 2`)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.NamedTemporaryFile(prefix="strata-server-", suffix=".log") as log_file:
        log_path = Path(log_file.name)
        command = [
            sys.executable,
            "-m",
            "strata_server",
            "--model",
            "default",
            "--port",
            str(port),
            "--parallel",
            "2",
            "--log-level",
            "warning",
        ]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, env=env)
        try:
            _wait_for_health(url, process, log_path)
            yield url
        finally:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
