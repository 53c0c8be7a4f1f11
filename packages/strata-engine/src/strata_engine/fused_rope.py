"""Whether a layer's q/k/v projections, RoPE and KV cache write run as one backend op.

The model's steps for the attention's inputs are the projections (model.fused_linear), q/k
norms where the model has them (qwen3), RoPE and the cache write (base.rope_kv_write), then
mistral3's query temperature. A backend with `qkv_rope` (the Triton backend: one decode launch,
kernels/triton/qkvrope.py) takes the projections' weights and the rest of what those steps read,
and returns the rotated queries, or None where its launch does not apply; a layer with biases,
q/k norms or a query temperature never asks it. Either way the bits are the model's steps'.

The model's next op after these is always the attention of the returned queries on these caches
(model.Transformer.forward), so the op is asked with `attend`: the Triton backend's launch then
waits for that `attention` call and runs the attention in it too (kernels/triton/qkvattn.py).
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
    fused, cfg, projections = getattr(model.ops, "qkv_rope", None), model.cfg, layer.qkv
    if fused is None or projections is None or model.q_temp is not None:
        return None
    if layer.q_norm is not None or layer.k_norm is not None or any(p.bias is not None for p in projections):
        return None
    return fused(
        h, [(p.weight, p.widths) for p in projections], (cfg.n_heads, cfg.n_kv_heads, cfg.head_dim),
        meta.positions, table, k_cache, v_cache, meta.slots, attend=True,
    )  # fmt: skip
