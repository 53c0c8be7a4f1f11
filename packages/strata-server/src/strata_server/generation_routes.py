"""The routes that run the model: `/v1/completions`, `/v1/chat/completions`, `/v1/score_candidates`.

Each reads the raw body and hands it to a worker thread, which decodes it strictly
(`protocol.decode_request`), checks it and builds the engine requests; the requests are then
queued within the admission bound and answered through `replies` (one JSON body or SSE).
Completions and chat differ only in their `GenerationRoute` (the body type, the plan, the
id prefix and the two ways to answer), so they share one path, `generate`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from litestar import Request, Response, post
from litestar.di import NamedDependency
from litestar.response import Stream

from strata_engine.api import Request as EngineRequest
from strata_engine.api import RequestError
from strata_engine.protocol import ChoiceStream
from strata_server.candidates import CandidatePlan, candidate_plan, score_reply
from strata_server.chat import chat_complete, chat_plan, stream_chat
from strata_server.completions import complete, completion_plan, stream_completion
from strata_server.context import ServerContext, new_request_id
from strata_server.errors import ApiError, engine_refusal
from strata_server.openapi import body_of
from strata_server.plan import Plan, engine_requests
from strata_server.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    ScoreCandidatesRequest,
    decode_request,
)
from strata_server.replies import event_stream, whole_reply
from strata_server.request_log import MAX_ID_CHARS, current_record, sane_request_id

Body = TypeVar("Body", CompletionRequest, ChatCompletionRequest)


@dataclass(frozen=True)
class GenerationRoute(Generic[Body]):
    """What one generation route is made of; everything else is `generate`'s."""

    body: type[Body]
    to_plan: Callable[[Body, ServerContext], Plan]
    id_prefix: str
    stream: Callable[[Plan, ChoiceStream, ServerContext, str, bool], AsyncIterator[bytes]]
    whole: Callable[[Plan, ChoiceStream, ServerContext, str], Awaitable[Any]]


COMPLETIONS = GenerationRoute(CompletionRequest, completion_plan, "cmpl", stream_completion, complete)
CHAT = GenerationRoute(ChatCompletionRequest, chat_plan, "chatcmpl", stream_chat, chat_complete)


def arrived() -> float:
    """When the request arrived (monotonic), so its deadline counts body reading and checks too."""
    record = current_record()
    if record is None:
        return time.monotonic()
    return time.monotonic() - (time.perf_counter() - record.started)


def reply_id(prefix: str) -> str:
    """The reply's id: the prefix and the request's id (`X-Request-Id`, or one of our own)."""
    record = current_record()
    return f"{prefix}-{record.request_id}" if record else new_request_id(prefix)


def prepared(
    raw: bytes, route: GenerationRoute[Body], ctx: ServerContext
) -> tuple[Body, Plan, list[EngineRequest]]:
    """Decode, check, tokenize or render, and engine-check a generation body.

    Runs on a worker thread (`asyncio.to_thread`): this is the work that grows with the
    request's size (prompts, templates, grammars), so the event loop never does it.
    """
    body = decode_request(raw, route.body)
    plan = route.to_plan(body, ctx)
    requests = engine_requests(plan, ctx.limits.ctx_size, ctx.settings.max_tokens_limit)
    ctx.check(requests, plan.ids_param, plan.structured_param)
    return body, plan, requests


def take_request_id(given: str | None) -> None:
    """vLLM's `request_id` field: the id of this request, as X-Request-Id is."""
    if given is None:
        return
    sane = sane_request_id(given)
    if sane is None:
        raise ApiError(
            f"`request_id` must be printable ASCII, 1 to {MAX_ID_CHARS} characters.",
            param="request_id",
        )
    record = current_record()
    if record is not None:
        record.request_id = sane


async def generate(request: Request, ctx: ServerContext, route: GenerationRoute[Body]) -> Response | Stream:
    """Check the body off the loop, submit its requests (refusals are plain 4xx), then reply
    as SSE or one JSON body."""
    ctx.admission.check_room()
    raw = await request.body()
    body, plan, requests = await asyncio.to_thread(prepared, raw, route, ctx)
    take_request_id(body.request_id)
    events = ctx.submit(requests, plan.ids_param, started=arrived(), checked=True)
    request_id = reply_id(route.id_prefix)

    def refusal(exc: RequestError) -> ApiError:  # a refusal found while running (a grammar's limits)
        return engine_refusal(exc, plan.ids_param, plan.structured_param)

    if body.stream:
        include_usage = body.stream_options is not None and body.stream_options.include_usage
        return event_stream(route.stream(plan, events, ctx, request_id, include_usage), events.abort, refusal)
    return await whole_reply(request, events, route.whole(plan, events, ctx, request_id), refusal)


@post("/completions", status_code=200, operation_class=body_of(CompletionRequest))
async def completions(request: Request, ctx: NamedDependency[ServerContext]) -> Response | Stream:
    """OpenAI legacy completions with full logprobs (see docs/DETAILS.md)."""
    return await generate(request, ctx, COMPLETIONS)


@post("/chat/completions", status_code=200, operation_class=body_of(ChatCompletionRequest))
async def chat_completions(request: Request, ctx: NamedDependency[ServerContext]) -> Response | Stream:
    """Chat completions through the model's chat template, with logprobs."""
    return await generate(request, ctx, CHAT)


def prepared_scores(raw: bytes, ctx: ServerContext) -> tuple[CandidatePlan, list[EngineRequest]]:
    """Decode, check, tokenize and engine-check a scoring body (on a worker thread)."""
    plan = candidate_plan(decode_request(raw, ScoreCandidatesRequest), ctx)
    requests = plan.requests()
    ctx.check(requests, "prompt")
    return plan, requests


@post("/score_candidates", status_code=200, operation_class=body_of(ScoreCandidatesRequest))
async def score_candidates(request: Request, ctx: NamedDependency[ServerContext]) -> Response:
    """Exact log-probabilities of candidate continuations of one prompt (see candidates.py)."""
    ctx.admission.check_room()
    raw = await request.body()
    plan, requests = await asyncio.to_thread(prepared_scores, raw, ctx)
    events = ctx.submit(requests, "prompt", started=arrived(), checked=True)
    return await whole_reply(request, events, score_reply(plan, events, ctx, reply_id("score")))


GENERATION_ROUTES = [completions, chat_completions, score_candidates]
