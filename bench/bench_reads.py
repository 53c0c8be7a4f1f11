"""The 15 decision reads: Strata over HTTP against llama.cpp in-process with prefix reuse.

    python bench/bench_reads.py [--threads 2] [--rounds 3] [--model-path GGUF] [--kernels native-q8] [--json]

The workload of a decision client: 5 support messages ("states", ~200 tokens each) x 3
questions, one one-token read each (the labels' raw logprobs). Each round makes its states
fresh (a new case number at the top of every message), so no round is helped by an earlier
one's cache; within a round, the questions of a state share its prefix.

- Strata: a strata-server started here on the default model (``--threads``); each read is
  ``strata_decide.read.read_labels`` (one ``/v1/completions`` call over HTTP, the prompt as
  token ids, ``allowed_token_ids`` = the labels), in order, as one client would send them;
  the prefix cache shares each state's prompt.
- llama.cpp (llama-cpp-python) in this process on the same GGUF and the same token ids,
  ``n_threads`` the same: before each read only the tokens after the longest common prefix
  with the previous prompt are evaluated (the KV of the shared part is kept), then the
  labels' logprobs are read from the last position's logits (log-softmax in numpy).

Prints each side's wall time per round, the ratio (target: Strata at most a third of
llama.cpp's time) and the largest label-probability difference between the two.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
from _common import host_line

from strata_client import AsyncStrataClient
from strata_decide.labels import LabelBook
from strata_decide.prompts import messages, render
from strata_decide.questions import from_wire
from strata_decide.read import read_labels
from strata_decide.samples import QUESTIONS, STATES
from strata_engine.model_store import resolve_model
from strata_server.launch import running_server

Case = tuple[list[int], list[int]]  # (prompt ids, label ids)


def fresh_states(tag: str) -> list[str]:
    """The sample states with a new case number on top: a prefix no cache has seen."""
    return [f"Case {tag}-{i}\n{state}" for i, state in enumerate(STATES)]


async def render_cases(client: AsyncStrataClient, states: list[str]) -> list[Case]:
    """Prompt ids and label ids of every (state, question), state-major (as a client asks)."""
    book, cases = LabelBook(client), []
    for state in states:
        for wire in QUESTIONS.values():
            question = from_wire(wire)
            labels = await book.labels_for(question.kind, len(question.options))
            prompt = await render(client, messages(state, question, question.options, labels))
            cases.append((list(prompt.token_ids), [label.token_id for label in labels]))
    return cases


async def strata_reads(client: AsyncStrataClient, cases: list[Case]) -> tuple[float, list[list[float]]]:
    """Wall time of the reads, one after another over HTTP, and each read's label logprobs."""
    values = []
    started = time.perf_counter()
    for prompt_ids, label_ids in cases:
        values.append((await read_labels(client, None, prompt_ids, label_ids)).raw_logprobs)
    return time.perf_counter() - started, values


class LlamaCppPrefixReuse:
    """llama.cpp in-process, keeping the KV of the prefix shared with the last evaluated ids."""

    def __init__(self, model_path: Path, threads: int) -> None:
        import llama_cpp

        self.llama_cpp = llama_cpp
        self.llm = llama_cpp.Llama(
            model_path=str(model_path), n_ctx=2048, n_threads=threads, logits_all=False, verbose=False
        )
        self.vocab = self.llm.n_vocab()
        self.evaluated: list[int] = []

    def last_row(self, ids: list[int]) -> np.ndarray:
        """Log-probabilities (float64) after ``ids``, evaluating only what the KV does not hold yet."""
        common = 0
        for a, b in zip(self.evaluated, ids, strict=False):
            if a != b:
                break
            common += 1
        common = min(common, len(ids) - 1)  # the last token is evaluated for its logits
        self.llm.n_tokens = common  # eval() drops the KV from here on
        self.llm.eval(ids[common:])
        self.evaluated = list(ids)
        pointer = self.llama_cpp.llama_get_logits_ith(self.llm.ctx, -1)
        logits = np.ctypeslib.as_array(pointer, shape=(self.vocab,)).astype(np.float64)
        top = logits.max()
        return logits - top - np.log(np.exp(logits - top).sum())


class LlamaCppReader(LlamaCppPrefixReuse):
    """The labels' logprobs at the position after each prompt."""

    def read(self, prompt_ids: list[int], label_ids: list[int]) -> list[float]:
        row = self.last_row(prompt_ids)
        return [float(row[i]) for i in label_ids]

    def reads(self, cases: list[Case]) -> tuple[float, list[list[float]]]:
        self.evaluated = []
        started = time.perf_counter()
        values = [self.read(prompt_ids, label_ids) for prompt_ids, label_ids in cases]
        return time.perf_counter() - started, values


