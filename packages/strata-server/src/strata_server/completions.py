"""`/v1/completions`: body -> Plan -> engine -> legacy reply (whole, or as SSE chunks).

An echoed prompt is formatted on a worker thread (`asyncio.to_thread`), as bodies are
tokenised: its rows grow with the prompt and the listing, so the event loop never formats them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import msgspec

from strata_engine.api import PromptScores, Step
from strata_engine.protocol import ChoiceStream
from strata_server.checks import (
    check_max_tokens,
    check_model,
    check_prompt_size,
    check_sequences,
    prompt_count,
)
from strata_server.context import ServerContext
from strata_server.envelope import sse_reply, whole_reply
from strata_server.formatting import ChoiceTally, LegacyBuilder, merge_legacy, prompt_logprobs
from strata_server.plan import Plan, checked_plan
from strata_server.protocol import (
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    CompletionResponse,
    PromptLogprobs,
)
from strata_server.render import completion_prompts


def completion_plan(body: CompletionRequest, ctx: ServerContext) -> Plan:
    """Check a completions body and reduce it to a Plan (every refusal is a 4xx here)."""
    check_model(body.model, ctx.served_name)
    check_max_tokens(body.max_tokens, body.echo)
    # the request's size from its wire form, before any prompt is tokenised
    sequences = prompt_count(body.prompt) * max(body.n, 1)
    check_sequences(sequences, ctx.limits)
    ctx.admission.check_size(sequences)
    check_prompt_size(body.prompt, ctx.limits.request)
    return checked_plan(
        body,
        ctx.limits,
        prompts=lambda: completion_prompts(body.prompt, ctx.tokenizer, body.add_special_tokens),
        max_tokens=body.max_tokens,
        logprobs=body.logprobs,
        ids_param="prompt",
        echo=body.echo,
    )


class CompletionChoiceState:
    """One choice in progress: turns its engine events into (text, logprobs fragment) pieces."""

    def __init__(self, plan: Plan, prompt_ids: list[int], ctx: ServerContext) -> None:
        self.plan = plan
        self.prompt_ids = prompt_ids
        self.builder = LegacyBuilder(plan, ctx.tokenizer)
        self.tally = ChoiceTally(prompt_tokens=len(prompt_ids))
        self.wants_logprobs = plan.wants_logprobs
        self.ctx = ctx
        self.prompt_logprobs: PromptLogprobs | None = None  # vLLM's, once the prompt rows came
        # the engine sends prompt rows when asked (an echo with logprobs, `prompt_logprobs`)
        self.rows_coming = plan.logprobs.prompt_logprobs

    @property
    def echo_first(self) -> bool:
        """Echo without prompt rows needs no engine event: the prompt text goes out first."""
        return self.plan.echo and not self.rows_coming

    def start(self) -> list[tuple[str, CompletionLogprobs | None]]:
        """The echoed prompt's text when `echo_first` (decoded here: call it off the loop)."""
        if self.echo_first:
            text, _ = self.builder.prompt(self.prompt_ids, None)
            return [(text, None)]
        return []

    async def take(self, event: PromptScores | Step) -> tuple[str, CompletionLogprobs | None]:
        """An event's piece; a prompt's rows are formatted on a worker thread, a step here."""
        if isinstance(event, PromptScores):
            return await asyncio.to_thread(self.on_event, event)
        return self.on_event(event)

    def on_event(self, event: PromptScores | Step) -> tuple[str, CompletionLogprobs | None]:
        self.tally.see(event)
        if isinstance(event, PromptScores):
            if self.plan.logprobs.prompt_top_n is not None:
                self.prompt_logprobs = prompt_logprobs(event, self.prompt_ids, self.plan, self.ctx.tokenizer)
            if not self.plan.echo:
                return "", None
            text, frag = self.builder.prompt(self.prompt_ids, event)
            return text, frag if self.wants_logprobs else None
        return event.text, self.builder.step(event) if self.wants_logprobs else None

    @property
    def finish_reason(self) -> str:
        return self.tally.finish_reason or "length"  # no steps at all: max_tokens 0 echo


def _choice_states(plan: Plan, ctx: ServerContext) -> list[CompletionChoiceState]:
    return [CompletionChoiceState(plan, prompt, ctx) for prompt in plan.prompts for _ in range(plan.n)]


async def _starts(states: list[CompletionChoiceState]) -> list[list[tuple[str, CompletionLogprobs | None]]]:
    """Every choice's opening pieces, decoded in one worker-thread call when any has some."""
    if not any(state.echo_first for state in states):
        return [[] for _ in states]
    return await asyncio.to_thread(lambda: [state.start() for state in states])


async def complete(
    plan: Plan, events: ChoiceStream, ctx: ServerContext, request_id: str
) -> CompletionResponse:
    """Run every choice to the end and build one reply."""
    states = _choice_states(plan, ctx)
    texts: list[list[str]] = [[] for _ in states]
    frags: list[list[CompletionLogprobs]] = [[] for _ in states]
    for i, pieces in enumerate(await _starts(states)):
        texts[i].extend(text for text, _ in pieces)
    async for index, event in events:
        text, frag = await states[index].take(event)
        texts[index].append(text)
        if frag is not None:
            frags[index].append(frag)
    choices = [
        CompletionChoice(
            index=i,
            text="".join(texts[i]),
            logprobs=merge_legacy(frags[i]) if state.wants_logprobs else None,
            finish_reason=state.finish_reason,
            prompt_logprobs=msgspec.UNSET if state.prompt_logprobs is None else state.prompt_logprobs,
        )
        for i, state in enumerate(states)
    ]
    tallies = [s.tally for s in states]
    return whole_reply(CompletionResponse, choices, plan, tallies, ctx, request_id)


def stream_completion(
    plan: Plan,
    events: ChoiceStream,
    ctx: ServerContext,
    request_id: str,
    include_usage: bool,
) -> AsyncIterator[bytes]:
    """SSE chunks: each carries its tokens' text and logprobs; usage last if asked; [DONE]."""
    states = _choice_states(plan, ctx)
    choices = _chunk_choices(states, events)
    tallies = [s.tally for s in states]
    return sse_reply(
        CompletionResponse, choices, plan, tallies, ctx, request_id, include_usage, _holds_prompt_rows
    )


def _holds_prompt_rows(choice: CompletionChoice) -> bool:
    """An echoed prompt's chunk with its rows (a generated token's chunk has one position)."""
    return choice.logprobs is not None and len(choice.logprobs.tokens) > 1


async def _chunk_choices(
    states: list[CompletionChoiceState], events: ChoiceStream
) -> AsyncIterator[CompletionChoice]:
    """Echoed prompts first, then each event's piece; a finish for any choice left open."""
    for i, pieces in enumerate(await _starts(states)):
        for text, frag in pieces:
            yield CompletionChoice(index=i, text=text, logprobs=frag, finish_reason=None)
    finished = [False] * len(states)
    async for index, event in events:
        text, frag = await states[index].take(event)
        finish = event.finish_reason if isinstance(event, Step) else None
        finished[index] = finished[index] or finish is not None
        yield CompletionChoice(index=index, text=text, logprobs=frag, finish_reason=finish)
    for i, state in enumerate(states):
        if not finished[i]:
            yield CompletionChoice(index=i, text="", logprobs=None, finish_reason=state.finish_reason)
