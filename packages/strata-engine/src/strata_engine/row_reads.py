"""Which entries of a log-probability row the host reads: the one rule, `read_for`.

A backend that selects on the device (`Ops.selects_on_device`, the Triton one) copies back a
row's K best entries and the values at the ids a request names instead of the whole vocabulary
(kernels/rows.py), for the rows this rule says need no more: greedy draws, scoring, draws at
temperature > 0 that the device makes itself (`DeviceDraw`, by the sampler's own rule), and
draws among allowed ids, which the host makes from those ids' values.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from strata_engine.api import Request, SamplingParams
from strata_engine.kernels.rows import TOP_BUCKETS, DeviceDraw, RowRead

MAX_IDS = 1024  # ids a sparse row may name (named + allowed + renormalised + top_within + chosen)


def reads_raw(s: SamplingParams, num_generated: int, eog_ids: Collection[int]) -> bool:
    """Whether a draw reads the raw row: no processor that changes values (bias, penalties), no
    grammar, and no `min_tokens` still blocking stop ids (the sampler's `mask` states the same)."""
    if s.logit_bias or s.presence_penalty or s.frequency_penalty or s.structured is not None:
        return False
    return not (num_generated < s.min_tokens and (s.stop_token_ids or (not s.ignore_eos and eog_ids)))


def samples_sparsely(s: SamplingParams, num_generated: int, eog_ids: Collection[int]) -> bool:
    """Whether the draw reads nothing but the row's first maximum (and the allowed ids' values):
    greedy, on the raw row."""
    return s.temperature <= 0 and reads_raw(s, num_generated, eog_ids)


def draws_on_device(s: SamplingParams, num_generated: int, eog_ids: Collection[int]) -> bool:
    """Whether the device may draw the token itself: temperature > 0 on the raw row, no allowed
    ids, and a top-k the selection holds (its K-th best value is the cut)."""
    return (
        s.temperature > 0
        and reads_raw(s, num_generated, eog_ids)
        and s.allowed_token_ids is None
        and s.top_k <= TOP_BUCKETS[-1]
    )


def draws_among_allowed(s: SamplingParams, num_generated: int, eog_ids: Collection[int]) -> bool:
    """Whether a draw at temperature > 0 reads only its allowed ids' values: on the raw row, with
    `allowed_token_ids` (every other id is -inf, so the host draws from those values alone)."""
    return s.temperature > 0 and s.allowed_token_ids is not None and reads_raw(s, num_generated, eog_ids)


def read_for(
    request: Request,
    *,
    prompt_token: int | None,
    samples: bool,
    num_generated: int,
    eog_ids: Collection[int],
    uniform: Callable[[], float] | None = None,
) -> RowRead | None:
    """The one rule: what the host reads of a row, or None when it needs the full vocabulary.

    `prompt_token` is the prompt token this row scores (None: it scores none); `samples` says a
    token is drawn from it; `uniform` is the request's generator, called once when the device
    draws (None: no device draws). Full rows: a draw with processors, a grammar or a `min_tokens`
    block, a draw at temperature > 0 without allowed ids and with a top-k beyond the largest K
    (or without `uniform`), a prompt rank (`prompt_top_n` on a prompt row), more than the
    largest K best entries, or more than MAX_IDS named ids (allowed ids included).
    """
    p, s = request.logprobs, request.sampling
    listed = (*p.named_ids, *(p.renormalize_over or ()), *(p.top_within or ()))
    top, ids = 0, set[int]()
    device_draw = samples and uniform is not None and draws_on_device(s, num_generated, eog_ids)
    if samples:
        if not (
            samples_sparsely(s, num_generated, eog_ids)
            or device_draw
            or draws_among_allowed(s, num_generated, eog_ids)
        ):
            return None
        top = max(1, p.top_n or 0, s.top_k if device_draw else 0)  # the draw's first/k-th best
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
    if not device_draw or uniform is None:
        return RowRead(top, tuple(sorted(ids)))
    # the generator's draw is taken only now, when the device will use it (else the host does)
    return RowRead(top, tuple(sorted(ids)), DeviceDraw(s.temperature, s.top_k, s.top_p, uniform()))
