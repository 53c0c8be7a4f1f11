"""Where one decode step's time goes, before and after one native call per layer, and how far
the kernels are from this machine's limits.

    python bench/profile_decode.py [--threads 2] [--tokens 64] [--json]

- before: model.py's per-operation path (one `Ops` call per operation); every call of a
  decode step is timed, Python and ctypes overhead included, and grouped by operation;
- after: the one-call-per-layer path (fused_layer.py): the layers, the LM head and log-softmax,
  and the rest of the step (scheduling, sampling, text), timed the same way;
- limits: the weight bytes a decode token reads against the measured memory read bandwidth,
  and the FLOPs of a prefill token against the matmul kernel's measured FLOP rate (a large
  fp32 matmul, all threads) — the distance left on each.

Figures are per decode token, batch 1, greedy, on the default model; each is the median of
three runs of `--tokens` tokens (the machine is shared: medians, not means).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from strata_engine import LLMEngine, Request, SamplingParams
from strata_engine.kernels.weights import Weight
from strata_engine.model_store import resolve_model

OPS = ("embed", "rmsnorm", "linear", "rope", "kv_write", "attention", "silu_mul", "log_softmax")


class Timed:
    """Wraps callables and adds their wall time to per-name totals."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - start

        return timed


def decode_profile(engine: LLMEngine, tokens: int, fused: bool) -> dict[str, float]:
    """Milliseconds per decode token by part (median of three runs)."""
    model, saved = engine.model, engine.model.fused
    model.fused = saved if fused else None
    runs: list[dict[str, float]] = []
    prompt = tuple(engine.tokenizer.encode("Tell me a long story about a lighthouse keeper."))
    try:
        for r in range(3):
            timer = Timed()
            patched: list[tuple[Any, str, Any]] = []

            def patch(obj: Any, attr: str, name: str, timer: Timed = timer, patched: list = patched) -> None:
                patched.append((obj, attr, getattr(obj, attr)))
                setattr(obj, attr, timer.wrap(name, getattr(obj, attr)))

            out = engine.add(
                Request((prompt[0] + r + 1, *prompt[1:]), SamplingParams(max_tokens=1, temperature=0))
            )
            while not out.drained:  # prefill outside the profile
                engine.step()
                out.take()
            request = Request(prompt, SamplingParams(max_tokens=tokens + 1, temperature=0, ignore_eos=True))
            out = engine.add(request)
            engine.step()  # the prompt (its prefix may be cached), not profiled
            out.take()
            if fused:
                patch(model, "forward", "layers")
                patch(model, "logits", "LM head")
                patch(engine.ops, "log_softmax", "log_softmax")
            else:
                for op in OPS:
                    patch(engine.ops, op, op)
            patch(engine, "step", "step")
            steps = 0
            while not out.drained:
                engine.step()
                out.take()
                steps += 1
            for obj, attr, original in reversed(patched):
                setattr(obj, attr, original)
            ms = {name: 1e3 * s / steps for name, s in timer.seconds.items()}
            inner = sum(v for k, v in ms.items() if k != "step")
            if fused:  # forward's time includes nothing else timed; logits' does not include log_softmax
                inner = ms["layers"] + ms["LM head"] + ms["log_softmax"]
            ms["rest of the step (Python: scheduling, batch, sampling, text)"] = ms["step"] - inner
            runs.append(ms)
    finally:
        model.fused = saved
    return {k: statistics.median(run[k] for run in runs) for k in runs[0]}


def memory_read_gbs(threads: int) -> float:
    """Read bandwidth: a 512 MB fp32 array read once by `np.max` on `threads` threads, best of 5.

    Each thread reads one contiguous slice (numpy releases the GIL inside a reduction). `np.max`,
    not `np.sum`: numpy's pairwise float sum is bound by its adds (about 25 GB/s on an in-cache
    array on an AVX-512 core), `np.max` is not (about 70 GB/s), so only the memory limits it."""
    data = np.ones(128 * 2**20, dtype=np.float32)
    slices = np.array_split(data, threads)
    best = 0.0
    with ThreadPoolExecutor(threads) as pool:
        for _ in range(5):
            start = time.perf_counter()
            list(pool.map(np.max, slices))
            best = max(best, data.nbytes / (time.perf_counter() - start) / 1e9)
    return best


def matmul_gflops(engine: LLMEngine) -> float:
    """The kernels' fp32 matmul rate on a large product (prefill-shaped), best of 3."""
    m, k, n = 256, 1024, 1024
    rng = np.random.default_rng(0)
    w = rng.standard_normal((n, k), dtype=np.float32)
    weight = Weight("probe", n, k, 0, w.view(np.uint8).reshape(-1))
    x = rng.standard_normal((m, k), dtype=np.float32)
    best = 0.0
    for _ in range(3):
        start = time.perf_counter()
        engine.ops.linear(x, weight)
        best = max(best, 2 * m * k * n / (time.perf_counter() - start) / 1e9)
    return best


def weight_bytes_per_token(engine: LLMEngine) -> int:
    model = engine.model
    total = model.output.raw.size
    for layer in model.layers:
        for w in (layer.wq, layer.wk, layer.wv, layer.wo, layer.w_gate, layer.w_up, layer.w_down):
            total += 0 if w is None else w.raw.size
    return total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    engine = LLMEngine(resolve_model("default"), num_threads=args.threads, parallel=1, kernels="native")
    before = decode_profile(engine, args.tokens, fused=False)
    after = decode_profile(engine, args.tokens, fused=True)
    cfg, wbytes = engine.config, weight_bytes_per_token(engine)
    flops = 2 * sum(
        w.out_features * w.in_features
        for layer in engine.model.layers
        for w in (layer.wq, layer.wk, layer.wv, layer.wo, layer.w_gate, layer.w_up, layer.w_down)
        if w is not None
    )
    report = {
        "kernels": engine.kernels,
        "threads": args.threads,
        "before_ms_per_token": before,
        "after_ms_per_token": after,
        "weight_bytes_per_token": wbytes,
        "memory_read_gbs": memory_read_gbs(args.threads),
        "layer_flops_per_prefill_token": flops,
        "matmul_gflops": matmul_gflops(engine),
        "hidden": cfg.hidden,
    }
    step_after = after["step"]
    report["decode_bandwidth_gbs"] = wbytes / (step_after / 1e3) / 1e9
    report["prefill_bound_tokens_per_s"] = report["matmul_gflops"] * 1e9 / flops
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(
        f"kernels {engine.kernels}, {args.threads} threads, ms per decode token (median of 3 x {args.tokens})"
    )
    for title, part in (("before: one call per operation", before), ("after: one call per layer", after)):
        print(f"  {title}: step {part['step']:.2f} ms")
        for name, ms in sorted(part.items(), key=lambda kv: -kv[1]):
            if name != "step":
                print(f"    {name:<62} {ms:6.2f} ms  {100 * ms / part['step']:5.1f}%")
    print(
        f"decode reads {wbytes / 1e6:.1f} MB of weights per token: {report['decode_bandwidth_gbs']:.1f} GB/s "
        f"at {1e3 / step_after:.0f} tokens/s; measured memory read bandwidth {report['memory_read_gbs']:.1f} GB/s"
    )
    print(
        f"prefill: {flops / 1e6:.0f} MFLOP of layer matmuls per token; the kernels' fp32 matmul runs at "
        f"{report['matmul_gflops']:.0f} GFLOP/s here, a bound of {report['prefill_bound_tokens_per_s']:.0f} tokens/s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
