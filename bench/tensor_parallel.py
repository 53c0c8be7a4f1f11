"""Tensor parallelism against one rank, over HTTP on real servers: how far the logprobs move and
how fast each serves.

    python bench/tensor_parallel.py                 # 2 gloo ranks vs 1 rank, the default model
    python bench/tensor_parallel.py --ranks 2 --model path/to/model.gguf

Starts a one-rank server (`--threads` = all cores) and an N-rank one (`--tensor-parallel N`, its
ranks started as torchrun starts them, each with cores/N threads), sends both the same greedy
requests (echo, 20 alternatives: a row for every prompt and generated position), and prints:
whether the generated tokens agree, the largest |logprob(N ranks) - logprob(1 rank)| over every
value both list, the one-request latency, and decode speed (tokens/s of a 64-token reply).
On a small shared CPU the timings are noisy; run it twice.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import httpx

from strata_server.launch import server_process, tensor_parallel_server

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "Question: Is the sky green? Answer (yes or no):",
    "Once upon a time, in a small village by the sea, there lived",
    "The three laws of thermodynamics are",
    "SELECT name, age FROM users WHERE",
    "Translate to French: I would like a cup of coffee.",
    "A list of prime numbers: 2, 3, 5, 7,",
    "The patient reported chest pain and shortness of breath; the doctor ordered",
    "In 1969, Apollo 11",
    "Dear hiring manager, I am writing to apply for",
    "To be, or not to be, that is the question:",
]
DECODE_TOKENS = 64


def complete(url: str, body: dict[str, Any]) -> dict[str, Any]:
    reply = httpx.post(f"{url}/v1/completions", json={"model": "bench", **body}, timeout=600)
    reply.raise_for_status()
    return reply.json()


def rows(url: str) -> list[dict[str, Any]]:
    body = {"max_tokens": 16, "temperature": 0, "echo": True, "logprobs": 20}
    return [complete(url, {**body, "prompt": p})["choices"][0]["logprobs"] for p in PROMPTS]


def max_difference(one: list[dict[str, Any]], many: list[dict[str, Any]]) -> tuple[float, bool, int]:
    """Largest |difference| over values both list, whether every token agrees, values compared."""
    worst, same, count = 0.0, True, 0
    for a, b in zip(one, many, strict=True):
        same &= a["tokens"] == b["tokens"]
        for va, vb in zip(a["token_logprobs"], b["token_logprobs"], strict=True):
            if va is not None and vb is not None:
                worst, count = max(worst, abs(va - vb)), count + 1
        for ta, tb in zip(a["top_logprobs"], b["top_logprobs"], strict=True):
            for token in (ta or {}).keys() & (tb or {}).keys():
                worst, count = max(worst, abs(ta[token] - tb[token])), count + 1
    return worst, same, count


def timings(url: str, repeats: int) -> dict[str, float]:
    latency, decode = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        complete(url, {"prompt": PROMPTS[3], "max_tokens": 1, "temperature": 0})
        latency.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        complete(
            url, {"prompt": PROMPTS[3], "max_tokens": DECODE_TOKENS, "temperature": 0, "ignore_eos": True}
        )
        decode.append(DECODE_TOKENS / (time.perf_counter() - t0))
    return {"one_token_s": statistics.median(latency), "decode_tok_s": statistics.median(decode)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--model", default="default")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--one-rank-threads", type=int, default=None, help="default: every core")
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    threads = args.one_rank_threads or cores
    common = ("--model", args.model, "--served-model-name", "bench", "--log-level", "warning")
    with server_process(*common, "--threads", str(threads)) as one:
        reference = rows(one.url)
        single = timings(one.url, args.repeats)
    per_rank = max(cores // args.ranks, 1)
    with tensor_parallel_server(args.ranks, *common, "--threads", str(per_rank)) as (many, _):
        split = rows(many.url)
        parallel = timings(many.url, args.repeats)
    worst, same, count = max_difference(reference, split)
    print(f"{args.ranks} ranks vs 1 rank, {len(PROMPTS)} prompts, {count} logprobs compared")
    print(f"  same generated tokens: {same}")
    print(f"  max |logprob difference|: {worst:.3g}")
    for name, t in (
        (f"1 rank, {threads} thread(s)", single),
        (f"{args.ranks} ranks, {per_rank} thread(s) each", parallel),
    ):
        print(
            f"  {name}: {t['one_token_s'] * 1000:.0f} ms for one token, {t['decode_tok_s']:.1f} tok/s decode"
        )


if __name__ == "__main__":
    main()
