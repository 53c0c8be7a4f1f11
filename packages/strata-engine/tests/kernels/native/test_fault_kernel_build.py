"""A process killed (SIGKILL) while it builds the kernels leaves nothing a later start would load
half-written: a library appears under STRATA_HOME/build only whole (built in a temporary
directory, then renamed), so the next start finds none and builds again."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from strata_engine.kernels.native import NativeUnavailable, compiler
from strata_engine.kernels.native.build import BUILDING

BUILD = "from strata_engine.kernels.native import load; load('portable')"


def test_a_build_killed_midway_leaves_no_library_half_written(tmp_path: Path) -> None:
    try:
        compiler()
    except NativeUnavailable as exc:
        pytest.skip(f"no C compiler: {exc}")
    env = {**os.environ, "STRATA_HOME": str(tmp_path)}
    child = subprocess.Popen([sys.executable, "-c", BUILD], env=env, start_new_session=True)
    build = tmp_path / "build"
    try:
        deadline = time.monotonic() + 60
        # the CPU probe is built first; then the kernels compile in a temporary directory
        while not (any(build.glob("strata_cpu_features_*.so")) and any(build.glob(f"{BUILDING}*"))):
            assert child.poll() is None and time.monotonic() < deadline, "the kernel build never started"
            time.sleep(0.05)
        time.sleep(1.0)  # the compiler is at work
    finally:
        os.killpg(child.pid, signal.SIGKILL)  # the process and its compiler, as a kill -9 of the tree
        child.wait()
    libraries = list(build.glob("*.so"))
    assert not [lib for lib in libraries if lib.name.startswith("strata_kernels_portable")], libraries
    for lib in libraries:  # what is there (the CPU probe, built first) is whole
        ctypes.CDLL(str(lib))


def test_two_processes_started_at_once_make_one_build(tmp_path: Path) -> None:
    """Both load the CPU probe; a lock in STRATA_HOME/build lets one compile while the other waits
    and then loads that library (a compiler that logs each build and takes a second of its own)."""
    cc, _ = compiler()
    log, wrapper = tmp_path / "builds.log", tmp_path / "cc"
    wrapper.write_text(
        f'#!/bin/sh\ncase "$*" in *" -o "*) echo build >> {log}; sleep 1;; esac\nexec {cc} "$@"\n'
    )
    wrapper.chmod(0o755)
    env = {**os.environ, "STRATA_HOME": str(tmp_path / "home"), "CC": str(wrapper)}
    probe = "from strata_engine.kernels.native import cpu_features; print(cpu_features())"
    children = [
        subprocess.Popen([sys.executable, "-c", probe], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    answers = [child.communicate(timeout=120)[0] for child in children]
    assert [child.returncode for child in children] == [0, 0]
    assert answers[0] == answers[1]
    assert log.read_text().splitlines() == ["build"]
    assert len(list((tmp_path / "home" / "build").glob("strata_cpu_features_*.so"))) == 1
