"""mistral3 (Ministral 3) beyond the per-architecture comparisons of test_arch_models: the query
temperature's factors bit for bit as llama.cpp computes them, the keys read and refused, the
temperature reaching the logprobs from the position floor on, and the same bits whatever the
batch, the chunking or the prefix cache."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from strata_engine import LLMEngine, LogprobParams, Request, SamplingParams
from strata_engine.api import ModelLoadError
from strata_engine.attention_temperature import factors
from strata_engine.config import ModelConfig
from strata_engine.gguf_checks import check_tensors_read
from strata_engine.gguf_loader import GGUFFile
from strata_engine.kernels.choice import make_ops
from strata_engine.model import Transformer
from strata_engine.testing import tiny_arch_models
from strata_engine.testing.compare import assert_a_prefix_hit_is_cold, engine_logprobs, run_batch
from strata_engine.testing.tiny_arch_models import (
    ARCH_SPECS,
    MISTRAL3_ORIGINAL_CTX,
    vocab_size,
    write_arch_model,
)

SPEC = next(s for s in ARCH_SPECS if s.arch == "mistral3")


def _llama_cpp_factor(p: int, scale: float, floor: int) -> np.float32:
    """llm_graph_input_attn_temp::set_input with libm's log: float pos / float floor, floorf,
    then double arithmetic, stored as a float."""
    steps = math.floor(float(np.float32(p) / np.float32(floor)))
    return np.float32(math.log(steps + 1.0) * float(np.float32(scale)) + 1.0)


@pytest.mark.parametrize(("scale", "floor"), [(0.1, 16384), (0.5, 16), (0.05, 3)])
def test_temperature_factors_are_llama_cpp_bits(scale: float, floor: int) -> None:
    ctx = 1 << 17
    got = factors(ctx, scale, floor)
    assert got is not None and got.dtype == np.float32
    steps = sorted({0, 1, floor - 1, floor, ctx - 1} | set(range(0, ctx, max(1, floor // 3))))
    want = np.array([_llama_cpp_factor(p, scale, floor) for p in steps], dtype=np.float32)
    np.testing.assert_array_equal(got[steps], want)
    assert got[0] == 1.0 and got[floor] == np.float32(1.0 + float(np.float32(scale)) * math.log(2.0))
    assert factors(ctx, 0.0, floor) is None


def _config(**keys: object) -> ModelConfig:
    base = {"embedding_length": 64, "block_count": 2, "attention.head_count": 4, "feed_forward_length": 128}
    meta = {f"mistral3.{k}": v for k, v in {**base, **keys}.items()}
    return ModelConfig.from_metadata(
        {"general.architecture": "mistral3", **meta, "tokenizer.ggml.tokens": ["a"]}
    )


def test_keys_read_as_llama_cpp_reads_them() -> None:
    """Pairs (2i, 2i+1) as llama; the YaRN betas and log multiplier applied; the temperature's
    floor is the original context (the training context when the key is absent)."""
    plain = _config()
    assert (plain.rope_style, plain.attn_temp_scale, plain.rope_scaling.kind) == (
        "interleaved",
        0.0,
        "linear",
    )
    keys = {k: v for k, v in tiny_arch_models.MISTRAL3_KEYS.items() if k.startswith("rope.")}
    cfg = _config(
        **keys,
        **{
            "rope.scaling.type": "yarn",
            "rope.scaling.original_context_length": 16,
            "attention.temperature_scale": 0.5,
        },
    )
    scaling = cfg.rope_scaling
    assert (scaling.beta_fast, scaling.beta_slow, scaling.original_ctx) == (2.0, 0.25, 16)
    ln4 = math.log(4.0)
    assert scaling.attn_factor == pytest.approx(
        (1 + 0.1 * ln4) / (1 + 0.05 * ln4) / (1 + 0.1 * ln4), rel=1e-15
    )
    assert (cfg.attn_temp_scale, cfg.attn_temp_floor) == (0.5, 16)
    assert _config(**{"attention.temperature_scale": 0.1, "context_length": 512}).attn_temp_floor == 512


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        (
            {"attention.temperature_scale": 0.1, "rope.scaling.original_context_length": 0},
            r"temperature_scale = 0\.1 needs mistral3\.rope\.scaling\.original_context_length > 0",
        ),
        ({"expert_count": 4, "expert_used_count": 2}, "mistral3 with experts"),
        ({"rope.scaling.yarn_attn_factor": 2.0}, "yarn_attn_factor"),  # read for other families only
    ],
)
def test_what_llama_cpp_refuses_or_strata_cannot_compute_is_refused(keys: dict, message: str) -> None:
    with pytest.raises(ModelLoadError, match=message):
        _config(**keys)


@pytest.mark.parametrize(
    ("name", "need"),
    [
        ("blk.0.attn_output.bias", "a bias on the attention output"),
        ("blk.1.ffn_down.bias", "biases in the feed-forward layer"),
        ("blk.0.ffn_gate_inp.weight", "a model variant Strata does not implement"),
    ],
)
def test_tensors_llama_cpp_reads_but_strata_does_not_are_refused_by_name(name: str, need: str) -> None:
    cfg = _config()
    check_tensors_read({"rope_freqs.weight": None, "blk.1.attn_q.weight": None}, cfg)  # type: ignore[dict-item]
    with pytest.raises(ModelLoadError, match=f"{name}.*{need}"):
        check_tensors_read({name: None}, cfg)  # type: ignore[dict-item]


@pytest.fixture(scope="module")
def prompt() -> list[int]:
    return np.random.default_rng(5).integers(7, vocab_size(SPEC) - 3, size=37).tolist()


def test_temperature_reaches_the_logprobs_from_the_floor_on(
    tmp_path: Path, prompt: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows before position 16 (factor 1) are the bits of the same file without a temperature;
    every row from 16 on differs."""
    with_temp = engine_logprobs(write_arch_model(tmp_path / "t.gguf", SPEC, seed=3, types=(QT.F32,)), prompt)
    monkeypatch.setitem(tiny_arch_models.MISTRAL3_KEYS, "attention.temperature_scale", 0.0)
    without = engine_logprobs(write_arch_model(tmp_path / "n.gguf", SPEC, seed=3, types=(QT.F32,)), prompt)
    # row r holds position r's prediction; positions 0..15 attend only with factor 1
    floor = MISTRAL3_ORIGINAL_CTX
    np.testing.assert_array_equal(with_temp[:floor], without[:floor])
    assert (np.abs(with_temp[floor:] - without[floor:]).max(axis=1) > 1e-3).all()


