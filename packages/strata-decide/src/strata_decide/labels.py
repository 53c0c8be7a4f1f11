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
    """A label as shown in the prompt (``text``) and the one token that stands for it."""

    text: str
    token_id: int


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
        self._token_of: dict[str, int | None] = {}
        self._special_prefix: list[int] | None = None
        self._lock = asyncio.Lock()

    async def labels_for(self, kind: Kind, count: int) -> list[Label]:
        """``count`` labels for a question of ``kind``, checked for single tokens and collisions."""
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
            token_id = await self.token_of(text)
            if token_id is None:
                raise LabelError(f"label {text!r} is not a single token in the served tokenizer")
            labels.append(Label(text, token_id))
        return check_distinct(labels)

    async def token_of(self, text: str) -> int | None:
        """The one token for ``text`` (tried as ``text``, then ``" " + text``), or None."""
        if text not in self._token_of:
            token_id = await self._single_token(text)
            if token_id is None:
                token_id = await self._single_token(" " + text)
            self._token_of[text] = token_id
        return self._token_of[text]

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
            ids = await asyncio.gather(*(self.token_of(text) for text in batch))
            found.extend(Label(t, i) for t, i in zip(batch, ids, strict=True) if i is not None)
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
