"""Decisions through a running gateway: wall time, decisions per second, p50/p95 latency.

Each decision is one ``POST /v1/systemone`` with one question, sent one after another,
states in order, so the questions of a state after the first reuse its cached prefix on
the upstream. A warm-up request on an unrelated state first settles label discovery.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

WARM_UP_STATE = "Warm-up: this state is not part of the measurement."


@dataclass(frozen=True)
class BenchResult:
    decisions: int
    wall_s: float
    latencies_s: list[float]

    @property
    def decisions_per_s(self) -> float:
        return self.decisions / self.wall_s if self.wall_s > 0 else math.inf

    def summary(self) -> dict[str, float]:
        return {
            "decisions": self.decisions,
            "wall_s": self.wall_s,
            "decisions_per_s": self.decisions_per_s,
            "p50_ms": 1000 * percentile(self.latencies_s, 50),
            "p95_ms": 1000 * percentile(self.latencies_s, 95),
        }


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile, linear between closest ranks (numpy's default)."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    position = (len(ordered) - 1) * q / 100
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def bench_gateway(
    gateway_url: str,
    states: Sequence[Any],
    questions: dict[str, dict[str, Any]],
    api_key: str | None = None,
    model: str = "jev-latest",
    timeout: float = 300.0,
    on_decision: Callable[[], None] | None = None,
) -> BenchResult:
    """Time every state x question as its own request through the gateway."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    with httpx.Client(base_url=gateway_url, headers=headers, timeout=timeout) as http:

        def ask(state: Any, question_id: str, question: dict[str, Any]) -> None:
            body = {"model": model, "state": state, "questions": {question_id: question}}
            http.post("/v1/systemone", json=body).raise_for_status()

        for question_id, question in questions.items():
            ask(WARM_UP_STATE, question_id, question)
        latencies = []
        started = time.perf_counter()
        for state in states:
            for question_id, question in questions.items():
                sent = time.perf_counter()
                ask(state, question_id, question)
                latencies.append(time.perf_counter() - sent)
                if on_decision is not None:
                    on_decision()
        wall = time.perf_counter() - started
    return BenchResult(len(latencies), wall, latencies)
