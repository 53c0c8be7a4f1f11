"""The routes any caller reaches without a key do their work on a pool of their own.

`/tokenize` and `/detokenize` do work that grows with the body (tokenizing up to
--max-prompt-chars). On the default thread pool, which the generation routes use to decode,
tokenize and check their bodies, a few keyless callers could take every worker thread: an
authenticated one-token completion then waited seconds behind them. Here they run on
`OpenPool`: `threads` workers and at most `queue` more requests waiting; beyond that a `429`
at once (before the body is read), so they can slow only one another.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from strata_server.admission import RETRY_AFTER_S
from strata_server.errors import ApiError

T = TypeVar("T")

OPEN_THREADS = 1  # workers for the keyless routes (tokenizing holds the GIL: more adds little)
OPEN_QUEUE = 128  # keyless requests that may wait for one (strata-decide's labels send dozens at once)


class OpenPool:
    """A small executor with a bound on the requests in it."""

    def __init__(self, threads: int = OPEN_THREADS, queue: int = OPEN_QUEUE) -> None:
        self.capacity = threads + queue
        self.in_flight = 0
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix="strata-open")

    def check_room(self) -> None:
        """429 when the pool holds all it may (called before a body is read, and again in `run`)."""
        if self.in_flight >= self.capacity:
            raise ApiError(
                f"The tokenizer routes are busy ({self.in_flight} requests); retry after {RETRY_AFTER_S} s.",
                status=429,
                code="queue_full",
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )

    async def run(self, work: Callable[[], T]) -> T:
        """`work` on the pool (with the caller's context: its request id), or 429 when full."""
        self.check_room()
        self.in_flight += 1
        try:
            context = contextvars.copy_context()
            return await asyncio.get_running_loop().run_in_executor(self._executor, context.run, work)
        finally:
            self.in_flight -= 1

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
