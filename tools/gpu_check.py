"""The GPU path checked in one run: the CPU's bits on the GPU, then speed.

    bash tools/gpu_setup.sh && .venv-gpu/bin/python tools/gpu_check.py   # a bare CUDA host
    python tools/gpu_check.py --dry-run     # anywhere: Triton's interpreter on the CPU, tiny shapes

Every mode (`native`, the default, and `native-q8`: integer dot products; `native-fp32`; each
with one explicit sequence of IEEE operations around them) must give the GPU the CPU's bits. The headline check
therefore runs the CPU engine on the same host beside the GPU one and compares every row:

(a) kernels: each op of the Triton backend against the C kernels' op, bit for bit (every quant
    type the integer kernels read, 1 and many rows; norm, RoPE, SwiGLU, attention, log-softmax);
(b) models: a SmolLM2-shaped Q4_1 file and a Q4_K_M-style one (random weights, written here), on
    both devices, requests alone and batched: GPU rows == CPU rows (prompt log-probabilities,
    top-20 and a fixed sample of named ids at every position, one seeded request drawn on the device);
    then decode on CUDA graphs (STRATA_CUDA_GRAPHS) with requests ending at different steps, so
    the batch crosses bucket sizes: GPU rows == CPU rows, and every bucket was captured;
(c) speed (8B shape; --size): a read-only kernel's rate as the bandwidth bound, every batch size
    warmed up before it is timed, batch-1 decode at temperature 0 as weight bytes read a second
    (the bytes the device reads as it holds them, not the GGUF's), 8/64/256-stream decode
    throughput (timed once every stream has its first token: prefill outside the window),
    each batch size eager and on CUDA graphs, prefill 2,048 tokens; the first
    streams' rows are compared with the CPU engine as in (b). The mode timed is the default
    (`native`) unless --speed-modes names others.
    Targets: batch-1 decode >= 50% of the read bandwidth; 256 streams >= 20x batch 1.

A hard time guard (--budget-s: 480 s on a GPU, an hour under the interpreter) prints the table so far and exits 3 when it
runs out. Prints one table; exits 1 if any check failed, 2 if there is no CUDA device (without
--dry-run) or the packages imported are not this tree's.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpu_rows import both_devices, graphs_engine, requests_for, rows_of, same_bits, table
from gpu_speed import speed

from strata_engine.testing.shaped_models import MIXES, SIZES, SMOLLM2, TINY, TINY_BIG, Shape, write_model

ROOT = Path(__file__).resolve().parents[1]
MODES = ("native", "native-fp32", "native-q8")  # every mode: both devices compute it alike


def guard(budget_s: float, t0: float) -> None:
    """The hard time guard: after `budget_s` the table so far is printed and the process ends (3)."""

    def expire() -> None:
        table.add("guard", "time budget", False, f"{budget_s:.0f} s ran out; the rows above are all there is")
        table.print(time.perf_counter() - t0)
        os._exit(3)

    timer = threading.Timer(budget_s, expire)
    timer.daemon = True
    timer.start()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dry-run", action="store_true", help="Triton's interpreter on the CPU, tiny shapes")
    parser.add_argument("--size", choices=sorted(SIZES), default="qwen3-8b", help="the model of part (c)")
    parser.add_argument("--skip-speed", action="store_true", help="skip part (c)")
    parser.add_argument("--sections", default="abc", help="the parts to run (default: abc)")
    parser.add_argument(
        "--speed-modes", default="native", help="comma-separated modes part (c) times (default: native)"
    )
    parser.add_argument(
        "--budget-s", type=float, help="hard time guard (seconds; 480 on a GPU, 3600 under the interpreter)"
    )
    args = parser.parse_args()
    t0 = time.perf_counter()
    guard(args.budget_s or (3600.0 if args.dry_run else 480.0), t0)
    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        print(
            f"gpu_check: no CUDA device visible to torch {torch.__version__} (CUDA build: {torch.version.cuda}); "
            "run tools/gpu_setup.sh on a GPU machine, or pass --dry-run (Triton's interpreter)",
            file=sys.stderr,
        )
        return 2
    try:
        import triton
    except ImportError:
        print("gpu_check: triton is not installed (bash tools/gpu_setup.sh)", file=sys.stderr)
        return 2
    import strata_engine

    if ROOT not in Path(strata_engine.__file__).resolve().parents:
        print(
            f"gpu_check: strata_engine comes from {strata_engine.__file__}, not this tree ({ROOT}); "
            "install it from here (bash tools/gpu_setup.sh) so the check runs this code",
            file=sys.stderr,
        )
        return 2
    name = "Triton interpreter (CPU)" if args.dry_run else torch.cuda.get_device_name()
    print(
        f"gpu_check on {name}, torch {torch.__version__}, triton {triton.__version__}, {os.cpu_count()} cpus"
    )
    tmp = Path(tempfile.mkdtemp(prefix="strata-gpu-check-"))
    shape_c = TINY_BIG if args.dry_run else SIZES[args.size]
    parts: dict[str, Callable[[], None]] = {
        "a": lambda: check_kernels(args.dry_run),
        "b": lambda: check_models(tmp, TINY if args.dry_run else SMOLLM2, args.dry_run),
        "c": lambda: speed(tmp, shape_c, args.dry_run, args.speed_modes.split(",")),
    }
    wanted = args.sections.replace("c", "") if args.skip_speed else args.sections
    sections = [(name, run) for name, run in parts.items() if name in wanted]
    for section, run in sections:
        try:
            run()
        except Exception as exc:  # one section's failure is a row; the others still run
            table.add(section, "section ran to the end", False, f"{type(exc).__name__}: {exc}"[:200])
    table.print(time.perf_counter() - t0)
    return 1 if table.failures else 0


# -- helpers ------------------------------------------------------------------------------------------
# -- (a) kernels ------------------------------------------------------------------------------------
INTEGER_TYPES: tuple[str, ...] = ("Q4_0", "Q4_1", "Q8_0", "Q2_K", "Q4_K", "Q5_K", "Q6_K", "IQ2_XS", "IQ2_S")
INTEGER_TYPES += ("IQ4_NL", "MXFP4", "IQ4_XS")  # the codebook types, read as the CPU holds them


def check_kernels(dry: bool) -> None:
    import numpy as np
    from gguf import GGMLQuantizationType as QT

    from strata_engine.gguf_loader import TensorInfo
    from strata_engine.kernels.base import AttentionMeta, RopeTable
    from strata_engine.kernels.weights import Weight
    from strata_engine.testing.tiny_models import encode_tensor

    rng = np.random.default_rng(0)
    n, k = (40, 256) if dry else (1000, 4096)
    rows = (1, 5) if dry else (1, 7, 64)
    for mode in MODES:
        cpu, gpu = both_devices(mode)
        for type_name in INTEGER_TYPES:
            qtype = QT[type_name]
            info = TensorInfo(
                "w", (n, k), qtype, encode_tensor(rng.normal(0, 0.05, (n, k)), qtype, rng).reshape(-1)
            )
            weight = Weight.from_info(info)
            wc, wg = cpu.pack(weight), gpu.pack(weight)
            bias = rng.normal(0, 1, n).astype(np.float32)
            ok = all(
                same_bits(cpu.linear(x, wc, bias), gpu.linear(x, wg, bias))
                for m in rows
                for x in [rng.normal(0, 1, (m, k)).astype(np.float32)]
            )
            table.add("a", f"{mode} matmul {type_name} == CPU", ok, f"rows {list(rows)}, {n}x{k}, bitwise")
    cpu, gpu = both_devices(MODES[0])
    m = 5 if dry else 64
    x = rng.normal(0, 2, (m, 96 if dry else 4096)).astype(np.float32)
    w = rng.normal(1, 0.1, x.shape[1]).astype(np.float32)
    table.add(
        "a", "rmsnorm == CPU", same_bits(cpu.rmsnorm(x, w, 1e-6), gpu.rmsnorm(x, w, 1e-6)), f"{x.shape}"
    )
    g, u = (rng.normal(0, 4, (m, 3000)).astype(np.float32) for _ in range(2))
    table.add("a", "silu_mul == CPU", same_bits(cpu.silu_mul(g, u), gpu.silu_mul(g, u)), f"{g.shape}")
    for interleaved in (True, False):
        d = 32 if dry else 128
        ang = np.arange(512)[:, None] * 10000.0 ** (-np.arange(d // 2) * 2.0 / d)[None, :]
        rope_table = RopeTable(np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32), d, interleaved)
        xq = rng.normal(0, 1, (m, 4, d)).astype(np.float32)
        pos = rng.integers(0, 512, m).astype(np.int32)
        ok = same_bits(cpu.rope(xq.copy(), pos, rope_table), gpu.rope(xq.copy(), pos, rope_table))
        table.add("a", f"rope {'interleaved' if interleaved else 'neox'} == CPU", ok, f"{xq.shape}")
    heads, kv_heads, d, block = 8, 2, 32 if dry else 128, 16
    lengths = [40, 7, 70] if dry else [600, 37, 1500]
    need = [-(-n_ // block) for n_ in lengths]
    perm = rng.permutation(sum(need) + 3).astype(np.int32)
    tables = np.zeros((len(lengths), max(need)), np.int32)
    at = 0
    for i, nb in enumerate(need):
        tables[i, :nb] = perm[at : at + nb]
        at += nb
    kc = rng.normal(0, 1, (len(perm), block, kv_heads, d)).astype(np.float32)
    vc = rng.normal(0, 1, (len(perm), block, kv_heads, d)).astype(np.float32)
    seqs = np.array([0, 0, 0, 1, 2, 2], np.int32)
    positions = np.array([0, lengths[0] // 2, lengths[0] - 1, lengths[1] - 1, 3, lengths[2] - 1], np.int32)
    q = rng.normal(0, 1, (len(positions), heads, d)).astype(np.float32)
    meta = AttentionMeta(positions, seqs, tables, np.zeros(len(positions), np.int64), block)
    ok = same_bits(cpu.attention(q, kc, vc, meta), _gpu_attention(gpu, q, kc.copy(), vc.copy(), meta))
    table.add("a", "attention == CPU", ok, f"GQA {heads}/{kv_heads}, lengths {lengths}")
    vocab = 320 if dry else 151936
    logits = (rng.normal(0, 5, (3, vocab))).astype(np.float32)
    table.add(
        "a",
        "log_softmax == CPU",
        same_bits(cpu.log_softmax(logits.copy()), gpu.log_softmax(logits.copy())),
        f"vocab {vocab}",
    )


def _gpu_attention(gpu: Any, q: Any, kc: Any, vc: Any, meta: Any) -> Any:
    """The GPU's attention over caches given whole: written into its device cache first."""
    import numpy as np

    blocks, block = kc.shape[0], kc.shape[1]
    slots = np.arange(blocks * block, dtype=np.int64)
    k_rows, v_rows = kc.reshape(blocks * block, *kc.shape[2:]), vc.reshape(blocks * block, *vc.shape[2:])
    gpu.kv_write(k_rows, v_rows, kc, vc, slots)
    return gpu.attention(q, kc, vc, meta)


