"""The C kernels, compiled once per machine and target on first use, loaded with ctypes.

One set of C files (SOURCES, each over vector.h's 16-lane virtual vector) is built into one
library for each instruction set: avx512, avx2 (+FMA), neon (AArch64) and portable C. All give the same bits; the best one
the CPU can run is used. The CPU is asked through a tiny probe library (cpu_features.c:
cpuid via the compiler's builtins), not by reading /proc/cpuinfo. The kernels build in seconds
with the system compiler and needs no torch headers, into a private cache
(build.py: only libraries this user built are loaded, from the descriptor that was checked).
Every function, type code and struct the library exports is declared once, in
strata_kernels.h, and bound from it (header.py).
"""

from __future__ import annotations

import ctypes
import logging
import os
from functools import cache
from pathlib import Path

from strata_engine.kernels.native.build import (
    BASE_FLAGS,
    NativeUnavailable,
    build_library,
    compiler,
    load_checked,
)
from strata_engine.kernels.native.header import INTERFACE

__all__ = [
    "BASE_FLAGS",
    "NativeUnavailable",
    "compiler",
    "in_use",
    "load",
    "runnable_targets",
    "targets_to_test",
]

HERE = Path(__file__).parent
# The kernel library's C files, one job each (strata_kernels.h says which defines what).
SOURCES = tuple(
    HERE / name
    for name in (
        "common.c",  # the target's name, the scratch memory
        "matmul.c",  # fp32 matmul on weights as stored, embedding gather
        "grids.c",  # the grid types' 32 values as their Q8_0 block
        "elementwise.c",  # RMSNorm, RoPE, SwiGLU / GeGLU, soft-cap, e^x
        "attention.c",  # paged, windowed attention; the KV write
        "logprobs.c",  # log-softmax
        "layer.c",  # one dense layer in one call
        "kquant_pack.c",  # K-quant blocks rearranged at load
        "q8.c",  # 8-bit activations, integer dot products
        "limb.c",  # activations as exact integer limbs, on q8's packed weights
        "amx.c",  # whether limb.c may take its integer sums on AMX tiles
        "recurrence.c",  # the gated delta rule of hybrid models' DeltaNet layers
        "fpmode.c",  # the IEEE default float modes around each step
    )
)
# Every header the sources include: part of each build's cache key, as the sources are.
HEADERS = (
    HERE / "strata_kernels.h",  # the library's interface
    HERE / "internal.h",  # what the files share and do not export
    HERE / "vector.h",  # the 16-lane virtual vector
    HERE / "q8.h",  # q8's packed layout and integer steps (q8.c, limb.c)
    HERE / "iq_grids.h",  # the IQ types' grids (matmul.c, grids.c)
    HERE / "amx.h",  # limb.c's integer sums on AMX tiles (the avx512 build)
)
PROBE = HERE / "cpu_features.c"
PROBE_FUNCTIONS = ["strata_cpu_features"]  # the probe's library; every other function is SOURCES's
# target -> (the probe's feature bit it needs, compiler flags); best first
TARGETS: dict[str, tuple[int, list[str]]] = {
    "avx512": (
        INTERFACE.constant("HAS_AVX512"),
        ["-DSTRATA_TARGET_AVX512", "-mavx512f", "-mavx512bw", "-mavx512vnni", "-mavx2", "-mfma", "-mf16c"],
    ),
    # AVX2 with AVX-VNNI's 256-bit vpdpbusd (Intel laptops and desktops from Alder Lake on)
    "avxvnni": (
        INTERFACE.constant("HAS_AVX2_FMA") | INTERFACE.constant("HAS_AVX_VNNI"),
        ["-DSTRATA_TARGET_AVX2", "-DSTRATA_AVX_VNNI", "-mavx2", "-mfma", "-mf16c", "-mavxvnni"],
    ),
    "avx2": (INTERFACE.constant("HAS_AVX2_FMA"), ["-DSTRATA_TARGET_AVX2", "-mavx2", "-mfma", "-mf16c"]),
    "neon": (INTERFACE.constant("HAS_NEON"), ["-DSTRATA_TARGET_NEON"]),
    "portable": (0, ["-DSTRATA_TARGET_PORTABLE"]),
}
TARGET_ENV = "STRATA_KERNELS_TARGET"  # force one target (tests, benchmarks)

logger = logging.getLogger("strata_engine")


def compile_library(sources: list[Path], flags: list[str], name: str) -> Path:
    """A shared library built from `sources` (and the kernels' headers) into the private cache."""
    return build_library(sources, HEADERS, flags, name, warn_serial=tuple(sources) == SOURCES)


@cache
def cpu_features() -> int:
    lib = load_checked(compile_library([PROBE], [], "strata_cpu_features"))
    INTERFACE.bind(lib, PROBE_FUNCTIONS)
    return int(lib.strata_cpu_features())


def runnable_targets() -> list[str]:
    """The targets this CPU can run, best first (portable is always last)."""
    features = cpu_features()
    return [name for name, (bit, _) in TARGETS.items() if bit == 0 or features & bit == bit]


def targets_to_test() -> list[str]:
    """For test parametrisation: the runnable targets, or ["portable"] where none can be
    built (the tests then meet NativeUnavailable and skip or fail, as their conftest says)."""
    try:
        return runnable_targets()
    except NativeUnavailable:
        return ["portable"]


@cache
def _load_target(target: str) -> ctypes.CDLL:
    lib = load_checked(compile_library(list(SOURCES), TARGETS[target][1], f"strata_kernels_{target}"))
    INTERFACE.bind(lib, [name for name in INTERFACE.functions if name not in PROBE_FUNCTIONS])
    built = lib.strata_target().decode()
    if built != target:
        raise NativeUnavailable(f"the {target} build reports target {built}")
    logger.info("native kernels: %s", in_use(lib, target))
    return lib


def load(target: str | None = None) -> tuple[ctypes.CDLL, str]:
    """The kernels for `target` (or $STRATA_KERNELS_TARGET, or the best this CPU runs)."""
    target = target or os.environ.get(TARGET_ENV) or None
    runnable = runnable_targets()
    if target is None:  # the best that builds: a compiler too old for a target's flags gets the next
        compiler()  # none at all: say so once, not once per target
        for choice in runnable[:-1]:
            try:
                return _load_target(choice), choice
            except NativeUnavailable as exc:
                logger.warning("the %s kernels do not build here (%s); trying the next target", choice, exc)
        target = runnable[-1]
    elif target not in TARGETS:
        raise NativeUnavailable(f"unknown kernel target {target!r} (known: {', '.join(TARGETS)})")
    elif target not in runnable:
        raise NativeUnavailable(f"this CPU cannot run the {target} kernels (it runs: {', '.join(runnable)})")
    return _load_target(target), target


def in_use(lib: ctypes.CDLL, target: str) -> str:
    """What the kernels run on: the target, with "+amx" where the integer-limb kernels take calls
    of many rows on AMX tiles (amx.c: the avx512 build on a CPU with AMX-INT8, unless
    STRATA_AMX=0), e.g. "avx512+amx". The bits are the target's either way."""
    return target + ("+amx" if lib.strata_amx_use(-1) else "")
