"""The engine's public request/response types: what a caller submits and what it gets back.

Everything a request owns travels in these objects; the engine keeps no per-request state
anywhere else, so one request's rows can never be touched by another.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

FinishReason = Literal["stop", "length", "abort"]


@dataclass(frozen=True)
class SamplingParams:
    """How the next tokens are chosen and when generation ends."""

    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = no top-k cut
    seed: int | None = None
    stop: tuple[str, ...] = ()  # stop strings; the stop text is not returned
    stop_token_ids: tuple[int, ...] = ()  # extra stop ids (the model's end-of-generation ids always stop)
    ignore_eos: bool = False
    allowed_token_ids: tuple[int, ...] | None = None  # only these ids may be sampled


@dataclass(frozen=True)
class LogprobParams:
    """Which log-probabilities the engine computes for a request (all fp32, full vocabulary)."""

    top_n: int | None = None  # None: no rows for generated tokens (unless named/renormalised ids are asked)
    prompt_logprobs: bool = False  # a row for every prompt position after the first (echo)
    named_ids: tuple[int, ...] = ()  # raw (full-vocabulary) values of these ids in every row
    renormalize_over: tuple[int, ...] | None = None  # also report values renormalised over these ids


@dataclass(frozen=True)
class Request:
    """One sequence to run: prompt token ids plus options."""

    prompt_ids: tuple[int, ...]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    logprobs: LogprobParams = field(default_factory=LogprobParams)
    request_id: str = ""


@dataclass(frozen=True)
class LogprobRow:
    """The log-probabilities at one position, for one request alone.

    `logprob` is the raw full-vocabulary value of `token_id` (the sampled or the echoed
    token); `top` is the top-N (id, value) pairs by value, descending, ties by lower id;
    `named` the raw values of the requested ids; `renormalized` the values renormalised
    over `LogprobParams.renormalize_over` (None when not asked). A token's value is the
    same float wherever it appears.
    """

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()
    named: dict[int, float] = field(default_factory=dict)
    renormalized: dict[int, float] | None = None


@dataclass(frozen=True)
class PromptScores:
    """Yielded first when `prompt_logprobs` was asked: one row per prompt position (None at 0)."""

    rows: tuple[LogprobRow | None, ...]
    num_prompt_tokens: int
    num_cached_tokens: int = 0


@dataclass(frozen=True)
class Step:
    """One generated token.

    `text` is the piece of completion text this step adds (may be "" while a UTF-8 character
    or a possible stop string is still incomplete; stop text is never included).
    `finish_reason` is set on the last step. The token that ended generation (an
    end-of-generation id or a stop id) is a step of its own, with its row.
    """

    token_id: int
    text: str
    logprobs: LogprobRow | None
    finish_reason: FinishReason | None = None
    num_prompt_tokens: int = 0
    num_cached_tokens: int = 0


EngineEvent = PromptScores | Step


class EngineError(Exception):
    """Base of the engine's own errors."""


class RequestError(EngineError):
    """A request the engine refuses (bad ids, too long for the context): the caller's fault.

    `param` names the offending field where there is one.
    """

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


class ModelLoadError(EngineError):
    """The model file cannot be loaded (unsupported architecture or weight type, bad file)."""
