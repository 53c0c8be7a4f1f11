"""``AsyncStream``: a streamed response's typed chunks, the response closed however iteration ends."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from typing import Generic

import httpx

from .._exceptions import error_from_transport
from .._streaming import DONE, ChunkT, SSEDecoder, decode_chunk
from .closing import AsyncClosing


async def aiter_sse_data(lines: AsyncIterable[str]) -> AsyncIterator[str]:
    """The data of each event in ``lines``, the last one even without a closing blank line."""
    decoder = SSEDecoder()
    async for line in lines:
        if (data := decoder.feed(line)) is not None:
            yield data
    if (data := decoder.flush()) is not None:
        yield data


class AsyncStream(AsyncClosing, Generic[ChunkT]):
    # unasync: sync has
    # """The chunks of a streamed response, iterated once.
    #
    # The response is closed when iteration ends for any reason: ``[DONE]``, an error, the
    # caller breaking out of the loop (the loop's generator is finalised at once), or leaving
    # a ``with`` block. Call ``close()`` when you hold the stream without iterating it.
    # """
    # unasync: async has
    """Async twin of ``Stream``.

    Breaking out of an ``async for`` does not finalise the iterator at once (Python defers
    async generator cleanup), so use ``async with`` or ``await stream.close()`` to release
    the connection promptly when stopping early.
    """

    # unasync: end

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
