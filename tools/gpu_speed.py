"""Part (c) of the GPU check (tools/gpu_check.py): the device's read bandwidth, decode at 1 to 256
streams eager and on CUDA graphs, a 2,048-token prefill, and two requests compared with the CPU."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gpu_rows import graphs_engine, requests_for, rows_of, table

from strata_engine.testing.shaped_models import MIXES, Shape, write_model


def device_bytes_per_token(path: Path, mode: str) -> int:
    """The bytes a batch-1 decode step reads from the weights as `mode`'s kernels hold them on the
    device: packed by strata_q8_pack for the integer modes (IQ2_XS, IQ2_S as expanded at load); for `native-fp32`, K-quants as GGUF bytes and
    Q4_0/Q4_1/Q8_0 with their scales widened to fp32 (stored.py). The tied embedding is the LM
    head, read whole."""
    from strata_engine.gguf_loader import GGUFFile
    from strata_engine.kernels.native.backend import NativeOps
    from strata_engine.kernels.triton import packed
    from strata_engine.kernels.triton.dequant import row_bytes
    from strata_engine.kernels.triton.stored import RAW_TYPES
    from strata_engine.kernels.weights import NATIVE_TYPES

    lib = NativeOps(1, q8=True).lib
    total = 0
    for info in GGUFFile(path).tensors.values():
        if len(info.shape) != 2:
            continue
        kind = NATIVE_TYPES[info.qtype]
        n, k = info.shape
        if mode == "native-fp32":
            total += n * row_bytes(RAW_TYPES.get(info.qtype, kind), k)
        elif kind in packed.KGRID:  # IQ2_XS, IQ2_S: the device holds the expansion (kgrid.py)
            total += packed.packed_bytes(kind, n, k)
        elif lib.strata_q8_supported(kind):
            total += int(lib.strata_q8_packed_bytes(kind, n, k))
        else:
            total += n * k * 4
    return total


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _timed(fn: Callable[[], Any], reps: int) -> float:
    fn()
    _sync()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    _sync()
    return (time.perf_counter() - t) / reps


def read_bandwidth(dry: bool) -> float:
    """Bytes a second the device reads, by a read-only kernel (a sum over 4 GiB): the bound a
    decode step, which reads its weights and writes almost nothing, is held to. A copy's rate
    halved would understate it (writes cost more than reads on HBM)."""
    import torch

    device = torch.device("cpu" if dry else "cuda")
    nbytes = 2**20 if dry else 2**32
    data = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    return nbytes / _timed(lambda: data.sum(), 1 if dry else 20)


def decode_rate(engine: Any, requests: list[Any], steps: int) -> float:
    """Tokens a second of `requests` decoding together, timed only once every request has its
    first token: the prefill of a wide batch can take several steps (the step's token budget),
    and those steps are not decode."""
    from strata_engine.api import Step

    outputs = [engine.add(r) for r in requests]
    started = [False] * len(outputs)
    while not all(started):
        engine.step()
        for index, out in enumerate(outputs):
            started[index] = started[index] or any(isinstance(e, Step) for e in out.take())
    _sync()
    t = time.perf_counter()
    for _ in range(steps):
        engine.step()
    _sync()
    sec = time.perf_counter() - t
    while not all(out.finished for out in outputs):
        engine.step()
    for out in outputs:
        out.take()  # a failed request raises here
    return len(requests) * steps / sec


def speed(tmp: Path, shape: Shape, dry: bool, modes: Sequence[str]) -> None:
    read_bw = read_bandwidth(dry)
    table.add("c", "device read bandwidth", None, f"{read_bw / 1e9:.1f} GB/s (a read-only sum)")
    for mix in MIXES:
        t = time.perf_counter()
        path = write_model(tmp / f"speed-{mix}.gguf", shape, mix, seed=2)
        table.add(
            "c", f"{mix} model", None,
            f"{shape.layers} layers, hidden {shape.hidden}, written in {time.perf_counter() - t:.0f} s",
        )  # fmt: skip
        for mode in modes:
            speed_of(path, shape, mix, mode, read_bw, dry)


def speed_of(path: Path, shape: Shape, mix: str, mode: str, read_bw: float, dry: bool) -> None:
    """Decode (eager, then on CUDA graphs), prefill, and two requests against the CPU, in `mode`."""
    from strata_engine import LLMEngine, LogprobParams, Request, SamplingParams

    per_token = device_bytes_per_token(path, mode)
    batches = (1, 2) if dry else (1, 8, 64, 256)
    steps = 1 if dry else 32
    options = {"kernels": mode, "parallel": max(batches), "kv_cache_mb": 64 if dry else 16384}
    t = time.perf_counter()
    engine = LLMEngine(path, device="cuda", **options)
    table.add(
        "c", f"{mix} {mode}", None,
        f"{per_token / 1e6:.1f} MB of weights read a token, loaded in {time.perf_counter() - t:.0f} s",
    )  # fmt: skip
    for graphs in (False, True):
        if graphs:
            del engine
            engine = graphs_engine(path, **options)
        how = ", CUDA graphs" if graphs else ""
        rates: dict[int, float] = {}
        for batch in batches:
            make = lambda seed, b=batch: requests_for(shape, b, 16, steps + 2, seed)  # noqa: E731
            decode_rate(engine, make(100 + batch), steps)  # warm-up: compiles (and captures) this size
            rate = decode_rate(engine, make(200 + batch), steps)
            rates[batch] = rate
            detail = f"{rate:.1f} tokens/s"
            if batch == 1:
                share = per_token * rate / read_bw
                detail += (
                    f", {per_token * rate / 1e9:.0f} GB/s of weights = {share:.0%} of the read bandwidth"
                )
                table.add(
                    "c", f"{mix} {mode} decode batch 1{how} (target >= 50%)",
                    None if dry else share >= 0.5, detail,
                )  # fmt: skip
            else:
                ratio = rate / rates[1]
                target = batch == 256
                table.add(
                    "c", f"{mix} {mode} decode {batch} streams{how}" + (" (target >= 20x)" if target else ""),
                    None if dry or not target else ratio >= 20, f"{detail}, {ratio:.1f}x batch 1",
                )  # fmt: skip
        if graphs:
            graphs_ran = engine.ops.decode_graphs
            captured = set(graphs_ran.captured) if not dry else {b for b, n in graphs_ran.steps.items() if n}
            table.add(
                "c", f"{mix} {mode} timed steps ran on graphs", set(batches) <= captured,
                f"buckets {sorted(captured)}",
            )  # fmt: skip
    prefill = 48 if dry else 2048
    request = Request(tuple(range(5, 5 + prefill)), SamplingParams(max_tokens=1), LogprobParams())
    engine.generate(request)  # warm-up
    t = time.perf_counter()
    engine.generate(Request(tuple(range(6, 6 + prefill)), SamplingParams(max_tokens=1), LogprobParams()))
    _sync()
    sec = time.perf_counter() - t
    table.add("c", f"{mix} {mode} prefill {prefill} tokens", None, f"{prefill / sec:.0f} tokens/s")
    sample = requests_for(shape, 2, 16, 3, seed=300)  # on the engine above (CUDA graphs on)
    got = [rows_of(e) for e in engine.generate_batch(sample)]
    del engine
    cpu = LLMEngine(path, device="cpu", kernels=mode, parallel=2)
    same = [rows_of(e) for e in cpu.generate_batch(sample)] == got
    table.add("c", f"{mix} {mode} {shape.layers}-layer model: GPU rows == CPU", same, "2 requests, bitwise")
    del cpu
