"""The logprob tail: fp32 log_softmax over the full vocabulary, then what a request asked for.

One function turns one position's log-probabilities into that request's `LogprobRow`, so a
token's value is the same float wherever it is reported (chosen, top-N, named, prompt).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from strata_engine import exactmath
from strata_engine.api import LogprobParams, LogprobRow
from strata_engine.kernels.rows import NotFetched, Row, SparseRow


def best_first(pairs: Iterable[tuple[int, float]], n: int) -> tuple[tuple[int, float], ...]:
    """The n best (id, value) pairs, descending, ties broken by the lower id (NaN counts as -inf).

    The one tie rule for every listing: the natural top-N and a top-N within a set alike.
    """
    if n <= 0:
        return ()
    return tuple(sorted(pairs, key=lambda p: (-(-math.inf if math.isnan(p[1]) else p[1]), p[0]))[:n])


def top_n(lp: Row, n: int) -> tuple[tuple[int, float], ...]:
    """The n best (id, value) pairs of the whole vocabulary (see `best_first`)."""
    if n <= 0:
        return ()
    if isinstance(lp, SparseRow):
        return lp.best(n)  # the device's selection, in the same order
    k = min(n + 8, lp.shape[0])  # a little slack so ties at the edge resolve by id
    ids = np.argpartition(-lp, k - 1)[:k] if k < lp.shape[0] else np.arange(k)
    top = best_first(zip(ids.tolist(), lp[ids].tolist(), strict=True), n)
    if k == lp.shape[0] or top[-1][1] > lp[ids[k - 1]]:
        return top  # every id left out is below the n-th value: no tie crosses the partition
    # ties of the n-th value beyond the slack: the partition may have kept higher ids than it left
    edge = top[-1][1]
    ids = np.flatnonzero(lp >= edge) if edge > -math.inf else np.arange(lp.shape[0])
    return best_first(zip(ids.tolist(), lp[ids].tolist(), strict=True), n)


def values_at(lp: Row, ids: tuple[int, ...]) -> np.ndarray:
    """fp32 values of `ids` (in that order) at one position."""
    return lp.take(ids) if isinstance(lp, SparseRow) else lp[np.array(ids, dtype=np.int64)]


def values_of(lp: Row, ids: tuple[int, ...]) -> dict[int, float]:
    """The raw values of `ids` at one position."""
    return dict(zip(ids, values_at(lp, ids).tolist(), strict=True))


def renormalized(lp: Row, ids: tuple[int, ...]) -> dict[int, float]:
    """The values of `ids` renormalised over that set (in float64 with exactmath: the same bits
    on every machine, unlike a library's logsumexp)."""
    sub = values_at(lp, ids).astype(np.float64)
    return dict(zip(ids, exactmath.log_normalize(sub).tolist(), strict=True))


def listing(
    lp: Row,
    params: LogprobParams,
    top: tuple[tuple[int, float], ...],
    named: dict[int, float],
    renorm: dict[int, float] | None,
) -> tuple[tuple[int, float], ...]:
    """Exactly the alternatives a response lists at one position, best first.

    The top `top_n` over the renormalised set when renormalising, else within `top_within`
    (raw values), else the natural `top`; then each named id not already listed, with its
    raw value, in the order asked.
    """
    n = params.top_n or 0
    if renorm is not None:
        pairs = best_first(renorm.items(), n)
    elif params.top_within is not None:
        pairs = best_first(values_of(lp, params.top_within).items(), n)
    else:
        pairs = top
    listed = {token_id for token_id, _ in pairs}
    extra = tuple((i, named[i]) for i in dict.fromkeys(params.named_ids) if i not in listed)
    return pairs + extra


def rank_of(lp: Row, token_id: int) -> int:
    """The token's rank in the vocabulary as vLLM counts it: ids whose value is >= its value."""
    if isinstance(lp, SparseRow):
        raise NotFetched("a rank counts the whole vocabulary: the row must be read in full")
    return int(np.count_nonzero(lp >= lp[token_id]))


def build_row(lp: Row, token_id: int, params: LogprobParams, prompt: bool = False) -> LogprobRow:
    """The row for one position of one request; `lp` is that position's fp32 log-probabilities
    (or the part of them the device selected, row_reads.py: the same values where it holds any).

    `prompt` marks a prompt position, which also gets the rank and natural top N of vLLM's
    `prompt_logprobs` when `params.prompt_top_n` asks (the values are the same floats).
    """
    named = values_of(lp, params.named_ids) if params.named_ids else {}
    renorm = renormalized(lp, params.renormalize_over) if params.renormalize_over else None
    natural = renorm is None and params.top_within is None  # else the natural top-N is not shown
    top = top_n(lp, params.top_n or 0) if natural else ()
    ranked = prompt and params.prompt_top_n is not None
    prompt_top: tuple[tuple[int, float], ...] = ()
    if ranked and params.prompt_top_n:
        prompt_top = (
            top if natural and params.top_n == params.prompt_top_n else top_n(lp, params.prompt_top_n)
        )
    return LogprobRow(
        token_id=token_id,
        logprob=float(values_at(lp, (token_id,))[0]),
        top=top,
        named=named,
        renormalized=renorm,
        listed=listing(lp, params, top, named, renorm),
        rank=rank_of(lp, token_id) if ranked else None,
        prompt_top=prompt_top,
    )
