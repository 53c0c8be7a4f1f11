"""Request ids and the one structured log line per request.

Every HTTP request gets an id: the client's `X-Request-Id` when it is sane (printable, at
most 128 characters), else a fresh one. It is echoed in the `X-Request-Id` response header,
put in the reply's `id` (`cmpl-<id>`, as vLLM does), beside the error envelope, and in a
JSON log line written when the response has been sent: route, status, tokens, queue and
total time. Headers are never logged, so API keys cannot leak into logs.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field

from litestar.types import ASGIApp, Message, Receive, Scope, Send

from strata_server.log_format import FIELDS_ATTR

access_log = logging.getLogger("strata_server.access")

MAX_ID_CHARS = 128


@dataclass
class RequestRecord:
    """What the log line says about one request; the routes fill in tokens and timings."""

    request_id: str
    method: str
    path: str
    started: float = field(default_factory=time.perf_counter)
    status: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    queue_s: float | None = None
    ttft_s: float | None = None

    def fields(self, route: str) -> dict[str, object]:
        return {
            "event": "request",
            "request_id": self.request_id,
            "method": self.method,
            "route": route,
            "status": self.status,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_tokens": self.cached_tokens,
            "queue_s": _rounded(self.queue_s),
            "ttft_s": _rounded(self.ttft_s),
            "total_s": _rounded(time.perf_counter() - self.started),
        }


_current: ContextVar[RequestRecord | None] = ContextVar("strata_request", default=None)


def current_record() -> RequestRecord | None:
    """The record of the request this task is serving (None outside the middleware)."""
    return _current.get()


def current_request_id() -> str | None:
    record = _current.get()
    return None if record is None else record.request_id


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 6)


def sane_request_id(value: str | None) -> str | None:
    """The client's id if it is safe to echo and log (no control characters, bounded)."""
    if not value or len(value) > MAX_ID_CHARS or not value.isprintable() or not value.isascii():
        return None
    return value


def request_log_middleware() -> Callable[[ASGIApp], ASGIApp]:
    """ASGI middleware factory: assign the id, echo it, log one JSON line per request."""

    def factory(app: ASGIApp) -> ASGIApp:
        async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            given = next((v for k, v in scope["headers"] if k == b"x-request-id"), b"")
            request_id = sane_request_id(given.decode("latin-1")) or uuid.uuid4().hex
            record = RequestRecord(request_id, str(scope.get("method", "")), scope["path"])
            token = _current.set(record)

            async def send_with_id(message: Message) -> None:
                if message["type"] == "http.response.start":
                    record.status = message["status"]
                    headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"x-request-id"]
                    headers.append(
                        (b"x-request-id", record.request_id.encode("latin-1"))
                    )  # body's may replace it
                    message = {**message, "headers": headers}
                await send(message)

            try:
                await app(scope, receive, send_with_id)
            except BaseException:
                record.status = record.status or 500
                raise
            finally:
                _current.reset(token)
                route = scope.get("path_template") or scope["path"]
                fields = record.fields(route)
                access_log.info(json.dumps(fields, separators=(",", ":")), extra={FIELDS_ATTR: fields})

        return middleware

    return factory
