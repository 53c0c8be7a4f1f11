"""Running a request's choices on the engine and stopping them when the client goes away.

The engine works in its own thread; here the event loop only awaits its async generators.
Closing a generator aborts that engine request and frees its slot, so every path out of
`choice_events` (done, error, cancellation by a disconnect) closes all of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import aclosing
from typing import Any, Protocol, TypeVar

from strata_engine.api import EngineEvent, Request

T = TypeVar("T")


class EngineLike(Protocol):
    def generate(self, request: Request) -> AsyncIterator[EngineEvent]: ...


async def choice_events(
    engine: EngineLike, requests: Sequence[Request]
) -> AsyncIterator[tuple[int, EngineEvent]]:
    """Yield (choice index, event) from all requests as they arrive, interleaved.

    All requests are submitted at once so the engine batches them. An error in one stops
    them all (the reply is one error).
    """
    if len(requests) == 1:
        async with aclosing(engine.generate(requests[0])) as events:
            async for event in events:
                yield 0, event
        return
    queue: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()

    async def pump(index: int, request: Request) -> None:
        async with aclosing(engine.generate(request)) as events:
            async for event in events:
                queue.put_nowait((index, event))

    tasks = []
    for index, request in enumerate(requests):
        task = asyncio.create_task(pump(index, request))
        task.add_done_callback(lambda t, i=index: queue.put_nowait((i, t)))
        tasks.append(task)
    try:
        running = len(tasks)
        while running:
            index, item = await queue.get()
            if item is tasks[index]:  # that choice ended: done, failed or cancelled
                running -= 1
                if not item.cancelled() and (exc := item.exception()) is not None:
                    raise exc
            else:
                yield index, item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class ClientDisconnected(Exception):
    """The client closed the connection before its (non-streamed) reply was ready."""


async def until_disconnect(receive: Callable[[], Awaitable[dict]], work: Awaitable[T]) -> T:
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


async def _wait_for_disconnect(receive: Callable[[], Awaitable[dict]]) -> None:
    while True:
        message = await receive()
        if message.get("type") == "http.disconnect":
            return
