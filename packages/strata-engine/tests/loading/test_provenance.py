"""The model file's sha256 (hashed once, then remembered per path, size and mtime) and the
arithmetic names the bits depend on (never the host's CPU)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

import strata_engine.provenance as provenance
from strata_engine.provenance import arithmetic, kernel_target, model_sha256


@pytest.fixture(autouse=True)
def own_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRATA_HOME", str(tmp_path / "home"))


def test_the_digest_is_the_files_sha256_and_is_remembered(tmp_path: Path, monkeypatch) -> None:
    model = tmp_path / "m.gguf"
    data = os.urandom(3 * provenance.CHUNK_BYTES + 17)  # several chunks and a partial one
    model.write_bytes(data)
    assert model_sha256(model) == hashlib.sha256(data).hexdigest()
    monkeypatch.setattr(provenance, "file_sha256", lambda path: pytest.fail("hashed again"))
    assert model_sha256(model) == hashlib.sha256(data).hexdigest()  # from the cache
    assert model_sha256(Path(os.path.relpath(model))) == hashlib.sha256(data).hexdigest()  # same file


def test_a_changed_file_is_hashed_again(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"first")
    assert model_sha256(model) == hashlib.sha256(b"first").hexdigest()
    model.write_bytes(b"second!")  # another size
    assert model_sha256(model) == hashlib.sha256(b"second!").hexdigest()
    model.write_bytes(b"third!!")  # the same size, a later mtime
    stat = model.stat()
    os.utime(model, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert model_sha256(model) == hashlib.sha256(b"third!!").hexdigest()


def test_a_corrupt_or_foreign_cache_entry_is_not_trusted(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"weights")
    model_sha256(model)
    (entry,) = provenance.hash_cache_dir().iterdir()
    entry.write_text('{"sha256": "' + "0" * 64 + '"}')  # no key fields: not this file's
    assert model_sha256(model) == hashlib.sha256(b"weights").hexdigest()
    entry.write_text("not json")
    assert model_sha256(model) == hashlib.sha256(b"weights").hexdigest()


def test_an_unwritable_cache_still_gives_the_digest(tmp_path: Path, monkeypatch) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"weights")
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("")
    monkeypatch.setenv("STRATA_HOME", str(blocker))  # hashes/ cannot be created under a file
    assert model_sha256(model) == hashlib.sha256(b"weights").hexdigest()


@pytest.mark.parametrize(
    ("kernels", "mode", "target"),
    [
        ("native-avx512", "native", "avx512"),
        ("native-avx2", "native", "avx2"),
        ("native-neon", "native", "neon"),
        ("native-portable", "native", "portable"),
        ("native-avx512-q8", "native-q8", "avx512"),
        ("native-avx2-q8", "native-q8", "avx2"),
        ("native-avx512-fp32", "native-fp32", "avx512"),
        ("native-neon-fp32", "native-fp32", "neon"),
        ("native-avx512-limb3", "native", "avx512"),  # the default's other name
        ("native-portable-limb2", "native-limb2", "portable"),
        ("triton-q8", "native-q8", None),  # the integer modes on a GPU: the C kernels' arithmetic
        ("triton", "native", None),  # the default (three limbs) on a GPU
        ("triton-fp32", "native-fp32", None),  # the fp32 mode on a GPU: the C kernels' operations too
        ("torch", "torch", None),
    ],
)
def test_every_cpu_target_is_one_arithmetic(kernels: str, mode: str, target: str | None) -> None:
    assert arithmetic(kernels) == mode
    assert kernel_target(kernels) == target
