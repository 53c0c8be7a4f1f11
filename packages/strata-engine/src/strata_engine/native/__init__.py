"""The C kernels, compiled once per machine on first use and loaded with ctypes.

A small C file compiled with the system compiler builds in about a second, needs no torch
headers, and lets the kernels fix their own reduction order (see kernels.c).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

from strata_engine.paths import strata_home

SOURCE = Path(__file__).with_name("kernels.c")
CFLAGS = ["-O3", "-march=native", "-ffp-contract=off", "-fno-fast-math", "-fopenmp", "-shared", "-fPIC"]

_P = ctypes.c_void_p
_I64 = ctypes.c_int64
_I = ctypes.c_int
_F = ctypes.c_float
SIGNATURES = {
    "strata_matmul": [_P, _I64, _I64, _P, _I, _I64, _P, _P, _I],
    "strata_gather_rows": [_P, _I, _I64, _P, _I64, _P],
    "strata_rmsnorm": [_P, _I64, _I64, _P, _F, _P, _I],
    "strata_silu_mul": [_P, _P, _I64, _P, _I],
    "strata_attention": [_P, _I64, _I, _I, _I, _P, _P, _I, _P, _I, _P, _P, _F, _P, _I],
    "strata_rope": [_P, _I64, _I, _I, _I, _P, _P, _P, _I],
    "strata_kv_write": [_P, _P, _I64, _I64, _P, _P, _P],
}


class NativeUnavailable(RuntimeError):
    """No C compiler, or a CPU without AVX-512: callers fall back to the torch ops."""


def _build(target: Path) -> None:
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise NativeUnavailable("no C compiler found (set CC or install gcc)")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        out = Path(tmp) / target.name
        proc = subprocess.run(
            [compiler, *CFLAGS, str(SOURCE), "-o", str(out), "-lm"], capture_output=True, text=True
        )
        if proc.returncode != 0:
            raise NativeUnavailable(f"compiling the kernels failed: {proc.stderr.strip()[:2000]}")
        os.replace(out, target)  # atomic: concurrent builders never see a half-written file


@cache
def library() -> ctypes.CDLL:
    """The compiled kernels (built into STRATA_HOME/build on first use, keyed by source hash)."""
    if "avx512f" not in Path("/proc/cpuinfo").read_text(errors="ignore"):
        raise NativeUnavailable("the native kernels need AVX-512 (avx512f)")
    digest = hashlib.sha256(SOURCE.read_bytes() + " ".join(CFLAGS).encode()).hexdigest()[:16]
    target = strata_home() / "build" / f"strata_kernels_{digest}.so"
    if not target.exists():
        _build(target)
    lib = ctypes.CDLL(str(target))
    for name, args in SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = None
    return lib
