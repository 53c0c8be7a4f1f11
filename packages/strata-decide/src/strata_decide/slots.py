"""Read slots shared fairly between callers.

A decider bounds the reads it has in flight (the upstream batches them). With one FIFO queue,
a request of 300 reads made every later caller wait behind all 300. `FairSlots` hands each
freed slot to the next caller in turn (round robin over the callers waiting), so a caller with
one read waits for at most one read of each other caller. A caller is whatever `caller` holds
in the task that asks (the gateway sets one per request); unset, all share one turn.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar

caller: ContextVar[object | None] = ContextVar("strata_decide_caller", default=None)
# the reads one gateway request may ask for: a question is one read, or one per option with
# rotations (a choice of 255 options with rotations is 255); more is refused before any is made
DEFAULT_MAX_READS = 256


class FairSlots:
    """`size` slots; waiting reads are granted one caller at a time, in turn."""

    def __init__(self, size: int) -> None:
        self.free = size
        self._waiting: OrderedDict[object | None, deque[asyncio.Future[None]]] = OrderedDict()

    @asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        await self._acquire(caller.get())
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, owner: object | None) -> None:
        if self.free > 0 and not self._waiting:
            self.free -= 1
            return
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(owner, deque()).append(granted)
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self._release()  # granted as it was cancelled: pass the slot on
            else:
                self._forget(owner, granted)
            raise

    def _release(self) -> None:
        """Give the slot to the first waiting read of the next caller in turn."""
        while self._waiting:
            owner, queue = next(iter(self._waiting.items()))
            granted = queue.popleft()
            if queue:
                self._waiting.move_to_end(owner)  # its next read waits for every other caller's
            else:
                del self._waiting[owner]
            if not granted.done():
                granted.set_result(None)
                return
        self.free += 1

    def _forget(self, owner: object | None, granted: asyncio.Future[None]) -> None:
        queue = self._waiting.get(owner)
        if queue is not None and granted in queue:
            queue.remove(granted)
            if not queue:
                del self._waiting[owner]
