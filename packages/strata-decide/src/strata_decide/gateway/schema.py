"""The request contract of ``POST /v1/systemone``, checked by pydantic.

Each question type builds its internal `questions.Question` directly (`to_question`).
Validation failures are reported in the vendor's 422 shape: one item per problem, each with
``type``, ``loc`` (starting with ``"body"``), ``msg`` and ``input``.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    ValidationError,
    model_validator,
)

from .. import questions

Content = StrictStr | dict[str, Any] | list[Any]

MAX_CHOICE_OPTIONS = 255
MAX_SCORE_LEVELS = 10


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ChoiceQuestion(_Strict):
    type: Literal["choice"]
    instructions: Content | None = None
    criteria: dict[str, Content | None] = Field(min_length=2, max_length=MAX_CHOICE_OPTIONS)
    # Strata's extension: "labels" (one-token labels, one read) or "text" (each option's name
    # scored whole); absent: the gateway's default (`--answers`)
    x_answers: Literal["labels", "text"] | None = None

    def to_question(self) -> questions.Question:
        return questions.choice(self.instructions, self.criteria, self.x_answers)


class ScoreQuestion(_Strict):
    type: Literal["score"]
    instructions: Content | None = None
    criteria: list[Content] = Field(min_length=2, max_length=MAX_SCORE_LEVELS)

    def to_question(self) -> questions.Question:
        return questions.score(self.instructions, self.criteria)


class NoulCriteria(_Strict):
    true: Content | None = None
    false: Content | None = None


class NoulQuestion(_Strict):
    type: Literal["noul"]
    instructions: Content | None = None
    criteria: NoulCriteria | None = None

    @model_validator(mode="after")
    def _needs_something_to_ask(self) -> NoulQuestion:
        described = self.criteria is not None and (
            self.criteria.true is not None or self.criteria.false is not None
        )
        if self.instructions is None and not described:
            raise ValueError("a noul question needs instructions or a described true/false outcome")
        return self

    def to_question(self) -> questions.Question:
        criteria = (
            None if self.criteria is None else {"true": self.criteria.true, "false": self.criteria.false}
        )
        return questions.noul(self.instructions, criteria)


Question = Annotated[ChoiceQuestion | ScoreQuestion | NoulQuestion, Field(discriminator="type")]


class SystemOneRequest(BaseModel):
    """The body. Unknown top-level fields are ignored, as the API specifies (newer clients
    send fields of their own); inside a question every field is checked."""

    model_config = ConfigDict(extra="ignore")

    model: StrictStr
    state: Content
    questions: dict[str, Question] = Field(min_length=1)
    x_strata: StrataExtensions = Field(default_factory=lambda: StrataExtensions())


class StrataExtensions(_Strict):
    """``x_strata``: what the playground asks for besides the answers (typed-decision SDKs
    never send it). ``trace`` adds each answer's prompt and read (``trace.py``); ``rotations``
    reads every rotation of the options (None: the gateway's ``--rotations``); ``parity``
    compares each label read with the server's own top-20."""

    trace: StrictBool = False
    rotations: StrictBool | None = None
    parity: StrictBool = False


def parse_request(body: bytes) -> SystemOneRequest:
    """The request parsed and validated; pydantic's ValidationError if it breaks the contract."""
    return SystemOneRequest.model_validate_json(body)


MAX_PROBLEMS = 20  # problems listed in one 422 (a body can break the contract millions of times)
MAX_INPUT_CHARS = 200  # an input shown in a problem: longer ones are cut (never the body echoed)


def validation_detail(error: ValidationError) -> list[dict[str, Any]]:
    """The 422 ``detail`` list: ``{"type", "loc", "msg", "input"}`` per problem, the first
    MAX_PROBLEMS of them, each input shown whole only when short: a reply stays small whatever
    the body held."""
    return [
        {
            "type": item["type"],
            "loc": ["body", *item["loc"]],
            "msg": item["msg"],
            "input": shown_input(item.get("input")),
        }
        for item in error.errors(include_url=False, include_context=False)[:MAX_PROBLEMS]
    ]


def shown_input(value: Any) -> Any:
    """`value` as it came when short; else the start of its text and its size."""
    if value is None or isinstance(value, bool | int | float):
        return value
    text = value.decode("utf-8", errors="replace") if isinstance(value, bytes | bytearray) else None
    if text is None:
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=repr)
        if len(text) <= MAX_INPUT_CHARS:
            return value
    elif len(text) <= MAX_INPUT_CHARS:
        return text
    return f"{text[:MAX_INPUT_CHARS]}... ({len(text):,} characters)"
