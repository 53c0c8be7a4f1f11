"""Word answers scored whole: Strata's /v1/score_candidates over HTTP against llama.cpp in-process.

    python bench/bench_candidates.py [--threads 2] [--rounds 3] [--model-path GGUF] [--json]

The workload: 5 support messages ("states", ~200 tokens each) x 3 choice questions whose 3
options are words or phrases ("billing", "shipping", "technical support"), answered by name
(`strata_decide`'s text answers): each option's name followed by the end-of-turn token is
scored whole after the rendered prompt. Each round makes its states fresh (a new case number
on top), so no round is helped by an earlier one's cache.

- Strata: a strata-server started here on the default model (``--threads``); each question is
  one ``/v1/score_candidates`` call over HTTP (the prompt as token ids, the 3 answer texts),
  one after another as one client would send them; the server computes the prompt once and
  the other candidates read it from the prefix cache.
- llama.cpp (llama-cpp-python) in this process on the same GGUF, the same token ids and
  ``n_threads``: each candidate token's logprob is the last row after evaluating the path up
  to it (log-softmax in numpy, float64); before each evaluation only the tokens after the
  longest common prefix with the previous one are evaluated (the KV of the shared part is
  kept), so a state's prompt is evaluated once, then one token per step.

Prints each side's wall time per round, the ratio (Strata / llama.cpp) and the largest
difference between the two sides' renormalised option probabilities. Timings on a shared
machine are noisy: read the ratio, not the seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from dataclasses import dataclass
from typing import Any

from bench_reads import (  # bench/ is the script's folder, so on sys.path
    LlamaCppPrefixReuse,
    paired_args,
    paired_rounds,
    print_rounds,
)

from strata_client import AsyncStrataClient
from strata_decide.prompts import messages, render
from strata_decide.questions import Question, choice

QUESTIONS: list[Question] = [
    choice(
        "Which team should handle the message?",
        {"billing": "Payments and refunds", "shipping": "Deliveries", "technical support": "Apps and sites"},
    ),
    choice("What is the tone of the message?", {"calm": None, "angry": None, "worried": None}),
    choice(
        "What does the customer want?",
        {"a refund": None, "a replacement": None, "an explanation": None},
    ),
]


@dataclass(frozen=True)
class Case:
    """One question about one state: its prompt and each answer path (text and token ids)."""

    prompt_ids: list[int]
    texts: list[str]
    candidate_ids: list[list[int]]


async def render_cases(client: AsyncStrataClient, states: list[str]) -> list[Case]:
    """Every (state, question), state-major; answers are the names plus the end-of-turn token."""
    eos = (await client.tokenizer_info()).eos_token or ""
    cases = []
    for state in states:
        for question in QUESTIONS:
            prompt = await render(client, messages(state, question, list(question.options), None))
            texts = [option.name + eos for option in question.options]
            ids = [(await client.tokenize(t, add_special_tokens=False)).tokens for t in texts]
            cases.append(Case(list(prompt.token_ids), texts, [list(i) for i in ids]))
    return cases


async def strata_scores(client: AsyncStrataClient, cases: list[Case]) -> tuple[float, list[list[float]]]:
    """Wall time of the scoring calls, one after another over HTTP, and each case's totals."""
    totals = []
    started = time.perf_counter()
    for case in cases:
        scores = await client.candidates.score(prompt=case.prompt_ids, candidates=case.texts)
        if [c.token_ids for c in scores.candidates] != case.candidate_ids:
            raise SystemExit("the server tokenized an answer differently from /tokenize")
        totals.append([c.logprob for c in scores.candidates])
    return time.perf_counter() - started, totals


class LlamaCppScorer(LlamaCppPrefixReuse):
    """llama.cpp scoring answer paths, keeping the KV of the prefix shared with the last path."""

    def path(self, prompt_ids: list[int], candidate: list[int]) -> float:
        """log P(candidate | prompt): each candidate token read from the row before it."""
        total = 0.0
        for j, token in enumerate(candidate):
            total += float(self.last_row(prompt_ids + candidate[:j])[token])
        return total

    def scores(self, cases: list[Case]) -> tuple[float, list[list[float]]]:
        self.evaluated = []
        started = time.perf_counter()
        totals = [[self.path(c.prompt_ids, ids) for ids in c.candidate_ids] for c in cases]
        return time.perf_counter() - started, totals


def shares(totals: list[float]) -> list[float]:
    """The totals renormalised over the options (probabilities)."""
    top = max(totals)
    weights = [math.exp(t - top) for t in totals]
    return [w / math.fsum(weights) for w in weights]


def max_prob_diff(ours: list[list[float]], theirs: list[list[float]]) -> float:
    return max(
        abs(a - b)
        for row_a, row_b in zip(ours, theirs, strict=True)
        for a, b in zip(shares(row_a), shares(row_b), strict=True)
    )


async def run(args: argparse.Namespace) -> dict[str, Any]:
    llama = LlamaCppScorer(args.model_path, args.threads)

    def describe(cases: list[Case], ours: list[list[float]], theirs: list[list[float]]) -> dict[str, Any]:
        return {
            "questions": len(cases),
            "paths": sum(len(c.candidate_ids) for c in cases),
            "prompt_tokens": [len(c.prompt_ids) for c in cases],
            "answer_tokens": sorted({len(i) for c in cases for i in c.candidate_ids}),
            "max_abs_prob_diff": max_prob_diff(ours, theirs),
        }

    return await paired_rounds(args, render_cases, strata_scores, llama.scores, describe)


def main() -> int:
    args = paired_args(__doc__.splitlines()[0])
    report = asyncio.run(run(args))
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    first = report["rounds"][0]
    tokens, answer = first["prompt_tokens"], first["answer_tokens"]
    print(
        f"{first['questions']} questions x 3 answers ({first['paths']} paths, {min(answer)}..{max(answer)} "
        f"tokens each) per round, prompts of {min(tokens)}..{max(tokens)} tokens, {args.threads} threads, "
        f"kernels {args.kernels}"
    )
    print_rounds(report, "option")
    print(f"median ratio strata/llama.cpp {report['median_ratio']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
