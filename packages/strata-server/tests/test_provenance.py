"""The system fingerprint changes exactly with what decides the bits; `/version` reports its parts."""

from __future__ import annotations

import dataclasses
import hashlib
import re
from pathlib import Path

import pytest
from litestar.testing import TestClient

from strata_server import ServerSettings, create_app
from strata_server.cli import build_parser
from strata_server.provenance import Provenance, package_version
from strata_server.settings import engine_options

SHA = "ab" * 32
BASE = Provenance(
    kernels="native-avx512", invariant=True, model_file="m.gguf", model_size=5, model_sha256=SHA
)


@pytest.mark.parametrize(
    "change",
    [
        {"model_sha256": "cd" * 32},
        {"kernels": "native-avx512-q8"},
        {"kernels": "torch"},
        {"engine_version": "9.9.9"},
        {"server_version": "9.9.9"},
        {"tensor_parallel": 2},
        {"chat_template_sha256": "ef" * 32},
        {"kernels": "triton", "gpu": "NVIDIA H200"},
        {"kv_cache_dtype": "bf16"},
        {"kv_cache_dtype": "fp16"},
    ],
)
def test_the_fingerprint_changes_with_what_may_change_the_bits(change: dict) -> None:
    assert dataclasses.replace(BASE, **change).system_fingerprint != BASE.system_fingerprint


@pytest.mark.parametrize(
    "change",
    [
        {"kernels": "native-avx2"},  # another CPU, the same arithmetic
        {"kernels": "native-neon"},
        {"kernels": "native-portable"},
        {"model_file": "renamed.gguf"},  # the bits depend on the content, not the name
        {"tensor_parallel": 1},
        {"kv_cache_dtype": "fp32"},
    ],
)
def test_the_fingerprint_ignores_what_never_changes_the_bits(change: dict) -> None:
    assert dataclasses.replace(BASE, **change).system_fingerprint == BASE.system_fingerprint


def test_the_default_kv_cache_keeps_the_fingerprint_it_had() -> None:
    """fp32 (the default) adds no part: the fingerprint is the digest of the four parts it had."""
    parts = [
        f"strata-engine={BASE.engine_version}",
        f"strata-server={BASE.server_version}",
        f"model-sha256={SHA}",
        "arithmetic=native",
    ]
    assert BASE.system_fingerprint == "fp_" + hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    assert BASE.body("m")["kv_cache_dtype"] == "fp32"


def test_the_kv_cache_dtype_flag() -> None:
    assert engine_options(build_parser().parse_args(["--model", "m"]))["kv_cache_dtype"] == "fp32"
    assert engine_options(build_parser().parse_args(["--kv-cache-dtype", "bf16"]))["kv_cache_dtype"] == "bf16"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--kv-cache-dtype", "fp8"])


def test_the_fingerprint_is_openai_shaped() -> None:
    assert re.fullmatch(r"fp_[0-9a-f]{16}", BASE.system_fingerprint)


def test_of_hashes_the_model_file(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("STRATA_HOME", str(tmp_path / "home"))
    model = tmp_path / "tiny.gguf"
    model.write_bytes(b"GGUF and weights")
    prov = Provenance.of("native-avx2", True, model)
    assert prov.model_sha256 == hashlib.sha256(b"GGUF and weights").hexdigest()
    assert (prov.model_file, prov.model_size) == ("tiny.gguf", 16)


def test_version_route_models_and_replies_carry_the_provenance(make_engine) -> None:
    app = create_app(make_engine(), ServerSettings(), BASE)
    with TestClient(app) as client:
        body = client.get("/version").json()
        assert body == {
            "version": package_version("strata-server"),
            "engine_version": package_version("strata-engine"),
            "kernels": "native-avx512",
            "kernel_target": "avx512",
            "arithmetic": "native",
            "invariant": True,
            "tensor_parallel": 1,
            "gpu": None,
            "model": {"id": "fake-model", "file": "m.gguf", "size": 5, "sha256": SHA},
            "chat_template_sha256": None,
            "kv_cache_dtype": "fp32",
            "system_fingerprint": BASE.system_fingerprint,
        }
        assert client.get("/v1/models").json()["data"][0]["sha256"] == SHA
        reply = client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2}).json()
        assert reply["system_fingerprint"] == BASE.system_fingerprint
        chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": True}
        with client.stream("POST", "/v1/chat/completions", json=chat) as stream:
            chunks = [line for line in stream.iter_lines() if line.startswith("data: {")]
        assert chunks and all(f'"system_fingerprint":"{BASE.system_fingerprint}"' in c for c in chunks)


def test_version_flag_prints_both_versions(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["--version"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.strip() == (
        f"strata-server {package_version('strata-server')} (strata-engine {package_version('strata-engine')})"
    )


def test_the_gpu_model_enters_only_the_triton_fingerprint() -> None:
    triton = dataclasses.replace(BASE, kernels="triton", gpu="NVIDIA H200")
    assert dataclasses.replace(triton, gpu="NVIDIA A100").system_fingerprint != triton.system_fingerprint
    assert Provenance.of("native-avx2", True, None).gpu is None  # a CPU server names no GPU
