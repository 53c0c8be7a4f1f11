"""What a browser on another site can make the server do: nothing, unless CORS allows it.

A web page can send a "simple" cross-site POST (`text/plain`, a form, or no Content-Type)
without asking first, and read nothing back but still cause the work; so every POST body must
say `Content-Type: application/json` (`415` otherwise), which a browser sends cross-site only
after a CORS preflight the server answers only for --cors-origins. A page can also point its
own domain at 127.0.0.1 (DNS rebinding) and reach a server bound there as same-origin; so a
server bound to a loopback address answers only the loopback names in `Host` (--allowed-hosts
adds others, e.g. a reverse proxy's).
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Callable

import msgspec
from litestar.connection import ASGIConnection
from litestar.handlers import BaseRouteHandler
from litestar.types import ASGIApp, Receive, Scope, Send

from strata_server.errors import ApiError, error_body

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
JSON = "application/json"


def require_json(connection: ASGIConnection, _: BaseRouteHandler) -> None:
    """A route guard: a POST's body is JSON, as its Content-Type says (any charset)."""
    if connection.scope.get("method") != "POST":
        return
    given = connection.headers.get("content-type", "")
    if given.split(";", 1)[0].strip().lower() != JSON:
        shown = given[:80] or "none"
        raise ApiError(
            f"Request bodies are JSON: send `Content-Type: application/json` (got {shown}).",
            status=415,
            code="unsupported_media_type",
        )


def is_loopback(host: str) -> bool:
    """Whether `host` (an address or a name) is this machine's loopback."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bound_host(host: str, fd: int | None) -> str:
    """The address the server listens on: --host, or that of the inherited socket (--fd)."""
    if fd is None:
        return host
    with socket.socket(fileno=os.dup(fd)) as sock:
        return str(sock.getsockname()[0])


def allowed_hosts(listening_on: str, given: list[str]) -> tuple[str, ...]:
    """The Host names to answer: those given (`*`: any), else the loopback names when bound to a
    loopback address, else any (empty)."""
    if given:
        return () if "*" in given else tuple(h.lower() for h in given)
    return LOOPBACK_NAMES if is_loopback(listening_on) else ()


def host_name(header: str) -> str:
    """`Host` without its port: `localhost:8000` -> localhost, `[::1]:8000` -> ::1."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].split("]", 1)[0]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def allowed_hosts_middleware(hosts: tuple[str, ...]) -> Callable[[ASGIApp], ASGIApp]:
    """Refuse (400) a request whose `Host` is not one of `hosts` (empty: any host)."""

    def factory(app: ASGIApp) -> ASGIApp:
        if not hosts:
            return app

        async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == "http":
                header = dict(scope["headers"]).get(b"host", b"").decode("latin-1")
                if host_name(header) not in hosts:
                    await _refuse(send, header)
                    return
            await app(scope, receive, send)

        return middleware

    return factory


async def _refuse(send: Send, header: str) -> None:
    message = (
        f"Host {header[:100]!r} is not served here: a server bound to loopback answers only "
        "localhost names (--allowed-hosts adds others)."
    )
    body = msgspec.json.encode(error_body(message, 400, code="invalid_host"))
    await send(
        {
            "type": "http.response.start",
            "status": 400,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})