# -- (b) models on both devices ---------------------------------------------------------------------
def check_models(tmp: Path, shape: Shape, dry: bool) -> None:
    from strata_engine import LLMEngine

    n_req, longest, max_tokens = (4, 12, 2) if dry else (16, 200, 8)
    for mix in MIXES:
        path = write_model(tmp / f"smollm2-shape-{mix}.gguf", shape, mix)
        for mode in MODES:
            t = time.perf_counter()
            requests = requests_for(shape, n_req, longest, max_tokens, seed=1, vary=True)
            cpu = LLMEngine(path, device="cpu", kernels=mode, parallel=n_req)
            expected = [rows_of(e) for e in cpu.generate_batch(requests)]
            del cpu
            gpu = LLMEngine(path, device="cuda", kernels=mode, parallel=n_req)
            alone = [rows_of(gpu.generate_batch([r])[0]) for r in requests]
            together = [rows_of(e) for e in gpu.generate_batch(requests)]
            differ = [i for i in range(n_req) if alone[i] != expected[i]]
            table.add(
                "b", f"{mix} {mode}: GPU rows == CPU rows", not differ,
                f"{n_req} requests alone, differing {differ}" if differ else f"{n_req} requests alone, bitwise",
            )  # fmt: skip
            differ = [i for i in range(n_req) if together[i] != expected[i]]
            table.add(
                "b", f"{mix} {mode}: GPU batch of {n_req} == CPU", not differ,
                f"differing {differ}" if differ else f"bitwise, {time.perf_counter() - t:.0f} s",
            )  # fmt: skip
            drawn = gpu.ops.device_draws  # the seeded request's tokens, alone and in the batch
            table.add("b", f"{mix} {mode}: sampled tokens drawn on the GPU", drawn > 0, f"{drawn} tokens")
            del gpu
        check_graphs(path, shape, mix, dry)


