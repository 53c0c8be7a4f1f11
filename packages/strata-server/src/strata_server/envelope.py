"""The envelope both generation routes share around their choices.

Every reply and chunk carries the same id, created time and model name; usage is counted
into the metrics once per request; a stream ends with the optional usage chunk and [DONE].
The routes only say how engine events become their own choice objects.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, TypeVar

from strata_server.context import ServerContext
from strata_server.formatting import SSE_DONE, ChoiceTally, sse, usage
from strata_server.plan import Plan
from strata_server.protocol import Usage
from strata_server.request_log import current_record

ReplyT = TypeVar("ReplyT")


def counted_usage(plan: Plan, tallies: Sequence[ChoiceTally], ctx: ServerContext) -> Usage:
    """The reply's usage, added to the token counters and the request's log record as it is made."""
    reply_usage = usage(plan, tallies)
    record_usage(reply_usage, ctx)
    ctx.metrics.observe_reply(
        reply_usage.prompt_tokens,
        reply_usage.completion_tokens,
        plan.n,
        plan.max_tokens,
        (tally.finish_reason or "length" for tally in tallies),
    )
    return reply_usage


def record_usage(reply_usage: Usage, ctx: ServerContext) -> None:
    """Add a reply's usage to the token counters and the request's log record (any route)."""
    details = reply_usage.prompt_tokens_details
    cached = details.cached_tokens if details is not None else 0
    ctx.metrics.add_tokens(reply_usage.prompt_tokens, reply_usage.completion_tokens, cached)
    record = current_record()
    if record is not None:
        record.prompt_tokens = reply_usage.prompt_tokens
        record.completion_tokens = reply_usage.completion_tokens
        record.cached_tokens = cached


def whole_reply(
    reply_type: Callable[..., ReplyT],
    choices: list[Any],
    plan: Plan,
    tallies: Sequence[ChoiceTally],
    ctx: ServerContext,
    request_id: str,
) -> ReplyT:
    """A non-streamed reply holding every finished choice.

    `reply_type` is a reply struct taking `id, created, model, choices, usage, system_fingerprint`.
    """
    return reply_type(
        id=request_id,
        created=int(time.time()),
        model=ctx.served_name,
        choices=choices,
        usage=counted_usage(plan, tallies, ctx),
        system_fingerprint=ctx.system_fingerprint,
    )


async def sse_reply(
    chunk_type: Callable[..., Any],
    choices: AsyncIterator[Any],
    plan: Plan,
    tallies: Sequence[ChoiceTally],
    ctx: ServerContext,
    request_id: str,
    include_usage: bool,
    off_loop: Callable[[Any], bool] | None = None,
) -> AsyncIterator[bytes]:
    """SSE frames: one chunk per choice delta, then usage if asked, then [DONE].

    `tallies` must be the ones `choices` updates, so usage is read once they are exhausted.
    A chunk `off_loop` picks (one that grows with the request, as an echoed prompt's rows)
    is encoded on a worker thread; a token's chunk is small and encoded here.
    """
    created = int(time.time())

    def frame(listed: list[Any], totals: Usage | None) -> bytes:
        return sse(
            chunk_type(
                id=request_id,
                created=created,
                model=ctx.served_name,
                choices=listed,
                usage=totals,
                system_fingerprint=ctx.system_fingerprint,
            )
        )

    async for choice in choices:
        if off_loop is not None and off_loop(choice):
            yield await asyncio.to_thread(frame, [choice], None)
        else:
            yield frame([choice], None)
    reply_usage = counted_usage(plan, tallies, ctx)
    if include_usage:
        yield frame([], reply_usage)
    yield SSE_DONE
