"""Single-token answer labels, checked against the served tokenizer.

A read is only exact if every option's label is exactly one token: then the label's
probability is one number in the model's next-token distribution. Each candidate label
``X`` is tried as ``"X"`` and then as ``" X"``; a form counts if ``/tokenize`` gives one
token for it (after any special prefix such as BOS) and ``/detokenize`` gives the form back.

Label sets, in order of preference:

* ``noul``: ``Yes``, ``No``;
* ``score``: the digits ``0``..``9`` (one per level, lowest first);
* ``choice``: ``A``..``Z``, then ``a``..``z``, then two-letter codes (``AA``, ``AB``, ...,
  then ``Aa``, ``Ab``, ...) that are single tokens; candidates that are not single tokens are
  skipped, so 255 options work on any tokenizer with enough such codes.

Two labels of one question that map to the same token id are refused (LabelCollisionError):
their probability could not be told apart.
"""

from __future__ import annotations

import asyncio
import string
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice

from strata_client import APIConnectionError, APIStatusError, AsyncStrataClient

from .errors import LabelCollisionError, LabelError, upstream_failure
from .questions import Kind

YES_NO = ("Yes", "No")
DIGITS = tuple(string.digits)
PROBE_BATCH = 32


@dataclass(frozen=True)
class Label:
    """A label as shown in the prompt (``text``) and the one token that stands for it.

    ``form`` is the exact text of that token: ``text`` itself or ``" " + text``.
    """

    text: str
    token_id: int
    form: str = ""


def choice_candidates() -> Iterator[str]:
    """Every candidate choice label, most preferred first."""
    upper, lower = string.ascii_uppercase, string.ascii_lowercase
    yield from upper
    yield from lower
    yield from (a + b for a in upper for b in upper)
    yield from (a + b for a in upper for b in lower)


def check_distinct(labels: list[Label]) -> list[Label]:
    """The labels unchanged if their token ids are distinct; LabelCollisionError otherwise."""
    seen: dict[int, str] = {}
    for label in labels:
        if label.token_id in seen:
            raise LabelCollisionError(
                f"labels {seen[label.token_id]!r} and {label.text!r} are the same token "
                f"({label.token_id}) in the served tokenizer; their probabilities cannot be split"
            )
        seen[label.token_id] = label.text
    return labels


class LabelBook:
    """Finds and caches single-token labels for one served tokenizer."""

    def __init__(self, client: AsyncStrataClient):
        self._client = client
        self._token_of: dict[str, tuple[int, str] | None] = {}
        self._special_prefix: list[int] | None = None
        self._lock = asyncio.Lock()

    async def labels_for(self, kind: Kind, count: int) -> list[Label]:
        """``count`` labels for a question of ``kind``, checked for single tokens and collisions."""
        fixed: tuple[str, ...]
        if kind == "noul":
            fixed = YES_NO
        elif kind == "score":
            fixed = DIGITS
        else:
            return check_distinct(await self._first_single_tokens(choice_candidates(), count))
        if count > len(fixed):
            raise LabelError(f"a {kind} question takes at most {len(fixed)} options, got {count}")
        labels = []
        for text in fixed[:count]:
            label = await self.label(text)
            if label is None:
                raise LabelError(f"label {text!r} is not a single token in the served tokenizer")
            labels.append(label)
        return check_distinct(labels)

    async def label(self, text: str) -> Label | None:
        """``text`` as a label if it is one token (as ``text`` or ``" " + text``), else None."""
        if text not in self._token_of:
            found = None
            for form in (text, " " + text):
                token_id = await self._single_token(form)
                if token_id is not None:
                    found = (token_id, form)
                    break
            self._token_of[text] = found
        found = self._token_of[text]
        return None if found is None else Label(text, *found)

    async def _first_single_tokens(self, candidates: Iterator[str], count: int) -> list[Label]:
        """The first ``count`` candidates that are single tokens, probing a batch at a time."""
        found: list[Label] = []
        while len(found) < count:
            batch = list(islice(candidates, PROBE_BATCH))
            if not batch:
                raise LabelError(
                    f"the served tokenizer has only {len(found)} single-token labels; "
                    f"the question has {count} options"
                )
            labels = await asyncio.gather(*(self.label(text) for text in batch))
            found.extend(label for label in labels if label is not None)
        return found[:count]

    async def _single_token(self, form: str) -> int | None:
        prefix = await self._prefix()
        try:
            tokens = (await self._client.tokenize(form)).tokens
            if tokens[: len(prefix)] != prefix or len(tokens) != len(prefix) + 1:
                return None
            decoded = (await self._client.detokenize([tokens[-1]])).prompt
        except (APIStatusError, APIConnectionError) as error:
            raise upstream_failure(error) from error
        return tokens[-1] if decoded == form else None

    async def _prefix(self) -> list[int]:
        """What ``/tokenize`` puts before any text (a BOS token, or nothing)."""
        async with self._lock:
            if self._special_prefix is None:
                try:
                    self._special_prefix = list((await self._client.tokenize("")).tokens)
                except APIStatusError as error:
                    if error.status_code >= 500:
                        raise upstream_failure(error) from error
                    self._special_prefix = []  # a server refusing empty text: no visible prefix
                except APIConnectionError as error:
                    raise upstream_failure(error) from error
        return self._special_prefix
