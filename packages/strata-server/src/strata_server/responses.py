"""Engine rows -> wire objects: the legacy logprobs lists, chat `content[]`, usage, SSE frames.

The engine computes every number; this module only chooses which of them to list and
formats them. A token's value is taken from one place (the row), so it is bit-identical
wherever it appears, and every float passes through `safe_logprob` so no NaN or infinity
ever reaches the JSON.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from strata_engine.api import LogprobRow, PromptScores, Step
from strata_server.plan import Plan
from strata_server.protocol import (
    ChatLogprobEntry,
    CompletionLogprobs,
    PromptTokensDetails,
    TopLogprob,
    Usage,
)

NEG_INF_LOGPROB = -9999.0  # what -inf (and NaN) is sent as


class TokenizerLike(Protocol):
    def token_text(self, token_id: int) -> str: ...

    def token_bytes(self, token_id: int) -> bytes: ...

    def new_decoder(self) -> Any: ...


def safe_logprob(value: float) -> float:
    """A JSON-safe logprob: -inf, NaN and anything below -9999 become -9999.0; +inf 0.0."""
    if math.isnan(value) or value <= NEG_INF_LOGPROB:
        return NEG_INF_LOGPROB
    if math.isinf(value):
        return 0.0
    return value


def token_label(tokenizer: TokenizerLike, token_id: int, as_token_ids: bool) -> str:
    """The string a listing shows for a token: its display text, or `token_id:<id>`."""
    return f"token_id:{token_id}" if as_token_ids else tokenizer.token_text(token_id)


def best_first(values: Mapping[int, float], limit: int | None) -> list[tuple[int, float]]:
    """(id, value) pairs by value descending, ties by lower id, at most `limit` of them."""
    pairs = sorted(values.items(), key=lambda kv: (-_sort_value(kv[1]), kv[0]))
    return pairs if limit is None else pairs[:limit]


def _sort_value(value: float) -> float:
    return -math.inf if math.isnan(value) else value


def alternatives(row: LogprobRow, plan: Plan) -> list[tuple[int, float]]:
    """The (id, value) alternatives listed at one position, best first.

    - chat with `allowed_token_ids`: the top N allowed ids, values renormalised over the set;
    - completions with `allowed_token_ids`: the top N allowed ids, raw full-vocabulary values;
    - otherwise the natural top N, unless `logprob_token_ids` replaces it (as vLLM does);
    - `logprob_token_ids` are then appended, with raw values, whatever was sampled.
    """
    n = plan.top_n or 0
    if plan.renormalize:
        pairs = best_first(row.renormalized or {}, n)
    elif plan.allowed_ids is not None:
        allowed = set(plan.allowed_ids)
        pairs = best_first({i: v for i, v in row.named.items() if i in allowed}, n)
    elif plan.named_ids:
        pairs = []
    else:
        pairs = list(row.top[:n])
    listed = {token_id for token_id, _ in pairs}
    for token_id in plan.named_ids:
        if token_id not in listed and token_id in row.named:
            pairs.append((token_id, row.named[token_id]))
            listed.add(token_id)
    return pairs


def chosen_value(row: LogprobRow, plan: Plan) -> float:
    """The sampled/echoed token's value: renormalised on chat with allowed ids, else raw."""
    if plan.renormalize:
        return (row.renormalized or {}).get(row.token_id, -math.inf)
    return row.logprob


# ---------------------------------------------------------------- legacy (completions)


def legacy_top(row: LogprobRow, plan: Plan, tokenizer: TokenizerLike) -> dict[str, float]:
    """`top_logprobs[i]`: the alternatives plus the chosen token when it is not among them.

    Keys are token strings; two ids with the same string keep the first (better) value, which
    is why `return_tokens_as_token_ids` exists.
    """
    top: dict[str, float] = {}
    pairs = alternatives(row, plan)
    if row.token_id not in {token_id for token_id, _ in pairs}:
        pairs.append((row.token_id, chosen_value(row, plan)))
    for token_id, value in pairs:
        top.setdefault(token_label(tokenizer, token_id, plan.as_token_ids), safe_logprob(value))
    return top


