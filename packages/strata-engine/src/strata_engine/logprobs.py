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


def best_first(pairs: Iterable[tuple[int, float]], n: int) -> tuple[tuple[int, float], ...]:
    """The n best (id, value) pairs, descending, ties broken by the lower id (NaN counts as -inf).

    The one tie rule for every listing: the natural top-N and a top-N within a set alike.
    """
    if n <= 0:
        return ()
    return tuple(sorted(pairs, key=lambda p: (-(-math.inf if math.isnan(p[1]) else p[1]), p[0]))[:n])


def top_n(lp: np.ndarray, n: int) -> tuple[tuple[int, float], ...]:
    """The n best (id, value) pairs of the whole vocabulary (see `best_first`)."""
    if n <= 0:
        return ()
    k = min(n + 8, lp.shape[0])  # a little slack so ties at the edge resolve by id
    ids = np.argpartition(-lp, k - 1)[:k] if k < lp.shape[0] else np.arange(k)
    return best_first(zip(ids.tolist(), lp[ids].tolist(), strict=True), n)


def values_of(lp: np.ndarray, ids: tuple[int, ...]) -> dict[int, float]:
    """The raw values of `ids` at one position."""
    return dict(zip(ids, lp[np.array(ids, dtype=np.int64)].tolist(), strict=True))


def renormalized(lp: np.ndarray, ids: tuple[int, ...]) -> dict[int, float]:
    """The values of `ids` renormalised over that set (in float64 with exactmath: the same bits
    on every machine, unlike a library's logsumexp)."""
    sub = lp[np.array(ids, dtype=np.int64)].astype(np.float64)
    return dict(zip(ids, exactmath.log_normalize(sub).tolist(), strict=True))


def listing(
    lp: np.ndarray,
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


def rank_of(lp: np.ndarray, token_id: int) -> int:
    """The token's rank in the vocabulary as vLLM counts it: ids whose value is >= its value."""
    return int(np.count_nonzero(lp >= lp[token_id]))


def build_row(lp: np.ndarray, token_id: int, params: LogprobParams, prompt: bool = False) -> LogprobRow:
    """The row for one position of one request; `lp` is that position's fp32 log-probabilities.

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
        logprob=float(lp[token_id]),
        top=top,
        named=named,
        renormalized=renorm,
        listed=listing(lp, params, top, named, renorm),
        rank=rank_of(lp, token_id) if ranked else None,
        prompt_top=prompt_top,
    )
