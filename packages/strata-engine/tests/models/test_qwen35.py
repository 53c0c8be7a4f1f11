"""qwen35 (Qwen3.5 / 3.6 dense, hybrid Gated DeltaNet + gated attention): the tiny file's float64
reference against llama.cpp at every position, which validates the reading of llama.cpp's graph
(tiny_hybrid_models' docstring); a reference with one part of the graph read differently is far
off, so the bound below can fail."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from strata_engine.testing.compare import llama_cpp_logprobs
from strata_engine.testing.tiny_hybrid_models import SPEC, HybridReference, write_qwen35
from strata_engine.testing.tiny_models import VOCAB_SIZE

# measured: 1.45e-5 (float32 llama.cpp vs float64, 36 rows of 295); a misread part costs >= 1
LLAMA_CPP_VS_REFERENCE = 1e-4


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_qwen35(tmp_path_factory.mktemp("qwen35") / "q35.gguf", seed=1)


@pytest.fixture(scope="module")
def prompt() -> list[int]:
    return np.random.default_rng(5).integers(7, VOCAB_SIZE - 3, size=37).tolist()


@pytest.fixture(scope="module")
def reference(tiny: Path, prompt: list[int]) -> np.ndarray:
    return HybridReference(str(tiny)).logprobs(prompt).numpy()[:-1]


@pytest.fixture(scope="module")
def llama(llama_cpp, tiny: Path, prompt: list[int]) -> np.ndarray:
    return llama_cpp_logprobs(llama_cpp, tiny, prompt)


def test_reference_is_llama_cpp_at_every_position(llama: np.ndarray, reference: np.ndarray) -> None:
    assert np.abs(llama - reference).max() < LLAMA_CPP_VS_REFERENCE
    assert (llama.argmax(1) == reference.argmax(1)).all()


def _misread(ref: HybridReference, part: str) -> None:
    """Change one reading of the graph in `ref`'s weights: what the bound must catch."""
    w, s = ref.w, SPEC
    key_dim = s.d_state * s.n_k_heads
    for i in range(s.n_layers):
        p = f"blk.{i}."
        if part == "key heads interleaved" and s.recurrent(i):  # head h reads k-head h // 2
            qkv = w[p + "attn_qkv.weight"]
            q = qkv[:key_dim].reshape(s.n_k_heads, s.d_state, -1).flip(0).reshape(key_dim, -1)
            k = qkv[key_dim : 2 * key_dim].reshape(s.n_k_heads, s.d_state, -1).flip(0)
            w[p + "attn_qkv.weight"] = torch.cat((q, k.reshape(key_dim, -1), qkv[2 * key_dim :]))
        if part == "gate before query" and not s.recurrent(i):
            q = w[p + "attn_q.weight"].reshape(s.n_heads, 2, s.head_dim, -1).flip(1)
            w[p + "attn_q.weight"] = q.reshape(2 * s.n_heads * s.head_dim, -1)
        if part == "no decay" and s.recurrent(i):
            w[p + "ssm_a"] = torch.zeros_like(w[p + "ssm_a"])


@pytest.mark.parametrize("part", ["key heads interleaved", "gate before query", "no decay"])
def test_a_misread_graph_is_far_from_llama_cpp(
    llama: np.ndarray, tiny: Path, prompt: list[int], part: str
) -> None:
    ref = HybridReference(str(tiny))
    _misread(ref, part)
    assert np.abs(ref.logprobs(prompt).numpy()[:-1] - llama).max() > 100 * LLAMA_CPP_VS_REFERENCE
