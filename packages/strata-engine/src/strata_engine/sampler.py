"""Choosing the next token from one request's own log-probabilities and its own generator."""

from __future__ import annotations

import secrets

import torch

from strata_engine.api import SamplingParams


class Sampler:
    """Per-request sampling state: a seeded generator makes sampled output repeatable."""

    def __init__(self, params: SamplingParams) -> None:
        self.params = params
        self.allowed = (
            torch.tensor(sorted(set(params.allowed_token_ids)), dtype=torch.int64)
            if params.allowed_token_ids
            else None
        )
        self.generator = torch.Generator()
        self.generator.manual_seed(params.seed if params.seed is not None else secrets.randbits(63))

    def sample(self, lp: torch.Tensor) -> int:
        """lp: fp32 log-probabilities over the vocabulary for this position."""
        p = self.params
        scores = lp.double()
        if self.allowed is not None:
            masked = torch.full_like(scores, float("-inf"))
            masked[self.allowed] = scores[self.allowed]
            scores = masked
        if p.temperature <= 0.0:
            return int(torch.argmax(scores))  # first maximum: ties go to the lower id
        scores = scores / p.temperature
        if p.top_k > 0 and p.top_k < scores.shape[0]:
            kth = torch.topk(scores, p.top_k).values[-1]
            scores = torch.where(scores < kth, float("-inf"), scores)
        probs = torch.softmax(scores, dim=-1)
        if p.top_p < 1.0:
            sorted_p, order = torch.sort(probs, descending=True, stable=True)
            keep = torch.cumsum(sorted_p, 0) - sorted_p < p.top_p
            keep[0] = True
            probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_p[keep])
        return int(torch.multinomial(probs, 1, generator=self.generator))
