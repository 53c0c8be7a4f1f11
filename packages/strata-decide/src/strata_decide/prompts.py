"""The prompt of one read: the state first, then the question and its labelled options.

Two chat messages, rendered by the served model's own chat template through the server's
``/tokenize`` (so the client needs no tokenizer):

* system: a fixed preamble and the state;
* user: the instructions, the options each behind its label, and what to answer with.

Every question about one state therefore shares a byte-identical prefix (the whole system
message), which a prefix cache reuses. Question ids are never part of the prompt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from strata_client import AsyncStrataClient

from .labels import Label
from .questions import Content, Option, Question, content_text

PREAMBLE = (
    "You answer questions about the state below. "
    "Reply with exactly one label from the options and nothing else."
)
DEFAULT_INSTRUCTIONS = {
    "choice": "Which option fits the state best?",
    "score": "Which level fits the state best?",
    "noul": "Is this true of the state?",
}
OPTIONS_HEADING = {"choice": "Options:", "score": "Levels, lowest first:", "noul": "Answers:"}
TEXT_REPLY = "Answer with the name of one option, exactly as written, and nothing else."


@dataclass(frozen=True)
class Prompt:
    """A rendered prompt: its token ids and the model's context size."""

    token_ids: list[int]
    max_model_len: int


def state_message(state: Content) -> dict[str, str]:
    """The system message: preamble then the state (JSON values as their JSON text)."""
    return {"role": "system", "content": f"{PREAMBLE}\n\nState:\n{content_text(state)}"}


def question_message(
    question: Question, options: Sequence[Option], labels: Sequence[Label]
) -> dict[str, str]:
    """The user message: instructions, then each option behind its label, then the reply rule."""
    lines = [
        question.instructions or DEFAULT_INSTRUCTIONS[question.kind],
        "",
        OPTIONS_HEADING[question.kind],
    ]
    for label, option in zip(labels, options, strict=True):
        shown = option_text(question, option)
        lines.append(f"{label.text}) {shown}" if shown else f"{label.text})")
    lines += ["", f"Answer with one label ({reply_hint(labels)}) only."]
    return {"role": "user", "content": "\n".join(lines)}


def text_question_message(question: Question, options: Sequence[Option]) -> dict[str, str]:
    """The user message of a text-answered choice: each option by its name, no labels."""
    lines = [question.instructions or DEFAULT_INSTRUCTIONS[question.kind], "", OPTIONS_HEADING[question.kind]]
    for option in options:
        lines.append(f"- {option_text(question, option)}")
    lines += ["", TEXT_REPLY]
    return {"role": "user", "content": "\n".join(lines)}


def reply_hint(labels: Sequence[Label]) -> str:
    """``A or B`` for two labels, ``A, B, ...`` for more."""
    if len(labels) == 2:
        return f"{labels[0].text} or {labels[1].text}"
    return f"{labels[0].text}, {labels[1].text}, ..."


def option_text(question: Question, option: Option) -> str:
    """What follows an option's label: the name and description (scores and yes/no: description)."""
    if question.kind != "choice":
        return option.description or ""
    return option.name if option.description is None else f"{option.name}: {option.description}"


def messages(
    state: Content, question: Question, options: Sequence[Option], labels: Sequence[Label] | None
) -> list[dict[str, str]]:
    """The chat messages of one read; ``options`` may be a rotation of the question's options.

    ``labels`` None: the options are answered by name (see ``text_question_message``).
    """
    asked = (
        question_message(question, options, labels) if labels else text_question_message(question, options)
    )
    return [state_message(state), asked]


async def render(client: AsyncStrataClient, chat: list[dict[str, str]]) -> Prompt:
    """Token ids of the messages through the served chat template, with the generation prompt."""
    rendered = await client.tokenize(messages=chat, add_generation_prompt=True)
    return Prompt(list(rendered.tokens), rendered.max_model_len)


async def state_prefix(client: AsyncStrataClient, state: Content) -> list[int]:
    """Token ids of the state's system message alone: the prefix every question shares."""
    rendered = await client.tokenize(messages=[state_message(state)], add_generation_prompt=False)
    return list(rendered.tokens)
