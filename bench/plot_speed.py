"""Speed charts: tokens/s against batch size and against prompt length, Strata and llama.cpp.

- speed_vs_batch.png: Strata's total decode tokens/s with 1, 2, 4, 8 and 16 concurrent streams
  (continuous batching, bench_batching's `run_streams`), with the default kernels and with the
  opt-in 8-bit-activation kernels (native-q8), and llama.cpp's batch-1 decode rate as a
  reference line (llama-cpp-python serves one sequence at a time);
- speed_vs_prompt.png: prefill tokens/s (last-position logits) for prompts of 64 to 1024
  tokens, both engines, Strata with both kernels (bench_engine's measurement);
- speed.json: the numbers.

Each side runs in its own subprocess; the sides take turns for --rounds rounds and each point
keeps its best figure. Written to bench/results/ (default model; --model for another GGUF).

    python bench/plot_speed.py [--quick] [--threads 2] [--model PATH] [--prefix speed]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench_engine import bench_llama_cpp, bench_strata, host_line, keep_best, run_side

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
    "strata:batch": lambda a: strata_batch(a.model, a.threads, a.tokens, "native"),
    "strata-q8:batch": lambda a: strata_batch(a.model, a.threads, a.tokens, "native-q8"),
    "llama.cpp:batch": lambda a: llama_cpp_batch(a.model, a.threads, a.tokens, a.repeat),
    "strata:prompt": lambda a: prefill(bench_strata, a.model, a.threads, a.repeat),
    "strata-q8:prompt": lambda a: prefill(bench_strata, a.model, a.threads, a.repeat, kernels="native-q8"),
    "llama.cpp:prompt": lambda a: prefill(bench_llama_cpp, a.model, a.threads, a.repeat),
}
LABELS = {"strata": "Strata (default kernels)", "strata-q8": "Strata, native-q8 (8-bit activations)"}


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


def plot(results: dict[str, dict[str, float]], title: str, note: str, prefix: str) -> list[Path]:
    """The two charts, as PNGs in bench/results/."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def axes(xlabel: str, ylabel: str, ticks: tuple[int, ...]):
        fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=120)
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        fig.suptitle(title, fontsize=11)
        fig.text(0.5, -0.01, note, ha="center", va="top", fontsize=7, color="0.4")
        return fig, ax

    def line(ax, points: dict[str, float], label: str, style: str) -> None:
        xs = [int(n) for n in points]
        ys = list(points.values())
        ax.plot(xs, ys, style, label=label, linewidth=2, markersize=6)
        for x, y in zip(xs, ys, strict=True):
            ax.annotate(
                f"{y:.0f}", (x, y), textcoords="offset points", xytext=(0, 7), ha="center", fontsize=8
            )

    paths = []
    fig, ax = axes("concurrent decode streams (batch size)", "total decode tokens/s", STREAMS)
    for side, style in (("strata", "o-"), ("strata-q8", "^-")):
        if f"{side}:batch" in results:
            line(ax, results[f"{side}:batch"], f"{LABELS[side]}, continuous batching", style)
    if "llama.cpp:batch" in results:
        rate = results["llama.cpp:batch"]["1"]
        ax.axhline(rate, color="C1", linestyle="--", linewidth=2,
                   label=f"llama.cpp, batch 1 ({rate:.0f} tok/s; one sequence at a time)")  # fmt: skip
    ax.set_ylim(0, ax.get_ylim()[1] * 1.15)  # room for the labels and the legend
    ax.legend(loc="lower right", fontsize=8)
    paths.append(RESULTS / f"{prefix}_vs_batch.png")
    fig.savefig(paths[-1], bbox_inches="tight")
    fig, ax = axes("prompt length (tokens)", "prefill tokens/s (last-position logits)", PROMPTS)
    for side, label, style in (
        ("strata:prompt", LABELS["strata"], "o-"),
        ("strata-q8:prompt", LABELS["strata-q8"], "^-"),
        ("llama.cpp:prompt", "llama.cpp", "s--"),
    ):
        if side in results:
            line(ax, results[side], label, style)
    ax.set_ylim(0, ax.get_ylim()[1] * 1.15)
    ax.legend(loc="lower right", fontsize=8)
    paths.append(RESULTS / f"{prefix}_vs_prompt.png")
    fig.savefig(paths[-1], bbox_inches="tight")
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="GGUF path (default: the default model)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=64, help="decode tokens per stream")
    ap.add_argument("--rounds", type=int, default=2, help="rounds in which the sides take turns")
    ap.add_argument("--repeat", type=int, default=2, help="measurements per prompt length and round")
    ap.add_argument("--quick", action="store_true", help="smoke run: 16 tokens per stream, one round")
    ap.add_argument("--prefix", default="speed", help="output names: PREFIX_vs_batch.png, ..., PREFIX.json")
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
    name = Path(args.model).name
    note = (
        f"{host.removeprefix('host: ')}; {args.threads} threads each; best of {args.rounds} round(s) "
        f"x {args.repeat}; {args.note}"
    )
    paths = plot(results, f"{name}: Strata vs llama.cpp (tokens/s)", note, args.prefix)
    record = {
        "note": args.note,
        "host": host,
        "model": name,
        "threads": args.threads,
        "decode_tokens_per_stream": args.tokens,
        "rounds": args.rounds,
        "repeat": args.repeat,
        "batch_decode_tok_s": {k.split(":")[0]: v for k, v in results.items() if k.endswith(":batch")},
        "prefill_tok_s": {k.split(":")[0]: v for k, v in results.items() if k.endswith(":prompt")},
    }
    paths.append(RESULTS / f"{args.prefix}.json")
    paths[-1].write_text(json.dumps(record, indent=2) + "\n")
    print("wrote " + ", ".join(str(p) for p in paths))


if __name__ == "__main__":
    main()
