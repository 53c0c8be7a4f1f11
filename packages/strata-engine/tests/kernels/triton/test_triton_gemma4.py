"""Gemma 4 on the Triton kernels gives the CPU engine's bits: the dense model and the E2B-style
one (per-layer embeddings, shared-KV layers, each layer kind's own head size and RoPE, V norms,
output scales), through the ops every family uses. Under Triton's interpreter without a GPU, as
the other Triton tests: every logprob row (prompt positions past the sliding window, and greedy
decode steps), batched and chunked 5 tokens a step, equals the CPU engine's for each request
alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from strata_engine.testing import triton_setup  # noqa: F401  (before triton: TRITON_INTERPRET=1 without a GPU)

pytest.importorskip(
    "triton", reason="the Triton kernels need `pip install triton` (the engine's [gpu] extra)"
)

from strata_engine.testing.tiny_gemma4 import VOCAB_SIZE, write_gemma4
from strata_engine.testing.triton_checks import assert_same_rows, rows


@pytest.mark.parametrize("variant", ["dense", "e2b"])
def test_gemma4_rows_are_the_cpu_engines(tmp_path: Path, variant: str) -> None:
    path = write_gemma4(tmp_path / "gemma4.gguf", seed=2, variant=variant)
    rng = np.random.default_rng(3)
    prompts = [tuple(int(t) for t in rng.integers(7, VOCAB_SIZE - 3, size=n)) for n in (20, 6)]
    cpu = rows(path, "native", "cpu", prompts, "alone")
    assert_same_rows(cpu, rows(path, "native", "cuda", prompts, "batched"), "batched")
    first = {key: row for key, row in cpu.items() if key[0] == prompts[0]}
    assert_same_rows(first, rows(path, "native", "cuda", prompts[:1], "chunked"), "chunked")
