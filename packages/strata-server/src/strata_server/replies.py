"""How a route answers: one JSON body, an SSE stream, or nothing once the client has gone.

Every reply that runs engine requests ends here (`whole_reply` or `event_stream`), so the
disconnect and abort handling is written once for completions, chat and candidate scores.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

from litestar import MediaType, Request, Response
from litestar.response import Stream

from strata_engine.api import RequestError
from strata_server.disconnect import ClientDisconnected, until_disconnect
from strata_server.errors import ApiError, engine_refusal, error_body, server_fault
from strata_server.formatting import SSE_DONE, sse
from strata_server.protocol import encode
from strata_server.request_log import current_request_id

log = logging.getLogger("strata_server")

CLIENT_CLOSED_REQUEST = 499  # nginx's code; nobody reads it, the metrics do

Refusal = Callable[[RequestError], ApiError]


class Abortable(Protocol):
    def abort(self) -> None: ...


def json_response(value: Any, status: int = 200) -> Response:
    return Response(content=encode(value), status_code=status, media_type=MediaType.JSON)


async def json_reply(value: Any) -> Response:
    """A JSON response encoded on a worker thread (an answer may be megabytes of logprobs)."""
    content = await asyncio.to_thread(encode, value)
    return Response(content=content, status_code=200, media_type=MediaType.JSON)


async def whole_reply(
    request: Request, events: Abortable, work: Awaitable[Any], refusal: Refusal | None = None
) -> Response:
    """Await a non-streamed reply's `work` and answer it as one JSON body.

    The client going away first cancels the work (499, no body); `events` are aborted on every
    way out (a no-op once finished; it frees the admission slot on any failure). `refusal`
    turns an engine refusal found while running into the route's 400 (None: raised as is).
    """
    try:
        reply = await until_disconnect(request.receive, work)
    except ClientDisconnected:
        return Response(content=b"", status_code=CLIENT_CLOSED_REQUEST)
    except RequestError as exc:
        if refusal is None:
            raise
        raise refusal(exc) from None
    finally:
        events.abort()
    return await json_reply(reply)


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
