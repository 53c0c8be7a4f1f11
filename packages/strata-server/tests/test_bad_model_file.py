"""`strata-server --model <malformed GGUF>` as a user runs it: one line on stderr naming the
fault, exit status 1, no traceback and no signal."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFWriter

HIDDEN, ROWS = 32, 8


def write_model(path: Path, vocab_size: int) -> Path:
    """A llama GGUF whose header says `vocab_size` tokens; the embedding has ROWS rows."""
    w = GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(64)
    w.add_head_count(2)
    w.add_vocab_size(vocab_size)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([chr(ord("a") + i) for i in range(ROWS)])
    w.add_token_merges([])
    w.add_tensor("token_embd.weight", np.zeros((ROWS, HIDDEN), dtype=np.float32))
    w.add_tensor("output_norm.weight", np.ones(HIDDEN, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def server_command() -> list[str]:
    script = Path(sys.executable).parent / "strata-server"
    return [str(script)] if script.exists() else [sys.executable, "-m", "strata_server"]


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("vocab", "token_embd.weight has 8 rows but llama.vocab_size says 40000000"),
        ("cut", "GGUF tensor output_norm.weight data: 128 bytes at offset"),
        ("header", "GGUF metadata count: 18446744073709551615 entries cannot fit"),
    ],
)
def test_a_malformed_model_file_exits_1_with_one_line(tmp_path: Path, kind: str, message: str) -> None:
    path = write_model(tmp_path / "bad.gguf", 40_000_000 if kind == "vocab" else ROWS)
    data = path.read_bytes()
    if kind == "cut":
        path.write_bytes(data[:-1])
    elif kind == "header":  # the metadata count, after magic, version and tensor count
        path.write_bytes(data[:16] + b"\xff" * 8 + data[24:])
    proc = subprocess.run(
        [*server_command(), "--model", str(path), "--port", "0"], capture_output=True, text=True, timeout=120
    )
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith("strata-server: cannot load model:") and message in lines[0], lines[0]
    assert "Traceback" not in proc.stderr
