"""Request ids through the gateway: the caller's `X-Request-Id` (or a fresh one) is echoed
back and forwarded on every upstream call the request makes, so one id finds a decision's
lines in the gateway's and the server's logs (the server puts it in its JSON access log)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from contextvars import ContextVar

import httpx
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from strata_client import AsyncStrataClient

HEADER = "X-Request-Id"
MAX_ID_CHARS = 128

_current: ContextVar[str | None] = ContextVar("strata_decide_request_id", default=None)


def current_request_id() -> str | None:
    return _current.get()


def sane_request_id(value: str) -> str | None:
    """The caller's id if it is safe to forward and log (printable ASCII, bounded)."""
    if not value or len(value) > MAX_ID_CHARS or not value.isprintable() or not value.isascii():
        return None
    return value


def request_id_middleware() -> Callable[[ASGIApp], ASGIApp]:
    """ASGI middleware factory: set the request's id for its upstream calls and echo it."""

    def factory(app: ASGIApp) -> ASGIApp:
        async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            given = next((v for k, v in scope["headers"] if k == b"x-request-id"), b"")
            request_id = sane_request_id(given.decode("latin-1")) or uuid.uuid4().hex
            token = _current.set(request_id)

            async def send_with_id(message: Message) -> None:
                if message["type"] == "http.response.start":
                    headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"x-request-id"]
                    headers.append((b"x-request-id", request_id.encode("latin-1")))
                    message = {**message, "headers": headers}
                await send(message)

            try:
                await app(scope, receive, send_with_id)
            finally:
                _current.reset(token)

        return middleware

    return factory


async def _forward(request: httpx.Request) -> None:
    request_id = _current.get()
    if request_id is not None:
        request.headers[HEADER] = request_id


def forward_request_ids(client: AsyncStrataClient) -> None:
    """Make every upstream request carry the id of the gateway request it serves."""
    http: httpx.AsyncClient = client._http  # the client keeps no public hook for per-call headers
    hooks = http.event_hooks
    hooks["request"] = [*hooks.get("request", []), _forward]
    http.event_hooks = hooks
