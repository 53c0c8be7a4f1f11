"""Tokens/s against batch size and against prompt length, Strata and llama.cpp, into speed.json;
then every chart is drawn again from the results (bench/figures.py).

- batch: Strata's total decode tokens/s with 1, 2, 4, 8 and 16 concurrent streams (continuous
  batching, bench_batching's `run_streams`), with the default kernels and with the opt-in
  8-bit-activation kernels (native-q8), and llama.cpp's batch-1 decode rate (llama-cpp-python
  serves one sequence at a time);
- prompt: prefill tokens/s (last-position logits) for prompts of 64 to 1024 tokens, both
  engines, Strata with both kernels (bench_engine's measurement).

speed.json keys each series by the kernels that ran (`native`, `native-q8`, `llama.cpp`).
Each side runs in its own subprocess; the sides take turns for --rounds rounds and each point
keeps its best figure. Written to bench/results/ (default model; --model for another GGUF).

    python bench/plot_speed.py [--quick] [--threads 2] [--model PATH]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from _common import host_line, keep_best, run_side, write_results
from bench_engine import bench_llama_cpp, bench_strata
from figures import draw_charts

RESULTS = Path(__file__).parent / "results"
NOTE = "provisional: a shared, noisy machine"
STREAMS = (1, 2, 4, 8, 16)
PROMPTS = (64, 128, 256, 512, 1024)


def strata_batch(path: str, threads: int, tokens: int, kernels: str) -> dict[str, float]:
    """Strata's total decode tokens/s at each stream count (one engine, continuous batching)."""
    from bench_batching import run_streams

    from strata_engine import LLMEngine

    engine = LLMEngine(path, num_threads=threads, parallel=max(STREAMS), prefix_cache=False, kernels=kernels)
    run_streams(engine, 1, 4, 1000)  # warm-up
    return {str(n): run_streams(engine, n, tokens, 100 * n)[0] for n in STREAMS}


def llama_cpp_batch(path: str, threads: int, tokens: int, repeat: int) -> dict[str, float]:
    """llama.cpp's batch-1 decode tokens/s (its only batch size through llama-cpp-python)."""
    return {"1": bench_llama_cpp(threads, repeat, path, PROMPTS[0], tokens, all_logits=False)["decode"]}


def prefill(bench, path: str, threads: int, repeat: int, **kernels: str) -> dict[str, float]:
    """Prefill tokens/s (last-position logits) at each prompt length, the best of `repeat` on
    one loaded model (the first prefill after a load also pays for warming up)."""
    return {
        str(n): bench(threads, repeat, path, prompt_tokens=n, decode_tokens=2, all_logits=False, **kernels)[
            "prefill_last"
        ]
        for n in PROMPTS
    }


SIDES = {
    "native:batch": lambda a: strata_batch(a.model, a.threads, a.tokens, "native"),
    "native-q8:batch": lambda a: strata_batch(a.model, a.threads, a.tokens, "native-q8"),
    "llama.cpp:batch": lambda a: llama_cpp_batch(a.model, a.threads, a.tokens, a.repeat),
    "native:prompt": lambda a: prefill(bench_strata, a.model, a.threads, a.repeat, kernels="native"),
    "native-q8:prompt": lambda a: prefill(bench_strata, a.model, a.threads, a.repeat, kernels="native-q8"),
    "llama.cpp:prompt": lambda a: prefill(bench_llama_cpp, a.model, a.threads, a.repeat),
}


def measure(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Every side, --rounds times in turn; the best figure of each point."""
    results: dict[str, dict[str, float]] = {}
    common = ["--model", args.model, "--threads", str(args.threads), "--tokens", str(args.tokens),
              "--repeat", str(args.repeat)]  # fmt: skip
    for _ in range(args.rounds):
        for side in SIDES:
            out = run_side(side, __file__, ["--side", side, *common])
            if out is not None:
                keep_best(results.setdefault(side, out), out)
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="GGUF path (default: the default model)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=64, help="decode tokens per stream")
    ap.add_argument("--rounds", type=int, default=2, help="rounds in which the sides take turns")
    ap.add_argument("--repeat", type=int, default=2, help="measurements per prompt length and round")
    ap.add_argument("--quick", action="store_true", help="smoke run: 16 tokens per stream, one round")
    ap.add_argument("--note", default=NOTE, help="how the figures were taken (JSON and charts)")
    ap.add_argument("--side", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if not args.model:
        from strata_engine.model_store import resolve_model

        args.model = str(resolve_model("default"))
    if args.side:
        print(json.dumps(SIDES[args.side](args)))
        return
    if args.quick:
        args.tokens, args.rounds, args.repeat = 16, 1, 1
    host = host_line()
    print(host)
    results = measure(args)
    for side, points in results.items():
        print(f"{side:18}" + "".join(f"{n:>7}: {v:7.1f}" for n, v in points.items()))
    RESULTS.mkdir(exist_ok=True)
    record = {
        "note": f"best of {args.rounds} round(s) x {args.repeat}; {args.note}",
        "host": host,
        "model": Path(args.model).name,
        "threads": args.threads,
        "decode_tokens_per_stream": args.tokens,
        "rounds": args.rounds,
        "repeat": args.repeat,
        "batch_decode_tok_s": {k.split(":")[0]: v for k, v in results.items() if k.endswith(":batch")},
        "prefill_tok_s": {k.split(":")[0]: v for k, v in results.items() if k.endswith(":prompt")},
    }
    path = RESULTS / "speed.json"
    write_results(path, record)
    print("charts: " + ", ".join(str(p) for p in draw_charts()))


if __name__ == "__main__":
    main()
