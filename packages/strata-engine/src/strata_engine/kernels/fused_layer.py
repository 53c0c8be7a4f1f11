"""One native call per transformer layer: the C kernels' `strata_layer` runs a whole dense layer.

model.py's layer loop calls one `Ops` method per operation; with the native kernels each call
costs a few microseconds of Python, ctypes and allocation, about 12 per layer, which at batch 1
is a large part of a decode step. `strata_layer` performs exactly the same kernel calls in the
same order (so the same bits; the golden hashes check it), described once per layer at load by a
`LayerDesc` that holds the weights' addresses. Layers it does not cover (mixtures of experts)
and tensor-parallel ranks (model.py decides) keep the per-operation path.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from strata_engine.kernels.base import AttentionMeta, Ops, RopeTable, address
from strata_engine.kernels.kv_types import kv_type
from strata_engine.kernels.native.backend import NativeOps
from strata_engine.kernels.native.header import INTERFACE
from strata_engine.kernels.weights import Weight


class Layer(Protocol):
    """What `describe` reads of a layer (model.py's Layer): stated here so the kernels need not
    import the model."""

    @property
    def attn_norm(self) -> np.ndarray: ...
    @property
    def ffn_norm(self) -> np.ndarray: ...
    @property
    def q_norm(self) -> np.ndarray | None: ...
    @property
    def k_norm(self) -> np.ndarray | None: ...
    @property
    def post_attn_norm(self) -> np.ndarray | None: ...
    @property
    def post_ffn_norm(self) -> np.ndarray | None: ...
    @property
    def bq(self) -> np.ndarray | None: ...
    @property
    def bk(self) -> np.ndarray | None: ...
    @property
    def bv(self) -> np.ndarray | None: ...
    @property
    def wq(self) -> Weight: ...
    @property
    def wk(self) -> Weight: ...
    @property
    def wv(self) -> Weight: ...
    @property
    def wo(self) -> Weight: ...
    @property
    def w_gate(self) -> Weight | None: ...
    @property
    def w_up(self) -> Weight | None: ...
    @property
    def w_down(self) -> Weight | None: ...
    @property
    def experts(self) -> object | None: ...
    @property
    def g4(self) -> object | None: ...  # gemma4's V norm and output scale


class ModelConfig(Protocol):
    """What `describe` reads of the model's hyper-parameters (config.py's ModelConfig)."""

    @property
    def hidden(self) -> int: ...
    @property
    def n_heads(self) -> int: ...
    @property
    def n_kv_heads(self) -> int: ...
    @property
    def head_dim(self) -> int: ...
    @property
    def rms_eps(self) -> float: ...
    @property
    def attn_scale(self) -> float | None: ...
    @property
    def attn_softcap(self) -> float: ...
    @property
    def ffn_act(self) -> str: ...
    def window(self, layer: int) -> int: ...


# strata_kernels.h's strata_layer_desc, field for field, in order
LayerDesc = INTERFACE.structs["strata_layer_desc"]


def describe(layer: Layer, cfg: ModelConfig, rope: RopeTable, window: int) -> ctypes.Structure | None:
    """The layer's description for `strata_layer`, or None when it needs the per-operation path."""
    if layer.experts is not None or layer.w_gate is None or layer.w_up is None or layer.w_down is None:
        return None  # (a gpt-oss layer, with sinks and biases strata_layer lacks, is always MoE)
    if layer.g4 is not None:
        return None  # gemma4: strata_layer has no V norm and no output scale
    weights = (layer.wq, layer.wk, layer.wv, layer.wo, layer.w_gate, layer.w_up, layer.w_down)
    return LayerDesc(
        *(address(t) for t in (layer.attn_norm, layer.ffn_norm, layer.q_norm, layer.k_norm)),
        *(address(t) for t in (layer.post_attn_norm, layer.post_ffn_norm, layer.bq, layer.bk, layer.bv)),
        *(address(w.raw) for w in weights),
        *(w.kernel_type for w in weights),
        cfg.hidden,
        cfg.n_heads,
        cfg.n_kv_heads,
        cfg.head_dim,
        layer.w_gate.out_features,
        cfg.rms_eps,
        1.0 / math.sqrt(cfg.head_dim) if cfg.attn_scale is None else cfg.attn_scale,
        cfg.attn_softcap,
        window,
        int(cfg.ffn_act == "gelu"),
        address(rope.cos),
        address(rope.sin),
        rope.dim,
        int(rope.interleaved),
    )


class FusedLayers:
    """Every layer of a model as one `strata_layer` call each."""

    def __init__(self, ops: NativeOps, descs: list[ctypes.Structure]) -> None:
        self.lib, self.threads, self.descs = ops.lib, ops.threads, descs

    def run(self, x: np.ndarray, meta: AttentionMeta, kv: list[tuple[np.ndarray, np.ndarray]]) -> None:
        """x [T, hidden] (contiguous fp32) becomes the last layer's output, in place."""
        positions, token_seq, tables = address(meta.positions), address(meta.token_seq), meta.block_tables
        slots, width, x_ptr, n = address(meta.slots), tables.shape[1], address(x), x.shape[0]
        for desc, (k_cache, v_cache) in zip(self.descs, kv, strict=True):
            self.lib.strata_layer(
                ctypes.byref(desc), x_ptr, n, positions, token_seq, address(tables), width,
                meta.block_size, slots, address(k_cache), address(v_cache), kv_type(k_cache), self.threads,
            )  # fmt: skip


def describe_all(
    ops: Ops, layers: Sequence[Layer], cfg: ModelConfig, rope: RopeTable, rope_swa: RopeTable
) -> FusedLayers | None:
    """Every layer's description, or None: not the native kernels, or a layer `strata_layer` does
    not cover (all layers take the same path). `rope_swa` rotates the sliding-window layers."""
    if not isinstance(ops, NativeOps):
        return None
    descs = []
    for i, layer in enumerate(layers):
        window = cfg.window(i)
        desc = describe(layer, cfg, rope_swa if window else rope, window)
        if desc is None:
            return None
        descs.append(desc)
    return FusedLayers(ops, descs)
