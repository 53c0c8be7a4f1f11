"""mistral3's attention temperature: each query, after RoPE, times a factor of its position.

llama.cpp (llm_graph_input_attn_temp::set_input) computes, for position p,
`(float)(log(floor((float)p / (float)n_floor) + 1.0) * f_attn_temp_scale + 1.0)`: a float32
division and floor, then double arithmetic rounded to float32 once; n_floor is the YaRN original
context. Here the same steps run in numpy (float32 where llama.cpp's are float, float64 with
exactmath's log where they are double), once per position at load: the same bits on every
machine. A token's factor depends on its position alone, so batching cannot change it.
"""

from __future__ import annotations

import numpy as np

from strata_engine import exactmath
from strata_engine.kernels.base import Array, like


def factors(ctx: int, scale: float, floor: int) -> np.ndarray | None:
    """float32 [ctx]: the query factor of every position, or None without a temperature scale."""
    if scale == 0.0:
        return None
    pos = np.arange(ctx, dtype=np.float32)
    steps = np.floor(pos / np.float32(floor)).astype(np.float64)  # float32 divide, exact floor
    return (exactmath.log(steps + 1.0) * float(np.float32(scale)) + 1.0).astype(np.float32)


def apply(q: Array, positions: np.ndarray, table: np.ndarray) -> Array:
    """q [T, H, D] times its token's factor: one correctly rounded fp32 multiply per element, as
    llama.cpp's ggml_mul."""
    return q * like(q, table[positions])[:, None, None]
