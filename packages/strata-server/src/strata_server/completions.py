"""`/v1/completions`: body -> Plan -> engine -> legacy reply (whole, or as SSE chunks)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from strata_engine.api import PromptScores, Request, Step
from strata_server.checks import (
    check_logprobs,
    check_max_tokens,
    check_model,
    check_sampling,
    normalize_stop,
    refuse_unsupported,
    resolve_top_n,
)
from strata_server.context import ServerContext
from strata_server.errors import ApiError
from strata_server.generation import choice_events
from strata_server.plan import Plan, unique_ids
from strata_server.protocol import (
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    CompletionResponse,
)
from strata_server.render import completion_prompts
from strata_server.responses import (
    SSE_DONE,
    ChoiceTally,
    LegacyBuilder,
    merge_legacy,
    sse,
    usage,
)


def completion_plan(body: CompletionRequest, ctx: ServerContext) -> Plan:
    """Check a completions body and reduce it to a Plan (every refusal is a 4xx here)."""
    check_model(body.model, ctx.served_name)
    refuse_unsupported(
        presence_penalty=body.presence_penalty,
        frequency_penalty=body.frequency_penalty,
        logit_bias=body.logit_bias,
        suffix=body.suffix,
    )
    if body.best_of is not None and body.best_of != body.n:
        raise ApiError("`best_of` other than `n` is not supported.", param="best_of")
    check_max_tokens(body.max_tokens, body.echo)
    temperature, top_p, top_k = check_sampling(
        n=body.n,
        temperature=body.temperature,
        top_p=body.top_p,
        top_k=body.top_k,
        seed=body.seed,
        vocab_size=ctx.limits.vocab_size,
    )
    plan = Plan(
        prompts=completion_prompts(body.prompt, ctx.tokenizer),
        max_tokens=body.max_tokens,
        n=body.n,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        seed=body.seed,
        stop=normalize_stop(body.stop),
        stop_token_ids=tuple(body.stop_token_ids or ()),
        ignore_eos=body.ignore_eos,
        top_n=resolve_top_n(body.logprobs, body.top_logprobs, "logprobs"),
        allowed_ids=None if body.allowed_token_ids is None else unique_ids(body.allowed_token_ids),
        named_ids=unique_ids(body.logprob_token_ids or ()),
        echo=body.echo,
        as_token_ids=body.return_tokens_as_token_ids,
        ids_param="prompt",
        top_n_param="top_logprobs" if body.logprobs is True else "logprobs",
    )
    check_logprobs(plan, ctx.limits)
    return plan


class CompletionChoiceState:
    """One choice in progress: turns its engine events into (text, logprobs fragment) pieces."""

    def __init__(self, plan: Plan, prompt_ids: list[int], ctx: ServerContext) -> None:
        self.plan = plan
        self.prompt_ids = prompt_ids
        self.builder = LegacyBuilder(plan, ctx.tokenizer)
        self.tally = ChoiceTally(prompt_tokens=len(prompt_ids))
        self.wants_logprobs = plan.top_n is not None

    def start(self) -> list[tuple[str, CompletionLogprobs | None]]:
        """Echo without logprobs needs no engine event: the prompt text goes out first."""
        if self.plan.echo and not self.wants_logprobs:
            text, _ = self.builder.prompt(self.prompt_ids, None)
            return [(text, None)]
        return []

    def on_event(self, event: PromptScores | Step) -> tuple[str, CompletionLogprobs | None]:
        self.tally.see(event)
        if isinstance(event, PromptScores):
            return self.builder.prompt(self.prompt_ids, event)
        frag = self.builder.step(event)
        return event.text, frag if self.wants_logprobs else None

    @property
    def finish_reason(self) -> str:
        return self.tally.finish_reason or "length"  # no steps at all: max_tokens 0 echo


def _choice_states(plan: Plan, ctx: ServerContext) -> list[CompletionChoiceState]:
    return [CompletionChoiceState(plan, prompt, ctx) for prompt in plan.prompts for _ in range(plan.n)]


async def complete(
    plan: Plan, requests: list[Request], ctx: ServerContext, request_id: str
) -> CompletionResponse:
    """Run every choice to the end and build one reply."""
    states = _choice_states(plan, ctx)
    texts: list[list[str]] = [[] for _ in states]
    frags: list[list[CompletionLogprobs]] = [[] for _ in states]
    for i, state in enumerate(states):
        for text, _ in state.start():
            texts[i].append(text)
    async for index, event in choice_events(ctx.engine, requests):
        text, frag = states[index].on_event(event)
        texts[index].append(text)
        if frag is not None:
            frags[index].append(frag)
    tallies = [s.tally for s in states]
    reply_usage = usage(plan, tallies)
    ctx.metrics.add_tokens(reply_usage.prompt_tokens, reply_usage.completion_tokens)
    return CompletionResponse(
        id=request_id,
        created=int(time.time()),
        model=ctx.served_name,
        choices=[
            CompletionChoice(
                index=i,
                text="".join(texts[i]),
                logprobs=merge_legacy(frags[i]) if state.wants_logprobs else None,
                finish_reason=state.finish_reason,
            )
            for i, state in enumerate(states)
        ],
        usage=reply_usage,
    )


async def stream_completion(
    plan: Plan,
    requests: list[Request],
    ctx: ServerContext,
    request_id: str,
    include_usage: bool,
) -> AsyncIterator[bytes]:
    """SSE chunks: each carries its tokens' text and logprobs; usage last if asked; [DONE]."""
    created = int(time.time())
    states = _choice_states(plan, ctx)

    def chunk(index: int, text: str, frag: CompletionLogprobs | None, finish: str | None) -> bytes:
        return sse(
            CompletionResponse(
                id=request_id,
                created=created,
                model=ctx.served_name,
                choices=[CompletionChoice(index=index, text=text, logprobs=frag, finish_reason=finish)],
                usage=None,
            )
        )

    for i, state in enumerate(states):
        for text, frag in state.start():
            yield chunk(i, text, frag, None)
    finished = [False] * len(states)
    async for index, event in choice_events(ctx.engine, requests):
        text, frag = states[index].on_event(event)
        finish = event.finish_reason if isinstance(event, Step) else None
        finished[index] = finished[index] or finish is not None
        yield chunk(index, text, frag, finish)
    for i, state in enumerate(states):
        if not finished[i]:
            yield chunk(i, "", None, state.finish_reason)
    reply_usage = usage(plan, [s.tally for s in states])
    ctx.metrics.add_tokens(reply_usage.prompt_tokens, reply_usage.completion_tokens)
    if include_usage:
        yield sse(
            CompletionResponse(
                id=request_id,
                created=created,
                model=ctx.served_name,
                choices=[],
                usage=reply_usage,
            )
        )
    yield SSE_DONE
