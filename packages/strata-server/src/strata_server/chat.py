"""`/v1/chat/completions`: messages -> template -> Plan -> engine -> chat reply or SSE chunks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from strata_engine.api import PromptScores, Step
from strata_engine.protocol import ChoiceStream
from strata_server.checks import check_max_tokens, check_messages_size, check_model
from strata_server.context import ServerContext
from strata_server.envelope import sse_reply, whole_reply
from strata_server.errors import ApiError
from strata_server.formatting import ChoiceTally, chat_entry, prompt_logprobs
from strata_server.plan import Plan, checked_plan
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
    PromptLogprobs,
)
from strata_server.render import chat_options


def chat_plan(body: ChatCompletionRequest, ctx: ServerContext) -> Plan:
    """Check a chat body and reduce it to a Plan (every refusal is a 4xx here)."""
    check_model(body.model, ctx.served_name)
    if body.echo:  # vLLM's chat echo (the last message's text before the reply): not implemented
        raise ApiError(
            "`echo` is not supported on chat; send the rendered prompt (/tokenize with `messages`) "
            "to /v1/completions with `echo`.",
            param="echo",
            code="unsupported",
        )
    if body.allowed_token_ids is not None and body.logprob_token_ids:
        raise ApiError(
            "On chat, `logprob_token_ids` cannot be combined with `allowed_token_ids` "
            "(chat values are renormalised over the allowed ids); use /v1/completions.",
            param="logprob_token_ids",
        )
    check_messages_size(body.messages, ctx.limits.request)
    options = chat_options(
        add_generation_prompt=body.add_generation_prompt,
        add_special=body.add_special_tokens,
        chat_template=body.chat_template,
        chat_template_kwargs=body.chat_template_kwargs,
        trusted=ctx.settings.trust_request_chat_template,
        documents=body.documents,
    )
    max_tokens = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    check_max_tokens(max_tokens, echo=False)
    return checked_plan(
        body,
        ctx.limits,
        prompts=lambda: [ctx.render_chat(body.messages, options)],
        max_tokens=max_tokens,
        logprobs=body.logprobs,
        ids_param="messages",
        renormalize=body.allowed_token_ids is not None,
    )


def _entry(plan: Plan, ctx: ServerContext, step: Step) -> ChatLogprobEntry | None:
    if not plan.wants_logprobs or step.logprobs is None:
        return None
    return chat_entry(step.logprobs, plan, ctx.tokenizer)


def _tallies(plan: Plan) -> list[ChoiceTally]:
    return [ChoiceTally(prompt_tokens=len(plan.prompts[0])) for _ in range(plan.num_choices)]


async def chat_complete(
    plan: Plan, events: ChoiceStream, ctx: ServerContext, request_id: str
) -> ChatCompletionResponse:
    """Run every choice to the end and build one chat reply."""
    tallies = _tallies(plan)
    entries: list[list[ChatLogprobEntry]] = [[] for _ in tallies]
    prompt_rows: PromptLogprobs | None = None
    async for index, event in events:
        tallies[index].see(event)
        if isinstance(event, PromptScores):
            if index == 0 and plan.logprobs.prompt_top_n is not None:  # every choice has the same prompt
                # rows that grow with the prompt: formatted on a worker thread, never on the loop
                prompt_rows = await asyncio.to_thread(
                    prompt_logprobs, event, plan.prompts[0], plan, ctx.tokenizer
                )
        elif (entry := _entry(plan, ctx, event)) is not None:
            entries[index].append(entry)
    choices = [
        ChatChoice(
            index=i,
            message=ChatMessageOut(role="assistant", content="".join(tally.text)),
            logprobs=ChatLogprobs(content=entries[i]) if plan.wants_logprobs else None,
            finish_reason=tally.finish_reason or "length",
        )
        for i, tally in enumerate(tallies)
    ]
    reply = whole_reply(ChatCompletionResponse, choices, plan, tallies, ctx, request_id)
    if prompt_rows is not None:
        reply.prompt_logprobs = prompt_rows
    return reply


def stream_chat(
    plan: Plan,
    events: ChoiceStream,
    ctx: ServerContext,
    request_id: str,
    include_usage: bool,
) -> AsyncIterator[bytes]:
    """SSE chunks: a role chunk per choice, then one per token with its logprobs; [DONE]."""
    tallies = _tallies(plan)
    choices = _chunk_choices(plan, events, ctx, tallies)
    return sse_reply(ChatCompletionChunk, choices, plan, tallies, ctx, request_id, include_usage)


async def _chunk_choices(
    plan: Plan, events: ChoiceStream, ctx: ServerContext, tallies: list[ChoiceTally]
) -> AsyncIterator[ChatChunkChoice]:
    for i in range(plan.num_choices):
        yield ChatChunkChoice(i, ChatDelta(role="assistant", content=""), None, None)
    async for index, event in events:
        tallies[index].see(event)
        if not isinstance(event, Step):
            continue
        entry = _entry(plan, ctx, event)
        logprobs = ChatLogprobs(content=[entry]) if entry is not None else None
        yield ChatChunkChoice(index, ChatDelta(content=event.text), logprobs, event.finish_reason)
