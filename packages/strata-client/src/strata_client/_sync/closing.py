# Generated from strata_client/_async/closing.py by scripts/unasync.py: do not edit.
# Regenerate: python packages/strata-client/scripts/unasync.py
"""`with` support for everything that holds a connection and has `close()`."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class Closing:
    """Closes itself on leaving its `with` block."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
