"""Two builds of the native kernels taking turns in one process: the speed-up of a kernel change.

    python bench/paired_builds.py A.so B.so matmul [Q4_K:6144:2048:512 ...]   (type:out:in:rows)
    python bench/paired_builds.py A.so B.so attention [512 2048 ...]          (prompt tokens)
    python bench/paired_builds.py A.so B.so prefill [512] [--file F.gguf]     (1.7B-shaped file)

A build is the kernels' shared library of a checkout, copied aside, e.g. for the checkout on
PYTHONPATH: `python -c "from strata_engine.kernels.native import load; import shutil;
shutil.copy(load()[0]._name, '/tmp/A.so')"` (`load('avx2')` for the AVX2 target). On a shared
host whole-process timings of two builds taken minutes apart differ by more than most kernel
changes; here the two builds alternate call by call, so a noisy spell slows both alike. Every
pair of results is also compared bit for bit (a speed change must not change a bit).
`--threads` (default 2), `--repeat` (default 7), `--limbs` (matmul: the arithmetic, default 3, the
default kernels' three limbs; 2: native-limb2; 0: the fp32 kernels on the weights as stored).
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
from collections.abc import Callable
from pathlib import Path

import numpy as np
from _common import in_turns
from gguf import GGMLQuantizationType as QT

from strata_engine import LLMEngine, Request, SamplingParams
from strata_engine.gguf_loader import TensorInfo
from strata_engine.kernels.native import INTERFACE, PROBE_FUNCTIONS
from strata_engine.kernels.native.backend import NativeOps
from strata_engine.kernels.weights import Weight
from strata_engine.testing.tiny_models import encode_tensor  # the engine tests' GGUF block writer

KQUANT_FILE = Path.home() / ".cache" / "strata" / "bench" / "qwen3-1.7b-shape-28l-q4_k_m-random.gguf"


def bind(path: str) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(Path(path).resolve()))
    INTERFACE.bind(lib, [n for n in INTERFACE.functions if n not in PROBE_FUNCTIONS])
    return lib


def report(what: str, a: list[float], b: list[float], same: bool | None) -> None:
    bits = "" if same is None else f"  same bits {same}"
    print(
        f"{what:24} A {min(a) * 1e3:9.2f} ms  B {min(b) * 1e3:9.2f} ms  B/A speed: best {min(a) / min(b):5.2f}"
        f"  median {statistics.median(a) / statistics.median(b):5.2f}{bits}",
        flush=True,
    )


def matmul(libs: list[ctypes.CDLL], specs: list[str], threads: int, repeat: int, limbs: int = 3) -> None:
    ops = NativeOps(threads, None, limbs=limbs)
    rng = np.random.default_rng(0)
    for spec in specs or ["Q4_K:6144:2048:512", "Q6_K:2048:6144:512", "Q4_K:6144:2048:1"]:
        name, out, inp, rows = spec.split(":")
        qtype, n, k, m = getattr(QT, name), int(out), int(inp), int(rows)
        values = encode_tensor(rng.normal(0, 0.05, (n, k)), qtype, rng).reshape(-1)
        ops.lib = libs[0]
        w = ops.pack(Weight.from_info(TensorInfo("w", (n, k), qtype, values)))
        x = rng.normal(0, 1, (m, k)).astype(np.float32)
        report(spec, *in_turns(one_matmul(ops, libs, x, w), repeat if m > 64 else 25 * repeat))


def one_matmul(
    ops: NativeOps, libs: list[ctypes.CDLL], x: np.ndarray, w: object
) -> Callable[[int], np.ndarray]:
    def run(i: int) -> np.ndarray:
        ops.lib = libs[i]
        return np.asarray(ops.linear(x, w))

    return run


def attention(libs: list[ctypes.CDLL], lengths: list[str], threads: int, repeat: int) -> None:
    """The 1.7B shape's attention (16 query heads, 8 KV heads of 128) over a prompt of T tokens."""
    for text in lengths or ["512", "2048"]:
        report(f"attention {text} tokens", *in_turns(one_attention(libs, int(text), threads), repeat))


def one_attention(libs: list[ctypes.CDLL], t: int, threads: int) -> Callable[[int], np.ndarray]:
    heads, kv_heads, dim, block = 16, 8, 128, 16
    rng = np.random.default_rng(0)
    blocks = (t + block - 1) // block
    q = rng.normal(size=(t, heads, dim)).astype(np.float32)
    kc = rng.normal(size=(blocks, block, kv_heads, dim)).astype(np.float32)
    vc = rng.normal(size=(blocks, block, kv_heads, dim)).astype(np.float32)
    tables, seq, pos = np.arange(blocks, dtype=np.int32), np.zeros(t, np.int32), np.arange(t, dtype=np.int32)

    def run(i: int) -> np.ndarray:
        out = np.zeros((t, heads, dim), np.float32)
        p = [a.ctypes.data_as(ctypes.c_void_p) for a in (q, kc, vc, tables, seq, pos, out)]
        libs[i].strata_attention(
            p[0], t, heads, kv_heads, dim, p[1], p[2], 0, block, p[3], blocks, p[4], p[5],
            1 / np.sqrt(dim), 0.0, 0, p[6], threads,
        )  # fmt: skip
        return out

    return run


def prefill(
    libs: list[ctypes.CDLL], lengths: list[str], threads: int, repeat: int, path: Path = KQUANT_FILE
) -> None:
    """A whole prefill of the 1.7B-shaped Q4_K_M file (bench_kquants.py writes it; --file: another,
    e.g. its `--mix q6_k` one), last logits."""
    engine = LLMEngine(str(path), num_threads=threads, parallel=1, kernels="native")
    n = int(lengths[0]) if lengths else 512
    ids = [100 + (i * 7919) % (engine.vocab_size - 200) for i in range(n)]
    turn = [0]

    def run(i: int) -> np.ndarray:
        engine.ops.lib = engine.model.fused.lib = libs[i]  # type: ignore[attr-defined,union-attr]
        turn[0] += 1  # a new first token each time: no prefix-cache hit
        out = engine.add(Request((ids[0] + turn[0], *ids[1:]), SamplingParams(max_tokens=1, temperature=0)))
        while not out.drained:
            engine.step()
            out.take()
        return np.zeros(0)

    a, b, _ = in_turns(run, repeat)
    report(f"prefill {n} tokens", a, b, None)  # each prompt differs: the time alone


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("what", choices=["matmul", "attention", "prefill"])
    ap.add_argument("args", nargs="*")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--limbs", type=int, default=3, choices=[0, 2, 3])
    ap.add_argument("--file", type=Path, default=KQUANT_FILE, help="prefill: the GGUF file")
    opts = ap.parse_args()
    libs = [bind(opts.a), bind(opts.b)]
    if opts.what == "matmul":
        matmul(libs, opts.args, opts.threads, opts.repeat, opts.limbs)
    elif opts.what == "prefill":
        prefill(libs, opts.args, opts.threads, opts.repeat, opts.file)
    else:
        attention(libs, opts.args, opts.threads, opts.repeat)


if __name__ == "__main__":
    main()
