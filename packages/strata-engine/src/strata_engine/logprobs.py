"""The logprob tail: fp32 log_softmax over the full vocabulary, then what a request asked for.

One function turns one position's log-probabilities into that request's `LogprobRow`, so a
token's value is the same float wherever it is reported (chosen, top-N, named, prompt).
"""

from __future__ import annotations

import torch

from strata_engine.api import LogprobParams, LogprobRow


def log_softmax_rows(logits: torch.Tensor) -> torch.Tensor:
    """fp32 log-probabilities, one row at a time, so a row's bits never depend on its neighbours."""
    return torch.stack([torch.log_softmax(row, dim=-1) for row in logits.float()]) if len(logits) else logits


def top_n(lp: torch.Tensor, n: int) -> tuple[tuple[int, float], ...]:
    """The n best (id, value) pairs, descending, ties broken by the lower id."""
    if n <= 0:
        return ()
    k = min(n + 8, lp.shape[0])  # a little slack so ties at the edge resolve by id
    values, ids = torch.topk(lp, k)
    pairs = sorted(zip(ids.tolist(), values.tolist(), strict=True), key=lambda p: (-p[1], p[0]))
    return tuple(pairs[:n])


def build_row(lp: torch.Tensor, token_id: int, params: LogprobParams, top: int) -> LogprobRow:
    """The row for one position of one request; `lp` is that position's fp32 log-probabilities."""
    named: dict[int, float] = {}
    if params.named_ids:
        ids = torch.tensor(params.named_ids, dtype=torch.int64)
        named = dict(zip(params.named_ids, lp[ids].tolist(), strict=True))
    renorm = None
    if params.renormalize_over:
        ids = torch.tensor(params.renormalize_over, dtype=torch.int64)
        sub = lp[ids].double()
        renorm = dict(zip(params.renormalize_over, (sub - torch.logsumexp(sub, 0)).tolist(), strict=True))
    return LogprobRow(
        token_id=token_id,
        logprob=float(lp[token_id]),
        top=top_n(lp, top),
        named=named,
        renormalized=renorm,
    )
