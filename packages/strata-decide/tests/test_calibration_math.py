"""Temperature fitting, ECE and Brier on a synthetic set where the right answer is known."""

from __future__ import annotations

import json
import math
import random

import pytest

from strata_decide import questions
from strata_decide.calibrate import (
    Calibration,
    answer_index,
    brier,
    calibrate,
    ece,
    load_examples,
)
from strata_decide.distribution import from_raw


def overconfident_set(n=3000, k=4, true_temperature=3.0, seed=0):
    """Answers drawn from softmax(z); the reader reports softmax(3 z): T = 3 is exact."""
    rng = random.Random(seed)
    distributions, answers = [], []
    for _ in range(n):
        z = [rng.gauss(0, 1) for _ in range(k)]
        top = max(z)
        weights = [math.exp(v - top) for v in z]
        answers.append(rng.choices(range(k), weights)[0])
        distributions.append(from_raw([true_temperature * v for v in z]))
    return distributions, answers


def test_fitted_temperature_recovers_the_true_one_and_improves_both_metrics():
    distributions, answers = overconfident_set()
    result = calibrate(distributions, answers)
    assert result.temperature == pytest.approx(3.0, rel=0.1)
    assert result.ece_before > 0.1 and result.ece_after < 0.03
    assert result.brier_after < result.brier_before


def test_a_calibrated_reader_keeps_temperature_near_one():
    distributions, answers = overconfident_set(true_temperature=1.0, seed=1)
    assert calibrate(distributions, answers).temperature == pytest.approx(1.0, rel=0.1)


def test_ece_and_brier_by_hand():
    certain_right = from_raw([0.0, -1e3])  # p = (1, 0), answer 0
    half = from_raw([0.0, 0.0])  # p = (.5, .5), argmax 0, answer 1
    # bins: top-prob 1.0 -> bin 9 (acc 1, conf 1); 0.5 -> bin 5 (acc 0, conf .5)
    assert ece([certain_right, half], [0, 1]) == pytest.approx(0.5 * 0.5)
    assert brier([certain_right, half], [0, 1]) == pytest.approx((0 + 0.5) / 2)


def test_calibration_round_trips_through_json(tmp_path):
    saved = Calibration(1.7, 10, 0.2, 0.05, 0.4, 0.3)
    saved.save(tmp_path / "c.json")
    assert Calibration.load(tmp_path / "c.json") == saved


def test_answers_map_to_option_indices(tmp_path):
    tone = questions.choice(None, {"calm": None, "angry": None})
    assert answer_index(tone, "angry") == 1
    assert answer_index(questions.noul("?"), False) == 1
    assert answer_index(questions.score(None, ["a", "b", "c"]), 2) == 2
    with pytest.raises(ValueError):
        answer_index(tone, "happy")
    path = tmp_path / "data.jsonl"
    line = {"state": "s", "question": {"type": "noul", "instructions": "?"}, "answer": True}
    path.write_text(json.dumps(line) + "\n\n" + json.dumps({**line, "answer": "maybe"}) + "\n")
    with pytest.raises(ValueError, match=":3:"):
        load_examples(path)
