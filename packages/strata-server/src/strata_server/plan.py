"""From a decoded generation body to a checked `Plan`, and from a Plan to engine requests.

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
    check_operator_limits,
    check_penalties,
    check_prompt_logprobs,
    check_sampling,
    normalize_stop,
    refuse_not_implemented,
    resolve_top_n,
    truncate_prompts,
)
from strata_server.protocol import GenerationRequest
from strata_server.structured_output import structured_param, structured_spec

SEED_MODULUS = 2**63  # choice seeds are (seed + i) mod 2**63, so any accepted seed is valid


@dataclass(frozen=True)
class Plan:
    """A checked request: prompts as ids, the engine's `SamplingParams` and the wire-only fields.

    `sampling` is every choice's sampling, except `max_tokens` and `seed`, which
    `engine_requests` sets per choice (`max_tokens` None: what the context has left; choice
    i draws with seed + i). Penalties and `logit_bias` change the draw only; reported values
    stay raw. The logprob fields are the wire's forms, which the responses render;
    `logprob_params` turns them into the engine's `LogprobParams`. `top_n` None means no
    logprobs at all. With `allowed_token_ids` and `renormalize` (chat) the listed values are
    renormalised over the set, without it (completions) they are the allowed ids' raw
    full-vocabulary values. `named_ids` are vLLM's `logprob_token_ids`: raw values
    reported at every position.
    """

    prompts: list[list[int]]
    max_tokens: int | None
    n: int = 1
    sampling: SamplingParams = field(default_factory=SamplingParams)
    top_n: int | None = None
    prompt_top_n: int | None = None  # vLLM's `prompt_logprobs` (None: not asked)
    named_ids: tuple[int, ...] = ()
    echo: bool = False
    renormalize: bool = False
    as_token_ids: bool = False
    ids_param: str = "prompt"
    top_n_param: str = "logprobs"
    structured_param: str = "response_format"  # the wire field of `sampling.structured`

    @property
    def num_choices(self) -> int:
        return len(self.prompts) * self.n

    @property
    def allowed_ids(self) -> tuple[int, ...] | None:
        """`allowed_token_ids`: they restrict the draw and shape the logprob listing."""
        return self.sampling.allowed_token_ids


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

    `prompts` is called after the sampling checks, so a bad knob is reported before any
    prompt is rendered or tokenised.
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
    bias = check_logit_bias(body.logit_bias)
    top_n_param = "top_logprobs" if logprobs is True else "logprobs"
    structured = structured_spec(
        body, limits.request
    )  # a bad schema/regex/grammar is a 400 before the prompt
    plan = Plan(
        prompts=truncate_prompts(prompts(), body.truncate_prompt_tokens, limits.ctx_size),
        max_tokens=max_tokens,
        n=body.n,
        sampling=SamplingParams(
            temperature=temperature,
            top_p=top_p,
            top_k=top_k,
            seed=body.seed,
            stop=normalize_stop(body.stop, limits.request),
            stop_token_ids=tuple(body.stop_token_ids or ()),
            ignore_eos=body.ignore_eos,
            allowed_token_ids=None if body.allowed_token_ids is None else unique_ids(body.allowed_token_ids),
            structured=structured,
            min_tokens=body.min_tokens,
            include_stop_str_in_output=body.include_stop_str_in_output,
            skip_special_tokens=body.skip_special_tokens,
            presence_penalty=presence,
            frequency_penalty=frequency,
            logit_bias=bias,
        ),
        top_n=resolve_top_n(logprobs, body.top_logprobs, top_n_param),
        prompt_top_n=check_prompt_logprobs(body.prompt_logprobs, body.stream, limits),
        named_ids=unique_ids(body.logprob_token_ids or ()),
        echo=echo,
        renormalize=renormalize,
        as_token_ids=body.return_tokens_as_token_ids,
        ids_param=ids_param,
        top_n_param=top_n_param,
        structured_param=structured_param(body),
    )
    check_logprobs(plan, limits)
    check_operator_limits(plan, limits)
    return plan


def unique_ids(ids: Iterable[int]) -> tuple[int, ...]:
    """Ids in first-seen order without repeats (a repeated label is still one label)."""
    return tuple(dict.fromkeys(ids))


def choice_seed(seed: int | None, sample_index: int) -> int | None:
    """The seed of the `sample_index`-th sample of a prompt: `seed + i` (so n>1 differs)."""
    if seed is None:
        return None
    return (seed + sample_index) % SEED_MODULUS


def logprob_params(plan: Plan) -> LogprobParams:
    """Ask the engine for exactly the listing the response will show.

    With `allowed_token_ids` the top N is chosen within that set (renormalised on chat);
    `logprob_token_ids` alone replace the natural top N (as vLLM does) and are appended.
    """
    if plan.top_n is None:
        if plan.prompt_top_n is None:
            return LogprobParams()
        return LogprobParams(prompt_logprobs=True, prompt_top_n=plan.prompt_top_n)
    listing_from_names = plan.allowed_ids is None and bool(plan.named_ids)
    return LogprobParams(
        top_n=0 if listing_from_names else plan.top_n,
        prompt_logprobs=plan.echo or plan.prompt_top_n is not None,
        named_ids=plan.named_ids,
        renormalize_over=plan.allowed_ids if plan.renormalize else None,
        top_within=None if plan.renormalize else plan.allowed_ids,
        prompt_top_n=plan.prompt_top_n,
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
    lp = logprob_params(plan)
    return [
        Request(
            prompt_ids=tuple(prompt),
            sampling=replace(
                plan.sampling,
                max_tokens=max_new_tokens(plan, len(prompt), ctx_size, max_tokens_limit),
                seed=choice_seed(plan.sampling.seed, i),
            ),
            logprobs=lp,
        )
        for prompt in plan.prompts
        for i in range(plan.n)
    ]
