"""Choosing the next token from one request's own log-probabilities and its own generator.

The draw is one pipeline: the raw row -> the request's logit processors (`logit_bias`,
presence/frequency penalties, all additive) -> masks (`allowed_token_ids`, `min_tokens`)
-> temperature, top-k, top-p -> one draw. Only the draw sees the processed scores; the
rows a response reports are built from the raw row elsewhere. Everything a step reads is
the request's own (its params, its generated ids), so a request's tokens never depend on
its batch.
"""

from __future__ import annotations

import random
import secrets
from collections.abc import Collection, Sequence

import numpy as np
import numpy.typing as npt

from strata_engine import exactmath
from strata_engine.api import SamplingParams
from strata_engine.kernels.rows import NotFetched, SparseRow
from strata_engine.row_reads import draws_among_allowed, samples_sparsely
from strata_engine.structured import Guide

Scores = npt.NDArray[np.float64]


class Uniform:
    """Seeded float64 draws in [0, 1): the draws of a CPU `torch.Generator` given the same seed.

    torch's generator is a 32-bit Mersenne Twister seeded with the seed's low 32 bits; a
    double takes two outputs (first high, then low) and keeps their low 53 bits. Python's
    `random` runs the same twister, so it is given that state and asked for 32 bits at a time:
    a seed draws the same tokens it drew when the engine used torch, without importing it.
    """

    def __init__(self, seed: int) -> None:
        state = [seed & 0xFFFFFFFF]
        for i in range(1, 624):
            state.append((1812433253 * (state[-1] ^ (state[-1] >> 30)) + i) & 0xFFFFFFFF)
        self._twister = random.Random()
        self._twister.setstate((3, (*state, 624), None))

    def draw(self) -> float:
        high, low = self._twister.getrandbits(32), self._twister.getrandbits(32)
        return (((high << 32) | low) & ((1 << 53) - 1)) * 2.0**-53


