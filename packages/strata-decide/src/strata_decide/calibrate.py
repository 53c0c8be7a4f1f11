"""Temperature calibration: fit T on labelled examples, report ECE and Brier before/after.

A temperature rescales a distribution's log-probabilities (p ∝ p^(1/T)); T > 1 softens an
over-confident reader, T < 1 sharpens an under-confident one. T is fitted by minimising the
negative log-likelihood of the true answers (golden-section search on log T), which leaves
the argmax, and so accuracy, unchanged.

* ECE: examples binned by their top probability into 10 equal-width bins; the weighted mean
  over bins of |accuracy - mean top probability|.
* Brier: the mean over examples of sum_k (p_k - [k is the answer])^2.

Data: a JSONL file of ``{"state": ..., "question": {type, instructions, criteria},
"answer": ...}`` where the answer is an option name (choice), a level index (score) or
true/false (noul).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .decider import Decider
from .distribution import Distribution, with_temperature
from .questions import Question, from_wire

LOG_T_RANGE = (math.log(0.05), math.log(20.0))
ECE_BINS = 10


@dataclass(frozen=True)
class Example:
    """One labelled example: what to ask and the index of the true option."""

    state: Any
    question: Question
    answer: int


@dataclass(frozen=True)
class Calibration:
    temperature: float
    examples: int
    ece_before: float
    ece_after: float
    brier_before: float
    brier_after: float

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> Calibration:
        return cls(**json.loads(Path(path).read_text()))


def answer_index(question: Question, answer: Any) -> int:
    """The option index of a labelled answer (name, level index, or true/false)."""
    if question.kind == "noul":
        if isinstance(answer, bool):
            return 0 if answer else 1
        if str(answer).lower() in ("yes", "true"):
            return 0
        if str(answer).lower() in ("no", "false"):
            return 1
    elif question.kind == "score" and not isinstance(answer, bool):
        index = int(answer)
        if 0 <= index < len(question.options):
            return index
    elif str(answer) in question.names:
        return question.names.index(str(answer))
    raise ValueError(f"answer {answer!r} is not an option of this {question.kind} question")


def load_examples(path: str | Path) -> list[Example]:
    """The examples of a JSONL file; a bad line raises ValueError naming it."""
    examples = []
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            question = from_wire(item["question"])
            examples.append(Example(item["state"], question, answer_index(question, item["answer"])))
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"{path}:{number}: {error}") from error
    return examples


def nll(distributions: Sequence[Distribution], answers: Sequence[int], temperature: float) -> float:
    """Mean negative log-likelihood of the answers under the tempered distributions."""
    total = math.fsum(
        -with_temperature(d, temperature).log_probabilities[a]
        for d, a in zip(distributions, answers, strict=True)
    )
    return total / len(answers)


def fit_temperature(distributions: Sequence[Distribution], answers: Sequence[int], steps: int = 80) -> float:
    """The temperature minimising NLL, by golden-section search over log T in [0.05, 20]."""
    if not answers:
        raise ValueError("no examples to fit a temperature on")
    ratio = (math.sqrt(5) - 1) / 2
    low, high = LOG_T_RANGE
    a, b = high - ratio * (high - low), low + ratio * (high - low)
    fa, fb = nll(distributions, answers, math.exp(a)), nll(distributions, answers, math.exp(b))
    for _ in range(steps):
        if fa <= fb:
            high, b, fb = b, a, fa
            a = high - ratio * (high - low)
            fa = nll(distributions, answers, math.exp(a))
        else:
            low, a, fa = a, b, fb
            b = low + ratio * (high - low)
            fb = nll(distributions, answers, math.exp(b))
    return math.exp((low + high) / 2)


def ece(distributions: Sequence[Distribution], answers: Sequence[int], bins: int = ECE_BINS) -> float:
    """Expected calibration error of the top probability, equal-width bins."""
    binned: list[list[tuple[float, bool]]] = [[] for _ in range(bins)]
    for d, answer in zip(distributions, answers, strict=True):
        confidence = max(d.probabilities)
        binned[min(int(confidence * bins), bins - 1)].append((confidence, d.argmax == answer))
    total = len(answers)
    return math.fsum(
        len(b) / total * abs(math.fsum(c for c, _ in b) / len(b) - sum(ok for _, ok in b) / len(b))
        for b in binned
        if b
    )


def brier(distributions: Sequence[Distribution], answers: Sequence[int]) -> float:
    """Multi-class Brier score: mean squared distance to the one-hot answer."""
    return math.fsum(
        math.fsum((p - (k == a)) ** 2 for k, p in enumerate(d.probabilities))
        for d, a in zip(distributions, answers, strict=True)
    ) / len(answers)


def calibrate(distributions: Sequence[Distribution], answers: Sequence[int]) -> Calibration:
    """Fit T and report both metrics before and after applying it."""
    temperature = fit_temperature(distributions, answers)
    tempered = [with_temperature(d, temperature) for d in distributions]
    return Calibration(
        temperature=temperature,
        examples=len(answers),
        ece_before=ece(distributions, answers),
        ece_after=ece(tempered, answers),
        brier_before=brier(distributions, answers),
        brier_after=brier(tempered, answers),
    )


async def read_examples(
    decider: Decider, examples: Sequence[Example], on_example: Callable[[], None] | None = None
) -> list[Distribution]:
    """The uncalibrated distribution of every example (the decider must use temperature 1)."""
    distributions = []
    for example in examples:
        distributions.append((await decider.decide(example.state, example.question)).distribution)
        if on_example is not None:
            on_example()
    return distributions