@dataclass
class LegacyBuilder:
    """Builds one choice's legacy logprobs lists, tracking character offsets.

    A token's offset is where its text starts in the text the choice returns (prompt +
    completion with echo). It is counted by decoding the ids here rather than from the
    engine's released text, which lags behind while a possible stop string is held back.
    """

    plan: Plan
    tokenizer: TokenizerLike
    text_len: int = 0
    decoder: Any = None

    def __post_init__(self) -> None:
        self.decoder = self.tokenizer.new_decoder()  # the completion's own, as the engine's

    def prompt(
        self, prompt_ids: Sequence[int], scores: PromptScores | None
    ) -> tuple[str, CompletionLogprobs]:
        """The echoed prompt: its detokenized text and one entry per prompt token."""
        decoder = self.tokenizer.new_decoder()
        frag = CompletionLogprobs()
        pieces: list[str] = []
        rows = scores.rows if scores is not None else (None,) * len(prompt_ids)
        for position, token_id in enumerate(prompt_ids):
            row = rows[position] if position < len(rows) else None
            self._add(frag, token_id, row)
            piece = decoder.push(token_id)
            pieces.append(piece)
            self.text_len += len(piece)
        tail = decoder.flush()
        pieces.append(tail)
        self.text_len += len(tail)
        return "".join(pieces), frag

    def step(self, step: Step) -> CompletionLogprobs:
        """One generated token (the stop token too), then advance past its text."""
        frag = CompletionLogprobs()
        self._add(frag, step.token_id, step.logprobs)
        self.text_len += len(self.decoder.push(step.token_id))
        return frag

    def _add(self, frag: CompletionLogprobs, token_id: int, row: LogprobRow | None) -> None:
        frag.tokens.append(token_label(self.tokenizer, token_id, self.plan.as_token_ids))
        frag.text_offset.append(self.text_len)
        if row is None:
            frag.token_logprobs.append(None)
            frag.top_logprobs.append(None)
        else:
            frag.token_logprobs.append(safe_logprob(chosen_value(row, self.plan)))
            frag.top_logprobs.append(legacy_top(row, self.plan, self.tokenizer))


def merge_legacy(fragments: Iterable[CompletionLogprobs]) -> CompletionLogprobs:
    """Concatenate a choice's fragments into the single object a non-streamed reply carries."""
    merged = CompletionLogprobs()
    for frag in fragments:
        merged.tokens.extend(frag.tokens)
        merged.token_logprobs.extend(frag.token_logprobs)
        merged.top_logprobs.extend(frag.top_logprobs)
        merged.text_offset.extend(frag.text_offset)
    return merged


# ---------------------------------------------------------------- chat


def chat_entry(row: LogprobRow, plan: Plan, tokenizer: TokenizerLike) -> ChatLogprobEntry:
    """One `content[]` entry: the token, its value, its bytes, and exactly the alternatives."""
    return ChatLogprobEntry(
        token=token_label(tokenizer, row.token_id, plan.as_token_ids),
        logprob=safe_logprob(chosen_value(row, plan)),
        bytes=list(tokenizer.token_bytes(row.token_id)),
        top_logprobs=[
            TopLogprob(
                token=token_label(tokenizer, token_id, plan.as_token_ids),
                logprob=safe_logprob(value),
                bytes=list(tokenizer.token_bytes(token_id)),
            )
            for token_id, value in alternatives(row, plan)
        ],
    )


# ---------------------------------------------------------------- usage and streaming


@dataclass
class ChoiceTally:
    """Token counts of one choice, read off its events."""

    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    text: list[str] = field(default_factory=list)

    def see(self, event: PromptScores | Step) -> None:
        self.prompt_tokens = max(self.prompt_tokens, event.num_prompt_tokens)
        self.cached_tokens = max(self.cached_tokens, event.num_cached_tokens)
        if isinstance(event, Step):
            self.completion_tokens += 1
            self.text.append(event.text)
            if event.finish_reason is not None:
                self.finish_reason = event.finish_reason


def usage(plan: Plan, tallies: Sequence[ChoiceTally]) -> Usage:
    """Usage over all choices; a prompt shared by `n` samples counts once (as OpenAI)."""
    prompt_tokens = sum(len(p) for p in plan.prompts)
    cached = sum(tallies[p * plan.n].cached_tokens for p in range(len(plan.prompts)))
    completion = sum(t.completion_tokens for t in tallies)
    return Usage(
        prompt_tokens=prompt_tokens,
        completion_tokens=completion,
        total_tokens=prompt_tokens + completion,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=min(cached, prompt_tokens)),
    )


def sse(payload: Any) -> bytes:
    """One server-sent event carrying a JSON payload."""
    return b"data: " + msgspec.json.encode(payload) + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"
