"""`strata-engine` as a user runs it: a real process on the default model."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ANSWER = "The capital of France is Paris."


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "strata_engine.cli", "--threads", "2", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=cwd)


def test_generates_the_answer_with_per_token_logprobs(model_path: Path, tmp_path: Path) -> None:
    proc = cli("--max-tokens", "8", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert f"{ANSWER}  [finish: stop]" in lines
    token_lines = [line for line in lines if " | " in line]
    assert len(token_lines) == 8  # seven answer tokens and <|im_end|>
    for line in token_lines:
        value = float(line.split(" | ")[0].split()[-1])
        assert -30 < value <= 0


def test_json_rows_are_consistent(model_path: Path, tmp_path: Path) -> None:
    proc = cli("--max-tokens", "8", "--json", "--logprobs", "3", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert "".join(r["token"] for r in rows) == ANSWER + "<|im_end|>"
    assert rows[-1]["id"] == 2
    for row in rows:
        assert len(row["top"]) == 3
        if row["token"] in row["top"]:
            assert row["top"][row["token"]] == row["logprob"]
        assert math.fsum(math.exp(v) for v in row["top"].values()) <= 1.0 + 1e-6


@pytest.mark.parametrize("kind", ["missing", "not-gguf"])
def test_bad_model_exits_1_with_one_line_error(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "model.gguf"
    if kind == "not-gguf":
        path.write_text("this is not a model\n")
    proc = cli("--model", str(path), cwd=tmp_path)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("strata-engine: error:")
    assert str(path) in errors[0]
    assert proc.stdout == ""
