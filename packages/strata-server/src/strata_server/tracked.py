"""A reply's engine events, watched: deadline, timings, and the admission ticket.

Wraps the `ChoiceStream` `submit` returns. Reading it past the request's deadline aborts
every engine request in the reply (their KV blocks are freed at the engine's next step) and
raises a 504 `ApiError`, which a whole reply answers in the envelope and a stream as an
error event. Time to first token and the gaps between tokens go to the metrics; queue time
and TTFT to the request's log record; the admission ticket is released however it ends.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from strata_engine.api import EngineEvent, Step
from strata_engine.protocol import ChoiceStream
from strata_server.admission import Ticket
from strata_server.errors import ApiError
from strata_server.metrics import Metrics
from strata_server.request_log import current_record

TIMEOUT_STATUS = 504


class TrackedStream:
    """A `ChoiceStream` with a deadline (monotonic seconds, or None), timed into `metrics`."""

    def __init__(
        self,
        inner: ChoiceStream,
        ticket: Ticket,
        metrics: Metrics,
        deadline: float | None,
        timeout_s: float | None,
        arrived: float | None = None,
    ) -> None:
        self.inner = inner
        self.ticket = ticket
        self.metrics = metrics
        self.deadline = deadline
        self.timeout_s = timeout_s
        self.submitted = time.monotonic()
        self.arrived = self.submitted if arrived is None else arrived  # monotonic, for latencies
        self.first_token: float | None = None
        self.last_token: float | None = None
        self.record = current_record()

    def abort(self) -> None:
        self.inner.abort()
        self.ticket.release()

    @property
    def scheduled_at(self) -> float | None:
        return self.inner.scheduled_at

    def __aiter__(self) -> AsyncIterator[tuple[int, EngineEvent]]:
        return self._events()

    async def _next(self, events: AsyncIterator[tuple[int, EngineEvent]]) -> tuple[int, EngineEvent]:
        if self.deadline is None:
            return await anext(events)
        left = self.deadline - time.monotonic()
        try:
            if left <= 0:
                raise TimeoutError
            return await asyncio.wait_for(anext(events), left)
        except TimeoutError:
            raise ApiError(
                f"The request did not finish within the server's --request-timeout "
                f"({self.timeout_s:g} s); it was cancelled.",
                status=TIMEOUT_STATUS,
                code="timeout",
            ) from None

    async def _events(self) -> AsyncIterator[tuple[int, EngineEvent]]:
        events = aiter(self.inner)
        last: dict[int, float] = {}
        try:
            while True:
                try:
                    index, event = await self._next(events)
                except StopAsyncIteration:
                    self._time_reply()
                    return
                if isinstance(event, Step):
                    self._time_step(index, last)
                yield index, event
        finally:
            self.abort()
            if hasattr(events, "aclose"):
                await events.aclose()

    def _time_step(self, index: int, last: dict[int, float]) -> None:
        now = time.monotonic()
        self.last_token = now
        previous = last.get(index)
        last[index] = now
        if previous is not None:
            self.metrics.inter_token.observe(now - previous)
            return
        ttft = now - self.arrived
        self.metrics.ttft.observe(ttft)
        if self.first_token is None:
            self.first_token = now
            scheduled = self.inner.scheduled_at
            queue_s = None if scheduled is None else max(scheduled - self.arrived, 0.0)
            if queue_s is not None:
                self.metrics.queue_time.observe(queue_s)
            record = self.record
            if record is not None and record.ttft_s is None:
                record.ttft_s, record.queue_s = ttft, queue_s

    def _time_reply(self) -> None:
        """A reply that ran to its end: vLLM's end-to-end, inference, prefill and decode times."""
        now = time.monotonic()
        self.metrics.e2e.observe(now - self.arrived)
        scheduled, first, last = self.inner.scheduled_at, self.first_token, self.last_token
        if scheduled is not None and first is not None and last is not None:
            self.metrics.inference_time.observe(max(last - scheduled, 0.0))
            self.metrics.prefill_time.observe(max(first - scheduled, 0.0))
            self.metrics.decode_time.observe(last - first)
