"""Accuracy of each CPU kernel mode against an independent float64 forward pass.

For every prompt position of a few prompts, each mode's log-probabilities are compared with the
float64 reference forward of packages/strata-engine/src/strata_engine/testing/reference_forward.py (gguf-py's
dequantised weights, float64 throughout, no code shared with the engine): over the reference's
top-20 tokens and over the full vocabulary, the mean, 99th percentile and maximum of
|engine - reference| in nats. Modes: the default three-limb integer kernels (`native`), the
fp32 kernels (`native-fp32`), two limbs (`native-limb2`) and 8-bit activations (`native-q8`).

Models: the default model (SmolLM2-135M-Instruct Q4_1), and a 2-layer cut of bench_kquants.py's
Qwen3-1.7B-shaped random Q4_K_M-style file (the full 28 layers are too slow for a float64
forward on two cores; the cut keeps every weight shape and type mixture of its layers, and the
Q6_K tied embedding). `--layers` changes the cut.

    python tools/accuracy.py [--models default,kquant] [--modes native-fp32,native,native-limb2,native-q8]
                             [--layers 2] [--json bench/results/accuracy.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
from strata_engine import LLMEngine, LogprobParams, PromptScores, Request, SamplingParams, Step  # noqa: E402
from strata_engine.model_store import resolve_model  # noqa: E402
from strata_engine.testing.qwen3_shaped import model_path as kquant_path  # noqa: E402
from strata_engine.testing.qwen3_shaped import write_model  # noqa: E402
from strata_engine.testing.reference_forward import ReferenceModel  # noqa: E402

RESULTS = ROOT / "bench" / "results"
MODES = ("native-fp32", "native", "native-limb2", "native-q8")
TOP = 20
PROMPTS = (  # prose, code, data and a chat turn: ~190 positions on the default model's tokenizer
    "The history of numerical computing is, in large part, the history of rounding. Early machines "
    "stored decimal digits; later designs moved to binary floating point, and in 1985 the IEEE 754 "
    "standard fixed the formats: binary32 has a 24-bit significand, binary64 a 53-bit one.",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    '{"name": "Strata", "version": [0, 1, 0], "ok": true, "ratio": 0.75, "tags": null}',
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
)


def engine_logprobs(engine: LLMEngine, ids: list[int], vocab: int) -> np.ndarray:
    """[T, vocab]: row p is the engine's full-vocabulary logprobs after position p."""
    request = Request(
        tuple(ids),
        SamplingParams(max_tokens=1, temperature=0.0),
        LogprobParams(top_n=1, prompt_logprobs=True, named_ids=tuple(range(vocab))),
    )
    events = engine.generate(request)
    scores = next(e for e in events if isinstance(e, PromptScores))
    (step,) = [e for e in events if isinstance(e, Step)]
    rows = [*scores.rows[1:], step.logprobs]
    out = np.empty((len(rows), vocab))
    for p, row in enumerate(rows):
        assert row is not None
        out[p] = np.fromiter((row.named[i] for i in range(vocab)), dtype=np.float64, count=vocab)
    return out


def stats(diffs: np.ndarray) -> dict[str, float]:
    return {"mean": float(diffs.mean()), "p99": float(np.percentile(diffs, 99)), "max": float(diffs.max())}


def measure(path: Path, modes: list[str], threads: int) -> dict:
    reference = ReferenceModel(str(path))
    tokenizer = LLMEngine(path, num_threads=threads, kernels="native").tokenizer
    prompts = [tokenizer.encode(text) for text in PROMPTS]
    started = time.perf_counter()
    wants = [reference.logprobs(ids).numpy() for ids in prompts]
    print(f"  float64 reference: {sum(map(len, prompts))} positions in {time.perf_counter() - started:.0f} s")
    vocab = wants[0].shape[1]
    out: dict = {"positions": sum(map(len, prompts)), "vocab": vocab, "modes": {}}
    for mode in modes:
        engine = LLMEngine(path, num_threads=threads, kernels=mode)
        top, full, top1 = [], [], 0
        for ids, want in zip(prompts, wants, strict=True):
            got = engine_logprobs(engine, ids, vocab)
            diff = np.abs(got - want)
            best = np.argsort(-want, axis=1)[:, :TOP]
            top.append(np.take_along_axis(diff, best, axis=1).ravel())
            full.append(diff.ravel())
            top1 += int((got.argmax(axis=1) == best[:, 0]).sum())
        out["modes"][mode] = {
            "kernels": engine.kernels,
            "top20": stats(np.concatenate(top)),
            "full": stats(np.concatenate(full)),
            "top1_agree": top1,
        }
        print(f"  {mode}: top-20 {out['modes'][mode]['top20']}, full {out['modes'][mode]['full']}")
    return out


def table(results: dict) -> str:
    lines = [
        "| model | mode | top-20 mean | top-20 p99 | top-20 max | full-vocab mean | full-vocab p99 | full-vocab max |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for model, r in results["models"].items():
        for mode, m in r["modes"].items():
            t, f = m["top20"], m["full"]
            lines.append(
                f"| {model} ({r['positions']} positions) | {mode} | {t['mean']:.2g} | {t['p99']:.2g} | "
                f"{t['max']:.2g} | {f['mean']:.2g} | {f['p99']:.2g} | {f['max']:.2g} |"
            )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="default,kquant", help="default, kquant, or both (comma list)")
    ap.add_argument("--modes", default=",".join(MODES), help="kernel modes (comma list)")
    ap.add_argument("--layers", type=int, default=2, help="layers of the K-quant cut")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default=str(RESULTS / "accuracy.json"))
    args = ap.parse_args()
    modes = args.modes.split(",")
    paths = {}
    for name in args.models.split(","):
        if name == "default":
            paths["SmolLM2-135M Q4_1"] = resolve_model("default")
        elif name == "kquant":
            path = kquant_path(None, args.layers)
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                write_model(path, args.layers)
            paths[f"1.7B-shape Q4_K_M, {args.layers} layers"] = path
        else:
            raise SystemExit(f"unknown model {name!r} (default, kquant)")
    results: dict = {"command": " ".join(["python", *sys.argv]), "models": {}}
    for name, path in paths.items():
        print(f"{name}: {path}")
        results["models"][name] = measure(path, modes, args.threads)
    print(table(results))
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
