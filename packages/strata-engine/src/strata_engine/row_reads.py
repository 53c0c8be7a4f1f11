"""Which entries of a log-probability row the host reads, and the row it gets when not all of them.

A backend that selects on the device (`Ops.selects_on_device`, the Triton one) copies back a
row's K best entries and the values at the ids a request names instead of the whole vocabulary,
for the rows that `read_for` (the one rule) says need no more: greedy draws and scoring. The
host then holds a `SparseRow`, which the sampler and `logprobs.build_row` read through the same
few questions as a full row (values at ids, the n best, the greedy draw) and which raises
`NotFetched` for anything it was not given, so a reader cannot see a value that was not copied.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

import numpy as np

from strata_engine.api import Request, SamplingParams

TOP_BUCKETS = (32, 64)  # K, the best entries a sparse row holds: one kernel binary per bucket
MAX_IDS = 1024  # ids a sparse row may name (named + allowed + renormalised + top_within + chosen)


class NotFetched(LookupError):
    """A reader asked a sparse row for what was not copied back (a bug in `read_for`'s rule)."""


@dataclass(frozen=True)
class RowRead:
    """What the host reads of one row: its `top` best entries and the values at `ids`."""

    top: int
    ids: tuple[int, ...]  # sorted, distinct


def samples_sparsely(s: SamplingParams, num_generated: int, eog_ids: Collection[int]) -> bool:
    """Whether the draw reads nothing but the row's first maximum (and the allowed ids' values):
    greedy, with no processor that changes values (bias, penalties), no grammar, and no
    `min_tokens` still blocking stop ids (the sampler's `mask` states the same conditions)."""
    if s.temperature > 0 or s.logit_bias or s.presence_penalty or s.frequency_penalty:
        return False
    if s.structured is not None:
        return False
    return not (num_generated < s.min_tokens and (s.stop_token_ids or (not s.ignore_eos and eog_ids)))


def read_for(
    request: Request,
    *,
    prompt_token: int | None,
    samples: bool,
    num_generated: int,
    eog_ids: Collection[int],
) -> RowRead | None:
    """The one rule: what the host reads of a row, or None when it needs the full vocabulary.

    `prompt_token` is the prompt token this row scores (None: it scores none); `samples` says a
    token is drawn from it. Full rows: a draw at temperature > 0 or with processors, a grammar
    or a `min_tokens` block (`samples_sparsely`), a prompt rank (`prompt_top_n` on a prompt
    row), more than the largest K best entries, or more than MAX_IDS named ids.
    """
    p, s = request.logprobs, request.sampling
    listed = (*p.named_ids, *(p.renormalize_over or ()), *(p.top_within or ()))
    top, ids = 0, set[int]()
    if samples:
        if not samples_sparsely(s, num_generated, eog_ids):
            return None
        top = max(1, p.top_n or 0)  # the greedy draw is the first of the best entries
        ids.update(s.allowed_token_ids or ())
        ids.update(listed)
    if prompt_token is not None:
        if p.prompt_top_n is not None:  # a rank counts the whole vocabulary
            return None
        top = max(top, p.top_n or 0)
        ids.add(prompt_token)
        ids.update(listed)
    if top > TOP_BUCKETS[-1] or len(ids) > MAX_IDS:
        return None
    return RowRead(top, tuple(sorted(ids)))


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

    @classmethod
    def of(
        cls,
        vocab: int,
        top: Iterable[tuple[int, float]],
        first_nan: tuple[int, float] | None,
        named: Iterable[tuple[int, float]],
    ) -> SparseRow:
        """A row from the device's best entries, its first NaN (id, value) and named values."""
        top = tuple(top)
        pairs = dict(named)
        pairs.update(top)
        if first_nan is not None:
            pairs[first_nan[0]] = first_nan[1]
        ids = np.array(sorted(pairs), dtype=np.int64)
        values = np.array([pairs[i] for i in ids.tolist()], dtype=np.float32)
        return cls(vocab, top, ids, values, None if first_nan is None else first_nan[0])

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
