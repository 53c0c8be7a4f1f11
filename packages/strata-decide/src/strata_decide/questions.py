"""The three question kinds as one internal shape: a kind, instructions and named options.

The wire forms (``choice`` criteria as a mapping, ``score`` levels as a list, ``noul`` with
optional true/false criteria) all become an ordered list of ``Option`` so that labels,
prompts and reads need to know only "N options in this order".
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["choice", "score", "noul"]
# How a choice is answered: "labels" (each option behind a one-token label, one read) or
# "text" (the model answers with the option's name, each name scored whole); None: the
# decider's default (`DecideOptions.answers`).
Answers = Literal["labels", "text"]
Content = str | Mapping[str, Any] | Sequence[Any]

YES, NO = "yes", "no"


def content_text(value: Content) -> str:
    """A state, instruction or description as prompt text: strings as-is, JSON values as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


@dataclass(frozen=True)
class Option:
    """One answer the model can give.

    ``name`` is what the caller sees, ``description`` the prompt text, ``raw`` the description
    exactly as the caller sent it (a score's legend echoes it).
    """

    name: str
    description: str | None
    raw: Any = None


@dataclass(frozen=True)
class Question:
    """A question in internal form; ``options`` are in the order the caller gave them."""

    kind: Kind
    instructions: str | None
    options: tuple[Option, ...]
    answers: Answers | None = None

    @property
    def names(self) -> list[str]:
        return [option.name for option in self.options]


def choice(
    instructions: Content | None, criteria: Mapping[str, Content | None], answers: Answers | None = None
) -> Question:
    """A ``choice`` question: one option per criteria key, description may be null."""
    options = tuple(Option(name, _text_or_none(text), text) for name, text in criteria.items())
    return Question("choice", _text_or_none(instructions), options, answers)


def score(instructions: Content | None, levels: Sequence[Content]) -> Question:
    """A ``score`` question: option ``"i"`` is level i, lowest first."""
    options = tuple(Option(str(i), content_text(level), level) for i, level in enumerate(levels))
    return Question("score", _text_or_none(instructions), options)


def noul(instructions: Content | None, criteria: Mapping[str, Content | None] | None = None) -> Question:
    """A yes/no question: options ``yes`` then ``no``, described by criteria true/false if given."""
    criteria = criteria or {}
    true_text, false_text = criteria.get("true"), criteria.get("false")
    options = (
        Option(YES, _text_or_none(true_text), true_text),
        Option(NO, _text_or_none(false_text), false_text),
    )
    return Question("noul", _text_or_none(instructions), options)


def from_wire(question: Mapping[str, Any]) -> Question:
    """A question from its (already validated) wire dict ``{type, instructions, criteria}``."""
    kind = question["type"]
    instructions = question.get("instructions")
    if kind == "choice":
        return choice(instructions, question["criteria"], question.get("x_answers"))
    if kind == "score":
        return score(instructions, question["criteria"])
    if kind == "noul":
        return noul(instructions, question.get("criteria"))
    raise ValueError(f"unknown question type {kind!r}")


def _text_or_none(value: Content | None) -> str | None:
    return None if value is None else content_text(value)
