"""One native call per layer (fused_layer.py / layer.c strata_layer) against the per-operation
path of model.py: the same bits for every architecture switch it covers (biases, q/k norms,
both RoPE layouts, GeGLU, post-norms, soft-capped and sliding-window attention), for a prefill
chunk and a decode step; and the layers it does not cover take the per-operation path."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_arch_models import ARCH_SPECS, write_arch_model
from tiny_models import TINY_SPECS, write_tiny_model

from strata_engine.config import ModelConfig
from strata_engine.gguf_loader import GGUFFile
from strata_engine.kernels.base import AttentionMeta
from strata_engine.kernels.choice import make_ops
from strata_engine.model import Transformer

BLOCK = 16
PROMPT = 37  # crosses two KV blocks


def _model(path: Path) -> Transformer:
    gguf = GGUFFile(path)
    return Transformer(gguf, ModelConfig.from_metadata(gguf.metadata), make_ops("native", "cpu", 2))


def _run(model: Transformer, fused: bool) -> tuple[np.ndarray, np.ndarray]:
    """Hidden states of a 37-token prefill, then of one decode step on top of it."""
    saved, cfg = model.fused, model.cfg
    model.fused = saved if fused else None
    blocks = PROMPT // BLOCK + 2
    shape = (blocks, BLOCK, cfg.n_kv_heads, cfg.head_dim)
    kv = [(np.zeros(shape, np.float32), np.zeros(shape, np.float32)) for _ in range(cfg.n_layers)]
    gen = torch.Generator().manual_seed(7)
    ids = torch.randint(0, min(cfg.vocab_size, 250), (PROMPT + 1,), generator=gen).numpy()
    table = np.arange(blocks, dtype=np.int32)[None, :]

    def meta(start: int, end: int) -> AttentionMeta:
        n = end - start
        return AttentionMeta(
            positions=np.arange(start, end, dtype=np.int32),
            token_seq=np.zeros(n, dtype=np.int32),
            block_tables=table,
            slots=np.arange(start, end, dtype=np.int64),
            block_size=BLOCK,
        )

    try:
        prefill = model.forward(ids[:PROMPT], meta(0, PROMPT), kv)
        decode = model.forward(ids[PROMPT:], meta(PROMPT, PROMPT + 1), kv)
    finally:
        model.fused = saved
    return prefill, decode


# mistral3's query temperature is not in strata_layer: it keeps the per-operation path
PER_OPERATION = [s for s in ARCH_SPECS if s.n_experts or s.arch == "mistral3"]
COVERED = [s.name for s in TINY_SPECS] + [s.name for s in ARCH_SPECS if s not in PER_OPERATION]


@pytest.mark.parametrize("name", COVERED)
def test_one_call_per_layer_gives_the_per_operation_bits(tmp_path: Path, name: str) -> None:
    tiny = {s.name: s for s in TINY_SPECS}
    if name in tiny:
        path = write_tiny_model(tmp_path / "m.gguf", tiny[name])
    else:
        path = write_arch_model(tmp_path / "m.gguf", next(s for s in ARCH_SPECS if s.name == name))
    model = _model(path)
    assert model.fused is not None, "a dense layer must take the one-call path"
    fused, per_op = _run(model, True), _run(model, False)
    for a, b in zip(fused, per_op, strict=True):
        assert np.array_equal(a, b), f"max difference {np.abs(a - b).max():.3e}"
    assert not np.array_equal(fused[0][0], fused[0][1])  # a real forward, not a constant


@pytest.mark.parametrize("spec", PER_OPERATION, ids=lambda s: s.name)
def test_mixture_of_experts_and_query_temperature_keep_the_per_operation_path(tmp_path: Path, spec) -> None:
    assert _model(write_arch_model(tmp_path / "m.gguf", spec)).fused is None


def test_the_torch_fallback_has_no_one_call_path(tmp_path: Path) -> None:
    gguf = GGUFFile(write_tiny_model(tmp_path / "m.gguf", TINY_SPECS[0]))
    model = Transformer(gguf, ModelConfig.from_metadata(gguf.metadata), make_ops("torch", "cpu", 2))
    assert model.fused is None
