"""What a first start says: the kernel build is announced before the wait, and the download's
size is one figure, the same in the log and in README.md."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import pytest

from strata_engine.kernels import native
from strata_engine.kernels.native import build
from strata_engine.model_store import DEFAULT_DOWNLOAD

README = Path(__file__).resolve().parents[3] / "README.md"
ANNOUNCED = "compiling the kernels for this CPU (once, about 20 s)"


def test_the_kernel_build_is_announced_once_and_only_for_the_kernels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def fake_run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        if cmd[-1] != "--version":  # a build: an empty library where it was asked for
            Path(cmd[cmd.index("-o") + 1]).write_bytes(b"")
        return subprocess.CompletedProcess(cmd, 0, "fake cc 1.0", "")

    monkeypatch.setenv("STRATA_HOME", str(tmp_path))
    monkeypatch.setattr(build, "_run", fake_run)
    build.compiler.cache_clear()
    caplog.set_level(logging.INFO, logger="strata_engine")
    try:
        native.compile_library([native.PROBE], [], "probe")  # the CPU probe: a second, no message
        assert ANNOUNCED not in caplog.text
        native.compile_library(list(native.SOURCES), [], "kernels")
        assert caplog.text.count(ANNOUNCED) == 1
        native.compile_library(list(native.SOURCES), [], "kernels")  # cached: nothing to wait for
        assert caplog.text.count(ANNOUNCED) == 1
    finally:
        build.compiler.cache_clear()


def test_the_readme_gives_the_download_size_the_log_gives() -> None:
    assert f"downloads the default model ({DEFAULT_DOWNLOAD}," in README.read_text()
