"""A SmolLM2-shaped random model on the Triton kernels gives the CPU engine's bits: SmolLM2-135M's
widths (hidden 576 = 18 blocks of 32, 9 query heads of 64 over 3 KV heads, FFN 1536, RoPE base
100000, tied embeddings) with 2 layers and a vocabulary cut to 512 tokens, Q4_1 weights (the
embedding and LM head Q8_0, as tools/gpu_check.py writes it). In each mode both devices run
(the default `native`, `native-q8` and `native-fp32`), every full-vocabulary log-probability
row of the GPU engine equals the CPU engine's as bytes: three requests of different lengths
batched, and the first alone, prefilled in chunks of 5 tokens (its decode steps one row).

Without a GPU the Triton kernels run under Triton's interpreter (IEEE fp32 one operation at a
time); the widths are the real model's so that the kernels meet its sizes (odd block counts,
partial tiles, 3:1 grouped heads), and the layers and vocabulary are cut to keep it quick."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from strata_engine.testing import triton_setup  # noqa: F401  (before triton: TRITON_INTERPRET=1 without a GPU)

pytest.importorskip(
    "triton", reason="the Triton kernels need `pip install triton` (the engine's [gpu] extra)"
)

from strata_engine.testing.shaped_models import SMOLLM2, write_model  # the GPU check's model writer
from strata_engine.testing.triton_checks import GENERATE, assert_same_rows, rows

SHAPE = replace(SMOLLM2, layers=2, vocab=512, ctx=256)
MODES = ("native", "native-q8", "native-fp32")
PROMPT_LENGTHS = (7, 4, 2)  # the first, chunked alone, crosses a chunk boundary


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> tuple[Path, list[tuple[int, ...]]]:
    import numpy as np

    path = write_model(tmp_path_factory.mktemp("smollm2") / "smollm2-shape-q4_1.gguf", SHAPE, "Q4_1", seed=2)
    rng = np.random.default_rng(2)
    prompts = [tuple(int(t) for t in rng.integers(0, SHAPE.vocab - 3, size=n)) for n in PROMPT_LENGTHS]
    return path, prompts


def test_the_model_is_smollm2_shaped(model):
    """The file has SmolLM2-135M's widths, base and tied head (so the test below meets its sizes)."""
    from strata_engine.gguf_loader import GGUFFile

    f = GGUFFile(model[0])
    assert f.tensors["blk.0.attn_q.weight"].shape == (576, 576)
    assert f.tensors["blk.0.attn_k.weight"].shape == (192, 576)
    assert f.tensors["blk.1.ffn_down.weight"].shape == (576, 1536)
    assert f.tensors["token_embd.weight"].shape == (SHAPE.vocab, 576)
    assert "output.weight" not in f.tensors
    assert f.metadata["llama.rope.freq_base"] == 100000.0
    assert f.metadata["llama.attention.head_count"] == 9
    assert f.metadata["llama.attention.head_count_kv"] == 3


@pytest.mark.parametrize("kernels", MODES)
def test_rows_are_the_cpu_engines(model, kernels):
    path, prompts = model
    cpu = rows(path, kernels, "cpu", prompts, "batched")  # the CPU's rows are batch-invariant
    assert len(cpu) == sum(len(p) - 1 + GENERATE for p in prompts)
    first = {key: row for key, row in cpu.items() if key[0] == prompts[0]}
    assert_same_rows(cpu, rows(path, kernels, "cuda", prompts, "batched"), f"{kernels}, batched")
    assert_same_rows(first, rows(path, kernels, "cuda", prompts[:1], "chunked"), f"{kernels}, chunked")