class Sampler:
    """Per-request sampling state: a seeded generator makes sampled output repeatable."""

    def __init__(self, params: SamplingParams, guide: Guide | None = None) -> None:
        self.params = params
        self.guide = guide  # structured output: the sequence's own matcher, None when unconstrained
        # a repeated id only writes its own score twice: the mask needs no de-duplication
        self.allowed = (
            np.asarray(params.allowed_token_ids, dtype=np.int64) if params.allowed_token_ids else None
        )
        self.bias_ids = np.array([i for i, _ in params.logit_bias], dtype=np.int64)
        self.bias_values = np.array([v for _, v in params.logit_bias], dtype=np.float64)
        self.uniform = Uniform(params.seed if params.seed is not None else secrets.randbits(63))

    def sample(
        self, lp: np.ndarray | SparseRow, output_ids: Sequence[int] = (), eog_ids: Collection[int] = ()
    ) -> int:
        """lp: fp32 log-probabilities over the vocabulary for this position (or the device's
        selection of them, row_reads.py); `output_ids` the tokens this request generated so far;
        `eog_ids` the model's end-of-generation ids.

        Every step is exact or uses exactmath, and the draw is one float64 from the request's
        own generator, so a seed gives the same token on every machine.
        """
        if isinstance(lp, SparseRow):
            if lp.drawn is not None:  # the device drew it by `draw`'s rule (row_reads.py)
                return lp.drawn
            if samples_sparsely(self.params, len(output_ids), eog_ids):  # np.argmax's answer
                return lp.argmax(self.params.allowed_token_ids or None)
            if not draws_among_allowed(self.params, len(output_ids), eog_ids):
                raise NotFetched("this draw reads the whole row, and the device copied back part of it")
            allowed = np.unique(np.asarray(self.params.allowed_token_ids, dtype=np.int64))  # the rest: -inf
            index = self.draw(lp.take(allowed.tolist()).astype(np.float64), lp.vocab)
            return int(allowed[index]) if index >= 0 else lp.argmax(self.params.allowed_token_ids)
        scores = self.process(lp.astype(np.float64), output_ids)
        scores = self.mask(scores, len(output_ids), eog_ids)
        return self.draw(scores)

    def process(self, scores: Scores, output_ids: Sequence[int]) -> Scores:
        """The additive logit processors, as vLLM applies them to logits.

        Adding a constant per id commutes with log-softmax's shift, so applying them to the
        log-probabilities gives the distribution vLLM gets from the logits. Presence and
        frequency penalties count the generated ids only (not the prompt), as vLLM does.
        """
        p = self.params
        if self.bias_ids.size:
            scores = scores.copy()
            np.add.at(scores, self.bias_ids, self.bias_values)
        if (p.presence_penalty or p.frequency_penalty) and output_ids:
            counts = np.bincount(np.asarray(output_ids, dtype=np.int64), minlength=scores.shape[0])
            scores = scores - (p.frequency_penalty * counts + p.presence_penalty * (counts > 0))
        return scores

    def mask(self, scores: Scores, num_generated: int, eog_ids: Collection[int]) -> Scores:
        """Ids that may not be drawn now get -inf: outside `allowed_token_ids`, or a stop id
        before `min_tokens` tokens (unless every id left is a stop id: then it may end)."""
        p = self.params
        if self.allowed is not None:
            masked = np.full_like(scores, -np.inf)
            masked[self.allowed] = scores[self.allowed]
            scores = masked
        if self.guide is not None:  # the ids the grammar allows next (a copy: the row stays raw)
            scores = np.where(self.guide.mask(), scores, -np.inf)
        if num_generated < p.min_tokens:
            stops = set(p.stop_token_ids) | (set() if p.ignore_eos else set(eog_ids))
            if stops:
                blocked = scores.copy()
                blocked[np.fromiter(stops, dtype=np.int64)] = -np.inf
                if np.isfinite(blocked).any():
                    scores = blocked
        return scores

    def draw(self, scores: Scores, vocab: int | None = None) -> int:
        """Greedy at temperature 0; else temperature, top-k, top-p and one seeded draw.

        `scores` is the row, or (with `vocab`, the row's length) the sorted allowed ids' scores
        of a row whose every other id is -inf: the draw is then the same id's index in them, or
        -1 where the whole row's draw would fall back to np.argmax (the caller's to apply).

        The draw is made from integer weights (`exactmath.draw_weights`) whose sums are exact in
        any order: top-p keeps the best ids (weight descending, ties to the lower id) while the
        weight before each is below top_p of the total, and the token is the first id whose
        running sum (in id order) passes floor(u * total). The Triton draw kernel computes the
        same integers (kernels/triton/draw.py), so a device draws the CPU's token. NaN scores are
        never drawn; a row with no finite maximum falls back to np.argmax (the greedy rule).
        """
        p = self.params
        if p.temperature <= 0.0:
            return int(np.argmax(scores))  # first maximum: ties go to the lower id
        u = self.uniform.draw()  # one draw a step, whatever the row holds
        s = scores / p.temperature
        s = np.where(np.isnan(s), -np.inf, s)
        if 0 < p.top_k < (s.shape[0] if vocab is None else vocab):
            # the k-th best of the row (-inf when the k-th best is one of the ids left out)
            kth = np.partition(s, -p.top_k)[-p.top_k] if p.top_k <= s.shape[0] else -np.inf
            s = np.where(s < kth, -np.inf, s)
        with np.errstate(invalid="ignore"):  # no finite maximum: -inf - -inf is NaN, weight 0
            weights = exactmath.draw_weights(s - s.max())
        if p.top_p < 1.0:
            order = np.argsort(-weights, kind="stable")
            before = np.cumsum(weights[order]) - weights[order]  # exact integers, < 2^53
            keep = before < p.top_p * float(weights.sum())
            keep[0] = True
            kept = np.zeros(s.shape[0], dtype=bool)
            kept[order[keep]] = True
            weights = np.where(kept, weights, 0)
        total = int(weights.sum())
        if total == 0:  # no finite maximum: nothing to weigh
            return int(np.argmax(scores)) if vocab is None else -1
        target = min(int(u * float(total)), total - 1)  # u * total may round up to the total
        return int(np.searchsorted(np.cumsum(weights), target, side="right"))
