"""The command line on the fake upstream: decide output, parity exit codes, calibrate file."""

from __future__ import annotations

import json

import pytest

from strata_decide.cli import main


def test_decide_prints_answer_probabilities_and_mass_as_json(fake, capsys):
    fake.preference = {"calm": 0.0, "angry: upset": 2.0}
    code = main(
        [
            "decide",
            "--server",
            fake.url,
            "--state",
            "I am furious",
            "--instructions",
            "Tone?",
            "--option",
            "calm",
            "--option",
            "angry=upset",
            "--json",
        ]
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"] == "fake-model"
    assert out["answer"]["choice"] == "angry"
    assert sum(out["answer"]["probabilities"].values()) == pytest.approx(1.0)
    assert out["answer"]["x_label_mass"] == pytest.approx(0.8)


def test_decide_text_output_and_state_from_file(fake, capsys, tmp_path):
    (tmp_path / "state.txt").write_text("a long state")
    code = main(
        [
            "decide",
            "--server",
            fake.url,
            "--state",
            f"@{tmp_path / 'state.txt'}",
            "--type",
            "noul",
            "--instructions",
            "Is it long?",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "answer: yes" in out and "label mass: 0.8000" in out
    assert "a long state" in fake.decode(fake.completion_calls[0]["prompt"])


def test_parity_exit_code_follows_the_tolerance(fake, capsys):
    assert main(["parity", "--server", fake.url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["max_abs_diff"] == 0.0
    original = fake.raw_logprobs
    fake.raw_logprobs = lambda ids, allowed: {
        i: v + 0.01 * (len(fake.completion_calls) % 2) for i, v in original(ids, allowed).items()
    }
    assert main(["parity", "--server", fake.url]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_calibrate_writes_a_reusable_file(fake, tmp_path, capsys):
    data = tmp_path / "data.jsonl"
    question = {"type": "choice", "criteria": {"calm": None, "angry": None}}
    fake.preference = {"calm": 3.0}  # confidently "calm", but half the answers are "angry"
    lines = [
        {"state": f"s{i}", "question": question, "answer": "calm" if i % 2 else "angry"} for i in range(10)
    ]
    data.write_text("\n".join(json.dumps(line) for line in lines))
    out = tmp_path / "calib.json"
    assert main(["calibrate", "--server", fake.url, "--data", str(data), "--out", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert saved["temperature"] > 5  # over-confident reader: softened a lot
    assert saved["ece_after"] < saved["ece_before"]
    capsys.readouterr()
    assert (
        main(
            [
                "decide",
                "--server",
                fake.url,
                "--state",
                "s",
                "--option",
                "calm",
                "--option",
                "angry",
                "--calibration",
                str(out),
                "--json",
            ]
        )
        == 0
    )
    tempered = json.loads(capsys.readouterr().out)["answer"]["probabilities"]["calm"]
    assert 0.5 < tempered < 0.7  # the raw read says 0.95


def test_errors_become_exit_code_2_with_a_message(fake, capsys):
    fake.fail_completions_with = 500
    assert main(["decide", "--server", fake.url, "--state", "s", "--option", "a", "--option", "b"]) == 2
    assert "UpstreamError" in capsys.readouterr().err
    assert main(["decide", "--server", fake.url, "--state", "s", "--option", "a"]) == 2
