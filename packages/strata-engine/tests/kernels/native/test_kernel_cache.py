"""The kernel cache loads only libraries this user built, and a hanging compiler is stopped.

A shared library is code: one planted in the cache (writable by others, owned by someone else,
or a link) must never be loaded; it is rebuilt in its place, and the planted code never runs
(checked by loading the cache's library in a fresh process). The cache directory is 0700 and
refused when another user owns it. A compiler that never finishes is killed, with everything
it started, after the time limit.
"""

from __future__ import annotations

import ctypes
import logging
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from strata_engine.kernels import native
from strata_engine.kernels.native import NativeUnavailable, build

PLANTED = 12345  # what the planted library's strata_cpu_features answers


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("STRATA_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _probe() -> Path:
    """The CPU probe library, built (or found) in the cache: the smallest library the engine builds."""
    return native.compile_library([native.PROBE], [], "strata_cpu_features")


def _answer(lib: Path) -> int:
    """strata_cpu_features of `lib`, loaded in a fresh process (this one may hold an older copy)."""
    code = f"import ctypes; print(ctypes.CDLL({str(lib)!r}).strata_cpu_features())"
    return int(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    )


def _planted(tmp_path: Path) -> Path:
    """A library that would answer PLANTED, built outside the cache."""
    src, lib = tmp_path / "planted.c", tmp_path / "planted.so"
    src.write_text(f"int strata_cpu_features(void) {{ return {PLANTED}; }}\n")
    cc, _ = native.compiler()
    subprocess.run([cc, "-shared", "-fPIC", str(src), "-o", str(lib)], check=True, timeout=120)
    assert _answer(lib) == PLANTED
    return lib


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_the_cache_is_private_to_the_user_who_built_it(home: Path) -> None:
    lib = _probe()
    assert lib.parent == home / "build"
    assert _mode(lib.parent) == 0o700 and _mode(lib) == 0o600
    assert lib.stat().st_uid == os.geteuid()
    assert _answer(lib) == native.cpu_features()  # 0600 is enough to load it
    built = lib.stat().st_ino
    assert _probe() == lib and lib.stat().st_ino == built  # found again, not rebuilt


@pytest.mark.parametrize("mode", [0o666, 0o620, 0o602])
def test_a_library_others_can_write_is_rebuilt_not_loaded(
    home: Path, tmp_path: Path, mode: int, caplog: pytest.LogCaptureFixture
) -> None:
    lib = _probe()
    planted = _planted(tmp_path)
    os.replace(planted, lib)
    lib.chmod(mode)
    with caplog.at_level(logging.WARNING, logger="strata_engine"):
        assert _probe() == lib
    assert "others can write to it" in caplog.text and str(lib) in caplog.text
    assert _mode(lib) == 0o600
    assert _answer(lib) != PLANTED


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user")
def test_a_library_another_user_owns_is_rebuilt_not_loaded(
    home: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    lib = _probe()
    os.replace(_planted(tmp_path), lib)
    lib.chmod(0o600)
    os.chown(lib, 4242, 4242)
    with caplog.at_level(logging.WARNING, logger="strata_engine"):
        assert _probe() == lib
    assert "belongs to user id 4242" in caplog.text
    assert lib.stat().st_uid == os.geteuid()
    assert _answer(lib) != PLANTED


def test_a_link_in_place_of_a_library_is_not_followed(
    home: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    lib = _probe()
    planted = _planted(tmp_path)
    planted.chmod(0o600)  # ours and private: only the link gives it away
    lib.unlink()
    lib.symlink_to(planted)
    with caplog.at_level(logging.WARNING, logger="strata_engine"):
        assert _probe() == lib
    assert "not a regular file" in caplog.text
    assert not lib.is_symlink() and _answer(lib) != PLANTED


def test_a_cache_another_user_owns_is_refused(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _probe()
    me = os.geteuid()
    monkeypatch.setattr(build.os, "geteuid", lambda: me + 1)  # the cache now looks like someone else's
    with pytest.raises(NativeUnavailable, match=f"belongs to user id {me}, not this user"):
        _probe()


def test_an_open_cache_of_ours_is_closed(home: Path) -> None:
    lib = _probe()
    lib.parent.chmod(0o777)
    assert _probe() == lib
    assert _mode(lib.parent) == 0o700


def test_a_hanging_compiler_is_stopped_with_what_it_started(build_with, tmp_path: Path, monkeypatch) -> None:
    pid_file = tmp_path / "child.pid"
    cc = tmp_path / "cc"
    cc.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "--version" ]; then echo "hanging cc 1.0"; exit 0; fi\n'
        f"sleep 300 &\necho $! > {pid_file}\nwait\n"  # a child holding the output pipes
    )
    cc.chmod(0o755)
    build_with(str(cc))
    monkeypatch.setenv(build.TIMEOUT_ENV, "1")
    start = time.monotonic()
    with pytest.raises(
        NativeUnavailable, match=r"did not finish within 1 s .*STRATA_KERNELS_COMPILE_TIMEOUT"
    ):
        _probe()
    assert time.monotonic() - start < 30
    child = int(pid_file.read_text())
    for _ in range(50):  # the killed child may take a moment to be reaped by init
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        if Path(f"/proc/{child}/stat").exists() and Path(f"/proc/{child}/stat").read_text().split()[2] == "Z":
            break  # killed, waiting to be reaped
        time.sleep(0.1)
    else:
        pytest.fail(f"the compiler's child {child} is still running")


@pytest.mark.parametrize("value", ["soon", "0", "-5"])
def test_a_bad_compile_timeout_is_refused_by_name(home: Path, monkeypatch, value: str) -> None:
    monkeypatch.setenv(build.TIMEOUT_ENV, value)
    build.compiler()  # needs a compiler to get as far as the build
    with pytest.raises(NativeUnavailable, match=build.TIMEOUT_ENV):
        native.compile_library([native.PROBE], ["-DSTRATA_UNCACHED"], "strata_cpu_features")


def test_loading_goes_through_the_checks(home: Path, tmp_path: Path) -> None:
    """The engine's own load path (not only compile_library) rebuilds a planted probe."""
    lib = _probe()
    os.replace(_planted(tmp_path), lib)
    lib.chmod(0o666)
    native.cpu_features.cache_clear()
    try:
        assert native.cpu_features() != PLANTED
        assert ctypes.CDLL(str(lib)).strata_cpu_features() != PLANTED
    finally:
        native.cpu_features.cache_clear()


def test_every_kernel_file_is_in_the_build_key(home: Path, tmp_path: Path, monkeypatch) -> None:
    """The cache key hashes every C file and header the kernels are built from: a change to any one
    of them gives a new library, never the cached one (the compiler faked: only the key matters)."""
    files = sorted(p.name for p in native.HERE.iterdir() if p.suffix in (".c", ".h"))
    assert sorted(p.name for p in (*native.SOURCES, *native.HEADERS, native.PROBE)) == files
    copy = tmp_path / "native"
    copy.mkdir()
    for name in files:
        shutil.copy(native.HERE / name, copy / name)
    sources, headers = [copy / p.name for p in native.SOURCES], [copy / p.name for p in native.HEADERS]

    def fake_run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        if cmd[-1] != "--version":  # a build: an empty library where it was asked for
            Path(cmd[cmd.index("-o") + 1]).write_bytes(b"")
        return subprocess.CompletedProcess(cmd, 0, "fake cc 1.0", "")

    monkeypatch.setattr(build, "_run", fake_run)
    build.compiler.cache_clear()
    try:
        first = build.build_library(sources, headers, [], "k", warn_serial=False)
        again = build.build_library(sources, headers, [], "k", warn_serial=False)
        assert again == first  # the same files: the cached library
        names = {first.name}
        for path in [*sources, *headers]:
            original = path.read_bytes()
            path.write_bytes(original + b"\n")
            names.add(build.build_library(sources, headers, [], "k", warn_serial=False).name)
            path.write_bytes(original)
    finally:
        build.compiler.cache_clear()
    assert len(names) == 1 + len(sources) + len(headers)


def test_a_library_swapped_in_after_its_check_is_not_loaded(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The library is loaded from the descriptor whose fstat was checked, not reopened by path:
    one put at the checked path afterwards (here: one anyone can write) is refused, not run."""
    _probe()
    planted = _planted(tmp_path)
    planted.chmod(0o666)
    checked = native.build_library

    def check_then_swap(*args: Any, **kwargs: Any) -> Path:
        lib = checked(*args, **kwargs)
        os.replace(planted, lib)  # between the check and the load
        return lib

    monkeypatch.setattr(native, "build_library", check_then_swap)
    native.cpu_features.cache_clear()
    try:
        with pytest.raises(NativeUnavailable, match="others can write to it"):
            native.cpu_features()
    finally:
        native.cpu_features.cache_clear()


def test_a_strata_home_another_user_owns_gives_no_kernels(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """STRATA_HOME itself is checked as build/ is (paths.private_dir), before anything in it."""
    _probe()
    me = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: me + 1)
    with pytest.raises(
        NativeUnavailable, match=f"^STRATA_HOME {home} belongs to user id {me}, not this user"
    ):
        _probe()


def test_each_library_loaded_from_its_descriptor_is_itself(home: Path, tmp_path: Path) -> None:
    """Two libraries loaded one after the other in one process are two libraries: the second is
    not answered with the first (the loader knows each by the descriptor name it came from)."""
    probe = build.load_checked(_probe())
    src = tmp_path / "other.c"
    src.write_text("int strata_other(void) { return 7; }\n")
    other = build.load_checked(build.build_library([src], [], [], "other", warn_serial=False))
    assert other.strata_other() == 7
    assert probe.strata_cpu_features() == native.cpu_features()
