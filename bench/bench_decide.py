"""Decision benchmark: 5 states x 3 questions through the gateway vs naive llama-cpp-python.

    python bench/bench_decide.py [--server URL] [--model-path GGUF] [--json]

Strata side: a gateway (in-process, free port) in front of ``--server`` (or of a
strata-server this script starts on the default model); each of the 15 decisions is one
``POST /v1/systemone`` with one question; the questions of a state share its prefix.

The same again with the rotations mode on (every cyclic option order read), to show its
cost.

Naive side, in the same run: the same 15 prompts (the same token ids) evaluated by
``llama_cpp.Llama`` from scratch each time (full prompt, no prefix reuse), then the labels'
logprobs read from the last position's logits. Skipped with a message when llama-cpp-python
is not installed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from strata_client import AsyncStrataClient
from strata_decide.bench import BenchResult, bench_gateway
from strata_decide.decider import DecideOptions
from strata_decide.distribution import from_raw
from strata_decide.gateway import GatewayConfig
from strata_decide.gateway.serve import background
from strata_decide.labels import LabelBook
from strata_decide.prompts import messages, render
from strata_decide.questions import from_wire
from strata_decide.read import read_labels
from strata_decide.samples import QUESTIONS, STATES
from strata_server.launch import running_server

DEFAULT_GGUF = Path.home() / ".cache/strata/models/SmolLM2-135M-Instruct.Q4_1.gguf"


@contextmanager
def strata_server(upstream: str | None):
    """The given upstream, or a strata-server started here on the default model."""
    if upstream:
        yield upstream
        return
    with running_server("--model", "default", "--log-level", "warning", startup_timeout_s=180) as url:
        yield url


async def prompts_and_labels(upstream: str) -> tuple[list[tuple[list[int], list[int]]], list]:
    """The 15 prompts exactly as the gateway renders them, their label ids, Strata's reads."""
    async with AsyncStrataClient(base_url=upstream, timeout=300) as client:
        book, cases, reads = LabelBook(client), [], []
        for state in STATES:
            for wire in QUESTIONS.values():
                question = from_wire(wire)
                labels = await book.labels_for(question.kind, len(question.options))
                prompt = await render(client, messages(state, question, question.options, labels))
                label_ids = [label.token_id for label in labels]
                cases.append((prompt.token_ids, label_ids))
                raw = await read_labels(client, None, prompt.token_ids, label_ids)
                reads.append(from_raw(raw.raw_logprobs))
        return cases, reads


def last_logits(llama_cpp: Any, llm: Any) -> list[float]:
    """The last evaluated position's logits (with logits_all=False, ``llm.scores`` stays empty)."""
    pointer = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
    return [float(pointer[i]) for i in range(llm.n_vocab())]


def naive_llama_cpp(model_path: Path, cases: list[tuple[list[int], list[int]]]) -> dict[str, Any]:
    """Each prompt evaluated from scratch by llama.cpp; labels read from the last logits."""
    try:
        import llama_cpp
    except ImportError:
        return {"skipped": "llama-cpp-python is not installed (pip install llama-cpp-python)"}
    llm = llama_cpp.Llama(
        model_path=str(model_path),
        logits_all=False,
        n_ctx=4096,
        n_threads=os.cpu_count(),
        verbose=False,
    )
    latencies, distributions = [], []
    started = time.perf_counter()
    for prompt_ids, label_ids in cases:
        sent = time.perf_counter()
        llm.reset()
        llm.eval(prompt_ids)
        logits = last_logits(llama_cpp, llm)
        top = max(logits)
        log_norm = top + math.log(math.fsum(math.exp(v - top) for v in logits))
        distributions.append(from_raw([logits[i] - log_norm for i in label_ids]))
        latencies.append(time.perf_counter() - sent)
    wall = time.perf_counter() - started
    return {"result": BenchResult(len(latencies), wall, latencies), "distributions": distributions}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default=None, help="a running strata-server (default: start one)")
    parser.add_argument("--upstream", dest="server", help=argparse.SUPPRESS)  # the older spelling
    parser.add_argument("--model-path", type=Path, default=DEFAULT_GGUF, help="GGUF for llama.cpp")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    report: dict[str, Any] = {}
    with strata_server(args.server) as upstream:
        for name, rotations in (("strata_gateway", False), ("strata_gateway_rotations", True)):
            config = GatewayConfig(
                upstream=upstream, upstream_timeout=300, decide=DecideOptions(rotations=rotations)
            )
            with background(config) as gateway:
                report[name] = bench_gateway(gateway, STATES, QUESTIONS).summary()
        cases, strata_reads = asyncio.run(prompts_and_labels(upstream))
    report["prompt_tokens"] = [len(ids) for ids, _ in cases]
    naive = naive_llama_cpp(args.model_path, cases)
    if "skipped" in naive:
        report["llama_cpp_naive"] = {"skipped": naive["skipped"]}
    else:
        report["llama_cpp_naive"] = naive["result"].summary()
        speedup = report["llama_cpp_naive"]["wall_s"] / report["strata_gateway"]["wall_s"]
        report["strata_speedup"] = speedup
        report["max_abs_prob_diff_vs_llama_cpp"] = max(
            abs(a - b)
            for ours, theirs in zip(strata_reads, naive["distributions"], strict=True)
            for a, b in zip(ours.probabilities, theirs.probabilities, strict=True)
        )

    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(
        f"prompts: {len(cases)}, tokens each {min(report['prompt_tokens'])}..{max(report['prompt_tokens'])}"
    )
    for name in ("strata_gateway", "strata_gateway_rotations", "llama_cpp_naive"):
        row = report[name]
        if "skipped" in row:
            print(f"{name}: skipped: {row['skipped']}")
            continue
        print(
            f"{name}: {row['decisions']} decisions in {row['wall_s']:.3f} s = "
            f"{row['decisions_per_s']:.2f}/s, p50 {row['p50_ms']:.1f} ms, p95 {row['p95_ms']:.1f} ms"
        )
    if "strata_speedup" in report:
        print(
            f"strata vs naive llama.cpp: {report['strata_speedup']:.2f}x faster; label "
            f"probabilities differ by at most {report['max_abs_prob_diff_vs_llama_cpp']:.2e}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
