"""Parity check: the named-id read against the server's own top-20 of the same prompt.

For every state x question, the labels' raw logprobs are read twice at the same position:
once by name (``allowed_token_ids`` = the labels, as every decision does) and once as a plain
``logprobs: 20`` read. Every label that appears in the plain top-20 must carry the same
value in both; on Strata the two come from one computation, so ``max_abs_diff`` is 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from strata_client import AsyncStrataClient

from .decider import read_question
from .labels import LabelBook
from .questions import Content, from_wire
from .read import read_top

DEFAULT_TOLERANCE = 1e-6
TOP_N = 20


@dataclass(frozen=True)
class ParityCase:
    """One state x question: how many labels the top-20 held and how far the values were."""

    state: int
    question: str
    labels: int
    compared: int
    max_abs_diff: float
    argmax_agrees: bool | None
    diffs: list[float] = field(repr=False)


@dataclass(frozen=True)
class ParityReport:
    cases: list[ParityCase]
    tolerance: float

    @property
    def diffs(self) -> list[float]:
        return [d for case in self.cases for d in case.diffs]

    @property
    def max_abs_diff(self) -> float:
        return max((abs(d) for d in self.diffs), default=math.nan)

    @property
    def mean_abs_diff(self) -> float:
        diffs = self.diffs
        return math.fsum(abs(d) for d in diffs) / len(diffs) if diffs else math.nan

    @property
    def mean_diff(self) -> float:
        diffs = self.diffs
        return math.fsum(diffs) / len(diffs) if diffs else math.nan

    @property
    def argmax_agreement(self) -> float:
        judged = [case.argmax_agrees for case in self.cases if case.argmax_agrees is not None]
        return sum(judged) / len(judged) if judged else math.nan

    @property
    def passed(self) -> bool:
        """Something was compared, every value within tolerance, every judged argmax agreeing."""
        return bool(self.diffs) and self.max_abs_diff <= self.tolerance and self.argmax_agreement == 1.0

    def summary(self) -> dict[str, Any]:
        return {
            "cases": len(self.cases),
            "labels_compared": len(self.diffs),
            "max_abs_diff": self.max_abs_diff,
            "mean_abs_diff": self.mean_abs_diff,
            "mean_diff": self.mean_diff,
            "argmax_agreement": self.argmax_agreement,
            "tolerance": self.tolerance,
            "passed": self.passed,
            "per_case": [{k: v for k, v in asdict(case).items() if k != "diffs"} for case in self.cases],
        }


async def check_case(
    client: AsyncStrataClient,
    labels: LabelBook,
    model: str | None,
    state: Content,
    question_wire: dict[str, Any],
) -> tuple[int, list[float], bool | None]:
    """(number of labels, named - plain diffs of labels in the top-20, argmax agreement)."""
    question = from_wire(question_wire)
    chosen = await labels.labels_for(question.kind, len(question.options))
    label_ids = [label.token_id for label in chosen]
    prompt, named_read = await read_question(client, model, state, question, list(question.options), chosen)
    named = dict(zip(label_ids, named_read.raw_logprobs, strict=True))
    plain = await read_top(client, model, prompt.token_ids, TOP_N)
    found = [token_id for token_id in label_ids if token_id in plain]
    diffs = [named[token_id] - plain[token_id] for token_id in found]
    agrees = None
    if found:
        agrees = max(label_ids, key=named.__getitem__) == max(found, key=plain.__getitem__)
        # a named argmax outside the top-20 while other labels are inside it is a disagreement
    return len(label_ids), diffs, agrees


async def run_parity(
    client: AsyncStrataClient,
    model: str | None,
    states: Sequence[Content],
    questions: dict[str, dict[str, Any]],
    tolerance: float = DEFAULT_TOLERANCE,
    on_case: Callable[[], None] | None = None,
) -> ParityReport:
    """Compare both reads for every state x question, one after another."""
    labels = LabelBook(client)
    cases = []
    for index, state in enumerate(states):
        for question_id, question in questions.items():
            count, diffs, agrees = await check_case(client, labels, model, state, question)
            cases.append(
                ParityCase(
                    state=index,
                    question=question_id,
                    labels=count,
                    compared=len(diffs),
                    max_abs_diff=max((abs(d) for d in diffs), default=math.nan),
                    argmax_agrees=agrees,
                    diffs=diffs,
                )
            )
            if on_case is not None:
                on_case()
    return ParityReport(cases, tolerance)
