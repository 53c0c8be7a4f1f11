"""What a request asks the engine for, once the route's wire form is gone.

Both routes reduce their body to a `Plan`; `checks` validates a Plan and `engine_requests`
turns it into one engine `Request` per returned choice. Keeping this route-independent is
what lets one set of rules (`check_logprobs`) serve completions and chat alike.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from strata_engine.api import LogprobParams, Request, SamplingParams

SEED_MODULUS = 2**63  # choice seeds are (seed + i) mod 2**63, so any accepted seed is valid


@dataclass(frozen=True)
class Plan:
    """A validated-to-be request: prompts as ids plus generation and logprob options.

    `top_n` None means no logprobs at all. `allowed_ids` restricts sampling; with
    `renormalize` (chat) its values are renormalised over the set, without it (completions)
    the listing shows the allowed ids' raw full-vocabulary values. `named_ids` are
    vLLM's `logprob_token_ids`: raw values reported at every position.
    """

    prompts: list[list[int]]
    max_tokens: int | None
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    top_n: int | None = None
    allowed_ids: tuple[int, ...] | None = None
    named_ids: tuple[int, ...] = ()
    echo: bool = False
    renormalize: bool = False
    as_token_ids: bool = False
    ids_param: str = "prompt"
    top_n_param: str = "logprobs"

    @property
    def num_choices(self) -> int:
        return len(self.prompts) * self.n


def unique_ids(ids: Iterable[int]) -> tuple[int, ...]:
    """Ids in first-seen order without repeats (a repeated label is still one label)."""
    return tuple(dict.fromkeys(ids))


def choice_seed(seed: int | None, sample_index: int) -> int | None:
    """The seed of the `sample_index`-th sample of a prompt: `seed + i` (so n>1 differs)."""
    if seed is None:
        return None
    return (seed + sample_index) % SEED_MODULUS


def logprob_params(plan: Plan) -> LogprobParams:
    """Ask the engine for exactly the values the response will list.

    With `allowed_ids` or `named_ids` the listing comes from the named values, so the
    engine's natural top-N is only needed when neither is given.
    """
    if plan.top_n is None:
        return LogprobParams()
    listing_from_names = plan.allowed_ids is not None or bool(plan.named_ids)
    named: tuple[int, ...] = ()
    if plan.allowed_ids is not None and not plan.renormalize:
        named = plan.allowed_ids
    named = unique_ids(named + plan.named_ids)
    return LogprobParams(
        top_n=0 if listing_from_names else plan.top_n,
        prompt_logprobs=plan.echo,
        named_ids=named,
        renormalize_over=plan.allowed_ids if plan.renormalize else None,
    )


def max_new_tokens(plan: Plan, prompt_len: int, ctx_size: int) -> int:
    """`max_tokens`, or everything the context has left when the client gave none."""
    if plan.max_tokens is None:
        return max(ctx_size - prompt_len, 0)
    return plan.max_tokens


def engine_requests(plan: Plan, ctx_size: int, request_id: str) -> list[Request]:
    """One engine request per choice, in choice order (prompt-major, then sample)."""
    lp = logprob_params(plan)
    requests = []
    for p, prompt in enumerate(plan.prompts):
        for i in range(plan.n):
            sampling = SamplingParams(
                max_tokens=max_new_tokens(plan, len(prompt), ctx_size),
                temperature=plan.temperature,
                top_p=plan.top_p,
                top_k=plan.top_k,
                seed=choice_seed(plan.seed, i),
                stop=plan.stop,
                stop_token_ids=plan.stop_token_ids,
                ignore_eos=plan.ignore_eos,
                allowed_token_ids=plan.allowed_ids,
            )
            requests.append(
                Request(
                    prompt_ids=tuple(prompt),
                    sampling=sampling,
                    logprobs=lp,
                    request_id=f"{request_id}-{p * plan.n + i}",
                )
            )
    return requests
