"""What the host holds of a log-probability row when a backend selects on the device.

A backend that selects on the device (`Ops.selects_on_device`, the Triton one) copies back a
row's K best entries and the values at the ids a request names instead of the whole vocabulary,
for the rows the engine's rule (`strata_engine.row_reads.read_for`) says need no more. These are
the types that pass between the engine and such a backend: `RowRead` (what to copy back of a
row), `SparseRow` (what came back; the sampler and `logprobs.build_row` read it through the same
few questions as a full row, and it raises `NotFetched` for anything it was not given, so a
reader cannot see a value that was not copied) and `Row` (either).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np

TOP_BUCKETS = (32, 64)  # K, the best entries a sparse row holds: one kernel binary per bucket


class NotFetched(LookupError):
    """A reader asked a sparse row for what was not copied back (a bug in `read_for`'s rule)."""


@dataclass(frozen=True)
class DeviceDraw:
    """A draw at temperature > 0 made on the device by the sampler's rule (`Sampler.draw`): the
    request's temperature, top-k (0: none; at most the selection's K) and top-p, and the next
    uniform of its generator (taken on the host, so a seed draws the same tokens anywhere)."""

    temperature: float
    top_k: int
    top_p: float
    u: float


@dataclass(frozen=True)
class RowRead:
    """What the host reads of one row: its `top` best entries and the values at `ids`, and the
    token drawn from it on the device when `draw` is set."""

    top: int
    ids: tuple[int, ...]  # sorted, distinct
    draw: DeviceDraw | None = None


def bucket(top: int) -> int:
    """The K a step's selection runs with: the smallest bucket holding `top` best entries."""
    return next(k for k in TOP_BUCKETS if k >= top)


@dataclass(frozen=True, eq=False)
class SparseRow:
    """What the device copied back of one fp32 log-probability row (see the module docstring)."""

    vocab: int
    top: tuple[tuple[int, float], ...]  # the row's min(K, vocab) best, in `best_first`'s order
    ids: np.ndarray  # int64, sorted and distinct: every id whose value was copied back
    values: np.ndarray  # fp32 values at `ids` (the row's own bits)
    first_nan: int | None  # the row's lowest NaN id (what np.argmax answers for a full row)
    drawn: int | None = None  # the token the device drew from this row (RowRead.draw), if any

    @classmethod
    def of(
        cls,
        vocab: int,
        top: Iterable[tuple[int, float]],
        first_nan: tuple[int, float] | None,
        named: Iterable[tuple[int, float]],
        drawn: tuple[int, float] | None = None,
    ) -> SparseRow:
        """A row from the device's best entries, its first NaN (id, value), named values and
        the device's draw (id, value; id -1: the row had no finite maximum to draw from, and
        the draw is the greedy rule's, `argmax`, as on the host)."""
        top = tuple(top)
        pairs = dict(named)
        pairs.update(top)
        if first_nan is not None:
            pairs[first_nan[0]] = first_nan[1]
        if drawn is not None and drawn[0] >= 0:
            pairs[drawn[0]] = drawn[1]
        ids = np.array(sorted(pairs), dtype=np.int64)
        values = np.array([pairs[i] for i in ids.tolist()], dtype=np.float32)
        row = cls(vocab, top, ids, values, None if first_nan is None else first_nan[0])
        if drawn is None:
            return row
        return replace(row, drawn=drawn[0] if drawn[0] >= 0 else row.argmax())

    def take(self, ids: Iterable[int]) -> np.ndarray:
        """fp32 values at `ids` (in that order), as a full row's `lp[ids]`; NotFetched if any
        of them was not copied back."""
        want = np.fromiter(ids, dtype=np.int64)
        at = np.searchsorted(self.ids, want)
        if want.size and (
            at.max() >= self.ids.size or (self.ids[np.minimum(at, self.ids.size - 1)] != want).any()
        ):
            raise NotFetched(f"a sparse row holds no value for some of ids {want.tolist()[:8]}")
        return self.values[at]

    def best(self, n: int) -> tuple[tuple[int, float], ...]:
        """The n best entries (`logprobs.top_n`'s answer); NotFetched beyond the K copied."""
        if n > len(self.top) and len(self.top) < self.vocab:
            raise NotFetched(f"a sparse row holds its {len(self.top)} best entries, not {n}")
        return self.top[: max(n, 0)]

    def argmax(self, allowed: tuple[int, ...] | None = None) -> int:
        """np.argmax of the row (the greedy draw), or of the row with every id outside `allowed`
        at -inf: the first NaN if any, else the first maximum (0 when every value is -inf)."""
        if allowed is None:
            return self.top[0][0] if self.first_nan is None else self.first_nan
        ids = np.unique(np.asarray(allowed, dtype=np.int64))
        values = self.take(ids.tolist())
        nan = np.flatnonzero(np.isnan(values))
        if nan.size:
            return int(ids[nan[0]])
        best = values.max()
        return 0 if best == -np.inf else int(ids[np.flatnonzero(values == best)[0]])


Row = np.ndarray | SparseRow  # what the host holds of one row: all of it (fp32), or the selection
