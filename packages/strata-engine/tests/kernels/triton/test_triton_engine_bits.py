"""Whole models on the Triton kernels give the CPU engine's bits: every full-vocabulary fp32
log-probability row (each prompt position, and each greedy decode step) of an engine on
TritonOps equals, as bytes, the row the CPU engine (the C kernels) computes, for tiny models of
each architecture with fp32 weights and for a tiny model holding every quantised type (Q4_0,
Q4_1, Q8_0, Q4_K, Q5_K, Q6_K) in the fp32 mode, `native-fp32` (both devices run every matmul in the C
kernels' order), with all requests batched together (one prefill of every prompt, decode steps
of several rows), and the longest request alone, prefilled in chunks of 5 tokens across a KV
block boundary (decode steps of one row).

The CPU engine's rows are themselves batch-invariant (test_invariance.py, test_golden.py), so
the CPU runs each request alone once; the GPU engine runs both ways: its rows equal those of a
request alone whatever the batch or the chunking. Without a GPU the
Triton kernels run under Triton's interpreter (IEEE fp32 one operation at a time): equality
here says the Triton kernels perform the C kernels' operations in the C kernels' order."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from strata_engine.testing import triton_setup  # noqa: F401  (before triton: TRITON_INTERPRET=1 without a GPU)

pytest.importorskip(
    "triton", reason="the Triton kernels need `pip install triton` (the engine's [gpu] extra)"
)

from gguf import GGMLQuantizationType as QT

from strata_engine.testing.tiny_arch_models import ARCH_SPECS, vocab_size, write_arch_model
from strata_engine.testing.tiny_gemma4 import VOCAB_SIZE as GEMMA4_VOCAB
from strata_engine.testing.tiny_gemma4 import write_gemma4
from strata_engine.testing.tiny_models import (
    N_LAYERS,
    TINY_SPECS,
    VOCAB_SIZE,
    write_quantised_model,
    write_tiny_model,
)
from strata_engine.testing.triton_checks import GENERATE, assert_same_rows, rows


def _prompts(vocab: int, seed: int, lengths: tuple[int, ...] = (20, 16, 5)) -> list[tuple[int, ...]]:
    """Three prompts: by default 20 tokens (across a 16-position KV block boundary), 16 (one block
    exactly), 5."""
    rng = np.random.default_rng(seed)
    return [tuple(int(t) for t in rng.integers(7, vocab - 3, size=n)) for n in lengths]


@pytest.fixture(scope="module", params=ARCH_SPECS, ids=lambda s: s.name)
def fp32_model(request, tmp_path_factory) -> tuple[Path, list[tuple[int, ...]]]:
    """(GGUF path, prompts) of one architecture with every weight F32."""
    path = tmp_path_factory.mktemp(request.param.name) / "f32.gguf"
    return write_arch_model(path, request.param, seed=4, types=(QT.F32,)), _prompts(
        vocab_size(request.param), 4
    )


def _same_on_both(path: Path, prompts, kernels: str, kv: str = "fp32") -> None:
    """The GPU engine's rows, batched and (the first prompt) chunked, are the CPU's for each
    request alone. A request alone on the GPU would repeat these runs' kernel calls: a whole
    prompt's prefill (as batched, with fewer sequences) and decode steps of one row (as chunked)."""
    cpu = rows(path, kernels, "cpu", prompts, "alone", kv)
    assert len(cpu) == sum(len(p) - 1 + GENERATE for p in prompts)
    assert_same_rows(cpu, rows(path, kernels, "cuda", prompts, "batched", kv), f"{kernels}, batched")
    first = {key: row for key, row in cpu.items() if key[0] == prompts[0]}
    chunked = rows(path, kernels, "cuda", prompts[:1], "chunked", kv)
    assert_same_rows(first, chunked, f"{kernels}, chunked")


def test_fp32_models_rows_are_the_cpu_engines(fp32_model):
    """fp32 weights: the fp32 kernels (C's dot_1 matmul order on both devices) end to end."""
    _same_on_both(*fp32_model, "native-fp32")


