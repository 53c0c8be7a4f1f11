"""The K-grid types' one-row matmul (decode): each held as stored against the Q6_K and Q8_0 blocks.

    python bench/bench_kgrid.py [--threads 1] [--repeat 30] [--rows 1,4,8] [--target avx2]
                                [--types Q3_K,Q6_K] [--cpu-time] [--paths] [--builds A.so B.so] [--llama]
                                [--shape 2048x6144]

Q3_K, IQ1_M, IQ2_XS and IQ2_S are held as the file stores them and decoded, a group of 16 rows at a
time, on every call (native/grids.c); so are IQ2_XXS, IQ3_XXS, IQ3_S and IQ1_S (the grid types,
decoded to Q8_0 blocks). A Q6_K and a Q8_0 weight of the same shape, whose packed blocks need no
decoding, are the yardsticks. The codebook types IQ4_NL, IQ4_XS and MXFP4 (held as stored, their
indices looked up in registers on x86) may be named in `--types` too.
One Qwen3-1.7B FFN-shaped weight (6144 x 2048, random blocks) per type, the default three-limb
kernels (`native`), the best of `--repeat` timings of `strata_matmul` per row count, the types
taking turns so that a noisy machine disturbs all alike (`--cpu-time`: the calling thread's CPU
time, not the wall clock, for a host shared with other work; one thread). Prints each type's milliseconds, its time
against Q6_K's, and its weight bytes read per second. `--paths` (the avx512 build): each grid type
timed both ways the build decodes it, with gathers and without (grids.c's strata_grid_gather_free),
the two taking turns call by call in one process (each first every other time), their median times and ratio (over 1: the gather-free way is
faster); the outputs of the two compared bit for bit. `--builds A.so B.so`: two builds of the kernels
(say main's and a branch's, each `python bench/bench_kgrid.py --print-build` under that tree's sources),
each type timed on both, taking turns as `--paths` does, over copies of the weight as `--llama`
below: the medians a call and their ratio (over 1: B is faster), the outputs compared bit for bit. `--llama`: each type against llama.cpp's own
CPU matmul on the same blocks (bench/_ggml.py: ggml_mul_mat as llama.cpp runs a weight in plain
buffers, which is its only path for the IQ and K-grid types), taking turns, each side over copies of
the weight larger than the cache together (`--cold-mb`, as a decode step reads them from memory;
a weight read again from cache runs up to 1.5 times faster): the medians a call, their ratio
(over 1: Strata is faster) and the two outputs' largest difference relative to the largest output (a
check that both read the blocks alike: llama.cpp rounds the activations to 8 bits, so about 1e-2).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from _common import in_turns
from _ggml import GgmlMatmul
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as QT

from strata_engine.gguf_loader import TensorInfo
from strata_engine.kernels.native import (
    INTERFACE,
    PROBE_FUNCTIONS,
    SOURCES,
    TARGETS,
    compile_library,
    load,
    load_checked,
)
from strata_engine.kernels.native.backend import NativeOps
from strata_engine.kernels.weights import Weight

TYPES = (QT.Q3_K, QT.IQ1_M, QT.IQ2_XS, QT.IQ2_S, QT.IQ2_XXS, QT.IQ3_XXS, QT.IQ3_S, QT.IQ1_S, QT.Q6_K, QT.Q8_0)
N, K = 6144, 2048  # Qwen3-1.7B's FFN up / gate
NO_VBMI = 1 << 30  # strata_grid_gather_free's bit: a VBMI CPU's grid types take their bit's way too
D_AT = {QT.Q3_K: 108, QT.Q6_K: 208}  # where a block keeps its fp16 d (the others: at 0; IQ1_M: below)


def blocks(qtype: QT, rng: np.random.Generator) -> np.ndarray:
    """Random stored blocks with fp16 scales d of a real model's size (0.001 to 0.01; MXFP4: its E);
    F16 and BF16: weights of a real model's spread (random bits would give NaNs and subnormals)."""
    block, size = GGML_QUANT_SIZES[qtype]
    if qtype in (QT.F16, QT.BF16):
        w = rng.normal(0, 0.02, size=N * K).astype(np.float32)
        return (
            w.astype(np.float16).view(np.uint8)
            if qtype == QT.F16
            else (w.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
        )
    data = rng.integers(0, 256, size=(N * K // block, size), dtype=np.uint8)
    d = np.asarray(rng.uniform(0.001, 0.01, size=data.shape[0])).astype(np.float16).view(np.uint16)
    if qtype == QT.MXFP4:  # its e8m0 byte E: scales 2^-10 .. 2^-6
        data[:, 0] = rng.integers(118, 123, size=data.shape[0])
    elif qtype == QT.IQ1_M:  # d's four nibbles on top of the four scale words (bytes 49, 51, 53, 55)
        for k in range(4):
            data[:, 49 + 2 * k] = (data[:, 49 + 2 * k] & 0x0F) | (((d >> (4 * k)) & 15) << 4).astype(np.uint8)
    else:
        at = D_AT.get(qtype, 0)
        data[:, at : at + 2] = d.view(np.uint8).reshape(-1, 2)
    return data.reshape(-1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--rows", default="1,4,8", help="activation rows (comma list)")
    ap.add_argument("--target", default=None, help="kernel target (default: the best this CPU runs)")
    ap.add_argument("--types", default=None, help="types to time (comma list of names; default: all)")
    ap.add_argument("--cpu-time", action="store_true", help="time the thread's CPU time (one thread)")
    ap.add_argument("--paths", action="store_true", help="each grid type with gathers and without (avx512)")
    ap.add_argument("--builds", nargs=2, metavar=("A", "B"), help="two kernel libraries, taking turns")
    ap.add_argument("--shape", default="6144x2048", help="the weight's outputs x inputs (default: FFN up)")
    ap.add_argument("--llama", action="store_true", help="each type against llama.cpp's matmul, taking turns")
    ap.add_argument("--cold-mb", type=int, default=128, help="--llama, --builds: copies this large")
    ap.add_argument("--print-build", action="store_true", help="build the target's library; print its path")
    args = ap.parse_args()
    if args.print_build:
        target = args.target or load()[1]
        print(compile_library(list(SOURCES), TARGETS[target][1], f"strata_kernels_{target}"))
        return
    global N, K  # every function here reads the one shape
    N, K = (int(v) for v in args.shape.split("x"))
    types = tuple(QT[t] for t in args.types.split(",")) if args.types else TYPES
    if QT.Q6_K not in types:
        types += (QT.Q6_K,)  # the yardstick
    clock = time.thread_time if args.cpu_time else time.perf_counter
    ops = NativeOps(args.threads, args.target, limbs=3)
    print(f"kernels {ops.name}, {args.threads} threads, {N}x{K}, best of {args.repeat}")
    rng = np.random.default_rng(0)
    if args.llama:
        against_llama(ops, types, args.rows, args.repeat, clock, rng, args.cold_mb)
        return
    if args.builds:
        builds(ops, args.builds, types, args.rows, args.repeat, clock, rng, args.cold_mb)
        return
    packed = {}
    for qtype in types:
        packed[qtype] = ops.pack(Weight.from_info(TensorInfo("w", (N, K), qtype, blocks(qtype, rng))))
    if args.paths:
        paths(ops, packed, args.rows, args.repeat, clock, rng)
        return
    print(f"{'type':9}{'rows':>5}{'ms':>9}{'/ Q6_K':>8}{'GB/s':>7}")
    for m in (int(r) for r in args.rows.split(",")):
        x = rng.normal(0, 1, (m, K)).astype(np.float32)
        best = dict.fromkeys(types, float("inf"))
        for _ in range(args.repeat):
            for qtype in types:  # in turns
                start = clock()
                ops.linear(x, packed[qtype])
                best[qtype] = min(best[qtype], clock() - start)
        for qtype in types:
            block, size = GGML_QUANT_SIZES[qtype]
            gbs = N * K // block * size / best[qtype] / 1e9  # the file's bytes of the weight
            print(f"{qtype.name:9}{m:5d}{best[qtype] * 1e3:9.3f}{best[qtype] / best[QT.Q6_K]:8.2f}{gbs:7.1f}")


def paths(
    ops: NativeOps, packed: dict[QT, Weight], rows: str, repeat: int, clock: Callable[[], float],
    rng: np.random.Generator,
) -> None:  # fmt: skip
    """Each grid type with gathers (mask NO_VBMI) and without (every bit set), in turns: the medians and
    their ratio. The CPU's default is restored after."""
    lib = ops.lib
    default = lib.strata_grid_gather_free(-2)
    if default < 0:
        raise SystemExit(f"{ops.name}: one way a type in this build (--paths needs the avx512 build)")
    types = [t for t in packed if t not in (QT.Q6_K, QT.Q8_0)]
    print(f"this CPU's default: gather-free {[t.name for t in types if default >> int(t) & 1]}")
    print(f"{'type':9}{'rows':>5}{'gathers ms':>11}{'free ms':>9}{'ratio':>7}  same bits")
    try:
        for m in (int(r) for r in rows.split(",")):
            x = rng.normal(0, 1, (m, K)).astype(np.float32)
            for qtype in types:

                def way(i: int, x: np.ndarray = x, w: Weight = packed[qtype]) -> np.ndarray:
                    lib.strata_grid_gather_free((NO_VBMI, 0x7FFFFFFF)[i])
                    return ops.linear(x, w)

                ta, tb, same = in_turns(way, repeat, clock, alternate=True)
                a, b = statistics.median(ta), statistics.median(tb)
                print(f"{qtype.name:9}{m:5d}{a * 1e3:11.3f}{b * 1e3:9.3f}{a / b:7.2f}  {same}")
    finally:
        lib.strata_grid_gather_free(-2)


def cold_copies(qtype: QT, cold_mb: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Stored blocks of copies of the weight (other random blocks) that together hold at least
    cold_mb, more than the last-level cache, so that each call reads its weight from memory as a
    decode step does (one copy for cold_mb 0: read again from cache)."""
    block, size = GGML_QUANT_SIZES[qtype]
    copies = max(1, min(64, -(-cold_mb * 2**20 // (N * K // block * size))))
    return [blocks(qtype, rng) for _ in range(copies)]


def builds(
    ops: NativeOps, libs: list[str], types: tuple[QT, ...], rows: str, repeat: int, clock: Callable[[], float],
    rng: np.random.Generator, cold_mb: int,
) -> None:  # fmt: skip
    """Each type on library A and on library B (the same packed weights, cold_copies of them), in
    turns: the medians a call and their ratio A / B."""
    both = []
    for path in libs:
        lib = load_checked(Path(path))
        INTERFACE.bind(lib, [name for name in INTERFACE.functions if name not in PROBE_FUNCTIONS])
        other = NativeOps(ops.threads, ops.target, limbs=3)
        other.lib = lib
        both.append(other)
    print(f"A {libs[0]}\nB {libs[1]}")
    print(f"{'type':9}{'rows':>5}{'copies':>7}{'A ms':>9}{'B ms':>9}{'A / B':>7}  same bits")
    for m in (int(r) for r in rows.split(",")):
        x = rng.normal(0, 1, (m, K)).astype(np.float32)
        for qtype in types:
            ws = [
                ops.pack(Weight.from_info(TensorInfo("w", (N, K), qtype, b)))
                for b in cold_copies(qtype, cold_mb, rng)
            ]

            def side(i: int, x: np.ndarray = x, ws: list = ws) -> np.ndarray:
                return np.stack([both[i].linear(x, w) for w in ws])

            ta, tb, same = in_turns(side, repeat, clock, alternate=True)
            a, b = statistics.median(ta) / len(ws), statistics.median(tb) / len(ws)
            print(f"{qtype.name:9}{m:5d}{len(ws):7d}{a * 1e3:9.3f}{b * 1e3:9.3f}{a / b:7.2f}  {same}")


def against_llama(
    ops: NativeOps, types: tuple[QT, ...], rows: str, repeat: int, clock: Callable[[], float],
    rng: np.random.Generator, cold_mb: int,
) -> None:  # fmt: skip
    """Each type by Strata and by llama.cpp's ggml_mul_mat on the same blocks, in turns. Decode
    reads every weight from memory, not from cache: each side runs in turn over copies of the
    weight (other random blocks) that together hold at least `cold_mb` (more than the last-level
    cache), a call's time is their mean, and the median of `repeat` rounds is printed."""
    print(
        f"{'type':9}{'rows':>5}{'copies':>7}{'Strata ms':>10}{'llama ms':>9}{'llama / Strata':>15}{'rel diff':>9}"
    )
    for m in (int(r) for r in rows.split(",")):
        x = rng.normal(0, 1, (m, K)).astype(np.float32)
        for qtype in types:
            stored = cold_copies(qtype, cold_mb, rng)
            copies = len(stored)
            ours = [ops.pack(Weight.from_info(TensorInfo("w", (N, K), qtype, b))) for b in stored]
            theirs = [GgmlMatmul(int(qtype), N, K, b, m, ops.threads) for b in stored]
            first = ops.linear(x, ours[0]), theirs[0].run(x)
            diff = float(np.max(np.abs(first[0] - first[1])) / np.max(np.abs(first[1])))

            def side(i: int, x: np.ndarray = x, ours: list = ours, theirs: list = theirs) -> np.ndarray:
                for w, g in zip(ours, theirs, strict=True):
                    out = ops.linear(x, w) if i == 0 else g.run(x)
                return out

            ts, tl, _ = in_turns(side, repeat, clock, alternate=True)
            for g in theirs:
                g.close()
            s, ll = statistics.median(ts) / copies, statistics.median(tl) / copies
            print(f"{qtype.name:9}{m:5d}{copies:7d}{s * 1e3:10.3f}{ll * 1e3:9.3f}{ll / s:15.2f}{diff:9.1e}")


if __name__ == "__main__":
    main()
