"""Logprob objects as the server sends them, plus the reads decision code needs.

Two shapes exist on the wire:

* the legacy completions object (``CompletionLogprobs``): four parallel lists, one entry
  per returned token (with ``echo``, the prompt's tokens first; their first entry has
  ``null`` values);
* the chat object (``ChatChoiceLogprobs``): ``content`` is a list of per-token entries,
  each with its own ``top_logprobs`` list.

With ``return_tokens_as_token_ids`` every token string is ``"token_id:<id>"``; the helpers
here turn those back into integer ids so callers can key values by id (decoded strings
can collide: two ids may decode to the same text).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

TOKEN_ID_PREFIX = "token_id:"


class WireModel(BaseModel):
    """Base of every response model: unknown fields are kept, so other servers parse."""

    model_config = ConfigDict(extra="allow")


def parse_token_id(token: str) -> int:
    """The id in a ``"token_id:<id>"`` string; ValueError for any other token string."""
    if not token.startswith(TOKEN_ID_PREFIX):
        raise ValueError(
            f"token {token!r} is not of the form 'token_id:<id>'; "
            "send return_tokens_as_token_ids=True to get ids"
        )
    return int(token[len(TOKEN_ID_PREFIX) :])


class CompletionLogprobs(WireModel):
    """The legacy ``choices[i].logprobs`` object of ``/v1/completions``.

    The four lists have one entry per returned token. ``token_logprobs[i]`` and
    ``top_logprobs[i]`` are ``None`` where the server has no value (the first echoed prompt
    position). ``-9999.0`` stands for minus infinity. ``text_offset[i]`` is where token
    ``i`` starts in the text the choice returns (Strata: counted from the start of that
    text; OpenAI: from the start of the prompt even without echo).
    """

    tokens: list[str] = Field(default_factory=list)
    token_logprobs: list[float | None] = Field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = Field(default_factory=list)
    text_offset: list[int] = Field(default_factory=list)

    def token_ids(self) -> list[int]:
        """The returned tokens as ids (needs ``return_tokens_as_token_ids``, else ValueError)."""
        return [parse_token_id(token) for token in self.tokens]

    def top_by_id(self, i: int) -> dict[int, float]:
        """Position ``i``'s ``top_logprobs`` keyed by token id, in the server's order.

        Needs ``token_id:`` keys (ValueError otherwise). A position without values (the
        first echoed prompt token) gives an empty dict.
        """
        top = self.top_logprobs[i]
        if top is None:
            return {}
        return {parse_token_id(token): value for token, value in top.items()}

    def values_of(self, i: int, ids: list[int]) -> dict[int, float | None]:
        """The values of the named ``ids`` at position ``i``; ``None`` for an id not listed.

        With ``allowed_token_ids`` on Strata's completions route every allowed id is listed
        (up to the requested count) with its full-vocabulary value, so none is ``None``.
        """
        top = self.top_by_id(i)
        return {token_id: top.get(token_id) for token_id in ids}

    def token_texts(self, text: str | None = None) -> list[str]:
        """The piece of the returned text that each token covers.

        Without ``text`` the pieces are the token strings themselves (ValueError in id
        mode: ``"token_id:<id>"`` is not text). With ``text`` (the choice's ``text``) the
        pieces are cut from it by ``text_offset``, relative to the first offset so that
        offsets counted from the prompt start (OpenAI) work too: piece ``i`` is
        ``text[text_offset[i] - text_offset[0] : text_offset[i + 1] - text_offset[0]]`` and
        the last piece runs to the end of ``text``. Offsets that go backwards or past the
        end of ``text`` raise ValueError.
        """
        if text is None:
            if any(token.startswith(TOKEN_ID_PREFIX) for token in self.tokens):
                raise ValueError("tokens are 'token_id:<id>' strings: pass the choice's text")
            return list(self.tokens)
        if len(self.text_offset) != len(self.tokens):
            raise ValueError("text_offset and tokens differ in length")
        if not self.text_offset:
            return []
        starts = [offset - self.text_offset[0] for offset in self.text_offset]
        ends = [*starts[1:], len(text)]
        for start, end in zip(starts, ends, strict=True):
            if not 0 <= start <= end <= len(text):
                raise ValueError(f"text_offset {self.text_offset} does not fit a {len(text)}-char text")
        return [text[start:end] for start, end in zip(starts, ends, strict=True)]

    def rebuild_text(self, text: str | None = None) -> str:
        """The returned text rebuilt from ``tokens`` and ``text_offset``.

        Without ``text`` (string tokens): the token strings joined, after checking that
        each token starts where the previous one ended (``text_offset[i + 1] -
        text_offset[i] == len(tokens[i])``; ValueError otherwise). The result includes the
        string of a listed stop token.
        With ``text`` (needed in id mode): the offset slices of ``text`` joined (see
        ``token_texts``), i.e. ``text`` from the first token on, once the offsets are
        checked to be ordered and in range.
        """
        pieces = self.token_texts(text)
        if text is None:
            for i in range(len(pieces) - 1):
                if self.text_offset[i + 1] - self.text_offset[i] != len(pieces[i]):
                    raise ValueError(f"text_offset[{i + 1}] does not follow token {i}")
        return "".join(pieces)


class TopLogprob(WireModel):
    """One alternative in a chat token's ``top_logprobs`` list."""

    token: str
    logprob: float
    bytes: list[int] | None = None


class ChatTokenLogprob(TopLogprob):
    """One generated token of a chat choice, with its own top alternatives."""

    top_logprobs: list[TopLogprob] = Field(default_factory=list)

    def top_dict(self) -> dict[str, float]:
        """The alternatives as ``{token: logprob}`` (keys by string: may collide)."""
        return {entry.token: entry.logprob for entry in self.top_logprobs}


class ChatChoiceLogprobs(WireModel):
    """``choices[i].logprobs`` of a chat completion (or of one chunk's delta)."""

    content: list[ChatTokenLogprob] | None = None
    refusal: list[ChatTokenLogprob] | None = None
