"""One decision: labels, prompt, read(s) and the distribution over a question's options.

Each question is read on its own (its prompt holds only the state and that question), so an
answer never depends on question ids, question order or which other questions share a
request. In the rotations mode every cyclic rotation of the option order is read and the
per-option probabilities are combined by geometric mean, which cancels position bias at
the cost of one read per option.

A ``choice`` is answered either by one-token labels (the one-token read, the default) or by
its options' names (``answers="text"``): then each name, followed by the model's end-of-turn
token so that no name's probability holds another's ("tech" within "technical support"), is
scored whole by ``/v1/score_candidates``. Scores and yes/no questions always use labels.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from strata_client import APIConnectionError, APIStatusError, AsyncStrataClient

from .distribution import Distribution, from_raw, geometric_mean, with_temperature
from .errors import ContextOverflowError, upstream_failure
from .labels import Label, LabelBook
from .prompts import Prompt, messages, render
from .questions import Answers, Content, Option, Question
from .read import RawRead, read_labels, read_texts
from .slots import FairSlots


@dataclass(frozen=True)
class FirstRead:
    """The read of the options in the caller's order: its prompt and what the server said of
    it (prefix-cache hits, ``system_fingerprint``). The gateway's ``x_trace`` shows it."""

    prompt_ids: tuple[int, ...]
    cached_tokens: int
    fingerprint: str | None


@dataclass(frozen=True)
class Decision:
    """The answer distribution over ``question.options`` (in their order) and its cost."""

    question: Question
    distribution: Distribution
    prompt_tokens: int
    completion_tokens: int
    reads: int
    first_read: FirstRead | None = None

    @property
    def probabilities(self) -> dict[str, float]:
        return dict(zip(self.question.names, self.distribution.probabilities, strict=True))

    @property
    def answer(self) -> str:
        return self.question.names[self.distribution.argmax]


@dataclass(frozen=True)
class DecideOptions:
    """How reads are made: rotations on/off, a calibration temperature (1 = none), and how
    many reads may be in flight at once (the upstream batches them)."""

    rotations: bool = False
    temperature: float = 1.0
    max_concurrent_reads: int = 16
    answers: Answers = "labels"  # how a choice whose question does not say is answered


class Decider:
    """Decides questions about states through one server (and one served model)."""

    def __init__(
        self,
        client: AsyncStrataClient,
        model: str | None = None,
        options: DecideOptions | None = None,
        labels: LabelBook | None = None,
        slots: FairSlots | None = None,
    ):
        self.client = client
        self.model = model
        self.options = options or DecideOptions()
        self.labels = labels or LabelBook(client)
        # shared with other deciders when given (the gateway's one set), taken fairly by callers
        self._slots = slots or FairSlots(self.options.max_concurrent_reads)
        self._end_of_turn: str | None = None

    async def decide(self, state: Content, question: Question) -> Decision:
        """Read ``question`` about ``state`` and return its distribution over the options."""
        labels = None
        if self.answers_by_label(question):
            labels = await self.labels.labels_for(question.kind, len(question.options))
        ending = "" if labels else await self.end_of_turn()
        shifts = range(self.reads_for(question))
        reads = await asyncio.gather(
            *(self._read_rotation(state, question, labels, ending, s) for s in shifts)
        )
        distributions = [distribution for distribution, _, _ in reads]
        combined = distributions[0] if len(distributions) == 1 else geometric_mean(distributions)
        _, first_prompt, first_raw = reads[0]
        return Decision(
            question=question,
            distribution=with_temperature(combined, self.options.temperature),
            prompt_tokens=sum(raw.prompt_tokens for _, _, raw in reads),
            completion_tokens=sum(raw.completion_tokens for _, _, raw in reads),
            reads=len(reads),
            first_read=FirstRead(
                tuple(first_prompt.token_ids), first_raw.cached_tokens, first_raw.fingerprint
            ),
        )

    def reads_for(self, question: Question) -> int:
        """The upstream reads deciding `question` takes: one, or one per option with rotations."""
        return len(question.options) if self.options.rotations else 1

    def answers_by_label(self, question: Question) -> bool:
        """Whether ``question`` is read by one-token labels (else its options' names are
        scored whole): scores and yes/no always; a choice as it or the decider says."""
        return question.kind != "choice" or (question.answers or self.options.answers) == "labels"

    async def end_of_turn(self) -> str:
        """The text of the model's end-of-turn token (its EOS; "" if it has none), fetched once."""
        if self._end_of_turn is None:
            try:
                info = await self.client.tokenizer_info()
            except (APIStatusError, APIConnectionError) as error:
                raise upstream_failure(error) from error
            self._end_of_turn = info.eos_token or ""
        return self._end_of_turn

    async def _read_rotation(
        self,
        state: Content,
        question: Question,
        labels: list[Label] | None,
        ending: str,
        shift: int,
    ) -> tuple[Distribution, Prompt, RawRead]:
        """Read with the options rotated left by ``shift``; map the result back to option order."""
        options = rotate(list(question.options), shift)
        async with self._slots.held():
            prompt, raw = await read_question(
                self.client, self.model, state, question, options, labels, ending
            )
        # position j shows option (j + shift) % n: put each value back at its option's index
        n = len(options)
        raw_by_option = [raw.raw_logprobs[(i - shift) % n] for i in range(n)]
        return from_raw(raw_by_option), prompt, raw


async def read_question(
    client: AsyncStrataClient,
    model: str | None,
    state: Content,
    question: Question,
    options: list[Option],
    labels: list[Label] | None,
    ending: str = "",
) -> tuple[Prompt, RawRead]:
    """The one read path (decider, parity, gateway): render the question with ``options`` in
    this order, refuse a prompt with no room for the answer token, read the labels' values
    (``labels`` None: score each option's name followed by ``ending``)."""
    try:
        prompt = await render(client, messages(state, question, options, labels))
    except (APIStatusError, APIConnectionError) as error:
        raise upstream_failure(error) from error
    if len(prompt.token_ids) + 1 > prompt.max_model_len:
        raise ContextOverflowError(len(prompt.token_ids), prompt.max_model_len)
    if labels is None:
        texts = [option.name + ending for option in options]
        return prompt, await read_texts(client, model, prompt.token_ids, texts)
    raw = await read_labels(client, model, prompt.token_ids, [label.token_id for label in labels])
    return prompt, raw


def rotate(options: list[Option], shift: int) -> list[Option]:
    """The options rotated left by ``shift`` (shift 0: the caller's order)."""
    return options[shift:] + options[:shift]
