"""Server-sent events -> typed chunks; the streams themselves are in ``_async`` and ``_sync``.

The server sends ``data: {json}`` events separated by blank lines and ends with
``data: [DONE]``. An event whose JSON has an ``"error"`` key is a failure reported after
the 200 status went out; it raises ``APIStatusError``. A connection that breaks or stalls
mid-stream raises ``APIConnectionError`` / ``APITimeoutError`` (never retried: chunks were
already delivered).
"""

from __future__ import annotations

import json
from typing import TypeVar

import httpx
from pydantic import BaseModel

from ._exceptions import StrataError, error_from_event

ChunkT = TypeVar("ChunkT", bound=BaseModel)

DONE = "[DONE]"


class SSEDecoder:
    """Collects the ``data`` lines of one event; a blank line ends the event.

    Only the ``data`` field matters to these routes; comments (``:``) and other fields
    (``event``, ``id``, ``retry``) are skipped.
    """

    def __init__(self) -> None:
        self._data: list[str] = []

    def feed(self, line: str) -> str | None:
        """Take one line (without its line ending); return an event's data when it ends."""
        if not line:
            return self.flush()
        name, _, value = line.partition(":")
        if name == "data":
            self._data.append(value.removeprefix(" "))
        return None

    def flush(self) -> str | None:
        """The data collected so far as one event (None if there is none)."""
        if not self._data:
            return None
        data = "\n".join(self._data)
        self._data = []
        return data


def decode_chunk(data: str, chunk_type: type[ChunkT], response: httpx.Response) -> ChunkT:
    """One event's JSON as a typed chunk; an ``"error"`` event raises APIStatusError."""
    try:
        event = json.loads(data)
    except json.JSONDecodeError as exc:
        raise StrataError(f"malformed stream event: {data[:200]!r}") from exc
    if isinstance(event, dict) and event.get("error") is not None:
        raise error_from_event(event, response)
    return chunk_type.model_validate(event)
