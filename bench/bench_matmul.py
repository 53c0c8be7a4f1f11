"""One matmul: the fp32 kernels (native-fp32), the 8-bit-activation kernels (native-q8), the
default three-limb kernels (native).

    python bench/bench_matmul.py [--threads 2] [--repeat 15] [--target avx512]

For each weight type and shape (the default model's FFN and LM head, a Qwen3-1.7B-sized FFN,
its Q6_K down projection and Q6_K at the up projection's shape), random GGUF blocks, and 1, 4, 16 and 128 activation rows: the
best of `--repeat` timings of `strata_matmul` on the weight as loaded (fp32 arithmetic on the
dequantised values) and on the weight repacked for `native-q8` (activations quantised to 8 bits
inside the call, integer dot products), with the rate in multiply-adds per second and as a share
of the machine's peak rate of the kernels' integer step (int8_peak.c: independent chains of
it per thread, nothing else). The same for the default `native` (three integer steps a weight: its
share of the peak counts all three). The runs alternate, so that a noisy machine disturbs all alike.
"""

from __future__ import annotations

import argparse
import ctypes
import time
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as QT

from strata_engine.gguf_loader import TensorInfo
from strata_engine.kernels import native
from strata_engine.kernels.native.backend import NativeOps
from strata_engine.kernels.weights import Weight
from strata_engine.testing.tiny_models import encode_tensor  # the engine tests' GGUF block writer

SHAPES = [  # (type, out, in, what)
    (QT.Q4_1, 1536, 576, "SmolLM2 FFN up"),
    (QT.Q8_0, 4096, 576, "SmolLM2 LM head (a slice)"),
    (QT.Q4_K, 6144, 2048, "Qwen3-1.7B FFN up"),
    (QT.Q6_K, 2048, 6144, "Qwen3-1.7B FFN down"),
    (QT.Q6_K, 6144, 2048, "Q6_K at the FFN up shape"),  # the same MACs with K 2048: the rate by K
]
ROWS = (1, 4, 16, 128)


def seconds(ops: NativeOps, x: np.ndarray, weight: Weight) -> float:
    start = time.perf_counter()
    ops.linear(x, weight)
    return time.perf_counter() - start


def int8_peak_gmacs(target: str, threads: int) -> float:
    """The machine's peak multiply-adds/s of the q8 kernels' integer step (int8_peak.c, built with
    the kernels' target flags), best of 3; 0 where the target has no vector step for it."""
    lib = ctypes.CDLL(
        str(
            native.compile_library(
                [Path(__file__).with_name("int8_peak.c")], native.TARGETS[target][1], "int8_peak"
            )
        )
    )
    lib.int8_peak.argtypes, lib.int8_peak.restype = [ctypes.c_int64, ctypes.c_int], ctypes.c_int64
    best = 0.0
    for _ in range(3):
        start = time.perf_counter()
        macs = lib.int8_peak(20_000_000, threads)
        best = max(best, macs / (time.perf_counter() - start) / 1e9)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--target", default=None, help="kernel target (default: the best this CPU runs)")
    args = ap.parse_args()
    exact, q8 = NativeOps(args.threads, args.target), NativeOps(args.threads, args.target, q8=True)
    limb = NativeOps(args.threads, args.target, limbs=3)
    print(f"kernels {exact.name}, {q8.name} and {limb.name}, {args.threads} threads, best of {args.repeat}")
    peak = int8_peak_gmacs(q8.target, args.threads)
    print(f"machine peak of the q8 kernels' integer step: {peak:.0f} GMAC/s ({args.threads} threads)")
    print(
        f"{'weight':46}{'rows':>5}{'native ms':>11}{'q8 ms':>9}{'q8 GMAC/s':>11}{'of peak':>9}{'speed-up':>10}"
        f"{'limb3 ms':>10}{'of peak':>9}{'speed-up':>10}"
    )
    rng = np.random.default_rng(0)
    for qtype, n, k, what in SHAPES:
        info = TensorInfo(
            "w", (n, k), qtype, encode_tensor(rng.normal(0, 0.05, (n, k)), qtype, rng).reshape(-1)
        )
        weight = Weight.from_info(info)
        packed, limbs = q8.pack(weight), limb.pack(weight)
        for m in ROWS:
            x = rng.normal(0, 1, (m, k)).astype(np.float32)
            runs = [
                (seconds(exact, x, weight), seconds(q8, x, packed), seconds(limb, x, limbs))
                for _ in range(args.repeat)
            ]
            a, b, c = (min(column) for column in zip(*runs, strict=True))  # alternated: noise hits all
            label = f"{qtype.name} {n}x{k} ({what})"
            rate = m * n * k / b / 1e9
            share = f"{rate / peak:9.0%}" if peak else f"{'':9}"
            limb_share = f"{3 * m * n * k / c / 1e9 / peak:9.0%}" if peak else f"{'':9}"
            print(
                f"{label:46}{m:5d}{a * 1e3:11.3f}{b * 1e3:9.3f}{rate:11.1f}{share}{a / b:10.2f}"
                f"{c * 1e3:10.3f}{limb_share}{a / c:10.2f}"
            )


if __name__ == "__main__":
    main()
