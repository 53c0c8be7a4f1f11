"""Every token's bytes in one buffer: a vocabulary's token texts without an object each.

A list of 262k `bytes` objects (Gemma 3's vocabulary) holds 12 MiB, mostly object headers;
the same bytes back to back with their offsets hold under 4 MiB. Indexing returns a fresh
`bytes` equal to the list's element, so readers index it as they indexed the list.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from typing import overload


class PackedBytes(Sequence[bytes]):
    """An immutable sequence of `bytes`, stored as one buffer and an offset per element."""

    __slots__ = ("_data", "_ends")

    def __init__(self, items: Iterable[bytes]) -> None:
        data, ends = bytearray(), array("q")  # appended to: no list of every item on the way
        for item in items:
            data += item
            ends.append(len(data))
        self._data = bytes(data)
        self._ends = ends

    def __len__(self) -> int:
        return len(self._ends)

    @overload
    def __getitem__(self, i: int) -> bytes: ...
    @overload
    def __getitem__(self, i: slice) -> list[bytes]: ...
    def __getitem__(self, i: int | slice) -> bytes | list[bytes]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        ends = self._ends
        if i < 0:
            i += len(ends)
        if not 0 <= i < len(ends):
            raise IndexError("token id out of range")
        return self._data[ends[i - 1] if i else 0 : ends[i]]
