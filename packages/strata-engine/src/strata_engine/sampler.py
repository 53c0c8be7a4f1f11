"""Choosing the next token from one request's own log-probabilities and its own generator."""

from __future__ import annotations

import secrets

import numpy as np
import torch

from strata_engine import exactmath
from strata_engine.api import SamplingParams


class Sampler:
    """Per-request sampling state: a seeded generator makes sampled output repeatable."""

    def __init__(self, params: SamplingParams) -> None:
        self.params = params
        self.allowed = (
            np.array(sorted(set(params.allowed_token_ids)), dtype=np.int64)
            if params.allowed_token_ids
            else None
        )
        self.generator = torch.Generator()
        self.generator.manual_seed(params.seed if params.seed is not None else secrets.randbits(63))

    def sample(self, lp: torch.Tensor) -> int:
        """lp: fp32 log-probabilities over the vocabulary for this position.

        Every step is exact or uses exactmath, and the draw is one float64 from the request's
        own generator, so a seed gives the same token on every machine.
        """
        p = self.params
        scores = lp.double().numpy()
        if self.allowed is not None:
            masked = np.full_like(scores, -np.inf)
            masked[self.allowed] = scores[self.allowed]
            scores = masked
        if p.temperature <= 0.0:
            return int(np.argmax(scores))  # first maximum: ties go to the lower id
        scores = scores / p.temperature
        if 0 < p.top_k < scores.shape[0]:
            kth = np.partition(scores, -p.top_k)[-p.top_k]
            scores = np.where(scores < kth, -np.inf, scores)
        probs = exactmath.softmax(scores)
        if p.top_p < 1.0:
            order = np.argsort(-probs, kind="stable")
            sorted_p = probs[order]
            keep = np.cumsum(sorted_p) - sorted_p < p.top_p  # cumsum runs in order: exact sequence
            keep[0] = True
            probs = np.zeros_like(probs)
            probs[order[keep]] = sorted_p[keep]
        cumulative = np.cumsum(probs)
        u = float(torch.rand((), generator=self.generator, dtype=torch.float64))
        index = int(np.searchsorted(cumulative, u * cumulative[-1], side="right"))
        return min(index, int(np.flatnonzero(probs)[-1]))  # u * total may round up to the total
