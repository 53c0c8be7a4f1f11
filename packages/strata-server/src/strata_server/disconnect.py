"""Awaiting a reply's work while watching for the client to go away.

The engine streams each request's events (`EngineClient.submit`); leaving a `ChoiceStream`
early, for any reason, aborts its requests. Here a non-streamed reply is cancelled when
the client disconnects, which closes its stream and so frees the engine's slots.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")

Receive = Callable[[], Awaitable[Mapping[str, Any]]]


class ClientDisconnected(Exception):
    """The client closed the connection before its (non-streamed) reply was ready."""


async def until_disconnect(receive: Receive, work: Awaitable[T]) -> T:
    """Await `work`, cancelling it if the ASGI client disconnects first.

    Only valid after the request body has been read: from then on `receive()` returns only
    when the client goes away.
    """
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
        raise ClientDisconnected
    return task.result()


async def _wait_for_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message.get("type") == "http.disconnect":
            return
