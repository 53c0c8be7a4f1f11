"""Provenance on the real server and model: `/version`, the model's sha256 on `/v1/models`, and
one `system_fingerprint` on every completion and chat reply (streamed chunks too) that moves
with the arithmetic and not with the host's instruction set."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from strata_engine.kernels.native import TARGET_ENV, runnable_targets
from strata_server.launch import server_process

CHAT = [{"role": "user", "content": "Say hi."}]


@pytest.fixture(scope="module")
def http(server_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server_url, timeout=60.0) as client:
        yield client


@pytest.fixture(scope="module")
def version(http: httpx.Client) -> dict:
    return http.get("/version").json()


def test_version_names_the_model_file_by_its_sha256(version: dict, engine_model_path: Path) -> None:
    expected = hashlib.sha256(engine_model_path.read_bytes()).hexdigest()  # an independent hash
    assert version["model"]["sha256"] == expected
    assert version["model"]["file"] == engine_model_path.name
    assert version["model"]["size"] == engine_model_path.stat().st_size
    assert version["kernels"] == f"native-{version['kernel_target']}"
    assert version["arithmetic"] == "native" and version["invariant"] is True
    assert re.fullmatch(r"fp_[0-9a-f]{16}", version["system_fingerprint"])
    print("GET /version:", json.dumps(version))


def test_models_carry_the_sha256(http: httpx.Client, version: dict) -> None:
    assert http.get("/v1/models").json()["data"][0]["sha256"] == version["model"]["sha256"]


def test_every_reply_and_chunk_carries_the_fingerprint(client: OpenAI, model: str, version: dict) -> None:
    fingerprint = version["system_fingerprint"]
    completion = client.completions.create(model=model, prompt="Hello", max_tokens=2)
    assert completion.system_fingerprint == fingerprint
    chat = client.chat.completions.create(model=model, messages=CHAT, max_tokens=2)  # type: ignore[arg-type]
    assert chat.system_fingerprint == fingerprint
    print("a chat reply's system_fingerprint:", chat.system_fingerprint)
    streams = [
        client.completions.create(model=model, prompt="Hello", max_tokens=3, stream=True),
        client.chat.completions.create(
            model=model,
            messages=CHAT,  # type: ignore[arg-type]
            max_tokens=3,
            stream=True,
            stream_options={"include_usage": True},
        ),
    ]
    for stream in streams:
        chunks = list(stream)
        assert len(chunks) >= 3
        assert {chunk.system_fingerprint for chunk in chunks} == {fingerprint}


def test_another_cpu_target_keeps_the_fingerprint_q8_changes_it(version: dict) -> None:
    """Another build of the kernels on this host (AVX2 on an AVX-512 host, plain C on any
    other) computes the same bits: the same fingerprint. The 8-bit activation kernels compute
    others: another fingerprint."""
    other = next(target for target in runnable_targets() if target != version["kernel_target"])
    fingerprints = {}
    for name, args, env in (
        (other, (), {TARGET_ENV: other}),
        ("q8", ("--kernels", "native-q8"), {}),
    ):
        flags = ("--model", "default", "--parallel", "1", "--log-level", "warning", *args)
        with server_process(*flags, env=env) as server:
            body = httpx.get(f"{server.url}/version", timeout=30).json()
        fingerprints[name] = body["system_fingerprint"]
        if name == other:
            assert body["kernels"] == f"native-{other}"
        assert body["model"]["sha256"] == version["model"]["sha256"]
    assert fingerprints[other] == version["system_fingerprint"]
    assert fingerprints["q8"] != version["system_fingerprint"]


def test_the_version_flag() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "strata_server", "--version"], capture_output=True, text=True, check=True
    ).stdout
    assert re.fullmatch(r"strata-server \S+ \(strata-engine \S+\)\n", out)
