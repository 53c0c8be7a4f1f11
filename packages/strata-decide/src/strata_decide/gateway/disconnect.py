"""A request's work cancelled when its caller leaves (as strata_server.disconnect does).

A request of many questions is many upstream reads; once the caller has gone, nobody reads the
answer, so its reads are cancelled (their HTTP calls closed, which frees the server's slots too)
instead of running on and holding the gateway's slots and a graceful shutdown.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from litestar.types import Receive

T = TypeVar("T")


class CallerLeft(Exception):
    """The caller closed the connection before its reply was ready."""


async def until_disconnect(receive: Receive, work: Awaitable[T]) -> T:
    """Await `work`, cancelling it if the caller disconnects first (call after the body is read:
    from then on `receive()` returns only when the caller goes away)."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_wait_for_disconnect(receive))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done():
            task.cancel()
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
    if task.cancelled() or not task.done():
        await asyncio.gather(task, return_exceptions=True)
        raise CallerLeft
    return task.result()


async def _wait_for_disconnect(receive: Receive) -> None:
    while (await receive()).get("type") != "http.disconnect":
        pass
