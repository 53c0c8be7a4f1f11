"""Engine rows -> wire objects: the legacy logprobs lists, chat `content[]`, usage, SSE frames.

The engine computes every number, listing and text offset (`LogprobRow.listed`,
`LogprobRow.value`, `Step.offset`, `PromptScores.offsets`); this module only formats them.
A token's value is taken from one place (the row), so it is bit-identical wherever it
appears, and every float passes through `safe_logprob` so no NaN or infinity ever reaches
the JSON.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from strata_engine.api import LogprobRow, PromptScores, Step
from strata_engine.protocol import EngineTokenizer
from strata_engine.text.stream import decode_spans
from strata_server.plan import Plan
from strata_server.protocol import (
    ChatLogprobEntry,
    CompletionLogprobs,
    PromptLogprob,
    PromptLogprobs,
    PromptTokensDetails,
    TopLogprob,
    Usage,
)

NEG_INF_LOGPROB = -9999.0  # what -inf (and NaN) is sent as


def safe_logprob(value: float) -> float:
    """A JSON-safe logprob: -inf, NaN and anything below -9999 become -9999.0; +inf 0.0."""
    if math.isnan(value) or value <= NEG_INF_LOGPROB:
        return NEG_INF_LOGPROB
    if math.isinf(value):
        return 0.0
    return value


def token_label(tokenizer: EngineTokenizer, token_id: int, as_token_ids: bool) -> str:
    """The string a listing shows for a token: its display text, or `token_id:<id>`."""
    return f"token_id:{token_id}" if as_token_ids else tokenizer.token_text(token_id)


# ---------------------------------------------------------------- legacy (completions)


def legacy_top(row: LogprobRow, plan: Plan, tokenizer: EngineTokenizer) -> dict[str, float]:
    """`top_logprobs[i]`: the listing plus the chosen token when it is not in it.

    Keys are token strings; two ids with the same string keep the first (better) value, which
    is why `return_tokens_as_token_ids` exists.
    """
    top: dict[str, float] = {}
    pairs = list(row.listed)
    if row.token_id not in {token_id for token_id, _ in pairs}:
        pairs.append((row.token_id, row.value))
    for token_id, value in pairs:
        top.setdefault(token_label(tokenizer, token_id, plan.as_token_ids), safe_logprob(value))
    return top


@dataclass
class LegacyBuilder:
    """Builds one choice's legacy logprobs lists.

    A token's offset is where its text starts in the text the choice returns (prompt +
    completion with echo); the engine reports it (`PromptScores.offsets`, `Step.offset`),
    so nothing is decoded twice.
    """

    plan: Plan
    tokenizer: EngineTokenizer
    prompt_len: int = 0  # characters of echoed prompt text before the completion

    def prompt(
        self, prompt_ids: Sequence[int], scores: PromptScores | None
    ) -> tuple[str, CompletionLogprobs]:
        """The echoed prompt: its text and one entry per prompt token."""
        if scores is not None:
            text, offsets, rows = scores.text, scores.offsets, scores.rows
        else:  # echo without logprobs: no engine event, the same decoding
            text, offsets = decode_spans(self.tokenizer, prompt_ids)
            rows = (None,) * len(prompt_ids)
        frag = CompletionLogprobs()
        for position, (token_id, offset) in enumerate(zip(prompt_ids, offsets, strict=True)):
            self._add(frag, token_id, offset, rows[position] if position < len(rows) else None)
        self.prompt_len = len(text)
        return text, frag

    def step(self, step: Step) -> CompletionLogprobs:
        """One generated token (the stop token too)."""
        frag = CompletionLogprobs()
        self._add(frag, step.token_id, self.prompt_len + step.offset, step.logprobs)
        return frag

    def _add(self, frag: CompletionLogprobs, token_id: int, offset: int, row: LogprobRow | None) -> None:
        frag.tokens.append(token_label(self.tokenizer, token_id, self.plan.as_token_ids))
        frag.text_offset.append(offset)
        if row is None:
            frag.token_logprobs.append(None)
            frag.top_logprobs.append(None)
        else:
            frag.token_logprobs.append(safe_logprob(row.value))
            frag.top_logprobs.append(legacy_top(row, self.plan, self.tokenizer))


def prompt_logprobs(
    scores: PromptScores, prompt_ids: Sequence[int], plan: Plan, tokenizer: EngineTokenizer
) -> PromptLogprobs:
    """vLLM's `prompt_logprobs` from the prompt rows an echo reads: None for the first token,
    then {token id: {logprob, rank, decoded_token}} with the prompt token first and the
    natural top N after it (ranks 1..N; a top entry for the prompt token replaces its own, as
    in vLLM). The values are the rows' raw floats, so they equal the echo's bit for bit."""
    out: PromptLogprobs = []
    for position, token_id in enumerate(prompt_ids):
        row = scores.rows[position] if position < len(scores.rows) else None
        if row is None:
            out.append(None)
            continue
        entries = {
            token_id: PromptLogprob(
                safe_logprob(row.logprob), row.rank or 0, token_label(tokenizer, token_id, plan.as_token_ids)
            )
        }
        for rank, (other, value) in enumerate(row.prompt_top, start=1):
            entries[other] = PromptLogprob(
                safe_logprob(value), rank, token_label(tokenizer, other, plan.as_token_ids)
            )
        out.append(entries)
    return out


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


def chat_entry(row: LogprobRow, plan: Plan, tokenizer: EngineTokenizer) -> ChatLogprobEntry:
    """One `content[]` entry: the token, its value, its bytes, and exactly the listing."""
    return ChatLogprobEntry(
        token=token_label(tokenizer, row.token_id, plan.as_token_ids),
        logprob=safe_logprob(row.value),
        bytes=list(tokenizer.token_bytes(row.token_id)),
        top_logprobs=[
            TopLogprob(
                token=token_label(tokenizer, token_id, plan.as_token_ids),
                logprob=safe_logprob(value),
                bytes=list(tokenizer.token_bytes(token_id)),
            )
            for token_id, value in row.listed
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
