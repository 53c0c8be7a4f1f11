"""One forward of a tiny model with the one-call C layer and without it, for the fused-layer tests."""

from __future__ import annotations

import numpy as np
import torch

from strata_engine.kernels.base import AttentionMeta
from strata_engine.model import Transformer
from strata_engine.testing.tiny_arch_models import ARCH_SPECS
from strata_engine.testing.tiny_models import TINY_SPECS


def run(model: Transformer, fused: bool) -> tuple[np.ndarray, np.ndarray]:
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


BLOCK = 16


PROMPT = 37  # crosses two KV blocks
