"""The engine's public request/response types: what a caller submits and what it gets back.

Everything a request owns travels in these objects; the engine keeps no per-request state
anywhere else, so one request's rows can never be touched by another.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

FinishReason = Literal["stop", "length", "abort"]


@dataclass(frozen=True)
class StructuredSpec:
    """A constraint on the generated text: llguidance's grammar text, and what it came from.

    Build it with `strata_engine.structured` (`json_schema_spec`, `regex_spec`, ...), which
    checks it; the engine runs one matcher per sequence and masks only the draw.
    """

    kind: str  # "json_schema", "json_object", "regex", "choice" or "grammar" (for messages)
    grammar: str


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
    structured: StructuredSpec | None = None  # the output must follow this grammar (see structured.py)
    # vLLM's extras. Penalties and bias change the scores the draw uses, never the reported rows.
    min_tokens: int = 0  # no end-of-generation/stop id, and no stop string, before this many tokens
    include_stop_str_in_output: bool = False  # keep the matched stop string / stop token's text
    skip_special_tokens: bool = True  # control tokens add no text (a stop token's text aside)
    presence_penalty: float = 0.0  # subtracted once from every id already generated
    frequency_penalty: float = 0.0  # subtracted per time an id was generated
    logit_bias: tuple[tuple[int, float], ...] = ()  # (id, value) added to that id's score


@dataclass(frozen=True)
class LogprobParams:
    """Which log-probabilities the engine computes for a request (all fp32, full vocabulary)."""

    top_n: int | None = None  # None: no rows for generated tokens (unless named/renormalised ids are asked)
    prompt_logprobs: bool = False  # a row for every prompt position after the first (echo)
    named_ids: tuple[int, ...] = ()  # raw (full-vocabulary) values of these ids in every row
    renormalize_over: tuple[int, ...] | None = None  # also report values renormalised over these ids
    top_within: tuple[int, ...] | None = None  # the listing's top-N is chosen among these ids only
    # with prompt_logprobs: rows only for prompt tokens at index >= this (candidate scoring), so
    # the tokens before it may come from the prefix cache; rows before it are None
    prompt_rows_from: int = 0
    # vLLM's `prompt_logprobs`: at prompt positions also the natural top N (raw values) and the
    # prompt token's rank in the vocabulary (None: not asked)
    prompt_top_n: int | None = None


@dataclass(frozen=True)
class ChatOptions:
    """How chat messages become a prompt (see `chat_template.render_ids`)."""

    add_generation_prompt: bool = True  # end with the assistant turn's opening
    add_special: bool = False  # force one BOS even when the model does not ask for it
    template_kwargs: Mapping[str, Any] = field(default_factory=dict)  # extra template variables
    template: str | None = (
        None  # a template source to render with instead of the model's (vLLM's per-request `chat_template`)
    )


DEFAULT_CHAT = ChatOptions()


@dataclass(frozen=True)
class Request:
    """One sequence to run: prompt token ids plus options."""

    prompt_ids: tuple[int, ...]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    logprobs: LogprobParams = field(default_factory=LogprobParams)


@dataclass(frozen=True)
class LogprobRow:
    """The log-probabilities at one position, for one request alone.

    `logprob` is the raw full-vocabulary value of `token_id` (the sampled or the echoed
    token); `top` is the natural top-N (id, value) pairs by value, descending, ties by lower
    id; `named` the raw values of the requested ids; `renormalized` the values renormalised
    over `LogprobParams.renormalize_over` (None when not asked); `listed` exactly the
    alternatives a response shows (see `logprobs.listing`). A token's value is the same
    float wherever it appears.
    """

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()
    named: dict[int, float] = field(default_factory=dict)
    renormalized: dict[int, float] | None = None
    listed: tuple[tuple[int, float], ...] = ()
    # prompt rows with `LogprobParams.prompt_top_n` only: the token's rank (how many ids have a
    # value >= its value, as vLLM counts) and the natural top N
    rank: int | None = None
    prompt_top: tuple[tuple[int, float], ...] = ()

    @property
    def value(self) -> float:
        """The token's value as a response reports it: renormalised when asked, else raw."""
        if self.renormalized is not None:
            return self.renormalized.get(self.token_id, -math.inf)
        return self.logprob


@dataclass(frozen=True)
class PromptScores:
    """Yielded first when `prompt_logprobs` was asked: one row per prompt position (None at 0)."""

    rows: tuple[LogprobRow | None, ...]
    num_prompt_tokens: int
    num_cached_tokens: int = 0
    text: str = ""  # the prompt decoded (what an echo returns)
    offsets: tuple[int, ...] = ()  # where each prompt token's text starts in `text`


@dataclass(frozen=True)
class Step:
    """One generated token.

    `text` is the piece of completion text this step adds (may be "" while a UTF-8 character
    or a possible stop string is still incomplete; stop text is never included).
    `finish_reason` is set on the last step. The token that ended generation (an
    end-of-generation id or a stop id) is a step of its own, with its row. `offset` is where
    this token's text starts in the completion's decoded text (held-back text included).
    """

    token_id: int
    text: str
    logprobs: LogprobRow | None
    finish_reason: FinishReason | None = None
    num_prompt_tokens: int = 0
    num_cached_tokens: int = 0
    offset: int = 0


EngineEvent = PromptScores | Step


class EngineError(Exception):
    """Base of the engine's own errors."""


class ErrorCode:
    """Stable machine codes of `RequestError`: callers branch on these, never on messages."""

    EMPTY_PROMPT = "empty_prompt"
    TOKEN_ID_OUT_OF_VOCAB = "token_id_out_of_vocab"
    CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"
    EMPTY_ALLOWED_IDS = "empty_allowed_token_ids"
    INVALID_MAX_TOKENS = "invalid_max_tokens"
    CHAT_TEMPLATE = "chat_template_error"
    INVALID_REQUEST = "invalid_request"
    INVALID_STRUCTURED_OUTPUT = "invalid_structured_output"


class RequestError(EngineError):
    """A request the engine refuses (bad ids, too long for the context): the caller's fault.

    `(code, param, message)`: `code` from `ErrorCode`; `param` the engine field at fault
    ("prompt_ids", "sampling.max_tokens", "logprobs.named_ids", "messages", ...), which a
    server maps to its own wire names; `message` is for people.
    """

    def __init__(self, message: str, param: str | None = None, code: str = ErrorCode.INVALID_REQUEST) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code


class EngineUnavailable(EngineError):
    """The engine can run no more steps (a tensor-parallel rank died): every request in flight
    and every later one fails with it until the server is restarted; not the caller's fault."""


class EngineOutOfMemory(EngineError):
    """A step could not allocate the memory it needed: the requests in it fail with this, the
    engine goes on with the next ones. Not the caller's fault and passing: a server answers 503
    with Retry-After (the same request may fit once others have finished)."""


def is_out_of_memory(exc: BaseException) -> bool:
    """A failed allocation: Python's and numpy's MemoryError, the C kernels' `KernelOutOfMemory`,
    torch's OutOfMemoryError (a GPU's, without importing torch where it is not loaded), or a
    thread whose stack could not be mapped (Python says "can't start new thread")."""
    torch_oom = getattr(sys.modules.get("torch"), "OutOfMemoryError", None)
    return (
        isinstance(exc, MemoryError | EngineOutOfMemory)
        or (torch_oom is not None and isinstance(exc, torch_oom))
        or (isinstance(exc, RuntimeError) and "can't start new thread" in str(exc))
    )


class ModelLoadError(EngineError):
    """The model file cannot be loaded (unsupported architecture or weight type, bad file)."""
