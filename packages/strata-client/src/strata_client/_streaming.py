"""Server-sent events -> typed chunks, closing the HTTP response however iteration ends.

The server sends ``data: {json}`` events separated by blank lines and ends with
``data: [DONE]``. An event whose JSON has an ``"error"`` key is a failure reported after
the 200 status went out; it raises ``APIStatusError``. A connection that breaks or stalls
mid-stream raises ``APIConnectionError`` / ``APITimeoutError`` (never retried: chunks were
already delivered).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from typing import Generic, TypeVar

import httpx
from pydantic import BaseModel

from ._closing import AsyncClosing, Closing
from ._exceptions import StrataError, error_from_event, error_from_transport

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


def iter_sse_data(lines: Iterable[str]) -> Iterator[str]:
    """The data of each event in ``lines``, the last one even without a closing blank line."""
    decoder = SSEDecoder()
    for line in lines:
        if (data := decoder.feed(line)) is not None:
            yield data
    if (data := decoder.flush()) is not None:
        yield data


async def aiter_sse_data(lines: AsyncIterable[str]) -> AsyncIterator[str]:
    """Async twin of ``iter_sse_data``."""
    decoder = SSEDecoder()
    async for line in lines:
        if (data := decoder.feed(line)) is not None:
            yield data
    if (data := decoder.flush()) is not None:
        yield data


def decode_chunk(data: str, chunk_type: type[ChunkT], response: httpx.Response) -> ChunkT:
    """One event's JSON as a typed chunk; an ``"error"`` event raises APIStatusError."""
    try:
        event = json.loads(data)
    except json.JSONDecodeError as exc:
        raise StrataError(f"malformed stream event: {data[:200]!r}") from exc
    if isinstance(event, dict) and event.get("error") is not None:
        raise error_from_event(event, response)
    return chunk_type.model_validate(event)


class Stream(Closing, Generic[ChunkT]):
    """The chunks of a streamed response, iterated once.

    The response is closed when iteration ends for any reason: ``[DONE]``, an error, the
    caller breaking out of the loop (the loop's generator is finalised at once), or leaving
    a ``with`` block. Call ``close()`` when you hold the stream without iterating it.
    """

    def __init__(self, response: httpx.Response, chunk_type: type[ChunkT]) -> None:
        self.response = response
        self._chunk_type = chunk_type

    def __iter__(self) -> Iterator[ChunkT]:
        try:
            for data in iter_sse_data(self.response.iter_lines()):
                if data == DONE:
                    return
                yield decode_chunk(data, self._chunk_type, self.response)
        except httpx.TransportError as exc:
            raise error_from_transport(exc, self.response.request) from exc
        finally:
            self.close()

    def close(self) -> None:
        """Close the HTTP response, releasing its connection."""
        self.response.close()


class AsyncStream(AsyncClosing, Generic[ChunkT]):
    """Async twin of ``Stream``.

    Breaking out of an ``async for`` does not finalise the iterator at once (Python defers
    async generator cleanup), so use ``async with`` or ``await stream.close()`` to release
    the connection promptly when stopping early.
    """

    def __init__(self, response: httpx.Response, chunk_type: type[ChunkT]) -> None:
        self.response = response
        self._chunk_type = chunk_type

    async def __aiter__(self) -> AsyncIterator[ChunkT]:
        try:
            async for data in aiter_sse_data(self.response.aiter_lines()):
                if data == DONE:
                    return
                yield decode_chunk(data, self._chunk_type, self.response)
        except httpx.TransportError as exc:
            raise error_from_transport(exc, self.response.request) from exc
        finally:
            await self.close()

    async def close(self) -> None:
        """Close the HTTP response, releasing its connection."""
        await self.response.aclose()
