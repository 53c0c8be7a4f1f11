"""The exact (limb) arithmetic's prefill bound on AVX2, and the share of it the kernels reach.

The default kernels split each activation into three int8 limbs, so every weight of a prefill
takes three byte products where llama.cpp's 8-bit activations take one. On AVX2 a byte product is
a lane of `vpmaddubsw` (32 a register, summed in pairs into int16) followed by a `vpaddw` into the
block's int16 partial sums: that step's peak rate on this machine (avx2_step_peak.c, 12 independent
chains, operands in registers) divided by three is the most multiply-adds a second the arithmetic
allows, whatever the kernel does around it ("bound"). "as issued" is the same step in the shape
the kernel issues it: one `vpbroadcastd` of 4 limb bytes from memory feeding the step for 16
outputs (two registers).

It then times the real thing on one thread: Qwen3-1.7B's FFN up (Q4_K, Q5_K: 6144 x 2048) and
down (Q6_K: 2048 x 6144) projections at 512 rows (a prefill's matmuls), random GGUF blocks, and
reports each one's multiply-adds a second and its share of the bound. Rounds alternate the
step's and the matmuls' timings, each keeping its best, and time the process's CPU time, not the
wall clock: on a shared host the share is then a same-run ratio of the two, not of the load.
With --base DIR (another checkout's kernels/native), that tree's kernels take turns too (the same
bits, checked). Table to stdout, JSON to bench/results/avx2_prefill_bound.json.

    python bench/avx2_prefill_bound.py [--types q4_k,q5_k,q6_k] [--rows 512] [--rounds 5] [--base DIR]
"""

from __future__ import annotations

import argparse
import ctypes
import time
from pathlib import Path

import numpy as np
from _common import host_line, write_results
from gguf import GGMLQuantizationType as QT

from strata_engine.gguf_loader import TensorInfo
from strata_engine.kernels import native
from strata_engine.kernels.native.backend import NativeOps
from strata_engine.kernels.native.build import load_checked
from strata_engine.kernels.native.header import INTERFACE
from strata_engine.kernels.weights import Weight
from strata_engine.testing.tiny_models import encode_tensor

RESULTS = Path(__file__).parent / "results"
LIMBS = 3  # byte products a weight takes (the default arithmetic)
SHAPES = {  # name -> (type, out, in, what)
    "q4_k": (QT.Q4_K, 6144, 2048, "FFN up"),
    "q5_k": (QT.Q5_K, 6144, 2048, "FFN up"),
    "q6_k": (QT.Q6_K, 2048, 6144, "FFN down"),
}


def step_library() -> ctypes.CDLL:
    path = native.compile_library(
        [Path(__file__).with_name("avx2_step_peak.c")], native.TARGETS["avx2"][1], "avx2_step_peak"
    )
    lib = ctypes.CDLL(str(path))
    lib.avx2_step_peak.argtypes, lib.avx2_step_peak.restype = [ctypes.c_int64, ctypes.c_int], ctypes.c_int64
    return lib


def base_library(sources: Path) -> ctypes.CDLL:
    """The avx2 kernels built from another checkout's native/ directory (its own headers)."""
    files = [sources / p.name for p in native.SOURCES]
    lib = load_checked(native.compile_library(files, native.TARGETS["avx2"][1], "strata_kernels_base_avx2"))
    INTERFACE.bind(lib, ["strata_matmul"])
    return lib


def step_rate(lib: ctypes.CDLL, mode: int) -> float:
    """Byte products a CPU-second of the step (mode 0: the bound's, 1: as issued)."""
    start = time.process_time()
    products = lib.avx2_step_peak(5_000_000, mode)
    return products / (time.process_time() - start)


def matmul(lib: ctypes.CDLL, x: np.ndarray, w: Weight) -> tuple[float, np.ndarray]:
    """Multiply-adds a CPU-second of one strata_matmul on one thread, and its output."""
    y = np.empty((x.shape[0], w.out_features), dtype=np.float32)
    start = time.process_time()
    lib.strata_matmul(
        x.ctypes.data, x.shape[0], w.in_features, w.raw.ctypes.data, w.kernel_type, w.out_features, None,
        y.ctypes.data, 1,
    )  # fmt: skip
    return x.shape[0] * w.in_features * w.out_features / (time.process_time() - start), y


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--types", default="q4_k,q5_k,q6_k")
    ap.add_argument("--rows", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--base", type=Path, help="a baseline checkout's kernels/native directory")
    ap.add_argument("--json", default=str(RESULTS / "avx2_prefill_bound.json"))
    args = ap.parse_args()
    print(host_line())
    ops, step = NativeOps(1, "avx2", limbs=LIMBS), step_library()
    libs = {"this": ops.lib, **({"base": base_library(args.base)} if args.base else {})}
    rng = np.random.default_rng(0)
    cases = {}
    for name in args.types.split(","):
        qtype, n, k, what = SHAPES[name]
        blocks = encode_tensor(rng.normal(0, 0.05, (n, k)), qtype, rng).reshape(-1)
        cases[name] = (
            ops.pack(Weight.from_info(TensorInfo(name, (n, k), qtype, blocks))),
            rng.normal(0, 1, (args.rows, k)).astype(np.float32),
        )
    best = {"step": 0.0, "as issued": 0.0}
    rates = {(name, label): 0.0 for name in cases for label in libs}
    same = True
    for _ in range(args.rounds):  # alternated: a change of the host's load meets every side
        best["step"] = max(best["step"], step_rate(step, 0))
        best["as issued"] = max(best["as issued"], step_rate(step, 1))
        for name, (w, x) in cases.items():
            outs = []
            for label, lib in libs.items():
                rate, y = matmul(lib, x, w)
                rates[name, label] = max(rates[name, label], rate)
                outs.append(y.view(np.uint32))
            same = same and all(np.array_equal(outs[0], o) for o in outs)
    bound = best["step"] / LIMBS
    print(
        f"step (vpmaddubsw + vpaddw): {best['step'] / 1e9:.1f} G byte products/s; as issued: {best['as issued'] / 1e9:.1f}"
    )
    print(f"bound of the {LIMBS}-limb arithmetic: {bound / 1e9:.1f} GMAC/s a thread")
    record: dict = {
        "step_gproducts": best["step"] / 1e9,
        "as_issued_gproducts": best["as issued"] / 1e9,
        "bound_gmacs": bound / 1e9,
        "rows": args.rows,
    }
    for name in cases:
        qtype, n, k, what = SHAPES[name]
        row = {label: rates[name, label] / 1e9 for label in libs}
        line = f"{qtype.name} {n}x{k} ({what}), {args.rows} rows: " + ", ".join(
            f"{label} {g:.1f} GMAC/s ({g * 1e9 / bound:.0%} of the bound)" for label, g in row.items()
        )
        if "base" in row:
            line += f"; this / base {row['this'] / row['base']:.2f}x"
        print(line)
        record[name] = {
            **{f"{label}_gmacs": g for label, g in row.items()},
            "share": row["this"] * 1e9 / bound,
        }
    if args.base:
        print(f"same bits as the base: {same}")
        record["same_bits"] = same
    write_results(args.json, record)


if __name__ == "__main__":
    main()