def max_prob_diff(ours: list[list[float]], theirs: list[list[float]]) -> float:
    return max(
        abs(float(np.exp(a)) - float(np.exp(b)))
        for row_a, row_b in zip(ours, theirs, strict=True)
        for a, b in zip(row_a, row_b, strict=True)
    )


async def paired_rounds(
    args: argparse.Namespace,
    render: Callable[[AsyncStrataClient, list[str]], Awaitable[list[Any]]],
    strata_side: Callable[[AsyncStrataClient, list[Any]], Awaitable[tuple[float, list[list[float]]]]],
    llama_side: Callable[[list[Any]], tuple[float, list[list[float]]]],
    describe: Callable[[list[Any], list[list[float]], list[list[float]]], dict[str, Any]],
) -> dict[str, Any]:
    """Both sides on the same fresh cases each round (after a warm-up on three): a strata-server
    started here over HTTP, then llama.cpp in-process; each round's times, their ratio and
    `describe(cases, ours, theirs)`."""
    rounds: list[dict[str, Any]] = []
    server_args = (
        *("--model", "default", "--threads", str(args.threads), "--log-level", "warning"),
        *("--kernels", args.kernels),
    )
    with running_server(*server_args, startup_timeout_s=180) as url:
        async with AsyncStrataClient(base_url=url, timeout=300) as client:
            warm = await render(client, fresh_states("warm-up"))
            await strata_side(client, warm[:3])
            llama_side(warm[:3])
            for r in range(args.rounds):
                cases = await render(client, fresh_states(secrets.token_hex(4)))
                strata_s, ours = await strata_side(client, cases)
                llama_s, theirs = llama_side(cases)
                rounds.append(
                    {
                        "round": r,
                        **describe(cases, ours, theirs),
                        "strata_http_s": strata_s,
                        "llama_cpp_prefix_reuse_s": llama_s,
                        "ratio": strata_s / llama_s,
                    }
                )
    ratios = sorted(row["ratio"] for row in rounds)
    return {
        "threads": args.threads,
        "rounds": rounds,
        "median_ratio": ratios[len(ratios) // 2],
        "best_ratio": ratios[0],
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    llama = LlamaCppReader(args.model_path, args.threads)

    def describe(cases: list[Case], ours: list[list[float]], theirs: list[list[float]]) -> dict[str, Any]:
        return {
            "reads": len(cases),
            "prompt_tokens": [len(ids) for ids, _ in cases],
            "max_abs_prob_diff": max_prob_diff(ours, theirs),
        }

    return await paired_rounds(args, render_cases, strata_reads, llama.reads, describe)


def paired_args(description: str) -> argparse.Namespace:
    """The command line of a paired benchmark (`paired_rounds`): threads, rounds, the GGUF, the
    server's kernels (native, or the opt-in native-q8) and --json."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model-path", type=Path, default=None, help="GGUF (default: the default model)")
    parser.add_argument("--kernels", default="native", choices=["native", "native-fp32", "native-q8"])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    args.model_path = args.model_path or resolve_model("default")
    return args


def print_rounds(report: dict[str, Any], what: str) -> None:
    """Each round's times and ratio, and how far apart the two sides' `what` probabilities are."""
    for row in report["rounds"]:
        print(
            f"round {row['round']}: strata over HTTP {row['strata_http_s']:.3f} s, llama.cpp in-process "
            f"with prefix reuse {row['llama_cpp_prefix_reuse_s']:.3f} s, ratio {row['ratio']:.3f} "
            f"({what} probabilities differ by at most {row['max_abs_prob_diff']:.1e})"
        )


def main() -> int:
    args = paired_args(__doc__.splitlines()[0])
    report = asyncio.run(run(args))
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    tokens = report["rounds"][0]["prompt_tokens"]
    print(host_line())
    target = os.environ.get("STRATA_KERNELS_TARGET", "the best this CPU runs")
    print(
        f"15 reads per round, prompts of {min(tokens)}..{max(tokens)} tokens, {args.threads} threads each, "
        f"kernels {args.kernels}, target {target}"
    )
    print_rounds(report, "label")
    print(f"median ratio {report['median_ratio']:.3f} (target <= 0.333), best {report['best_ratio']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
