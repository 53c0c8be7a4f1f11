"""Gemma 4 (llama.cpp's gemma4): what its layers add to the shared transformer (model.py).

llama.cpp's graph (src/models/gemma4.cpp) for the text model: gemma3's layer (GeGLU, q/k norms,
post-attention and post-FFN norms, the embedding scale) plus, per layer, V RMS-normed without a
weight after its projection, K's projection standing in for V where the file has no attn_v
(use_alternative_attention), the layer's output times `layer_output_scale` after the residual,
and in E2B / E4B:

- per-layer embeddings: each token's row of `per_layer_token_embd` (times sqrt(width)) plus the
  RMS-normed projection of the scaled embedding (`per_layer_model_proj`, times 1/sqrt(hidden)),
  the sum times 1/sqrt(2), one slice per layer; each layer adds, after its FFN residual,
  post_norm(proj(gelu(inp_gate x) * slice)) to its output before the scale;
- shared KV layers: the last `attention.shared_kv_layers` layers compute no K or V and attend
  over the cache of the last earlier layer of their kind (config.py's `kv_source`; the runner
  gives them that layer's cache arrays);

and in 26B-A4B, mixture-of-experts layers (those with `ffn_gate_inp`): the dense FFN is a shared
expert whose output is normed by `post_ffw_norm_1`, plus the routed experts' GeGLU mixture on the
attention block's output normed by `pre_ffw_norm_2`, itself normed by `post_ffw_norm_2`; the router
reads that output RMS-normed without a weight, times 1/sqrt(hidden), times `ffn_gate_inp.scale`;
its gating is llama.cpp's softmax with the top-k weights renormalised (experts.py); experts stored
as one fused `ffn_gate_up_exps` (gate rows, then up rows) or separate gate and up, with optional
per-expert output scales (`ffn_{gate,up,down}_exps.scale`). The sum of the two is then normed by
`post_ffw_norm` as in a dense layer.

The hyper-parameters (sliding layers by per-layer flags, their head sizes and RoPE, queries
unscaled, the final soft-cap) are config.py's; `rope_freqs` (the global layers' proportional
RoPE factors) is rope.py's. Kept here so that the shared forward only asks a layer whether it
has these parts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType

from strata_engine.api import ModelLoadError
from strata_engine.config import GEMMA4_REFUSED, ModelConfig
from strata_engine.experts import mix
from strata_engine.gguf_loader import TensorInfo, required
from strata_engine.kernels.base import Array, AttentionMeta, Ops, RopeTable, like
from strata_engine.kernels.weights import Weight, packed_experts, split_rows, vector

# per layer, read beyond the shared (gemma3) ones
TENSORS = (
    "layer_output_scale.weight", "inp_gate.weight", "proj.weight", "post_norm.weight",
)  # fmt: skip
PLE_TENSORS = ("per_layer_token_embd.weight", "per_layer_model_proj.weight", "per_layer_proj_norm.weight")
# per mixture-of-experts layer, read beyond the router and the separate experts (gguf_checks')
MOE_TENSORS = (
    "ffn_gate_inp.scale", "pre_ffw_norm_2.weight", "post_ffw_norm_1.weight", "post_ffw_norm_2.weight",
    "ffn_gate_up_exps.weight", "ffn_gate_exps.scale", "ffn_up_exps.scale", "ffn_down_exps.scale",
)  # fmt: skip
_SCALES = ("gate", "up", "down")
_UNUSED = np.zeros(1, dtype=np.float32)  # a shared-KV layer's absent K/V projections (never read)


@dataclass(frozen=True)
class Moe:
    """A mixture-of-experts layer's parts beside its router and experts (model.Layer's)."""

    ones: np.ndarray  # [hidden]: the router input's RMS norm has no weight (x * 1.0 is x exactly)
    router_scale: np.ndarray  # [hidden] ffn_gate_inp.scale
    pre_norm: np.ndarray  # pre_ffw_norm_2: the experts' input
    shared_norm: np.ndarray  # post_ffw_norm_1: on the dense FFN (the shared expert)
    routed_norm: np.ndarray  # post_ffw_norm_2: on the experts' mixture
    scales: tuple[np.ndarray | None, ...]  # per expert, [n_experts] or None: gate, up, down outputs


@dataclass(frozen=True)
class Parts:
    """One Gemma 4 layer's additions."""

    v_norm: np.ndarray  # [head_dim] ones: ggml_rms_norm has no weight, and x * 1.0 is x exactly
    out_scale: np.float32 | None  # layer_output_scale, one value; None: the file has none
    shared: bool = False  # reads an earlier layer's KV cache: computes no K or V
    inp_gate: Weight | None = None  # per-layer embeddings: [width, hidden]
    proj: Weight | None = None  # [hidden, width]
    post_norm: np.ndarray | None = None  # [hidden]
    moe: Moe | None = None  # 26B-A4B's mixture-of-experts layers


