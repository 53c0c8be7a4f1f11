"""The Litestar app: routes, auth, error envelopes and metrics around a loaded engine.

Handlers read the raw body and decode it with `protocol.decode_request` (strict), so every
validation failure takes the same path to the OpenAI error envelope.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from litestar import Litestar, MediaType, Request, Response, Router, get, post
from litestar.config.cors import CORSConfig
from litestar.connection import ASGIConnection
from litestar.handlers import BaseRouteHandler
from litestar.response import Stream

from strata_engine.api import Request as EngineRequest
from strata_engine.api import RequestError
from strata_engine.protocol import ChoiceStream, EngineClient
from strata_server.browsers import allowed_hosts_middleware, require_json
from strata_server.candidates import CandidatePlan, candidate_plan, score_reply
from strata_server.chat import chat_complete, chat_plan, stream_chat
from strata_server.completions import complete, completion_plan, stream_completion
from strata_server.context import ServerContext, ServerSettings, new_request_id
from strata_server.disconnect import ClientDisconnected, until_disconnect
from strata_server.errors import EXCEPTION_HANDLERS, ApiError, engine_refusal, error_body, server_fault
from strata_server.formatting import SSE_DONE, sse
from strata_server.info import health as health_body
from strata_server.info import models
from strata_server.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from strata_server.metrics import metrics_middleware
from strata_server.open_routes import OpenPool
from strata_server.openapi import body_of, openapi_config
from strata_server.plan import Plan, engine_requests
from strata_server.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    GenerationRequest,
    ScoreCandidatesRequest,
    TokenizeRequest,
    decode_request,
    encode,
)
from strata_server.provenance import Provenance
from strata_server.request_log import (
    MAX_ID_CHARS,
    current_record,
    current_request_id,
    request_log_middleware,
    sane_request_id,
)
from strata_server.shutdown import drain_middleware
from strata_server.slow_clients import body_timeout_middleware
from strata_server.tokenizer_routes import detokenize, tokenize, tokenizer_info

log = logging.getLogger("strata_server")

Body = TypeVar("Body", CompletionRequest, ChatCompletionRequest)

CLIENT_CLOSED_REQUEST = 499  # nginx's code; nobody reads it, the metrics do


def json_response(value: Any, status: int = 200) -> Response:
    return Response(content=encode(value), status_code=status, media_type=MediaType.JSON)


async def json_reply(value: Any) -> Response:
    """A JSON response encoded on a worker thread (an answer may be megabytes of logprobs)."""
    content = await asyncio.to_thread(encode, value)
    return Response(content=content, status_code=200, media_type=MediaType.JSON)


def accepted_key(given: bytes, keys: list[bytes]) -> bool:
    """Constant-time comparison against every key (no early exit that would time the match)."""
    found = False
    for key in keys:
        found |= hmac.compare_digest(given, key)
    return found


def arrived(request: Request) -> float:
    """When the request arrived (monotonic), so its deadline counts body reading and checks too."""
    record = current_record()
    if record is None:
        return time.monotonic()
    return time.monotonic() - (time.perf_counter() - record.started)


Refusal = Callable[[RequestError], ApiError]


def event_stream(
    chunks: AsyncIterator[bytes],
    on_end: Callable[[], None] | None = None,
    refusal: Refusal = engine_refusal,
) -> Stream:
    return Stream(
        _errors_in_stream(chunks, on_end, refusal),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _errors_in_stream(
    chunks: AsyncIterator[bytes], on_end: Callable[[], None] | None = None, refusal: Refusal = engine_refusal
) -> AsyncIterator[bytes]:
    """Once headers are sent, a failure becomes an SSE `error` event (which SDKs raise)."""
    request_id = current_request_id()
    try:
        async for chunk in chunks:
            yield chunk
    except (ApiError, RequestError) as exc:
        error = exc if isinstance(exc, ApiError) else refusal(exc)
        yield sse(error_body(error.message, error.status, error.param, error.code, request_id))
        yield SSE_DONE
    except Exception as exc:
        fault = server_fault(exc)
        if fault is None:
            log.exception("error while streaming request %s", request_id, exc_info=exc)
        body = (
            error_body(fault.message, fault.status, fault.param, fault.code, request_id)
            if fault is not None
            else error_body(f"Internal server error: {type(exc).__name__}", 500, request_id=request_id)
        )
        yield sse(body)
        yield SSE_DONE
    finally:
        if on_end is not None:
            on_end()


def create_app(
    engine: EngineClient, settings: ServerSettings | None = None, provenance: Provenance | None = None
) -> Litestar:
    """Build the app around an already loaded engine (`strata_engine.AsyncEngine`).

    `provenance` names the model file and its sha256 for `/version`, `/v1/models` and the
    replies' `system_fingerprint` (`Provenance.of`); without it they know only the kernels.
    """
    ctx = ServerContext(engine=engine, settings=settings or ServerSettings(), provenance=provenance)
    open_pool = OpenPool()  # the keyless routes' own workers (open_routes.py)

    keys = [f"Bearer {key}".encode() for key in ctx.settings.keys]

    def require_api_key(connection: ASGIConnection, _: BaseRouteHandler) -> None:
        if not ctx.settings.needs_key(connection.scope["path"]):
            return
        given = connection.headers.get("authorization", "").encode()
        if not accepted_key(given, keys):
            raise ApiError(
                "Missing or invalid API key: send `Authorization: Bearer <key>`.",
                status=401,
                code="invalid_api_key",
            )

    def prepared(
        raw: bytes, request_type: type[Body], to_plan: Callable[[Body, ServerContext], Plan]
    ) -> tuple[Body, Plan, list[EngineRequest]]:
        """Decode, check, tokenize or render, and engine-check a generation body.

        Runs on a worker thread (`asyncio.to_thread`): this is the work that grows with the
        request's size (prompts, templates, grammars), so the event loop never does it.
        """
        body = decode_request(raw, request_type)
        plan = to_plan(body, ctx)
        requests = engine_requests(plan, ctx.limits.ctx_size, ctx.settings.max_tokens_limit)
        ctx.check(requests, plan.ids_param, plan.structured_param)
        return body, plan, requests

    async def generate(
        request: Request,
        body: GenerationRequest,
        plan: Plan,
        requests: list[EngineRequest],
        id_prefix: str,
        stream: Callable[[Plan, ChoiceStream, ServerContext, str, bool], AsyncIterator[bytes]],
        whole: Callable[[Plan, ChoiceStream, ServerContext, str], Awaitable[Any]],
    ) -> Response | Stream:
        """Submit checked requests (refusals are plain 4xx), then reply as SSE or one JSON body."""
        record = current_record()
        if body.request_id is not None:  # vLLM's field: the id of this request, as X-Request-Id is
            given = sane_request_id(body.request_id)
            if given is None:
                raise ApiError(
                    f"`request_id` must be printable ASCII, 1 to {MAX_ID_CHARS} characters.",
                    param="request_id",
                )
            if record is not None:
                record.request_id = given
        events = ctx.submit(requests, plan.ids_param, started=arrived(request), checked=True)
        request_id = f"{id_prefix}-{record.request_id}" if record else new_request_id(id_prefix)

        def refusal(exc: RequestError) -> ApiError:  # a refusal found while running (a grammar's limits)
            return engine_refusal(exc, plan.ids_param, plan.structured_param)

        if body.stream:
            include_usage = body.stream_options is not None and body.stream_options.include_usage
            return event_stream(stream(plan, events, ctx, request_id, include_usage), events.abort, refusal)
        try:
            reply = await until_disconnect(request.receive, whole(plan, events, ctx, request_id))
        except ClientDisconnected:
            return Response(content=b"", status_code=CLIENT_CLOSED_REQUEST)
        except RequestError as exc:
            raise refusal(exc) from None
        finally:
            events.abort()  # no-op once finished; frees the admission slot on any failure
        return await json_reply(reply)

    @post("/completions", status_code=200, operation_class=body_of(CompletionRequest))
    async def completions(request: Request) -> Response | Stream:
        """OpenAI legacy completions with full logprobs (see docs/DETAILS.md)."""
        ctx.admission.check_room()
        raw = await request.body()
        body, plan, requests = await asyncio.to_thread(prepared, raw, CompletionRequest, completion_plan)
        return await generate(request, body, plan, requests, "cmpl", stream_completion, complete)

    @post("/chat/completions", status_code=200, operation_class=body_of(ChatCompletionRequest))
    async def chat_completions(request: Request) -> Response | Stream:
        """Chat completions through the model's chat template, with logprobs."""
        ctx.admission.check_room()
        raw = await request.body()
        body, plan, requests = await asyncio.to_thread(prepared, raw, ChatCompletionRequest, chat_plan)
        return await generate(request, body, plan, requests, "chatcmpl", stream_chat, chat_complete)

    def prepared_scores(raw: bytes) -> tuple[CandidatePlan, list[EngineRequest]]:
        """Decode, check, tokenize and engine-check a scoring body (on a worker thread)."""
        plan = candidate_plan(decode_request(raw, ScoreCandidatesRequest), ctx)
        requests = plan.requests()
        ctx.check(requests, "prompt")
        return plan, requests

    @post("/score_candidates", status_code=200, operation_class=body_of(ScoreCandidatesRequest))
    async def score_candidates(request: Request) -> Response:
        """Exact log-probabilities of candidate continuations of one prompt (see candidates.py)."""
        ctx.admission.check_room()
        raw = await request.body()
        plan, requests = await asyncio.to_thread(prepared_scores, raw)
        events = ctx.submit(requests, "prompt", started=arrived(request), checked=True)
        record = current_record()
        request_id = f"score-{record.request_id}" if record else new_request_id("score")
        try:
            reply = await until_disconnect(request.receive, score_reply(plan, events, ctx, request_id))
        except ClientDisconnected:
            return Response(content=b"", status_code=CLIENT_CLOSED_REQUEST)
        finally:
            events.abort()
        return await json_reply(reply)

    @get("/models")
    async def list_models() -> Response:
        """The one served model."""
        return json_response(models(ctx))

    @post("/tokenize", status_code=200, operation_class=body_of(TokenizeRequest))
    async def tokenize_route(request: Request) -> Response:
        """vLLM tokenize: `prompt` or `messages` (+ `add_generation_prompt`) -> ids."""
        open_pool.check_room()
        raw = await request.body()
        content = await open_pool.run(lambda: encode(tokenize(decode_request(raw, TokenizeRequest), ctx)))
        return Response(content=content, status_code=200, media_type=MediaType.JSON)

    @post("/detokenize", status_code=200, operation_class=body_of(DetokenizeRequest))
    async def detokenize_route(request: Request) -> Response:
        """vLLM detokenize: `tokens` -> `prompt` text."""
        open_pool.check_room()
        raw = await request.body()
        content = await open_pool.run(lambda: encode(detokenize(decode_request(raw, DetokenizeRequest), ctx)))
        return Response(content=content, status_code=200, media_type=MediaType.JSON)

    @get("/tokenizer_info")
    async def tokenizer_info_route() -> Response:
        """Special tokens and chat template (lm-evaluation-harness's remote tokenizer)."""
        return json_response(tokenizer_info(ctx))

    @get("/version")
    async def version() -> Response:
        """Which arithmetic answers: versions, kernels, the model file's sha256, the fingerprint."""
        assert ctx.provenance is not None
        return json_response(ctx.provenance.body(ctx.served_name))

    @get("/health")
    async def health() -> Response:
        """200 once the model is loaded (the app only exists after loading); 503 while draining
        or once the engine has failed for good (a tensor-parallel rank died)."""
        down = ctx.drain.draining or engine.failure is not None
        return json_response(health_body(ctx), 503 if down else 200)

    @get("/metrics", media_type=METRICS_CONTENT_TYPE)
    async def metrics() -> str:
        """Prometheus text: requests, tokens, latency histograms, queue depth, KV cache."""
        server = {
            "admitted": ctx.admission.in_flight,
            "max_queue": -1 if ctx.admission.max_queue is None else ctx.admission.max_queue,
            "draining": int(ctx.drain.draining),
        }
        return ctx.metrics.render(
            engine.stats(), kernels=engine.kernels, invariant=engine.invariant, server=server
        )

    v1 = Router(
        path="/v1",
        route_handlers=[completions, chat_completions, score_candidates, list_models],
        guards=[require_api_key, require_json],
    )
    # keyless unless --key-on-every-route; /health always (load balancers and probes have no key)
    outside_v1 = Router(
        path="/",
        route_handlers=[tokenize_route, detokenize_route, tokenizer_info_route, version, metrics],
        guards=[require_api_key, require_json],  # the key only with --key-on-every-route (needs_key)
    )
    app = Litestar(
        route_handlers=[v1, outside_v1, health],
        on_shutdown=[open_pool.close],
        exception_handlers=EXCEPTION_HANDLERS,
        middleware=[
            allowed_hosts_middleware(ctx.settings.allowed_hosts),
            body_timeout_middleware(ctx.settings.limits.body_timeout),
            request_log_middleware(),
            drain_middleware(ctx.drain),
            metrics_middleware(ctx.metrics),
        ],
        cors_config=CORSConfig(allow_origins=list(ctx.settings.cors_origins))
        if ctx.settings.cors_origins
        else None,
        openapi_config=openapi_config(),
        request_max_body_size=ctx.settings.limits.max_body_bytes,
        logging_config=None,  # the CLI configures logging; an embedding process keeps its own
    )
    app.state.ctx = ctx
    return app
