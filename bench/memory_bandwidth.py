"""The host's memory read bandwidth, the bound a batch-1 decode step streams its weights against.

    python bench/memory_bandwidth.py [--threads 2] [--mib 1024]

A decode step at batch 1 reads every weight once, so (weight bytes a token) x (tokens/s) is the
rate it pulls weights from memory; this script measures the most that rate can be on this host
(mem_read.c: `--threads` threads summing one buffer far larger than the caches, best of 5) so the
benchmarks can print each engine's decode as a share of it.
"""

from __future__ import annotations

import argparse
import ctypes
import time
from pathlib import Path

import numpy as np
from gguf import GGUFReader

from strata_engine.kernels import native


def read_gbps(threads: int, mib: int = 1024, tries: int = 5) -> float:
    """Best of `tries` read rates (GB/s, 1e9 bytes) of a `mib` MiB buffer on `threads` threads."""
    target = native.runnable_targets()[0]
    lib = ctypes.CDLL(
        str(
            native.compile_library(
                [Path(__file__).with_name("mem_read.c")], native.TARGETS[target][1], "mem_read"
            )
        )
    )
    lib.mem_read.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_int]
    lib.mem_read.restype = ctypes.c_int64
    buf = np.ones(mib * (1 << 20) // 8, dtype=np.int64)  # written once: every page is mapped
    lib.mem_read(buf.ctypes.data, buf.size, 1, threads)  # warm-up
    best = 0.0
    for _ in range(tries):
        start = time.perf_counter()
        lib.mem_read(buf.ctypes.data, buf.size, 2, threads)
        best = max(best, 2 * buf.nbytes / (time.perf_counter() - start) / 1e9)
    return best


def decode_weight_bytes(path: str) -> int:
    """Bytes of weights a batch-1 decode step reads, as the GGUF stores them: every 2-D weight but
    the token embedding (one row of it is read), plus the embedding once more when the output
    projection is tied to it (then it is the LM head, read whole)."""
    reader = GGUFReader(path)
    names = {t.name for t in reader.tensors}
    total = 0
    for t in reader.tensors:
        if len(t.shape) < 2:
            continue
        if t.name == "token_embd.weight" and "output.weight" in names:
            continue
        total += int(t.n_bytes)
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--mib", type=int, default=1024)
    args = ap.parse_args()
    print(f"memory read bandwidth, {args.threads} threads: {read_gbps(args.threads, args.mib):.1f} GB/s")


if __name__ == "__main__":
    main()
