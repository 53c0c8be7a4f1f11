"""From a decoded generation body to a checked `Plan`, and from a Plan to engine requests.

The checks of a whole Plan (the operator's bounds, the answer's estimated size) live here
too, beside the Plan they read; `checks.py` holds the per-field rules and imports nothing
from this module.

Both routes reduce their body to a `Plan` (route-independent), so one set of wire rules
serves completions and chat alike; `engine_requests` turns it into one engine `Request`
per returned choice, asking the engine for exactly the listing the response shows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from strata_engine.api import LogprobParams, Request, SamplingParams
from strata_server.checks import (
    Limits,
    check_best_of,
    check_logit_bias,
    check_logprobs,
    check_penalties,
    check_prompt_logprobs,
    check_prompt_tokens,
    check_sampling,
    check_sequences,
    normalize_stop,
    refuse_not_implemented,
    resolve_top_n,
    truncate_prompts,
)
from strata_server.errors import ApiError
from strata_server.protocol import GenerationRequest
from strata_server.structured_output import structured_param, structured_spec

SEED_MODULUS = 2**63  # choice seeds are (seed + i) mod 2**63, so any accepted seed is valid
# Bytes a listed value takes in each answer format, measured on the default model's replies
# (top 20, 200 tokens / a 2,000-token prompt) and rounded up: completions' legacy logprobs
# (token text, logprob; 26 measured), chat's {"token", "logprob", "bytes"} objects (78; 93 at
# top 0) and vLLM's prompt_logprobs {id: {"logprob", "rank", "decoded_token"}} (65).
BYTES_PER_VALUE = 32
BYTES_PER_CHAT_VALUE = 96
BYTES_PER_PROMPT_VALUE = 80


@dataclass(frozen=True)
class Plan:
    """A checked request: prompts as ids, the engine's parameters, and the wire-only fields.

    `sampling` and `logprobs` are the engine's `SamplingParams` and `LogprobParams`, built
    once from the body by `checked_plan`; every choice runs with them, except `max_tokens`
    and `seed`, which `engine_requests` sets per choice (`max_tokens` None: what the context
    has left; choice i draws with seed + i). Penalties and `logit_bias` change the draw only;
    reported values stay raw. `logprobs.top_n` None means the reply lists no logprobs for
    its tokens. The rest is what only the wire knows: `echo` (the prompt's text leads each
    choice), `as_token_ids` (how tokens are labelled) and the wire names under which a
    refusal found later (the engine's checks, the answer's size) is reported.
    """

    prompts: list[list[int]]
    max_tokens: int | None
    n: int = 1
    sampling: SamplingParams = field(default_factory=SamplingParams)
    logprobs: LogprobParams = field(default_factory=LogprobParams)
    echo: bool = False
    as_token_ids: bool = False
    ids_param: str = "prompt"
    top_n_param: str = "logprobs"
    structured_param: str = "response_format"  # the wire field of `sampling.structured`

    @property
    def num_choices(self) -> int:
        return len(self.prompts) * self.n

    @property
    def wants_logprobs(self) -> bool:
        """`logprobs` (or `top_logprobs`) was asked: each returned token carries its values."""
        return self.logprobs.top_n is not None


def checked_plan(
    body: GenerationRequest,
    limits: Limits,
    *,
    prompts: Callable[[], list[list[int]]],
    max_tokens: int | None,
    logprobs: bool | int | None,
    ids_param: str,
    echo: bool = False,
    renormalize: bool = False,
) -> Plan:
    """Check the shared fields and build the Plan (every refusal is a 4xx here).

    Each wire field is checked once, here or in the function this calls for it, under its
    own name; what depends on the model (ids inside the vocabulary, prompts that fit the
    context) the engine checks when the requests are checked. `prompts` is called after the
    field checks, so a bad knob is reported before any prompt is rendered or tokenised.
    `renormalize` (chat): values listed with `allowed_token_ids` are renormalised over them.
    """
    refuse_not_implemented(body)
    check_best_of(body.best_of, body.n)
    temperature, top_p, top_k = check_sampling(
        n=body.n,
        temperature=body.temperature,
        top_p=body.top_p,
        top_k=body.top_k,
        seed=body.seed,
        vocab_size=limits.vocab_size,
    )
    presence, frequency = check_penalties(
        body.presence_penalty, body.frequency_penalty, body.repetition_penalty
    )
    stop = normalize_stop(body.stop, limits.request)
    bias = check_logit_bias(body.logit_bias)
    allowed = None if body.allowed_token_ids is None else unique_ids(body.allowed_token_ids)
    top_n_param = "top_logprobs" if logprobs is True else "logprobs"
    wanted = checked_logprobs(
        body,
        limits,
        logprobs=logprobs,
        allowed=allowed,
        top_n_param=top_n_param,
        echo=echo,
        renormalize=renormalize,
    )
    structured = structured_spec(body, limits.request)  # the costliest check, after the cheap ones
    sampling = SamplingParams(
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        seed=body.seed,
        stop=stop,
        stop_token_ids=tuple(body.stop_token_ids or ()),
        ignore_eos=body.ignore_eos,
        allowed_token_ids=allowed,
        structured=structured,
        min_tokens=body.min_tokens,
        include_stop_str_in_output=body.include_stop_str_in_output,
        skip_special_tokens=body.skip_special_tokens,
        presence_penalty=presence,
        frequency_penalty=frequency,
        logit_bias=bias,
    )
    plan = Plan(
        prompts=truncate_prompts(prompts(), body.truncate_prompt_tokens, limits.ctx_size),
        max_tokens=max_tokens,
        n=body.n,
        sampling=sampling,
        logprobs=wanted,
        echo=echo,
        as_token_ids=body.return_tokens_as_token_ids,
        ids_param=ids_param,
        top_n_param=top_n_param,
        structured_param=structured_param(body),
    )
    check_operator_limits(plan, limits)
    return plan


def checked_logprobs(
    body: GenerationRequest,
    limits: Limits,
    *,
    logprobs: bool | int | None,
    allowed: tuple[int, ...] | None,
    top_n_param: str,
    echo: bool,
    renormalize: bool,
) -> LogprobParams:
    """The wire's logprob fields, each checked once under its own name, as the engine's
    `LogprobParams` (`logprobs` is the route's field: an int on completions, a bool on chat)."""
    top_n = resolve_top_n(logprobs, body.top_logprobs, top_n_param)
    prompt_top_n = check_prompt_logprobs(body.prompt_logprobs, body.stream, limits)
    named = unique_ids(body.logprob_token_ids or ())
    check_logprobs(top_n, named, allowed, limits, top_n_param)
    return logprob_params(top_n, prompt_top_n, named, allowed, echo=echo, renormalize=renormalize)


def unique_ids(ids: Iterable[int]) -> tuple[int, ...]:
    """Ids in first-seen order without repeats (a repeated label is still one label)."""
    return tuple(dict.fromkeys(ids))


def choice_seed(seed: int | None, sample_index: int) -> int | None:
    """The seed of the `sample_index`-th sample of a prompt: `seed + i` (so n>1 differs)."""
    if seed is None:
        return None
    return (seed + sample_index) % SEED_MODULUS


def logprob_params(
    top_n: int | None,
    prompt_top_n: int | None,
    named_ids: tuple[int, ...],
    allowed_ids: tuple[int, ...] | None,
    *,
    echo: bool = False,
    renormalize: bool = False,
) -> LogprobParams:
    """Ask the engine for exactly the listing the response will show (the values checked).

    `top_n` None: no logprobs for the tokens (`prompt_top_n`: vLLM's `prompt_logprobs`, which
    needs prompt rows on its own). With `allowed_token_ids` the top N is chosen within that
    set (renormalised over it with `renormalize`, chat; the allowed ids' raw
    full-vocabulary values without, completions); `logprob_token_ids` alone replace the
    natural top N (as vLLM does) and are appended. `echo` with logprobs needs prompt rows.
    """
    if top_n is None:
        if prompt_top_n is None:
            return LogprobParams()
        return LogprobParams(prompt_logprobs=True, prompt_top_n=prompt_top_n)
    listing_from_names = allowed_ids is None and bool(named_ids)
    return LogprobParams(
        top_n=0 if listing_from_names else top_n,
        prompt_logprobs=echo or prompt_top_n is not None,
        named_ids=named_ids,
        renormalize_over=allowed_ids if renormalize else None,
        top_within=None if renormalize else allowed_ids,
        prompt_top_n=prompt_top_n,
    )


def max_new_tokens(plan: Plan, prompt_len: int, ctx_size: int, limit: int | None = None) -> int:
    """`max_tokens`, or what the context has left (at least 1, at most the operator's
    --max-tokens-limit) when the client gave none."""
    if plan.max_tokens is None:
        left = max(ctx_size - prompt_len, 1)
        return left if limit is None else min(left, limit)
    return plan.max_tokens


def engine_requests(plan: Plan, ctx_size: int, max_tokens_limit: int | None = None) -> list[Request]:
    """One engine request per choice, in choice order (prompt-major, then sample)."""
    return [
        Request(
            prompt_ids=tuple(prompt),
            sampling=replace(
                plan.sampling,
                max_tokens=max_new_tokens(plan, len(prompt), ctx_size, max_tokens_limit),
                seed=choice_seed(plan.sampling.seed, i),
            ),
            logprobs=plan.logprobs,
        )
        for prompt in plan.prompts
        for i in range(plan.n)
    ]


def check_operator_limits(plan: Plan, limits: Limits) -> None:
    """The operator's bounds on one request's work: choices, new tokens, prompt length."""
    check_sequences(plan.num_choices, limits)
    if limits.max_tokens is not None and plan.max_tokens is not None and plan.max_tokens > limits.max_tokens:
        raise ApiError(
            f"`max_tokens` is {plan.max_tokens}; the server allows at most {limits.max_tokens} "
            "(--max-tokens-limit).",
            param="max_tokens",
        )
    check_prompt_tokens(max((len(p) for p in plan.prompts), default=0), limits, plan.ids_param)
    check_answer_size(plan, limits)


def check_answer_size(plan: Plan, limits: Limits) -> None:
    """Refuse an answer estimated past --max-answer-bytes before anything runs.

    Positions are the prompt (echoed with logprobs, or with `prompt_logprobs`) and the new
    tokens of every choice; each lists its own value, the alternatives the engine is asked
    for (none when the named ids replace them) and the named ids.
    """
    asked = plan.logprobs
    per_position = 0 if asked.top_n is None else 1 + asked.top_n + len(asked.named_ids)
    per_echoed = per_position if plan.echo else 0
    per_prompt_row = 0 if asked.prompt_top_n is None else 2 + asked.prompt_top_n  # vLLM's prompt_logprobs
    positions = 0
    listed = 0  # values in the tokens' logprobs (an echoed prompt's too)
    prompt_rows = 0  # values in prompt_logprobs
    for prompt in plan.prompts:
        new = plan.max_tokens if plan.max_tokens is not None else max(limits.ctx_size - len(prompt), 1)
        positions += plan.n * (len(prompt) + new)
        listed += plan.n * (len(prompt) * per_echoed + new * per_position)
        prompt_rows += plan.n * len(prompt) * per_prompt_row
    values = listed + prompt_rows
    per_value = BYTES_PER_CHAT_VALUE if plan.ids_param == "messages" else BYTES_PER_VALUE
    estimate = listed * per_value + prompt_rows * BYTES_PER_PROMPT_VALUE
    if estimate > limits.request.max_answer_bytes:
        if asked.top_n is None:
            param = "prompt_logprobs"
        else:
            param = "logprob_token_ids" if asked.named_ids else plan.top_n_param
        raise ApiError(
            f"This answer would list {values} values over {positions} positions (about "
            f"{estimate // 2**20} MiB); the server allows about {limits.request.max_answer_bytes // 2**20} "
            "MiB (--max-answer-bytes). Ask for fewer values, positions or choices.",
            param=param,
            code="answer_too_large",
        )