@dataclass(frozen=True)
class PerLayerInputs:
    """The model-level per-layer embedding tensors (E2B, E4B)."""

    embedding: Weight  # [vocab, n_layers * width]: gathered as stored
    model_proj: Weight  # [n_layers * width, hidden], packed for the ops' matmul
    norm: np.ndarray  # [width]


def tensors(t: Mapping[str, TensorInfo], cfg: ModelConfig, tensor_parallel: bool) -> dict[str, TensorInfo]:
    """The file's tensors with each layer's attn_k also under attn_v where attn_v is absent (as
    llama.cpp's graph takes Kcur for Vcur): the same weight, so V's projection is K's bits; a
    shared-KV layer's absent K/V projections and K norm as placeholders it never reads.
    Tensor parallelism is refused: its shards are cut by one KV-head count for every layer."""
    if tensor_parallel:
        raise ModelLoadError(GEMMA4_REFUSED["tensor parallelism"])
    out = dict(t)
    for i in range(cfg.n_layers):
        p = f"blk.{i}."
        if not cfg.owns_kv(i):
            if cfg.heads(i) != cfg.heads(cfg.kv_source[i]):
                raise ModelLoadError(f"gemma4 layer {i}: {GEMMA4_REFUSED['shared KV']}")
            unused = TensorInfo(p + "(unused)", (1, 1), GGMLQuantizationType.F32, _UNUSED)
            for name in ("attn_k.weight", "attn_v.weight"):
                out.setdefault(p + name, unused)
            if p + "attn_q_norm.weight" in out:
                out.setdefault(p + "attn_k_norm.weight", out[p + "attn_q_norm.weight"])
        elif (
            p + "attn_v.weight" not in out and p + "attn_k.weight" in out and p + "attn_qkv.weight" not in out
        ):
            out[p + "attn_v.weight"] = out[p + "attn_k.weight"]
    return out


def parts(t: Mapping[str, TensorInfo], prefix: str, cfg: ModelConfig, layer: int, ops: Ops) -> Parts:
    """The layer's V norm, its output scale (optional, as llama.cpp loads it) and, with per-layer
    embeddings, its gate, projection and norm (required then)."""
    info = t.get(prefix + "layer_output_scale.weight")
    scale = None
    if info is not None:
        values = vector(info)
        if values.shape != (1,):
            raise ModelLoadError(f"tensor {info.name} has {values.size} values; it is one scale")
        scale = np.float32(values[0])
    ple: dict[str, Any] = {}
    if cfg.ple_dim:
        ple = {
            "inp_gate": ops.pack(Weight.from_info(required(t, prefix + "inp_gate.weight"))),
            "proj": ops.pack(Weight.from_info(required(t, prefix + "proj.weight"))),
            "post_norm": vector(required(t, prefix + "post_norm.weight")),
        }
    v_norm = np.ones(cfg.heads(layer)[1], dtype=np.float32)
    return Parts(v_norm, scale, not cfg.owns_kv(layer), **ple, moe=_moe(t, prefix, cfg))


