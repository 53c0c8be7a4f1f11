"""The read's arithmetic against numbers worked out by hand."""

from __future__ import annotations

import math

import pytest

from strata_decide.distribution import (
    choice_confidence,
    expected_score,
    from_raw,
    geometric_mean,
    logsumexp,
    score_confidence,
    with_temperature,
)


def test_mass_is_the_labels_share_of_the_full_vocabulary():
    raw = [math.log(0.5), math.log(0.2), math.log(0.1)]
    d = from_raw(raw)
    assert d.mass == pytest.approx(0.8, abs=1e-15)
    assert d.probabilities == pytest.approx([0.625, 0.25, 0.125], abs=1e-15)
    assert d.argmax == 0


def test_renormalised_probabilities_sum_to_one_even_for_tiny_raw_values():
    # raw values far below float32/64 exp range: a naive exp would give 0/0
    d = from_raw([-2000.0, -2001.0, -9999.0])
    assert d.mass == 0.0
    assert math.fsum(d.probabilities) == pytest.approx(1.0, abs=1e-15)
    assert d.probabilities[0] == pytest.approx(1 / (1 + math.exp(-1)), abs=1e-15)
    assert d.probabilities[2] == 0.0


def test_logsumexp_is_stable_and_exact():
    assert logsumexp([1000.0, 1000.0]) == pytest.approx(1000.0 + math.log(2), abs=1e-12)
    assert logsumexp([-1e308, 0.0]) == 0.0


def test_argmax_takes_the_first_of_a_tie():
    assert from_raw([-1.0, -0.5, -0.5]).argmax == 1


def test_non_finite_raw_values_are_refused():
    with pytest.raises(ValueError):
        from_raw([float("nan"), -1.0])
    with pytest.raises(ValueError):
        from_raw([float("-inf"), -1.0])


def test_geometric_mean_of_rotations_then_renormalise():
    a = from_raw([math.log(0.6), math.log(0.3), math.log(0.1)])
    b = from_raw([math.log(0.2), math.log(0.4), math.log(0.4)])
    g = geometric_mean([a, b])
    raw = [math.sqrt(0.6 * 0.2), math.sqrt(0.3 * 0.4), math.sqrt(0.1 * 0.4)]
    total = sum(raw)
    assert g.probabilities == pytest.approx([r / total for r in raw], abs=1e-15)
    assert g.mass == pytest.approx(1.0, abs=1e-15)  # each read's labels held all the mass


def test_temperature_softens_and_sharpens():
    d = from_raw([math.log(0.8), math.log(0.2)])
    soft = with_temperature(d, 2.0)  # p ∝ sqrt(p): 0.8^.5, 0.2^.5 -> 2/3, 1/3
    assert soft.probabilities == pytest.approx([2 / 3, 1 / 3], abs=1e-15)
    assert with_temperature(d, 1.0) is d
    with pytest.raises(ValueError):
        with_temperature(d, 0.0)


def test_choice_confidence_is_the_vendor_formula():
    assert choice_confidence([0.7, 0.2, 0.1]) == pytest.approx((3 * 0.7 - 1) / 2)
    assert choice_confidence([0.25] * 4) == 0.0
    assert choice_confidence([1.0, 0.0]) == 1.0


def test_score_confidence_is_the_vendor_formula():
    # K = 2: D = mean(|0 - .5|, |1 - .5|) = .5 ; mode 1, spread .2 -> 1 - .4
    assert score_confidence([0.2, 0.8]) == pytest.approx(0.6)
    # K = 5: D = (2 + 1 + 0 + 1 + 2) / 5 = 1.2 ; mode 2 ; spread = .1*2 + .2*1 + .2*1 + .1*2 = .8
    assert score_confidence([0.1, 0.2, 0.4, 0.2, 0.1]) == pytest.approx(1 - 0.8 / 1.2)
    # spread larger than D is clipped at 0: mass split between the two ends
    assert score_confidence([0.5, 0.0, 0.0, 0.0, 0.5]) == 0.0


def test_expected_score_weights_levels():
    assert expected_score([0.1, 0.2, 0.7]) == pytest.approx(0.2 + 1.4)
