"""Graceful shutdown: drain on the first SIGTERM/Ctrl-C, exit at once on the second.

On the first signal `/health` answers 503 at once (a load balancer stops sending), new
requests get a 503 in the envelope, and requests in flight have `--shutdown-grace` seconds
to finish; then uvicorn stops and the process exits 0. A second signal exits immediately.
uvicorn's own handler would stop listening at once (health checks would fail to connect
rather than see 503) and re-raise the signal afterwards (exit status -15, not 0); the
`GracefulServer` subclass replaces both behaviours.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType

import msgspec
import uvicorn
from litestar.types import ASGIApp, Receive, Scope, Send

from strata_server.errors import error_body
from strata_server.request_log import current_request_id

log = logging.getLogger("strata_server")

ALWAYS_ANSWERED = frozenset({"/health", "/metrics"})  # still answered while draining
FORCED_EXIT_STATUS = 1
POLL_S = 0.05


@dataclass
class Drain:
    """Whether the server is draining, and how many HTTP requests are being served."""

    draining: bool = False
    in_flight: int = 0

    def wait_idle(self, grace_s: float) -> bool:
        """Block (off the event loop) until nothing is in flight or the grace is over."""
        deadline = time.monotonic() + grace_s
        while self.in_flight > 0 and time.monotonic() < deadline:
            time.sleep(POLL_S)
        return self.in_flight == 0


def drain_middleware(drain: Drain) -> Callable[[ASGIApp], ASGIApp]:
    """Count requests in flight; while draining refuse new ones with a 503 envelope."""

    def factory(app: ASGIApp) -> ASGIApp:
        async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            if drain.draining and scope["path"] not in ALWAYS_ANSWERED:
                await _refuse(send)
                return
            drain.in_flight += 1
            try:
                await app(scope, receive, send)
            finally:
                drain.in_flight -= 1

        return middleware

    return factory


async def _refuse(send: Send) -> None:
    body = msgspec.json.encode(
        error_body(
            "The server is shutting down; send the request to another replica.",
            503,
            code="shutting_down",
            request_id=current_request_id(),
        )
    )
    await send(
        {
            "type": "http.response.start",
            "status": 503,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


class GracefulServer(uvicorn.Server):
    """uvicorn with a drain phase: first signal drains, a second exits at once."""

    def __init__(self, config: uvicorn.Config, drain: Drain, grace_s: float) -> None:
        super().__init__(config)
        self.drain = drain
        self.grace_s = grace_s

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.drain.draining:
            log.warning("second %s: exiting now", signal.Signals(sig).name)
            os._exit(FORCED_EXIT_STATUS)
        self.drain.draining = True
        log.warning(
            "%s: draining (%d in flight, up to %.1f s); /health is 503",
            signal.Signals(sig).name,
            self.drain.in_flight,
            self.grace_s,
        )
        threading.Thread(target=self._stop_when_drained, name="strata-drain", daemon=True).start()

    def _stop_when_drained(self) -> None:
        if not self.drain.wait_idle(self.grace_s):
            log.warning("grace over with %d requests in flight; closing them", self.drain.in_flight)
        self.should_exit = True
