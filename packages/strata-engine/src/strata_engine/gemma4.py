"""Gemma 4 (llama.cpp's gemma4): what its layers add to the shared transformer (model.py).

llama.cpp's graph (src/models/gemma4.cpp) for the dense text model: gemma3's layer (GeGLU, q/k
norms, post-attention and post-FFN norms, the embedding scale) plus, per layer, V RMS-normed
without a weight after its projection, K's projection standing in for V where the file has no
attn_v (use_alternative_attention), and the layer's output times `layer_output_scale` after the
residual. The hyper-parameters (sliding layers by per-layer flags, their RoPE base, queries
unscaled, the final soft-cap) are config.py's; `rope_freqs` (the global layers' proportional
RoPE factors) is rope.py's. Kept here so that the shared forward only asks a layer whether it
has these parts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from strata_engine.api import ModelLoadError
from strata_engine.config import GEMMA4_REFUSED
from strata_engine.gguf_loader import TensorInfo
from strata_engine.kernels.base import Array, Ops
from strata_engine.kernels.weights import vector

TENSORS = ("layer_output_scale.weight",)  # per layer, read beyond the shared (gemma3) ones


@dataclass(frozen=True)
class Parts:
    """One Gemma 4 layer's additions."""

    v_norm: np.ndarray  # [head_dim] ones: ggml_rms_norm has no weight, and x * 1.0 is x exactly
    out_scale: np.float32 | None  # layer_output_scale, one value; None: the file has none


def tensors(t: Mapping[str, TensorInfo], n_layers: int, tensor_parallel: bool) -> dict[str, TensorInfo]:
    """The file's tensors with each layer's attn_k also under attn_v where attn_v is absent (as
    llama.cpp's graph takes Kcur for Vcur): the same weight, so V's projection is K's bits.
    Tensor parallelism is refused: its shards are cut by one KV-head count for every layer."""
    if tensor_parallel:
        raise ModelLoadError(GEMMA4_REFUSED["tensor parallelism"])
    out = dict(t)
    for i in range(n_layers):
        p = f"blk.{i}."
        if p + "attn_v.weight" not in out and p + "attn_k.weight" in out and p + "attn_qkv.weight" not in out:
            out[p + "attn_v.weight"] = out[p + "attn_k.weight"]
    return out


def parts(t: Mapping[str, TensorInfo], prefix: str, head_dim: int) -> Parts:
    """The layer's V norm and its output scale (optional, as llama.cpp loads it)."""
    info = t.get(prefix + "layer_output_scale.weight")
    scale = None
    if info is not None:
        values = vector(info)
        if values.shape != (1,):
            raise ModelLoadError(f"tensor {info.name} has {values.size} values; it is one scale")
        scale = np.float32(values[0])
    return Parts(np.ones(head_dim, dtype=np.float32), scale)


def v_norm(ops: Ops, v: Array, p: Parts, eps: float) -> Array:
    """V [T, kv_heads, head_dim] RMS-normed per head, as ggml_rms_norm (the weight of ones)."""
    return ops.rmsnorm(v, p.v_norm, eps)


def scaled(x: Array, p: Parts) -> Array:
    """The layer's output times its scale (one fp32 multiply per element, as ggml_mul)."""
    return x if p.out_scale is None else x * p.out_scale
