"""Slow clients: bound the time a connection may take to send its headers and its body.

uvicorn bounds idle keep-alive connections (`timeout_keep_alive`), open connections
(`limit_concurrency`) and header size (`h11_max_incomplete_event_size`), but not the time
a client takes to send a request: one byte every few seconds holds a connection (and its
buffers) for ever. Two guards close that gap:

- `header_timeout_protocol`: uvicorn's h11 protocol with a timer from a connection's (or a
  keep-alive request's) first byte until its request line and headers are complete; past
  `--header-timeout` the connection is closed. It also counts each client address's open
  connections: past `--max-client-connections` a new one is closed at once, so one client
  holding idle connections cannot take every `--max-connections` slot (then every request,
  /health too, got uvicorn's 503).
- `body_timeout_middleware`: an ASGI wrapper around `receive` that gives a request
  `--body-timeout` seconds from its headers to the body's last byte; past it the app's read
  fails with 408 (the route answers it, uvicorn then closes the connection, whose body was
  never finished).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import h11
from litestar.exceptions import HTTPException
from litestar.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from strata_server.limits import RequestLimits


class BodyTimeout(HTTPException):
    """The client did not send its whole body within --body-timeout."""

    status_code = 408


def header_timeout_protocol(timeout_s: float, per_client: int | None = None) -> type[H11Protocol]:
    """uvicorn's h11 protocol, closing a connection whose headers take longer than `timeout_s`,
    and one that would be its client address's `per_client + 1`-th open connection."""
    open_by_client: Counter[str] = Counter()  # this server's open connections by client address

    class HeaderTimeoutProtocol(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None
        _client: str | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            peer = transport.get_extra_info("peername")
            client = peer[0] if isinstance(peer, tuple) and peer else None
            if client is not None and per_client is not None:
                if open_by_client[client] >= per_client:
                    transport.close()  # over its share: closed before a byte is read
                    return
                open_by_client[client] += 1
                self._client = client
            self._arm()  # a client that connects and sends nothing is timed too

        def data_received(self, data: bytes) -> None:
            if self._header_timer is None and self.conn.their_state is h11.IDLE:
                self._arm()  # the first byte of a keep-alive connection's next request
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:
                self._disarm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            if self._client is not None:
                open_by_client[self._client] -= 1
                if open_by_client[self._client] <= 0:
                    del open_by_client[self._client]
                self._client = None
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._header_timer = self.loop.call_later(timeout_s, self._headers_too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

    return HeaderTimeoutProtocol


def connection_options(limits: RequestLimits) -> dict[str, Any]:
    """uvicorn `Config` keywords for the connection limits (see docs/server.md#limits)."""
    return {
        "http": header_timeout_protocol(limits.header_timeout, limits.max_client_connections),
        "timeout_keep_alive": limits.keep_alive_timeout,
        "limit_concurrency": limits.max_connections,
        "h11_max_incomplete_event_size": limits.max_header_bytes,
    }


def body_timeout_middleware(timeout_s: float) -> Any:
    """An ASGI middleware factory: a request's body must arrive within `timeout_s` seconds."""

    def middleware(app: ASGIApp) -> ASGIApp:
        async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            deadline = time.monotonic() + timeout_s
            body_done = False

            async def timed_receive() -> Any:
                nonlocal body_done
                if body_done:
                    return await receive()  # later reads wait for a disconnect: no deadline
                try:
                    message = await asyncio.wait_for(receive(), max(deadline - time.monotonic(), 0.0))
                except TimeoutError:
                    raise BodyTimeout(
                        f"The request body did not arrive within {timeout_s:g} s (--body-timeout).",
                        headers={"Connection": "close"},  # h11 then closes once the 408 is sent
                    ) from None
                if message.get("type") != "http.request" or not message.get("more_body", False):
                    body_done = True
                return message

            await app(scope, timed_receive, send)

        return guarded

    return middleware
