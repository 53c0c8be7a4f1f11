# Generated from strata_client/_async/streaming.py by scripts/unasync.py: do not edit.
# Regenerate: python packages/strata-client/scripts/unasync.py
"""``Stream``: a streamed response's typed chunks, the response closed however iteration ends."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Generic

import httpx

from .._exceptions import error_from_transport
from .._streaming import DONE, ChunkT, SSEDecoder, decode_chunk
from .closing import Closing


def iter_sse_data(lines: Iterable[str]) -> Iterator[str]:
    """The data of each event in ``lines``, the last one even without a closing blank line."""
    decoder = SSEDecoder()
    for line in lines:
        if (data := decoder.feed(line)) is not None:
            yield data
    if (data := decoder.flush()) is not None:
        yield data


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
