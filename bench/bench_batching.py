"""Continuous batching on the default model: throughput, time to first token, the cost of
invariance, and prefix reuse.

- aggregate decode tokens/s and mean time-to-first-token at 1, 4, 8 and 16 concurrent
  streams (each stream: a distinct ~64-token prompt, 64 greedy tokens);
- the same with invariance switched off (TorchOps: MKL GEMMs + SDPA), and the ratio;
- 15 one-token reads over 5 shared ~200-token states (3 questions each): cold cache vs warm.

    python bench/bench_batching.py [--threads 2] [--tokens 64]
"""

from __future__ import annotations

import argparse
import time

from strata_engine import LLMEngine, Request, SamplingParams, Step
from strata_engine.model_store import resolve_model

TOPICS = ["ocean tides", "volcanoes", "jazz history", "compilers", "bees", "glaciers", "chess openings",
          "bread baking", "satellites", "rainforests", "origami", "the Roman empire", "solar panels",
          "octopuses", "typography", "bicycles"]  # fmt: skip


def prompt(engine: LLMEngine, i: int) -> tuple[int, ...]:
    text = (
        f"<|im_start|>user\nWrite a detailed, friendly paragraph about {TOPICS[i % len(TOPICS)]} for a curious "
        f"twelve-year-old, with two surprising facts and one question to think about (variant {i}).<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    return tuple(engine.tokenizer.encode(text))


def run_streams(engine: LLMEngine, n: int, tokens: int, offset: int) -> tuple[float, float]:
    """Start n streams at once; return (aggregate decode tok/s, mean time to first token).

    The decode rate is taken while all n streams decode together: from the moment the last of
    them has its first token (the others' prompts are prefilled meanwhile, in the same steps)
    to the moment the first of them has its last, the tokens made in that window over its
    length."""
    first: dict[int, float] = {}
    last: dict[int, float] = {}
    stamps: list[float] = []
    start = time.perf_counter()
    outs = [
        engine.add(
            Request(
                prompt(engine, offset + i), SamplingParams(max_tokens=tokens, temperature=0, ignore_eos=True)
            )
        )
        for i in range(n)
    ]
    while not all(out.drained for out in outs):
        engine.step()
        now = time.perf_counter()
        for i, out in enumerate(outs):
            for ev in out.take():
                if isinstance(ev, Step):
                    first.setdefault(i, now)
                    last[i] = now
                    stamps.append(now)
    window_start, window_end = max(first.values()), min(last.values())
    if window_end <= window_start:  # too few tokens for a common window: the whole run
        window_start, window_end = min(first.values()), max(last.values())
    decode_tokens = sum(1 for t in stamps if window_start < t <= window_end)
    decode_time = window_end - window_start
    ttft = sum(first[i] - start for i in range(n)) / n
    return decode_tokens / decode_time, ttft


def prefix_reuse(engine: LLMEngine) -> float:
    """Seconds for 15 one-token reads: 5 states x 3 questions, each state's prefix shared."""
    start = time.perf_counter()
    for s in range(5):
        state = f"<|im_start|>user\nState {s}: " + " ".join(
            f"event {s}-{k} happened at {k}:00 in room {k * 7 % 13}." for k in range(25)
        )
        for q in range(3):
            text = f"{state}\nQuestion {q}: did anything happen in room {q + 2}? Answer Yes or No.<|im_end|>\n<|im_start|>assistant\n"
            engine.generate(
                Request(tuple(engine.tokenizer.encode(text)), SamplingParams(max_tokens=1, temperature=0))
            )
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--streams", default="1,4,8,16")
    args = ap.parse_args()
    path = resolve_model("default")
    levels = [int(x) for x in args.streams.split(",")]
    results: dict[bool, dict[int, tuple[float, float]]] = {}
    for invariant in (True, False):
        engine = LLMEngine(
            path,
            num_threads=args.threads,
            parallel=max(levels),
            prefix_cache=False,
            kernels="native" if invariant else "torch",
        )
        run_streams(engine, 1, 4, 1000)  # warm-up
        results[invariant] = {n: run_streams(engine, n, args.tokens, 100 * n) for n in levels}
    print(
        f"{'streams':>7} {'tok/s inv':>10} {'ttft inv':>9} {'tok/s off':>10} {'ttft off':>9} {'inv/off':>8}"
    )
    for n in levels:
        (a, ta), (b, tb) = results[True][n], results[False][n]
        print(f"{n:7d} {a:10.1f} {ta:8.2f}s {b:10.1f} {tb:8.2f}s {a / b:8.2f}")
    cold_engine = LLMEngine(path, num_threads=args.threads, prefix_cache=False)
    warm_engine = LLMEngine(path, num_threads=args.threads, prefix_cache=True)
    cold = prefix_reuse(cold_engine)
    warm = prefix_reuse(warm_engine)
    print(f"prefix reuse, 15 one-token reads over 5 states: no cache {cold:.2f}s, prefix cache {warm:.2f}s "
          f"({cold / warm:.2f}x)")  # fmt: skip


if __name__ == "__main__":
    main()
