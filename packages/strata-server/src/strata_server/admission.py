"""Bounded admission: how many engine requests the server holds at once, and who waits.

The engine queues whatever it is given, so without a bound a burst grows the queue (and its
memory and latency) without limit. The server counts the engine requests it has submitted
and not yet seen end; beyond `slots + max_queue` a new request is refused with a 429 and
`Retry-After` at once, before anything is queued, so the queue (and p99) stays bounded.
"""

from __future__ import annotations

from dataclasses import dataclass

from strata_server.errors import ApiError

RETRY_AFTER_S = 1  # a queue slot frees as soon as any request ends; retrying soon is fine


@dataclass
class Ticket:
    """One admitted request's share of the bound; `release` is idempotent."""

    admission: Admission
    size: int
    released: bool = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.admission.in_flight -= self.size


@dataclass
class Admission:
    """Counts engine requests in flight; `enter` refuses beyond `slots + max_queue`.

    `max_queue` None means unbounded. A single request larger than the whole bound is refused
    by `check_size` (400); one within it is admitted when nothing else is in flight.
    """

    slots: int
    max_queue: int | None
    in_flight: int = 0

    @property
    def capacity(self) -> int | None:
        return None if self.max_queue is None else self.slots + self.max_queue

    @property
    def waiting(self) -> int:
        """Engine requests beyond the running slots (what the queue bound counts)."""
        return max(self.in_flight - self.slots, 0)

    def check_room(self) -> None:
        """Refuse before the body is even read when not one more request fits.

        Under overload most requests are refused; refusing them before decoding, tokenizing
        and rendering keeps that cheap, so refusals do not slow the requests being served.
        """
        capacity = self.capacity
        if capacity is not None and self.in_flight >= capacity:
            raise self._full()

    def check_size(self, size: int) -> None:
        """A request of more sequences than the whole bound could never be admitted: a 400
        (not a 429: retrying cannot help), so one request cannot flood the queue either."""
        capacity = self.capacity
        if capacity is not None and size > capacity:
            raise ApiError(
                f"This request is {size} sequences (prompts x n); the server queues at most "
                f"{capacity} (--parallel + --max-queue).",
                param="n",
            )

    def enter(self, size: int) -> Ticket:
        capacity = self.capacity
        if capacity is not None and self.in_flight > 0 and self.in_flight + size > capacity:
            raise self._full()
        self.in_flight += size
        return Ticket(self, size)

    def _full(self) -> ApiError:
        return ApiError(
            f"The server is at capacity ({self.waiting} requests waiting, --max-queue "
            f"{self.max_queue}); retry after {RETRY_AFTER_S} s.",
            status=429,
            code="queue_full",
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )
