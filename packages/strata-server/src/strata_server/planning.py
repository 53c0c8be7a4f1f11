"""From a decoded generation body to a checked `Plan`: the steps both routes share.

Each route first refuses what only it knows about (its own fields, its `max_tokens` form),
then hands its prompts here; the sampling, stop and logprob fields are read one way.
"""

from __future__ import annotations

from collections.abc import Callable

from strata_server.checks import check_logprobs, check_sampling, normalize_stop, resolve_top_n
from strata_server.context import ServerContext
from strata_server.plan import Plan, unique_ids
from strata_server.protocol import GenerationRequest


def checked_plan(
    body: GenerationRequest,
    ctx: ServerContext,
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
    temperature, top_p, top_k = check_sampling(
        n=body.n,
        temperature=body.temperature,
        top_p=body.top_p,
        top_k=body.top_k,
        seed=body.seed,
        vocab_size=ctx.limits.vocab_size,
    )
    top_n_param = "top_logprobs" if logprobs is True else "logprobs"
    plan = Plan(
        prompts=prompts(),
        max_tokens=max_tokens,
        n=body.n,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        seed=body.seed,
        stop=normalize_stop(body.stop),
        stop_token_ids=tuple(body.stop_token_ids or ()),
        ignore_eos=body.ignore_eos,
        top_n=resolve_top_n(logprobs, body.top_logprobs, top_n_param),
        allowed_ids=None if body.allowed_token_ids is None else unique_ids(body.allowed_token_ids),
        named_ids=unique_ids(body.logprob_token_ids or ()),
        echo=echo,
        renormalize=renormalize,
        as_token_ids=body.return_tokens_as_token_ids,
        ids_param=ids_param,
        top_n_param=top_n_param,
    )
    check_logprobs(plan, ctx.limits)
    return plan
