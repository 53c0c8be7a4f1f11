"""What a browser on another site can make the gateway do: nothing (as strata_server.browsers
does for the server).

A page can send a "simple" cross-site POST (`text/plain`, a form, or no Content-Type) without
a preflight: every POST body must say `Content-Type: application/json` (`415` otherwise). A page
can also point its own domain at 127.0.0.1 (DNS rebinding): a gateway bound to a loopback
address answers only the loopback names in `Host` (`--allowed-hosts` adds others).
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable

from litestar import Request
from litestar.types import ASGIApp, Receive, Scope, Send

from .errors import Refusal

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def require_json(request: Request) -> None:
    """A POST's body is JSON, as its Content-Type says (any charset); else 415."""
    given = request.headers.get("content-type", "")
    if request.method == "POST" and given.split(";", 1)[0].strip().lower() != "application/json":
        raise Refusal(
            415,
            "unsupported_media_type",
            f"request bodies are JSON: send Content-Type: application/json (got {given[:80] or 'none'})",
        )


def allowed_hosts(listening_on: str, given: list[str]) -> tuple[str, ...]:
    """The Host names to answer: those given (`*`: any), else the loopback names when bound to a
    loopback address, else any (empty)."""
    if given:
        return () if "*" in given else tuple(h.lower() for h in given)
    host = listening_on.strip("[]").lower()
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    return LOOPBACK_NAMES if loopback else ()


def host_name(header: str) -> str:
    """`Host` without its port: `localhost:8100` -> localhost, `[::1]:8100` -> ::1."""
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
    message = f"Host {header[:100]!r} is not served here (--allowed-hosts adds names)"
    body = json.dumps({"detail": {"error_type": "invalid_host", "message": message}}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 400,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})
