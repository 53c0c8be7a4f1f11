"""`/v1/chat/completions`: messages -> template -> Plan -> engine -> chat reply or SSE chunks."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from strata_engine.api import Request, Step
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
    ChatChoice,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatDelta,
    ChatLogprobEntry,
    ChatLogprobs,
    ChatMessageOut,
)
from strata_server.render import chat_prompt_ids
from strata_server.responses import SSE_DONE, ChoiceTally, chat_entry, sse, usage

RESERVED_TEMPLATE_KWARGS = frozenset({"messages", "add_generation_prompt"})


def chat_plan(body: ChatCompletionRequest, ctx: ServerContext) -> Plan:
    """Check a chat body and reduce it to a Plan (every refusal is a 4xx here)."""
    check_model(body.model, ctx.served_name)
    if body.response_format is not None and body.response_format.get("type") != "text":
        raise ApiError(
            "`response_format` (structured output) is not supported yet.",
            param="response_format",
            code="unsupported",
        )
    refuse_unsupported(
        tools=body.tools,
        presence_penalty=body.presence_penalty,
        frequency_penalty=body.frequency_penalty,
        logit_bias=body.logit_bias,
    )
    if body.allowed_token_ids is not None and body.logprob_token_ids:
        raise ApiError(
            "On chat, `logprob_token_ids` cannot be combined with `allowed_token_ids` "
            "(chat values are renormalised over the allowed ids); use /v1/completions.",
            param="logprob_token_ids",
        )
    template_kwargs = body.chat_template_kwargs or {}
    if reserved := RESERVED_TEMPLATE_KWARGS & template_kwargs.keys():
        raise ApiError(
            f"`chat_template_kwargs` may not set {sorted(reserved)}.",
            param="chat_template_kwargs",
        )
    max_tokens = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    check_max_tokens(max_tokens, echo=False)
    temperature, top_p, top_k = check_sampling(
        n=body.n,
        temperature=body.temperature,
        top_p=body.top_p,
        top_k=body.top_k,
        seed=body.seed,
        vocab_size=ctx.limits.vocab_size,
    )
    prompt = chat_prompt_ids(
        body.messages,
        ctx.engine.chat_template,
        ctx.tokenizer,
        add_generation_prompt=body.add_generation_prompt,
        template_kwargs=template_kwargs,
    )
    top_n = resolve_top_n(body.logprobs, body.top_logprobs, "top_logprobs")
    plan = Plan(
        prompts=[prompt],
        max_tokens=max_tokens,
        n=body.n,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        seed=body.seed,
        stop=normalize_stop(body.stop),
        stop_token_ids=tuple(body.stop_token_ids or ()),
        ignore_eos=body.ignore_eos,
        top_n=top_n,
        allowed_ids=None if body.allowed_token_ids is None else unique_ids(body.allowed_token_ids),
        named_ids=unique_ids(body.logprob_token_ids or ()),
        renormalize=body.allowed_token_ids is not None,
        as_token_ids=body.return_tokens_as_token_ids,
        ids_param="messages",
        top_n_param="top_logprobs",
    )
    check_logprobs(plan, ctx.limits)
    return plan


def _entry(plan: Plan, ctx: ServerContext, step: Step) -> ChatLogprobEntry | None:
    if plan.top_n is None or step.logprobs is None:
        return None
    return chat_entry(step.logprobs, plan, ctx.tokenizer)


async def chat_complete(
    plan: Plan, requests: list[Request], ctx: ServerContext, request_id: str
) -> ChatCompletionResponse:
    """Run every choice to the end and build one chat reply."""
    tallies = [ChoiceTally(prompt_tokens=len(plan.prompts[0])) for _ in range(plan.num_choices)]
    entries: list[list[ChatLogprobEntry]] = [[] for _ in tallies]
    async for index, event in choice_events(ctx.engine, requests):
        tallies[index].see(event)
        if isinstance(event, Step) and (entry := _entry(plan, ctx, event)) is not None:
            entries[index].append(entry)
    reply_usage = usage(plan, tallies)
    ctx.metrics.add_tokens(reply_usage.prompt_tokens, reply_usage.completion_tokens)
    return ChatCompletionResponse(
        id=request_id,
        created=int(time.time()),
        model=ctx.served_name,
        choices=[
            ChatChoice(
                index=i,
                message=ChatMessageOut(role="assistant", content="".join(tally.text)),
                logprobs=ChatLogprobs(content=entries[i]) if plan.top_n is not None else None,
                finish_reason=tally.finish_reason or "length",
            )
            for i, tally in enumerate(tallies)
        ],
        usage=reply_usage,
    )


async def stream_chat(
    plan: Plan,
    requests: list[Request],
    ctx: ServerContext,
    request_id: str,
    include_usage: bool,
) -> AsyncIterator[bytes]:
    """SSE chunks: a role chunk per choice, then one per token with its logprobs; [DONE]."""
    created = int(time.time())
    tallies = [ChoiceTally(prompt_tokens=len(plan.prompts[0])) for _ in range(plan.num_choices)]

    def chunk(choice: ChatChunkChoice) -> bytes:
        return sse(
            ChatCompletionChunk(id=request_id, created=created, model=ctx.served_name, choices=[choice])
        )

    for i in range(plan.num_choices):
        yield chunk(ChatChunkChoice(i, ChatDelta(role="assistant", content=""), None, None))
    async for index, event in choice_events(ctx.engine, requests):
        tallies[index].see(event)
        if not isinstance(event, Step):
            continue
        entry = _entry(plan, ctx, event)
        logprobs = ChatLogprobs(content=[entry]) if entry is not None else None
        yield chunk(ChatChunkChoice(index, ChatDelta(content=event.text), logprobs, event.finish_reason))
    reply_usage = usage(plan, tallies)
    ctx.metrics.add_tokens(reply_usage.prompt_tokens, reply_usage.completion_tokens)
    if include_usage:
        yield sse(
            ChatCompletionChunk(
                id=request_id,
                created=created,
                model=ctx.served_name,
                choices=[],
                usage=reply_usage,
            )
        )
    yield SSE_DONE
