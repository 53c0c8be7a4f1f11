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
