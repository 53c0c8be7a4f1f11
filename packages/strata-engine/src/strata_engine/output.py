"""One request's output channel: the engine writes to it, one consumer reads from it.

`LLMEngine.add` returns a `RequestStream`; the step loop calls `put` for each event and
`finish` or `fail` once at the end; the consumer calls `take` (or iterates, in the async
layer) and may `abort` at any time. Nothing else carries a request's results, so the
engine thread and the caller share exactly this object and nothing more.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from strata_engine.api import EngineError, EngineEvent


def _nothing() -> None:
    return None


class RequestStream:
    """Events of one request, written by the engine thread and read by its caller.

    `on_ready` is called (on the engine thread) after every write, `on_abort` (on the
    caller's) after an abort, so an async layer can wake its event loop and the worker.
    A deque's append and popleft are atomic, so no lock is needed for one writer and one reader.
    """

    def __init__(
        self, on_ready: Callable[[], None] = _nothing, on_abort: Callable[[], None] = _nothing
    ) -> None:
        self._events: deque[EngineEvent] = deque()
        self._on_ready = on_ready
        self._on_abort = on_abort
        self._error: EngineError | None = None
        self.finished = False  # no more events will be written
        self.aborted = False  # the caller wants no more; the engine drops the request at its next step
        self.scheduled_at: float | None = None  # time.monotonic() when it first got a slot (queue time)

    # -- the engine's side ------------------------------------------------------------
    def mark_scheduled(self) -> None:
        """Called by the scheduler when the request first leaves the queue."""
        if self.scheduled_at is None:
            self.scheduled_at = time.monotonic()

    def put(self, event: EngineEvent) -> None:
        self._events.append(event)
        self._on_ready()

    def finish(self) -> None:
        self.finished = True
        self._on_ready()

    def fail(self, error: EngineError) -> None:
        self._error = error
        self.finished = True
        self._on_ready()

    # -- the caller's side ------------------------------------------------------------
    def take(self) -> list[EngineEvent]:
        """The events written since the last call; raises the engine's error once they are read."""
        done = self.finished  # read before draining, so no event written before it is missed
        events = []
        while self._events:
            events.append(self._events.popleft())
        if done and self._error is not None and not events:
            raise self._error
        return events

    @property
    def drained(self) -> bool:
        """Finished and every event taken (a failure is raised by `take` before this is True)."""
        return self.finished and not self._events and self._error is None

    def abort(self) -> None:
        if not self.finished and not self.aborted:
            self.aborted = True
            self._on_abort()
