"""When a failed request is tried again, and how long to wait first.

Retried: connection failures (refused, reset, connect timeout), 429 and 503. These say
"not now" or "never reached the server", so a later try can succeed.
Not retried: every other 4xx (the request itself is wrong; it fails again), 500 and other
5xx (a server bug; repeating a generation request only repeats the cost), and read or
write timeouts (the server is busy with the request; a retry would exceed the caller's
timeout budget several times over).
"""

from __future__ import annotations

import random
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx

RETRY_STATUSES = frozenset({429, 503})
BASE_DELAY_S = 0.5
MAX_DELAY_S = 8.0
MAX_RETRY_AFTER_S = 60.0


def is_retryable_status(status_code: int) -> bool:
    """Whether an answer with this status is worth trying again."""
    return status_code in RETRY_STATUSES


def is_retryable_error(exc: httpx.TransportError) -> bool:
    """Whether a transport failure happened before the server could start on the request."""
    if isinstance(exc, httpx.TimeoutException):
        return isinstance(exc, httpx.ConnectTimeout)
    return True


def retry_after_seconds(headers: httpx.Headers) -> float | None:
    """The server's ``Retry-After`` (seconds or an HTTP date), capped; None if absent/bad."""
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = (when - datetime.now(UTC)).total_seconds()
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


def retry_delay(attempt: int, response: httpx.Response | None = None) -> float:
    """Seconds to wait before retry number ``attempt`` (0-based).

    ``Retry-After`` wins when the response has one. Otherwise exponential backoff,
    ``0.5 s * 2**attempt`` capped at 8 s, shortened by up to 25 % of random jitter so that
    many clients refused at once do not come back at once.
    """
    if response is not None and (after := retry_after_seconds(response.headers)) is not None:
        return after
    backoff = min(BASE_DELAY_S * 2**attempt, MAX_DELAY_S)
    return backoff * (1 - 0.25 * random.random())
