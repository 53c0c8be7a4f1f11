"""gpt-oss on the Triton kernels: refused at load, naming what they lack (attention sinks, the
clamped SwiGLU), rather than computed without them; the Triton attention refuses sinks too.
Under Triton's interpreter without a GPU, as the other Triton tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from strata_engine.testing import triton_setup  # noqa: F401  (before triton: TRITON_INTERPRET=1 without a GPU)

pytest.importorskip(
    "triton", reason="the Triton kernels need `pip install triton` (the engine's [gpu] extra)"
)

from strata_engine import LLMEngine
from strata_engine.api import ModelLoadError
from strata_engine.kernels.base import AttentionMeta
from strata_engine.kernels.choice import make_ops
from strata_engine.testing.tiny_gpt_oss import write_gpt_oss


def test_triton_kernels_refuse_gpt_oss(tmp_path: Path) -> None:
    path = write_gpt_oss(tmp_path / "gpt-oss.gguf", seed=3)
    with pytest.raises(ModelLoadError, match=r"gpt-oss needs attention sinks and the clamped SwiGLU"):
        LLMEngine(path, device="cuda", kernels="native", kv_cache_mb=16)


def test_triton_attention_refuses_sinks() -> None:
    ops = make_ops("native", device="cuda")
    q = np.zeros((1, 2, 16), np.float32)
    cache = np.zeros((1, 4, 1, 16), np.float32)
    meta = AttentionMeta(
        np.zeros(1, np.int32), np.zeros(1, np.int32), np.zeros((1, 1), np.int32), np.zeros(1, np.int64), 4
    )
    with pytest.raises(NotImplementedError, match="no sinks"):
        ops.attention(q, cache, cache, meta, None, 0, 0.0, np.zeros(2, np.float32))