def test_query_temperature_keeps_the_eager_path(tmp_path: Path) -> None:
    """A captured CUDA graph would replay the factors of the step it captured: the static decode
    path declines a model with a query temperature (and takes one without)."""
    from strata_engine.kernels.triton.graphs import DecodeGraphs

    gguf = GGUFFile(write_arch_model(tmp_path / "m.gguf", SPEC, seed=3))
    model = Transformer(gguf, ModelConfig.from_metadata(gguf.metadata), make_ops("native", num_threads=1))
    assert model.q_temp is not None and not DecodeGraphs.covers(model)
    model.q_temp = None
    assert DecodeGraphs.covers(model)


def test_batch_chunks_and_prefix_cache_give_the_same_bits(tmp_path: Path, prompt: list[int]) -> None:
    path = write_arch_model(tmp_path / "m.gguf", SPEC, seed=3)
    rng = np.random.default_rng(1)
    others = [rng.integers(7, vocab_size(SPEC) - 3, size=n).tolist() for n in (23, 50)]

    def request(ids: list[int], echo: bool = True) -> Request:
        return Request(
            tuple(ids),
            SamplingParams(max_tokens=4, temperature=0.0),
            LogprobParams(top_n=5, prompt_logprobs=echo),
        )

    def engine(**kw: object) -> LLMEngine:
        return LLMEngine(path, num_threads=2, kv_cache_mb=16, **kw)

    alone = run_batch(engine(), [request(prompt)])[0]
    assert run_batch(engine(), [request(others[0]), request(prompt), request(others[1])])[1] == alone
    assert run_batch(engine(step_tokens=7), [request(prompt)])[0] == alone
    assert_a_prefix_hit_is_cold(engine, request(prompt, echo=False), request(prompt[:33], echo=False))
