"""From raw label logprobs to the numbers a decision reports, in float64.

The server gives each label's *raw* logprob: its log-probability in the full vocabulary.
From those:

* ``mass`` = sum of exp(raw): how much of the model's next-token probability the labels hold
  (near 1: the prompt fits the question; low: the model wanted to say something else);
* ``probabilities`` = the raw values renormalised over the labels (a softmax over them);
* ``argmax`` = the most probable label (the first one on a tie).

Every sum goes through a max-shifted log-sum-exp with ``math.fsum``, so the result does
not depend on summation order and never overflows; the same inputs always give the same bits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def logsumexp(values: Sequence[float]) -> float:
    """log(sum(exp(v))) computed stably: shift by the maximum, sum exactly with fsum."""
    return normalise(values)[1]


def normalise(values: Sequence[float]) -> tuple[tuple[float, ...], float]:
    """Log-probabilities proportional to exp(values), and log(sum(exp(values))).

    The maximum is subtracted first, so each log-probability is (v - max) - log(sum), both
    small numbers: no precision is lost when every value is far below zero.
    """
    top = max(values)
    shifted = [value - top for value in values]
    log_norm = math.log(math.fsum(math.exp(value) for value in shifted))
    return tuple(value - log_norm for value in shifted), top + log_norm


@dataclass(frozen=True)
class Distribution:
    """A distribution over a question's options, in option order."""

    log_probabilities: tuple[float, ...]
    mass: float

    @property
    def probabilities(self) -> list[float]:
        return [math.exp(value) for value in self.log_probabilities]

    @property
    def argmax(self) -> int:
        """Index of the most probable option; the lowest index wins a tie."""
        values = self.log_probabilities
        return max(range(len(values)), key=lambda i: (values[i], -i))


def from_raw(raw_logprobs: Sequence[float]) -> Distribution:
    """Mass and renormalised distribution from the labels' raw full-vocabulary logprobs."""
    values = [float(value) for value in raw_logprobs]
    if not all(math.isfinite(value) for value in values):
        raise ValueError(f"label logprobs must be finite, got {values}")
    log_probabilities, log_mass = normalise(values)
    return Distribution(log_probabilities, math.exp(log_mass))


def geometric_mean(distributions: Sequence[Distribution]) -> Distribution:
    """Per-option geometric mean of several distributions over the same options, renormalised.

    Used by the rotations mode: each distribution comes from a different option order
    (already mapped back to option order). The reported mass is the arithmetic mean of the
    reads' masses.
    """
    if not distributions:
        raise ValueError("geometric mean of no distributions")
    count = len(distributions)
    width = len(distributions[0].log_probabilities)
    mean_logs = [math.fsum(d.log_probabilities[i] for d in distributions) / count for i in range(width)]
    mass = math.fsum(d.mass for d in distributions) / count
    return Distribution(normalise(mean_logs)[0], mass)


def with_temperature(distribution: Distribution, temperature: float) -> Distribution:
    """The distribution softened (T > 1) or sharpened (T < 1) by a fitted temperature."""
    if not (temperature > 0 and math.isfinite(temperature)):
        raise ValueError(f"temperature must be a positive finite number, got {temperature}")
    if temperature == 1.0:
        return distribution
    scaled = [value / temperature for value in distribution.log_probabilities]
    return Distribution(normalise(scaled)[0], distribution.mass)


def choice_confidence(probabilities: Sequence[float]) -> float:
    """The vendor's choice confidence: (K * p_max - 1) / (K - 1); 0 when uniform, 1 when certain."""
    k = len(probabilities)
    return _clamp01((k * max(probabilities) - 1.0) / (k - 1))


def score_confidence(probabilities: Sequence[float]) -> float:
    """The vendor's score confidence: max(0, 1 - sum(p_i * |i - mode|) / D).

    ``mode`` is the most probable level and ``D`` the mean distance of the levels from the
    middle of the scale, mean_i |i - (K - 1) / 2|.
    """
    k = len(probabilities)
    mode = max(range(k), key=lambda i: (probabilities[i], -i))
    spread = math.fsum(p * abs(i - mode) for i, p in enumerate(probabilities))
    scale = math.fsum(abs(i - (k - 1) / 2) for i in range(k)) / k
    return _clamp01(1.0 - spread / scale)


def expected_score(probabilities: Sequence[float]) -> float:
    """sum(i * p_i): the expected level under the returned probabilities."""
    return math.fsum(i * p for i, p in enumerate(probabilities))


def _clamp01(value: float) -> float:
    return min(1.0, max(0.0, value))
