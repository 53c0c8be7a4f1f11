"""Whether a layer's q/k/v projections, RoPE and KV cache write run as one backend op.

The model's steps for the attention's inputs are the projections (model.fused_linear), q/k
norms where the model has them (qwen3), RoPE and the cache write (base.rope_kv_write), then
mistral3's query temperature. A backend with `qkv_rope` (the Triton backend: one decode launch,
kernels/triton/qkvrope.py) takes the projections' weights and the rest of what those steps read,
and returns the rotated queries, or None where its launch does not apply; a layer with biases,
q/k norms or a query temperature never asks it. Either way the bits are the model's steps'.

`qkv_attention` asks for the attention of those queries on those caches too, in the same op (the
Triton backend's one launch, kernels/triton/qkvattn.py), and returns the attention's output.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from strata_engine.config import ModelConfig
from strata_engine.kernels.base import Array, AttentionMeta, Ops, RopeTable
from strata_engine.kernels.weights import Weight


class Projection(Protocol):  # model.FusedProjection, read here (model.py imports this module)
    @property
    def weight(self) -> Weight: ...
    @property
    def bias(self) -> object: ...
    @property
    def widths(self) -> tuple[int, ...]: ...


class Layer(Protocol):  # what is read of model.Layer
    @property
    def qkv(self) -> Sequence[Projection] | None: ...
    @property
    def q_norm(self) -> object: ...
    @property
    def k_norm(self) -> object: ...


class Model(Protocol):  # what is read of model.Transformer
    @property
    def ops(self) -> Ops: ...
    @property
    def cfg(self) -> ModelConfig: ...
    @property
    def q_temp(self) -> object: ...


def _runs(model: Model, layer: Layer) -> list[tuple[Weight, tuple[int, ...]]] | None:
    """The q/k/v projections as the backend's fused ops take them, or None where the layer has
    steps those ops do not run (biases, q/k norms, a query temperature)."""
    projections = layer.qkv
    if (
        projections is None
        or model.q_temp is not None
        or layer.q_norm is not None
        or layer.k_norm is not None
    ):
        return None
    if any(p.bias is not None for p in projections):
        return None
    return [(p.weight, p.widths) for p in projections]


def qkv_rope(
    model: Model,
    h: Array,
    layer: Layer,
    meta: AttentionMeta,
    table: RopeTable,
    k_cache: Array,
    v_cache: Array,
) -> Array | None:
    """The rotated queries [T, heads, head_dim] of `model`'s layer, K and V written to the caches,
    in its backend's one op (`qkv_rope`) where it has one and takes this layer; else None (the
    model's steps, model.Transformer._qkv)."""
    fused, cfg, runs = getattr(model.ops, "qkv_rope", None), model.cfg, _runs(model, layer)
    if fused is None or runs is None:
        return None
    heads = (cfg.n_heads, cfg.n_kv_heads, cfg.head_dim)
    return fused(h, runs, heads, meta.positions, table, k_cache, v_cache, meta.slots)


def qkv_attention(
    model: Model,
    h: Array,
    layer: Layer,
    meta: AttentionMeta,
    table: RopeTable,
    caches: tuple[Array, Array],
    attend: tuple[float | None, int, float, Array | None],
) -> Array | None:
    """The attention's output [T, heads, head_dim] of `model`'s layer (`attend`: ops.attention's
    scale, window, soft-cap and sinks), its q/k/v, RoPE and cache write included, in its backend's
    one op (`qkv_attention`) where it has one and takes this layer; else None (the model's steps)."""
    fused, cfg, runs = getattr(model.ops, "qkv_attention", None), model.cfg, _runs(model, layer)
    if fused is None or runs is None:
        return None
    heads = (cfg.n_heads, cfg.n_kv_heads, cfg.head_dim)
    return fused(h, runs, heads, table, *caches, meta, *attend)