@pytest.fixture(scope="module")
def quantised_model(tmp_path_factory) -> tuple[Path, list[tuple[int, ...]]]:
    """(GGUF path, prompts) of a tiny model whose 2-D weights are quantised (tiny_models.QUANTISED_TYPES);
    short prompts: the kernels' sizes, not the positions, are what this model adds."""
    path = write_quantised_model(tmp_path_factory.mktemp("quantised") / "mixed.gguf")
    return path, _prompts(VOCAB_SIZE, 5, (9, 6, 3))


def test_quantised_models_rows_are_the_cpu_engines(quantised_model):
    """Quantised weights in the fp32 mode: matmul.py dequantises each block as C does and
    runs C's dot_1 order, so the rows are the CPU's."""
    _same_on_both(*quantised_model, "native-fp32")


@pytest.mark.parametrize("kv", ["fp16"])  # bf16: test_triton_kv_dtype.py, kernel by kernel
def test_a_2_byte_kv_cache_gives_the_cpu_engines_rows(quantised_model, kv: str):
    """--kv-cache-dtype bf16 / fp16: the device cache rounds and widens as the C kernels do."""
    _same_on_both(*quantised_model, "native-fp32", kv)


@pytest.mark.parametrize(
    ("v_type", "static"),
    [(QT.Q6_K, False), (QT.Q4_K, False), (QT.Q6_K, True)],
    ids=["q-k-Q4_K-v-Q6_K", "q-k-v-Q4_K", "q-k-Q4_K-v-Q6_K-static-path"],
)
def test_the_qkv_rope_launch_gives_the_cpu_engines_rows(tmp_path, monkeypatch, v_type: QT, static: bool):
    """The integer mode ("native") on the tiny llama (no biases, no q/k norms), q and k Q4_K and
    v Q6_K (two weights, as Q4_K_M's layers) or all Q4_K (one stacked weight), decode steps on
    the dynamic or the static path (CUDA graphs' buffers): decode steps and 5-token chunks take
    the projections, RoPE and the cache write in one launch (qkvrope.py), and the rows are the
    CPU engine's, batched and chunked; the attention runs in that launch (qkvattn.py)."""
    from strata_engine.kernels.triton import graphs, qkvrope

    types = {f"blk.{i}.attn_{x}.weight": QT.Q4_K for i in range(N_LAYERS) for x in "qk"}
    types |= {f"blk.{i}.attn_v.weight": v_type for i in range(N_LAYERS)}
    path = write_tiny_model(tmp_path / "qkv.gguf", TINY_SPECS[0], seed=6, overrides=types)
    launches, launch = [], qkvrope.qkv_rope
    monkeypatch.setattr(
        qkvrope,
        "qkv_rope",
        lambda *a, **k: launches.append(len(k["weights"] if k else a[1])) or launch(*a, **k),
    )
    attended, attend = [], qkvrope.qkv_rope_attention
    monkeypatch.setattr(qkvrope, "qkv_rope_attention", lambda *a, **k: attended.append(1) or attend(*a, **k))
    if static:
        monkeypatch.setenv(graphs.SWITCH, "1")
    _same_on_both(path, _prompts(VOCAB_SIZE, 6, (9, 3)), "native")
    assert set(launches) == {1 if v_type == QT.Q4_K else 2}, "the layers took the one launch"
    assert len(attended) == len(launches), "every one ran the layer's attention too"


def test_gemma4_mixture_of_experts_rows_are_the_cpu_engines(tmp_path):
    """Gemma 4's parts (two head geometries, V norms, output scales) and its mixture-of-experts
    layers (the router's scaled input, fused and separate GeGLU experts, per-expert scales, the
    extra norms; a dense layer too) in the fp32 mode: the CPU's rows, batched and chunked."""
    path = write_gemma4(tmp_path / "gemma4-moe.gguf", seed=4, variant="moe")
    _same_on_both(path, _prompts(GEMMA4_VOCAB, 4, (20, 5)), "native-fp32")


def test_a_planted_difference_is_seen():
    """The comparison reads every byte: one flipped bit of one logprob fails it."""
    rows = {((1, 2), 0, False): np.zeros(5, np.float32).tobytes()}
    flipped = bytearray(rows[((1, 2), 0, False)])
    flipped[7] ^= 1
    with pytest.raises(AssertionError, match="differs in 1 of 5"):
        assert_same_rows(rows, {((1, 2), 0, False): bytes(flipped)}, "planted")
