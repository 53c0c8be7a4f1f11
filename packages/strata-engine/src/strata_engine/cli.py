"""`strata-engine`: run a real generation with logprobs straight from the engine."""

from __future__ import annotations

import argparse
import json
import sys

from strata_engine.api import EngineError, LogprobParams, ModelLoadError, Request, SamplingParams, Step
from strata_engine.cli_help import HelpFormatter
from strata_engine.engine import LLMEngine
from strata_engine.kernels.choice import KERNEL_CHOICES, describe
from strata_engine.kernels.kv_types import KV_DTYPES
from strata_engine.kernels.native import NativeUnavailable
from strata_engine.model_store import resolve_model


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="strata-engine",
        description="Generate text with logprobs from a GGUF model.",
        formatter_class=HelpFormatter,
    )
    ap.add_argument(
        "--model",
        default="default",
        help="GGUF path, a Hub reference (owner/repo:QUANT, owner/repo/FILE.gguf), or 'default' "
        "(SmolLM2-135M-Instruct Q4_1)",
    )
    ap.add_argument(
        "--prompt", default="What is the capital of France?", help="user message (chat) or raw text"
    )
    ap.add_argument(
        "--raw", action="store_true", help="send --prompt as raw text, not through the chat template"
    )
    ap.add_argument("--max-tokens", type=int, default=32, help="tokens to generate at most")
    ap.add_argument("--temperature", type=float, default=0.0, help="0: greedy; above 0: sampled")
    ap.add_argument(
        "--seed", type=int, default=None, help="the sampler's seed (default: none: a fresh one each run)"
    )
    ap.add_argument("--logprobs", type=int, default=5, help="top-N alternatives to show per token")
    ap.add_argument(
        "--threads", type=int, default=None, help="CPU threads (default: the CPUs this process may run on)"
    )
    ap.add_argument(
        "--kernels",
        default="auto",
        choices=KERNEL_CHOICES,
        help="native (exact, batch-invariant; the modes: docs/engine.md) or torch",
    )
    ap.add_argument(
        "--kv-cache-dtype",
        default="fp32",
        choices=tuple(KV_DTYPES),
        help="what the KV cache stores: fp32 (exact), bf16 / fp16 (half the memory) or q8_0 (CPU; docs/engine.md)",
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object per token")
    args = ap.parse_args(argv)
    try:
        engine = LLMEngine(
            resolve_model(args.model),
            num_threads=args.threads,
            kernels=args.kernels,
            kv_cache_dtype=args.kv_cache_dtype,
        )
        tok = engine.tokenizer
        if args.raw or engine.chat_template is None:
            ids = tok.encode(args.prompt)
        else:
            ids = engine.render_chat([{"role": "user", "content": args.prompt}])
        request = Request(
            tuple(ids),
            SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, seed=args.seed),
            LogprobParams(top_n=args.logprobs),
        )
        events = engine.generate(request)
    except (EngineError, NativeUnavailable) as exc:
        print(f"strata-engine: error: {exc}", file=sys.stderr)
        return 1 if isinstance(exc, ModelLoadError) else 2
    print(f"# {describe(engine.kernels, engine.invariant)}", file=sys.stderr)
    print(
        f"# model {engine.model_name} loaded in {engine.load_seconds:.2f} s; prompt {len(ids)} tokens",
        file=sys.stderr,
    )
    steps = [e for e in events if isinstance(e, Step)]
    for step in steps:
        row = step.logprobs
        if row is None:  # never: top_n is always set above
            continue
        if args.json:
            print(json.dumps({
                "token": tok.token_text(step.token_id), "id": step.token_id, "logprob": row.logprob,
                "top": {tok.token_text(i): v for i, v in row.top},
            }))  # fmt: skip
        else:
            alts = "  ".join(f"{tok.token_text(i)!r} {v:.3f}" for i, v in row.top)
            print(f"{tok.token_text(step.token_id)!r:>16} {row.logprob:8.4f}   | {alts}")
    print(f"\n{''.join(s.text for s in steps)}  [finish: {steps[-1].finish_reason if steps else 'length'}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