def check_graphs(path: Path, shape: Shape, mix: str, dry: bool) -> None:
    """Decode on CUDA graphs: requests that end one by one, so the batch crosses buckets; every
    row equals the CPU engine's and every bucket the steps needed was captured."""
    from strata_engine import LLMEngine
    from strata_engine.kernels.triton.graphs import bucket

    mode, n_req = "native", (5 if dry else 12)
    requests = requests_for(shape, n_req, 8 if dry else 64, n_req, seed=7, vary=True)
    cpu = LLMEngine(path, device="cpu", kernels=mode, parallel=n_req)
    expected = [rows_of(e) for e in cpu.generate_batch(requests)]
    del cpu
    try:
        gpu = graphs_engine(path, kernels=mode, parallel=n_req)
        got = [rows_of(e) for e in gpu.generate_batch(requests)]
    except Exception as exc:  # a failed capture is a failed row, not the end of the run
        table.add("b", f"{mix} {mode}: CUDA graphs == CPU", False, f"{type(exc).__name__}: {exc}"[:200])
        return
    graphs = gpu.ops.decode_graphs
    wanted = {bucket(n) for n in range(1, n_req)}  # decode-only steps of 1..n_req-1 live rows
    ran = {b for b, steps in graphs.steps.items() if steps}
    differ = [i for i in range(n_req) if got[i] != expected[i]]
    table.add(
        "b", f"{mix} {mode}: CUDA graphs == CPU", not differ,
        f"differing {differ}" if differ else f"{n_req} requests ending one by one, bitwise",
    )  # fmt: skip
    captured = set(graphs.captured) if not dry else ran  # the interpreter runs the static path uncaptured
    table.add(
        "b", f"{mix} {mode}: CUDA graph buckets", wanted <= ran and wanted <= captured,
        f"buckets stepped {sorted(ran)}, captured {sorted(graphs.captured)}, needed {sorted(wanted)}",
    )  # fmt: skip
    del gpu


# -- (c) speed --------------------------------------------------------------------------------------
if __name__ == "__main__":
    sys.exit(main())