def _moe(t: Mapping[str, TensorInfo], p: str, cfg: ModelConfig) -> Moe | None:
    """The layer's mixture-of-experts norms and scales where it has a router (required then)."""
    if not cfg.n_experts or p + "ffn_gate_inp.weight" not in t:
        return None
    _check_one_form(t, p)
    scales = [vector(t[name]) if name in t else None for name in (f"{p}ffn_{x}_exps.scale" for x in _SCALES)]
    router_scale, pre, shared, routed = (vector(required(t, p + name)) for name in MOE_TENSORS[:4])
    return Moe(np.ones(cfg.hidden, dtype=np.float32), router_scale, pre, shared, routed, tuple(scales))


def experts(
    t: Mapping[str, TensorInfo], p: str, cfg: ModelConfig
) -> tuple[Weight | None, list[tuple[Weight, Weight, Weight]] | None]:
    """The layer's router and experts (gate, up, down; blocks kept packed) where it has a router:
    a fused ffn_gate_up_exps split by rows, gate first (a row's output is its own row's)."""

    if not cfg.n_experts or p + "ffn_gate_inp.weight" not in t:
        return None, None
    _check_one_form(t, p)
    router = Weight.from_info(t[p + "ffn_gate_inp.weight"])
    if p + "ffn_gate_up_exps.weight" in t:
        fused = packed_experts(t[p + "ffn_gate_up_exps.weight"])
        halves = [split_rows(w, [w.out_features // 2] * 2) for w in fused]
        gates, ups = [g for g, _ in halves], [u for _, u in halves]
    else:
        gates, ups = (packed_experts(required(t, f"{p}ffn_{x}_exps.weight")) for x in ("gate", "up"))
    downs = packed_experts(required(t, p + "ffn_down_exps.weight"))
    if not len(gates) == len(ups) == len(downs) == router.out_features == cfg.n_experts:
        raise ModelLoadError(f"{p}: expert tensors disagree with expert_count {cfg.n_experts}")
    return router, list(zip(gates, ups, downs, strict=True))


def _check_one_form(t: Mapping[str, TensorInfo], p: str) -> None:
    """Beside a fused ffn_gate_up_exps, llama.cpp reads no separate gate or up experts and none of
    their scales (it loads a scale with its own tensor only): a file holding them is refused."""
    if p + "ffn_gate_up_exps.weight" not in t:
        return
    for name in ("ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_gate_exps.scale", "ffn_up_exps.scale"):
        if p + name in t:
            raise ModelLoadError(
                f"tensor {p}{name} beside {p}ffn_gate_up_exps.weight, which llama.cpp reads alone"
            )


def moe_shapes(p: str, n_experts: int, hidden: int, ffn: int) -> dict[str, tuple[int, ...]]:
    """The shapes of a mixture-of-experts layer's tensors beyond the router and separate experts."""
    vectors = dict.fromkeys((p + name for name in MOE_TENSORS[:4]), (hidden,))
    scales = dict.fromkeys((f"{p}ffn_{x}_exps.scale" for x in _SCALES), (n_experts,))
    return {**vectors, **scales, p + "ffn_gate_up_exps.weight": (n_experts, 2 * ffn, hidden)}


def per_layer_inputs(t: Mapping[str, TensorInfo], cfg: ModelConfig, ops: Ops) -> PerLayerInputs | None:
    """The per-layer embedding tensors where the model has them (required then)."""
    if not cfg.ple_dim:
        return None
    embedding, proj, norm = (required(t, name) for name in PLE_TENSORS)
    return PerLayerInputs(Weight.from_info(embedding), ops.pack(Weight.from_info(proj)), vector(norm))


def layer_inputs(
    ops: Ops, ple: PerLayerInputs | None, ids: Array, x: Array, cfg: ModelConfig
) -> Array | None:
    """[T, n_layers, width]: each token's per-layer inputs from its id and its scaled embedding
    `x`, in ggml's order of fp32 operations (project_per_layer_inputs)."""
    if ple is None:
        return None
    n, width = x.shape[0], cfg.ple_dim
    rows = ops.embed(ple.embedding, ids).reshape(n, cfg.n_layers, width) * np.sqrt(np.float32(width))
    proj = ops.linear(x, ple.model_proj) * (np.float32(1.0) / np.sqrt(np.float32(cfg.hidden)))
    proj = ops.rmsnorm(proj.reshape(n, cfg.n_layers, width), ple.norm, cfg.rms_eps)
    return (proj + rows) * (np.float32(1.0) / np.sqrt(np.float32(2.0)))


def qkv(
    ops: Ops, h: Array, layer: Any, p: Parts, cfg: ModelConfig, i: int, meta: AttentionMeta, rope: RopeTable,
    cache: tuple[np.ndarray, np.ndarray],
) -> Array:  # fmt: skip
    """The layer's rotated queries [T, heads, d]; its K (normed, rotated) and V (normed) written
    to its cache, unless it reads another layer's (shared: no K or V computed)."""
    n, (kvh, d) = h.shape[0], cfg.heads(i)
    q = ops.rmsnorm(ops.linear(h, layer.wq).reshape(n, cfg.n_heads, d), layer.q_norm, cfg.rms_eps)
    if not p.shared:
        k = ops.rmsnorm(ops.linear(h, layer.wk).reshape(n, kvh, d), layer.k_norm, cfg.rms_eps)
        v = ops.rmsnorm(ops.linear(h, layer.wv).reshape(n, kvh, d), p.v_norm, cfg.rms_eps)
        ops.kv_write(ops.rope(k, meta.positions, rope), v, cache[0], cache[1], meta.slots)
    return ops.rope(q, meta.positions, rope)


def layer_out(ops: Ops, x: Array, p: Parts, inputs: Array | None, i: int, eps: float) -> Array:
    """After the FFN residual: the per-layer embedding's contribution, then the output scale
    (one fp32 multiply per element, as ggml_mul)."""
    if inputs is not None and p.inp_gate is not None and p.proj is not None and p.post_norm is not None:
        gated = ops.gelu_mul(ops.linear(x, p.inp_gate), np.ascontiguousarray(inputs[:, i]))
        x = x + ops.rmsnorm(ops.linear(gated, p.proj), p.post_norm, eps)
    return x if p.out_scale is None else x * p.out_scale


def ffn_out(ops: Ops, x: Array, f: Array, layer: Any, cfg: ModelConfig) -> Array:
    """The FFN block's output before post_ffw_norm: a dense layer's `f` as is; in a
    mixture-of-experts layer `f` (the shared expert) normed by post_ffw_norm_1 plus the routed
    mixture normed by post_ffw_norm_2, the router and the experts reading `x` (the attention
    block's output) in ggml's order of fp32 operations."""
    moe: Moe | None = layer.g4.moe
    if moe is None:
        return f
    eps = cfg.rms_eps
    r = ops.rmsnorm(x, moe.ones, eps) * (np.float32(1.0) / np.sqrt(np.float32(cfg.hidden)))
    r = r * like(r, moe.router_scale)
    h = ops.rmsnorm(x, moe.pre_norm, eps)

    def expert(e: int, rows: Array) -> Array:
        (gate_w, up_w, down_w), (gs, us, ds) = layer.experts[e], moe.scales
        gate, up = ops.linear(rows, gate_w), ops.linear(rows, up_w)
        gate = gate if gs is None else gate * gs[e]
        y = ops.linear(ops.gelu_mul(gate, up if us is None else up * us[e]), down_w)
        return y if ds is None else y * ds[e]

    routed = mix(h, ops.linear(r, layer.router), cfg.n_experts_used, expert)
    return ops.rmsnorm(f, moe.shared_norm, eps) + ops.rmsnorm(routed, moe.routed_norm, eps)
