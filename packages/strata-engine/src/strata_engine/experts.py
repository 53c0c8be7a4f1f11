"""A mixture of experts' fixed orders, one place for every MoE family (qwen3moe, gpt-oss, and the
hybrid qwen35moe and qwen3next through hybrid_moe.py).

The router's top-k is taken on its fp32 logits (softmax is monotonic; ties go to the lower expert
id); the k weights are the softmax over those k logits, i.e. the renormalised top-k probabilities
llama.cpp uses (Mixtral, Qwen3-MoE, gpt-oss's SOFTMAX_WEIGHT gating), computed in float64 with
exactmath (the same bits on every machine). Each expert runs on the rows that chose it (an
invariant matmul: a row's bits do not depend on the others), and a row's outputs are added in
ascending expert id: one fixed order of fp32 multiplies and adds per row, so a row's result
depends on that row alone.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from strata_engine import exactmath
from strata_engine.kernels.base import Array, like, to_numpy


def route(routed: Array, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's k experts ([rows, k], ties: the lower id first) and their fp32 weights."""
    logits = to_numpy(routed)
    order = np.argsort(-logits, axis=1, kind="stable")[:, :k]
    top = np.take_along_axis(logits, order, axis=1).astype(np.float64)
    e = exactmath.exp(top - top[:, :1])  # the first is the largest: exp(0) = 1 for it
    return order, (e / e.sum(axis=1, keepdims=True)).astype(np.float32)


def mix(h: Array, routed: Array, k: int, expert_ffn: Callable[[int, Array], Array]) -> Array:
    """The rows' weighted sum of their experts' outputs, `expert_ffn(expert, rows)` computing one
    expert on the rows that chose it; the result in the backend's kind of array (`routed`'s)."""
    order, weights = route(routed, k)
    out = like(routed, np.zeros(h.shape, dtype=np.float32))
    for expert in np.unique(order).tolist():  # ascending expert id
        rows, slot = np.nonzero(order == expert)
        y = expert_ffn(expert, h[like(h, rows)])
        index = like(out, rows)
        out[index] = out[index] + like(out, weights[rows, slot][:, None]) * y
    return out
