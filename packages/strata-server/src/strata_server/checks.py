"""One set of rules for both routes: each function raises a 400 `ApiError` naming the field.

`plan.checked_plan` calls these while reducing a body to a `Plan`; nothing route-specific
lives here except the parameter names the route passes in for messages. Rules about the
model (vocabulary, context) are the engine's (`strata_engine.checks`), never repeated here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from strata_server.errors import ApiError
from strata_server.limits import RequestLimits

if TYPE_CHECKING:
    from strata_server.protocol import ChatMessage, PromptInput

MAX_N = 128  # choices per prompt; a bound so one request cannot queue unbounded work
MAX_ID_DIGITS = 20  # a token id key of `logit_bias` (int() of thousands of digits is slow, then fails)
MIN_TEMPERATURE = 1e-5  # below this sampling is greedy (dividing by ~0 would overflow)
SEED_RANGE = (-(2**63), 2**64 - 1)


@dataclass(frozen=True)
class Limits:
    """What the loaded model and the server flags allow."""

    vocab_size: int
    ctx_size: int
    max_logprobs: int = 20
    max_n: int | None = None  # operator limits (None: only the built-in ones)
    max_tokens: int | None = None
    max_prompt_tokens: int | None = None
    request: RequestLimits = field(
        default_factory=RequestLimits
    )  # the size bounds of one request (limits.py)


def check_model(requested: str | None, served: str) -> None:
    """An absent model name means the served one; any other name is unknown (404, as vLLM)."""
    if requested is not None and requested != served:
        raise ApiError(
            f"The model `{requested}` does not exist; this server serves `{served}`.",
            param="model",
            status=404,
            code="model_not_found",
        )


def resolve_top_n(logprobs: bool | int | None, top_logprobs: int | None, param: str) -> int | None:
    """The number of alternatives per position, or None for no logprobs at all.

    `logprobs: N` (legacy completions), or `logprobs: true` with `top_logprobs: N` (chat form,
    also accepted on completions). `top_logprobs` without `logprobs` is refused, as vLLM does.
    """
    if logprobs is None or logprobs is False:
        if top_logprobs is not None:
            raise ApiError("`top_logprobs` needs `logprobs` set to true.", param="top_logprobs")
        return None
    if logprobs is True:
        return 0 if top_logprobs is None else top_logprobs
    return logprobs


def check_logprobs(
    top_n: int | None,
    named_ids: Sequence[int],
    allowed_ids: Sequence[int] | None,
    limits: Limits,
    param: str = "logprobs",
) -> None:
    """The logprob counts of the wire, shared by completions and chat (`param`: the route's
    name for `top_n`, `logprobs` or `top_logprobs`).

    The alternatives count is within 0..max_logprobs, or up to the number of allowed ids
    when `allowed_token_ids` is given (the listing is bounded by that set), never beyond
    --max-logprob-ids; so are the named ids, which need logprobs asked. What the model
    decides (ids inside the vocabulary, prompts that fit the context) the engine checks,
    once, when the requests are checked.
    """
    most = limits.request.max_logprob_ids
    if len(named_ids) > most:
        raise ApiError(
            f"`logprob_token_ids` names {len(named_ids)} ids; the server allows at most "
            f"{most} (--max-logprob-ids).",
            param="logprob_token_ids",
        )
    if top_n is not None:
        cap = limits.max_logprobs
        if allowed_ids is not None:
            cap = max(cap, min(len(allowed_ids), most))
        if not 0 <= top_n <= cap:
            if cap == limits.max_logprobs:
                why = " (the server's --max-logprobs)."
            elif cap == most:
                why = " (the server's --max-logprob-ids)."
            else:
                why = "."
            raise ApiError(f"`{param}` must be between 0 and {cap}, got {top_n}{why}", param=param)
    elif named_ids:
        raise ApiError("`logprob_token_ids` needs `logprobs` set.", param="logprob_token_ids")


def check_prompt_logprobs(prompt_logprobs: int | None, stream: bool, limits: Limits) -> int | None:
    """vLLM's `prompt_logprobs`: 0..max_logprobs alternatives per prompt token, not on a stream
    (vLLM's rule: a stream has no place for them)."""
    if prompt_logprobs is None:
        return None
    if stream:
        raise ApiError("`prompt_logprobs` are not available when `stream` is true.", param="prompt_logprobs")
    if not 0 <= prompt_logprobs <= limits.max_logprobs:
        raise ApiError(
            f"`prompt_logprobs` must be between 0 and {limits.max_logprobs} (the server's "
            f"--max-logprobs), got {prompt_logprobs}.",
            param="prompt_logprobs",
        )
    return prompt_logprobs


def check_top_logprobs(value: int | None, limits: Limits, param: str = "top_logprobs") -> None:
    """Alternatives listed per position without an allowed set: 0..--max-logprobs."""
    if value is not None and not 0 <= value <= limits.max_logprobs:
        raise ApiError(
            f"`{param}` must be between 0 and {limits.max_logprobs}, got {value} (the server's "
            "--max-logprobs).",
            param=param,
        )


def check_prompt_tokens(longest: int, limits: Limits, param: str, what: str = "The prompt") -> None:
    """The operator's --max-prompt-tokens, on the longest prompt of a request."""
    if limits.max_prompt_tokens is not None and longest > limits.max_prompt_tokens:
        raise ApiError(
            f"{what} has {longest} tokens; the server allows at most "
            f"{limits.max_prompt_tokens} (--max-prompt-tokens).",
            param=param,
            code="prompt_too_long",
        )


def check_sequences(
    count: int, limits: Limits, param: str = "n", what: str = "choices (n x prompts)"
) -> None:
    """The operator's --max-n, on the engine sequences one request becomes."""
    if limits.max_n is not None and count > limits.max_n:
        raise ApiError(
            f"This request asks for {count} {what}; the server allows at most {limits.max_n} (--max-n).",
            param=param,
        )


def check_max_tokens(max_tokens: int | None, echo: bool, param: str = "max_tokens") -> None:
    """`max_tokens` >= 1, or 0 together with `echo` (pure prompt scoring), as vLLM."""
    if max_tokens is None:
        return
    if max_tokens < 0 or (max_tokens == 0 and not echo):
        raise ApiError(
            f"`{param}` must be at least 1 (0 is allowed only with `echo`), got {max_tokens}.",
            param=param,
        )


def check_sampling(
    *,
    n: int,
    temperature: float | None,
    top_p: float | None,
    top_k: int | None,
    seed: int | None,
    vocab_size: int,
) -> tuple[float, float, int]:
    """Validate the sampling knobs; return (temperature, top_p, top_k) with defaults applied."""
    if not 1 <= n <= MAX_N:
        raise ApiError(f"`n` must be between 1 and {MAX_N}, got {n}.", param="n")
    t = 1.0 if temperature is None else temperature
    if not (math.isfinite(t) and t >= 0):
        raise ApiError(f"`temperature` must be a finite number >= 0, got {t}.", param="temperature")
    if t < MIN_TEMPERATURE:
        t = 0.0
    p = 1.0 if top_p is None else top_p
    if not (math.isfinite(p) and 0 < p <= 1):
        raise ApiError(f"`top_p` must be in (0, 1], got {p}.", param="top_p")
    k = 0 if top_k is None or top_k == -1 else top_k
    if k < 0:
        raise ApiError(f"`top_k` must be -1, 0 or positive, got {top_k}.", param="top_k")
    if k >= vocab_size:
        k = 0  # a cut at or above the vocabulary keeps every token
    if seed is not None and not SEED_RANGE[0] <= seed <= SEED_RANGE[1]:
        raise ApiError(f"`seed` must fit in 64 bits, got {seed}.", param="seed")
    return t, p, k


PENALTY_RANGE = 2.0  # presence/frequency penalties lie in [-2, 2] (OpenAI, vLLM)
BIAS_RANGE = 100.0  # logit_bias values lie in [-100, 100] (OpenAI)


def check_penalties(
    presence: float | None, frequency: float | None, repetition: float | None
) -> tuple[float, float]:
    """(presence, frequency) with defaults applied; `repetition_penalty` only at its neutral 1.

    vLLM's repetition penalty divides positive logits and multiplies negative ones: it needs
    the raw logits, and the sampler sees only log-probabilities (where presence/frequency
    penalties, being additive, give vLLM's distribution exactly), so it is refused.
    """
    values = []
    for name, value in (("presence_penalty", presence), ("frequency_penalty", frequency)):
        v = 0.0 if value is None else value
        if not (math.isfinite(v) and -PENALTY_RANGE <= v <= PENALTY_RANGE):
            raise ApiError(f"`{name}` must be between -2 and 2, got {v}.", param=name)
        values.append(v)
    if repetition is not None and repetition != 1.0:
        raise ApiError(
            "`repetition_penalty` other than 1 is not supported by this server (it rescales raw "
            "logits, which the sampler does not see); use `presence_penalty` or "
            "`frequency_penalty`.",
            param="repetition_penalty",
            code="unsupported",
        )
    return values[0], values[1]


def check_logit_bias(bias: dict[str, float] | None) -> tuple[tuple[int, float], ...]:
    """OpenAI's `logit_bias`: token id strings -> values in [-100, 100], as (id, value) pairs.

    Whether the ids are inside the vocabulary is the engine's check.
    """
    pairs: dict[int, float] = {}
    for key, value in (bias or {}).items():
        if not (key.isascii() and key.isdigit() and len(key) <= MAX_ID_DIGITS):
            shown = key if len(key) <= MAX_ID_DIGITS else f"{key[:MAX_ID_DIGITS]}... ({len(key)} characters)"
            raise ApiError(f"`logit_bias` keys must be token ids, got {shown!r}.", param="logit_bias")
        if int(key) in pairs:
            raise ApiError(f"`logit_bias` names token id {int(key)} twice.", param="logit_bias")
        if not (math.isfinite(value) and -BIAS_RANGE <= value <= BIAS_RANGE):
            raise ApiError(
                f"`logit_bias` values must be between -100 and 100, got {value} for {key!r}.",
                param="logit_bias",
            )
        pairs[int(key)] = value
    return tuple(pairs.items())


def truncate_prompts(prompts: list[list[int]], keep: int | None, ctx_size: int) -> list[list[int]]:
    """vLLM's `truncate_prompt_tokens`: keep each prompt's last `keep` tokens (-1: the
    context length); None leaves prompts whole."""
    if keep is None:
        return prompts
    if keep == 0 or keep < -1:
        raise ApiError(
            f"`truncate_prompt_tokens` must be -1 or at least 1, got {keep}.", param="truncate_prompt_tokens"
        )
    if keep > ctx_size:
        raise ApiError(
            f"`truncate_prompt_tokens` is {keep}, more than the model's context length ({ctx_size}).",
            param="truncate_prompt_tokens",
        )
    keep = ctx_size if keep == -1 else keep
    return [prompt[-keep:] for prompt in prompts]


def normalize_stop(stop: str | Sequence[str] | None, limits: RequestLimits) -> tuple[str, ...]:
    """`stop` as a tuple of non-empty strings (an empty stop string would end every reply),
    within --max-stop-strings and --max-stop-chars."""
    if stop is None:
        return ()
    stops = (stop,) if isinstance(stop, str) else tuple(stop)
    if len(stops) > limits.max_stop_strings:
        raise ApiError(
            f"`stop` has {len(stops)} strings; the server allows at most {limits.max_stop_strings} "
            "(--max-stop-strings).",
            param="stop",
        )
    total = sum(len(s) for s in stops)
    if total > limits.max_stop_chars:
        raise ApiError(
            f"`stop` strings have {total} characters together; the server allows at most "
            f"{limits.max_stop_chars} (--max-stop-chars).",
            param="stop",
        )
    if any(s == "" for s in stops):
        raise ApiError("`stop` strings must not be empty.", param="stop")
    return stops


# vLLM's request fields this server parses but does not implement, and why. Each is a 400
# naming it (`code: "unsupported"`) unless it holds its neutral value (NEUTRAL, else None or
# empty); docs/DETAILS.md lists them beside the fields that are honoured.
NOT_IMPLEMENTED = {
    "prompt_embeds": "prompts are text or token ids",
    "suffix": "no fill-in-the-middle",
    "use_beam_search": "no beam search",
    "length_penalty": "it applies to beam search only",
    "min_p": "the sampler has top_k and top_p",
    "guided_decoding_backend": "structured output has one backend (llguidance)",
    "priority": "requests are served first come, first served",
    "logits_processors": "no server-side code from requests",
    "cache_salt": "the prefix cache is shared (results are identical either way)",
    "kv_transfer_params": "no disaggregated serving",
    "vllm_xargs": "no custom extensions",
    "tools": "no tool calling",
    "tool_choice": "no tool calling",
    "parallel_tool_calls": "no tool calling",
    "reasoning_effort": "no reasoning parser",
    "include_reasoning": "no reasoning parser (the reply is the model's text as generated)",
    "bad_words": "use logit_bias",
    "continue_final_message": "the template always closes the last message",
    "mm_processor_kwargs": "text only",
    "structural_tag": "use response_format or structured_outputs",
    "spaces_between_special_tokens": (
        "Strata does not insert spaces between special tokens (vLLM's behaviour with a fast, "
        "`tokenizers`, vocabulary); only the default, true, is supported"
    ),
}
NEUTRAL: dict[str, tuple[object, ...]] = {
    "use_beam_search": (False,),
    "length_penalty": (1.0,),
    "min_p": (None, 0.0),
    "priority": (0,),
    "include_reasoning": (True,),
    "continue_final_message": (False,),
    "tool_choice": (None, "none"),
    "spaces_between_special_tokens": (True,),
}


def prompt_count(prompt: PromptInput) -> int:
    """How many prompts a completions `prompt` holds, read from its form without tokenising."""
    if isinstance(prompt, str) or not prompt or any(isinstance(p, int) for p in prompt):
        return 1  # one text, or one id list (mixed forms are refused when tokenising)
    return len(prompt)


def check_prompt_size(prompt: PromptInput | list[int], limits: RequestLimits, param: str = "prompt") -> None:
    """A completions request's prompts within --max-prompt-chars together: characters of the
    text prompts and ids of the id prompts, counted before anything is tokenised."""
    if isinstance(prompt, str) or any(isinstance(p, int) for p in prompt):
        total = len(prompt)  # one text, or one id list (mixed forms are refused later)
    else:
        total = sum(len(p) if isinstance(p, str | list) else 1 for p in prompt)
    if total > limits.max_prompt_chars:
        raise ApiError(
            f"The prompts have {total} characters or token ids together; the server allows at most "
            f"{limits.max_prompt_chars} (--max-prompt-chars).",
            param=param,
            code="prompt_too_long",
        )


def check_messages_size(
    messages: Sequence[ChatMessage], limits: RequestLimits, param: str = "messages"
) -> None:
    """Chat messages' text within --max-prompt-chars together (before rendering the template)."""
    total = 0
    for message in messages:
        content = message.content
        if isinstance(content, str):
            total += len(content)
        elif content is not None:
            total += sum(len(part.text or "") for part in content)
        total += len(message.role) + len(message.name or "")
    check_input_size(total, limits, param, "The messages have")


def check_input_size(total: int, limits: RequestLimits, param: str, what: str) -> None:
    """Characters (or token ids) of a request's input together within --max-prompt-chars."""
    if total > limits.max_prompt_chars:
        raise ApiError(
            f"{what} {total} characters or token ids; the server allows at most "
            f"{limits.max_prompt_chars} (--max-prompt-chars).",
            param=param,
            code="prompt_too_long",
        )


def refuse_not_implemented(body: object) -> None:
    """Every field of NOT_IMPLEMENTED the body has, at anything but its neutral value: a 400."""
    for name, why in NOT_IMPLEMENTED.items():
        if not hasattr(body, name):
            continue
        value = getattr(body, name)
        if value in NEUTRAL.get(name, (None,)) or value == [] or value == {}:
            continue
        raise ApiError(f"`{name}` is not supported by this server: {why}.", param=name, code="unsupported")


def check_best_of(best_of: int | None, n: int) -> None:
    """`best_of` only as `n` (one sample per choice, nothing drawn and dropped)."""
    if best_of is not None and best_of != n:
        raise ApiError("`best_of` other than `n` is not supported.", param="best_of", code="unsupported")
