"""Running the gateway: in the foreground (the ``serve`` command) or on a background thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import httpx
import uvicorn

from ..operations import configure_logging
from .app import GatewayConfig, create_app
from .browsers import allowed_hosts


def launcher(
    config: GatewayConfig, host: str, port: int, log_level: str, own_logging: bool = False
) -> uvicorn.Server:
    """The one way the gateway is started, in the foreground or on a thread.

    `own_logging`: logging is configured already (``operations.configure_logging``), so uvicorn
    leaves it alone and its lines go through the same handler.
    """
    options: dict[str, Any] = {"log_config": None} if own_logging else {}
    return uvicorn.Server(
        uvicorn.Config(create_app(config), host=host, port=port, log_level=log_level, **options)
    )


def serve(
    config: GatewayConfig,
    host: str = "127.0.0.1",
    port: int = 8100,
    log_level: str = "info",
    log_format: str = "text",
    hosts: list[str] | None = None,
) -> None:
    """Serve until interrupted, logging at `log_level` in `log_format` (text or json); `hosts`:
    --allowed-hosts (none given: only loopback names when `host` is a loopback address)."""
    configure_logging(log_level, log_format)
    config = replace(config, allowed_hosts=allowed_hosts(host, hosts or []))
    launcher(config, host, port, log_level, own_logging=True).run()


@contextmanager
def background(config: GatewayConfig, host: str = "127.0.0.1", startup_s: float = 30.0) -> Iterator[str]:
    """The gateway on a free port (the OS picks it) on a daemon thread; yields its base URL."""
    server = launcher(config, host, 0, "warning")
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the gateway did not start on {host}")
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    url = f"http://{host}:{port}"
    try:
        httpx.get(f"{url}/health", timeout=5).raise_for_status()
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=10)
