"""Which entries of a log-probability row the host reads: the one rule, `read_for`.

A backend that selects on the device (`Ops.selects_on_device`, the Triton one) copies back a
row's K best entries and the values at the ids a request names instead of the whole vocabulary
(kernels/rows.py), for the rows this rule says need no more: greedy draws and scoring.
"""

from __future__ import annotations

from collections.abc import Collection

from strata_engine.api import Request, SamplingParams
from strata_engine.kernels.rows import TOP_BUCKETS, RowRead

MAX_IDS = 1024  # ids a sparse row may name (named + allowed + renormalised + top_within + chosen)


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
