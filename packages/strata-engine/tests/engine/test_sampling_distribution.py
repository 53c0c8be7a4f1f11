"""Sampled tokens follow the distribution vLLM's rules define, at several temperatures, top_k
and top_p values, not only at the extremes (greedy, `top_k=1`).

The reference is computed independently, in torch float64, the way vLLM's sampler does it:
logits divided by the temperature, then top-k (ids below the k-th largest value dropped), then
top-p on the sorted probabilities of what is left (ascending cumulative sum, ids whose sum is
<= 1 - top_p dropped, the largest always kept), then a softmax. The sampler's draws must:

- never fall outside the reference's support (checked exactly), and
- pass Pearson's chi-square goodness-of-fit test against it at ALPHA = 1e-6 per case: a correct
  sampler fails a case with probability 1e-6. The seeds are fixed, so each run draws the same
  tokens and the outcome is deterministic anyway; the alpha says how unlucky a seed would have
  to be for a correct sampler to fail here.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from strata_engine.api import SamplingParams
from strata_engine.sampler import Sampler

ALPHA = 1e-6
DRAWS = 20_000
VOCAB = 40
MIN_EXPECTED = 5.0  # bins with fewer expected draws are pooled (the chi-square approximation's rule)

CASES = [  # (temperature, top_k, top_p)
    (1.0, 0, 1.0),
    (0.5, 0, 1.0),
    (1.7, 0, 1.0),
    (1.0, 5, 1.0),
    (0.7, 12, 1.0),
    (1.0, 0, 0.9),
    (1.3, 0, 0.5),
    (0.8, 10, 0.8),
    (2.0, 20, 0.6),
]


def log_probs() -> np.ndarray:
    """A fixed fp32 log-probability row with a spread of large and small probabilities."""
    logits = np.random.default_rng(11).normal(0.0, 1.5, size=VOCAB)
    return (logits - np.log(np.exp(logits).sum())).astype(np.float32)


def vllm_reference(lp: np.ndarray, temperature: float, top_k: int, top_p: float) -> np.ndarray:
    """vLLM's `apply_top_k_top_p` on one row, in float64 torch, then the softmax."""
    logits = torch.tensor(lp, dtype=torch.float64) / temperature
    ordered, index = logits.sort(descending=False)
    if top_k > 0:
        kth_largest = ordered[ordered.numel() - top_k]
        ordered = ordered.masked_fill(ordered < kth_largest, -torch.inf)
    if top_p < 1.0:
        cumulative = ordered.softmax(dim=-1).cumsum(dim=-1)
        drop = cumulative <= 1 - top_p
        drop[-1] = False  # at least one id is kept
        ordered = ordered.masked_fill(drop, -torch.inf)
    filtered = torch.empty_like(ordered).scatter_(0, index, ordered)
    return filtered.softmax(dim=-1).numpy()


def chi_square_p_value(counts: np.ndarray, probs: np.ndarray) -> float:
    """Pearson's test of `counts` against `probs`, low-expectation bins pooled into one."""
    expected = probs * counts.sum()
    big = expected >= MIN_EXPECTED
    observed_bins = [*counts[big], counts[~big].sum()]
    expected_bins = [*expected[big], expected[~big].sum()]
    if expected_bins[-1] < MIN_EXPECTED:  # too small to stand alone: merge it into the smallest
        smallest = int(np.argmin(expected_bins[:-1]))
        observed_bins[smallest] += observed_bins.pop()
        expected_bins[smallest] += expected_bins.pop()
    observed, want = np.array(observed_bins, dtype=np.float64), np.array(expected_bins)
    statistic = float(((observed - want) ** 2 / want).sum())
    dof = len(want) - 1
    if dof == 0:
        return 1.0
    half = torch.tensor(dof / 2, dtype=torch.float64)
    return float(torch.special.gammaincc(half, torch.tensor(statistic / 2, dtype=torch.float64)))


@pytest.mark.parametrize(("temperature", "top_k", "top_p"), CASES)
def test_draws_follow_vllms_filtered_distribution(temperature: float, top_k: int, top_p: float) -> None:
    lp = log_probs()
    reference = vllm_reference(lp, temperature, top_k, top_p)
    sampler = Sampler(SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, seed=2024))
    counts = np.bincount([sampler.sample(lp) for _ in range(DRAWS)], minlength=VOCAB)
    outside = np.flatnonzero((reference == 0) & (counts > 0))
    assert outside.size == 0, f"drew ids {outside.tolist()} that top_k/top_p exclude"
    support = int((reference > 0).sum())
    if top_k or top_p < 1.0:
        assert support < VOCAB  # the case really filters
    p_value = chi_square_p_value(counts, reference)
    assert p_value > ALPHA, f"chi-square p = {p_value:.3g} over {support} ids"


def test_the_test_rejects_a_neighbouring_temperature() -> None:
    """Negative control: draws at temperature 1.0 tested against the 0.8 reference fail, so the
    test has the power to see a temperature applied wrongly."""
    lp = log_probs()
    sampler = Sampler(SamplingParams(temperature=1.0, seed=2024))
    counts = np.bincount([sampler.sample(lp) for _ in range(DRAWS)], minlength=VOCAB)
    assert chi_square_p_value(counts, vllm_reference(lp, 0.8, 0, 1.0)) < ALPHA
    assert chi_square_p_value(counts, vllm_reference(lp, 1.0, 0, 1.0)) > ALPHA
