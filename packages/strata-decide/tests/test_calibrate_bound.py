"""`strata-decide calibrate` warns when the fitted temperature sits at the end of its search
range (the best fit lies beyond it), and stays quiet for a fit inside it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from strata_decide.cli import main

QUESTION = {"type": "choice", "criteria": {"calm": None, "angry": None}}


def calibrate(fake, tmp_path: Path, answers: list[str]) -> float:
    data = tmp_path / "data.jsonl"
    lines = [{"state": f"s{i}", "question": QUESTION, "answer": answer} for i, answer in enumerate(answers)]
    data.write_text("\n".join(json.dumps(line) for line in lines))
    out = tmp_path / "calib.json"
    assert main(["calibrate", "--server", fake.url, "--data", str(data), "--out", str(out)]) == 0
    return json.loads(out.read_text())["temperature"]


def test_a_temperature_at_the_search_bound_is_warned_about(fake, tmp_path, capsys) -> None:
    fake.preference = {"calm": 3.0}  # the reader is sure of "calm"; every answer is "angry"
    assert calibrate(fake, tmp_path, ["angry"] * 6) == pytest.approx(20.0)
    assert "warning: the temperature is at the end of its search range [0.05, 20]" in capsys.readouterr().err


def test_a_temperature_inside_the_range_is_not(fake, tmp_path, capsys) -> None:
    fake.preference = {"calm": 1.0}  # P(calm) about 0.73; 7 answers of 10 are "calm"
    assert 0.5 < calibrate(fake, tmp_path, ["calm"] * 7 + ["angry"] * 3) < 2.0
    assert "warning" not in capsys.readouterr().err
