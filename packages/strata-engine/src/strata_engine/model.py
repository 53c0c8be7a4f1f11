"""The transformer (llama / qwen2 / qwen3 / qwen3moe / phi3 / gemma 1-3 / mistral3 / gpt-oss), once,
calling `Ops` for every heavy step; the architectures differ by `ModelConfig` switches.

The forward pass takes a flat batch of tokens from any number of sequences (prefill
chunks and decode steps mixed), writes their K/V into the paged cache first, then attends.

With tensor parallelism (tensor_parallel.py) each rank loads its part of every layer
(`shard_layer`: a range of KV heads with their query heads, a range of FFN columns) and the
same forward sums the ranks' partial outputs after the row-parallel projections (attention
output and FFN down; with one rank, the input untouched).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

import numpy as np
from gguf import GGML_QUANT_SIZES

from strata_engine import attention_temperature, fused_rope, gemma4, gpt_oss
from strata_engine.api import ModelLoadError
from strata_engine.config import ModelConfig
from strata_engine.experts import mix
from strata_engine.fused_norm import add_norm
from strata_engine.gguf_loader import GGUFFile, TensorInfo, required
from strata_engine.kernels import fused_layer
from strata_engine.kernels.base import (
    Array,
    AttentionMeta,
    Ops,
    RopeTable,
    linear_runs,
    rope_kv_write,
)
from strata_engine.kernels.weights import Weight, packed_experts, split_rows, vector
from strata_engine.rope import read_factors, rope_table
from strata_engine.row_packing import lm_head
from strata_engine.tensor_parallel import SINGLE, TensorParallel

log = logging.getLogger("strata_engine")


@dataclass
class Layer:
    attn_norm: np.ndarray
    wq: Weight
    wk: Weight
    wv: Weight
    wo: Weight
    bq: np.ndarray | None
    bk: np.ndarray | None
    bv: np.ndarray | None
    q_norm: np.ndarray | None
    k_norm: np.ndarray | None
    ffn_norm: np.ndarray
    w_gate: Weight | None  # None in a mixture-of-experts layer
    w_up: Weight | None
    w_down: Weight | None
    router: Weight | None = None  # [n_experts, hidden]: the MoE gate (ffn_gate_inp)
    experts: list[tuple[Weight, Weight, Weight]] | None = None  # (gate, up, down) per expert
    post_attn_norm: np.ndarray | None = None  # gemma2/3: on the attention output
    post_ffn_norm: np.ndarray | None = None  # gemma2/3: on the FFN output
    # q/k/v and gate/up as fused matmuls, for backends that pay per launch (`Ops.fuses_projections`)
    qkv: tuple[FusedProjection, ...] | None = None
    gate_up: tuple[FusedProjection, ...] | None = None
    oai: gpt_oss.Parts | None = None  # gpt-oss: attention sinks, output, router and expert biases
    g4: gemma4.Parts | None = None  # gemma4: V's norm and the layer's output scale


@dataclass(frozen=True)
class FusedProjection:
    """Consecutive projections of one input read by one matmul: their weights' rows stacked (and
    their biases), packed once. An output depends only on its own weight row, so each member's
    columns of the result are the bits its own matmul gives."""

    weight: Weight
    bias: np.ndarray | None
    widths: tuple[int, ...]  # the members' output features, in order


def fuse_projections(
    weights: list[Weight], biases: list[np.ndarray | None], ops: Ops
) -> tuple[FusedProjection, ...]:
    """`weights` (with `biases`) as runs of fused matmuls: consecutive members of one stored type
    whose biases are all present or all absent share a run (Q4_K_M's Q6_K attn_v stands alone)."""
    runs: list[list[int]] = []
    for i, w in enumerate(weights):
        last = runs[-1][-1] if runs else None
        if (
            last is not None
            and weights[last].kernel_type == w.kernel_type
            and weights[last].in_features == w.in_features
            and (biases[last] is None) == (biases[i] is None)
        ):
            runs[-1].append(i)
        else:
            runs.append([i])
    fused = []
    for run in runs:
        members = [weights[i] for i in run]
        parts = [biases[i] for i in run]
        bias = None if parts[0] is None else np.concatenate(parts).astype(np.float32)  # type: ignore[arg-type]
        widths = tuple(w.out_features for w in members)
        fused.append(FusedProjection(ops.pack(stack_rows(members)), bias, widths))
    return tuple(fused)


def stack_rows(weights: list[Weight]) -> Weight:
    """The weights' rows one after another as one weight (the inverse of `split_rows`)."""
    if len(weights) == 1:
        return weights[0]
    first = weights[0]
    name = "+".join(w.name for w in weights)
    out = sum(w.out_features for w in weights)
    raw = np.concatenate([w.raw for w in weights])
    sources = [w.source for w in weights]
    source = None
    if first.source is not None and all(s is not None for s in sources):
        data = np.concatenate([s.data for s in sources if s is not None])
        source = TensorInfo(name, (out, first.in_features), first.source.qtype, data)
    return Weight(name, out, first.in_features, first.kernel_type, raw, source)


def gated_linear(
    ops: Ops, x: Array, projections: tuple[FusedProjection, ...] | None, gelu: bool
) -> Array | None:
    """act(gate) * up of the fused gate/up `projections` applied to `x` as one backend op where it
    has one (`gated_linear`: the matmuls, the product and its quantisation in one launch, the
    same bits), else None: the model's steps."""
    fused = getattr(ops, "gated_linear", None)
    if fused is None or projections is None or any(p.bias is not None for p in projections):
        return None
    return fused(x, [(p.weight, p.widths) for p in projections], gelu)


def fused_linear(ops: Ops, x: Array, projections: tuple[FusedProjection, ...]) -> list[Array]:
    """Each member's output of `projections` applied to `x`, as contiguous arrays."""
    outs: list[Array] = []
    ys = linear_runs(ops, x, [(p.weight, p.bias) for p in projections])
    for p, y in zip(projections, ys, strict=True):
        if len(p.widths) == 1:
            outs.append(y)
            continue
        start = 0
        for width in p.widths:
            part = y[:, start : start + width]
            outs.append(part.contiguous() if hasattr(part, "contiguous") else np.ascontiguousarray(part))
            start += width
    return outs


def row_range(w: Weight, start: int, end: int) -> Weight:
    """Rows [start, end) of a weight, its blocks copied so that the other rows can be freed."""
    part = split_rows(w, [start, end - start, w.out_features - end])[1]
    return replace(part, raw=part.raw.copy())


def column_range(w: Weight, start: int, end: int) -> Weight:
    """Input columns [start, end) of a weight (a row-parallel projection's shard).

    A row's blocks are contiguous, so a range on block boundaries (32 values, 256 for K-quants)
    is a slice of every row's blocks, kept packed, and the dot product over it reads the very
    values the whole weight holds. Off block boundaries the columns become exact fp32 values.
    """
    if not 0 <= start < end <= w.in_features:
        raise ModelLoadError(f"tensor {w.name}: no columns {start}:{end} in {w.in_features}")
    block = _block(w)
    name, n = f"{w.name}[:, {start}:{end}]", end - start
    if start % block or end % block:
        log.info(
            "tensor %s: columns %d:%d are off its %d-value blocks; kept as fp32", w.name, start, end, block
        )
        dense = np.ascontiguousarray(w.dense()[:, start:end])
        return Weight(name, w.out_features, n, 0, dense.view(np.uint8).reshape(-1), None, dense)
    n_blocks = w.in_features // block
    raw = np.ascontiguousarray(w.raw.reshape(w.out_features, n_blocks, -1)[:, start // block : end // block])
    source = None
    if w.kernel_type != 0 and w.source is not None:  # the stored blocks, for the torch and GPU ops
        data = w.source.data.reshape(w.out_features, n_blocks, -1)[:, start // block : end // block]
        source = TensorInfo(name, (w.out_features, n), w.source.qtype, np.ascontiguousarray(data).reshape(-1))
    return Weight(name, w.out_features, n, w.kernel_type, raw.reshape(-1), source)


def _block(w: Weight) -> int:
    """Values per block of `w` (1 for fp32), the unit its input columns split by: the stored
    block, and at least the 32 values the kernels dequantise at a time (F16, BF16: 1 stored)."""
    return 1 if w.kernel_type == 0 or w.source is None else max(GGML_QUANT_SIZES[w.source.qtype][0], 32)


def _ffn_shard(gate: Weight, up: Weight, down: Weight, tp: TensorParallel) -> tuple[Weight, Weight, Weight]:
    """This rank's FFN columns: rows of gate and up, the same input columns of down."""
    start, end = tp.part(down.in_features, _block(down), f"{down.name} columns")
    return row_range(gate, start, end), row_range(up, start, end), column_range(down, start, end)


def shard_layer(layer: Layer, cfg: ModelConfig, tp: TensorParallel) -> Layer:
    """This rank's part of a layer: its KV heads with their query heads (rows of wq, wk, wv and
    their biases, input columns of wo) and its FFN columns (each expert's, in an MoE layer)."""
    group, d = cfg.n_heads // cfg.n_kv_heads, cfg.head_dim
    k0, k1 = tp.part(cfg.n_kv_heads, what="KV heads")
    q0, q1 = k0 * group * d, k1 * group * d

    def rows(b: np.ndarray | None, start: int, end: int) -> np.ndarray | None:
        return None if b is None else b[start:end].copy()

    experts, w_gate, w_up, w_down = layer.experts, layer.w_gate, layer.w_up, layer.w_down
    if experts is not None:
        experts = [_ffn_shard(g, u, dn, tp) for g, u, dn in experts]
    else:
        assert w_gate is not None and w_up is not None and w_down is not None
        w_gate, w_up, w_down = _ffn_shard(w_gate, w_up, w_down, tp)
    return replace(
        layer,
        wq=row_range(layer.wq, q0, q1),
        wk=row_range(layer.wk, k0 * d, k1 * d),
        wv=row_range(layer.wv, k0 * d, k1 * d),
        wo=column_range(layer.wo, q0, q1),
        bq=rows(layer.bq, q0, q1),
        bk=rows(layer.bk, k0 * d, k1 * d),
        bv=rows(layer.bv, k0 * d, k1 * d),
        w_gate=w_gate,
        w_up=w_up,
        w_down=w_down,
        experts=experts,
    )


def pack_layer(layer: Layer, ops: Ops) -> Layer:
    """The layer's matmul weights in the form `ops.linear` reads (see `Ops.pack`); for a backend
    that pays per launch (`fuses_projections`), q/k/v and gate/up fused (`fuse_projections`)
    instead, the members left unpacked (the forward reads only the fused weights)."""

    def pack(w: Weight | None) -> Weight | None:
        return None if w is None else ops.pack(w)

    if getattr(ops, "fuses_projections", False) and layer.experts is None and layer.g4 is None:
        assert layer.w_gate is not None and layer.w_up is not None and layer.w_down is not None
        return replace(
            layer,
            qkv=fuse_projections([layer.wq, layer.wk, layer.wv], [layer.bq, layer.bk, layer.bv], ops),
            gate_up=fuse_projections([layer.w_gate, layer.w_up], [None, None], ops),
            wo=ops.pack(layer.wo),
            w_down=ops.pack(layer.w_down),
        )

    return replace(
        layer,
        wq=ops.pack(layer.wq),
        wk=ops.pack(layer.wk),
        wv=ops.pack(layer.wv),
        wo=ops.pack(layer.wo),
        w_gate=pack(layer.w_gate),
        w_up=pack(layer.w_up),
        w_down=pack(layer.w_down),
        router=pack(layer.router),
        experts=None
        if layer.experts is None
        else [(ops.pack(g), ops.pack(u), ops.pack(d)) for g, u, d in layer.experts],
    )


def rope_tables(cfg: ModelConfig, t: dict[str, TensorInfo]) -> tuple[RopeTable, RopeTable]:
    """The RoPE tables of the full-attention and the sliding-window layers (the same table unless
    the file gives the latter their own base, as gemma3 does), with the file's scaling and factors."""
    named = {
        name: vector(info) for name, info in t.items() if name.startswith(("rope_freqs", "rope_factors"))
    }
    factors = read_factors(cfg.arch, named, cfg.rope_scaling, cfg.ctx_size, cfg.rope_dim)
    interleaved = cfg.rope_style == "interleaved"
    full = rope_table(cfg.ctx_size, cfg.rope_dim, cfg.rope_base, interleaved, cfg.rope_scaling, factors)
    if cfg.rope_base_swa is None:
        return full, full
    # llama.cpp's sliding-window layers rotate with their own base and no frequency scaling
    dim = cfg.rope_dim_swa or cfg.rope_dim  # gemma4: the sliding layers' own
    swa = rope_table(cfg.ctx_size, dim, cfg.rope_base_swa, interleaved, cfg.rope_scaling, None, 1.0)
    return full, swa


class Transformer:
    def __init__(self, gguf: GGUFFile, cfg: ModelConfig, ops: Ops, tp: TensorParallel = SINGLE) -> None:
        self.cfg = cfg  # with tensor parallelism: this rank's head counts (see the end of __init__)
        self.ops = ops
        self.tp = tp
        t = gpt_oss.tensors(gguf.tensors, ops, tp.active) if cfg.arch == "gpt-oss" else gguf.tensors
        t = gemma4.tensors(t, cfg, tp.active) if cfg.arch == "gemma4" else t

        def need(name: str) -> TensorInfo:
            return required(t, name)

        def opt_vec(name: str) -> np.ndarray | None:
            return vector(t[name]) if name in t else None

        # the LM head in the form the ops' matmul reads (a tied head: the embedding packed, or itself)
        self.embedding, self.output = lm_head(ops, need, "output.weight" in t, gguf.release_pages)
        self.norm = vector(need("output_norm.weight"))
        self.layers = []
        for i in range(cfg.n_layers):
            p = f"blk.{i}."
            if p + "attn_qkv.weight" in t:  # phi3: one fused projection, split by rows at load
                kvh, d = cfg.heads(i)
                q_rows, kv_rows = cfg.n_heads * d, kvh * d
                wq, wk, wv = split_rows(
                    Weight.from_info(t[p + "attn_qkv.weight"]), [q_rows, kv_rows, kv_rows]
                )
            else:
                wq, wk, wv = (Weight.from_info(need(p + f"attn_{x}.weight")) for x in "qkv")
            router, experts = gemma4.experts(t, p, cfg) if cfg.arch == "gemma4" else (None, None)
            if cfg.n_experts and cfg.arch != "gemma4":  # gemma4's: a dense FFN beside them
                router = Weight.from_info(need(p + "ffn_gate_inp.weight"))
                gates, ups, downs = (
                    packed_experts(need(p + f"ffn_{x}_exps.weight")) for x in ("gate", "up", "down")
                )
                if not len(gates) == len(ups) == len(downs) == router.out_features == cfg.n_experts:
                    raise ModelLoadError(
                        f"layer {i}: expert tensors disagree with expert_count {cfg.n_experts}"
                    )
                experts = list(zip(gates, ups, downs, strict=True))
                w_gate = w_up = w_down = None
            elif p + "ffn_gate.weight" not in t and p + "ffn_up.weight" in t:  # phi3: fused [gate; up]
                up = Weight.from_info(t[p + "ffn_up.weight"])
                w_gate, w_up = split_rows(up, [up.out_features // 2] * 2)
                w_down = Weight.from_info(need(p + "ffn_down.weight"))
            else:
                w_gate, w_up, w_down = (
                    Weight.from_info(need(p + f"ffn_{x}.weight")) for x in ("gate", "up", "down")
                )
            self.layers.append(
                Layer(
                    attn_norm=vector(need(p + "attn_norm.weight")),
                    wq=wq,
                    wk=wk,
                    wv=wv,
                    wo=Weight.from_info(need(p + "attn_output.weight")),
                    bq=opt_vec(p + "attn_q.bias"),
                    bk=opt_vec(p + "attn_k.bias"),
                    bv=opt_vec(p + "attn_v.bias"),
                    q_norm=opt_vec(p + "attn_q_norm.weight"),
                    k_norm=opt_vec(p + "attn_k_norm.weight"),
                    ffn_norm=vector(need(p + "ffn_norm.weight")),
                    w_gate=w_gate,
                    w_up=w_up,
                    w_down=w_down,
                    router=router,
                    experts=experts,
                    post_attn_norm=opt_vec(p + "post_attention_norm.weight"),
                    post_ffn_norm=opt_vec(p + "post_ffw_norm.weight"),
                    oai=gpt_oss.parts(t, p) if cfg.arch == "gpt-oss" else None,
                    g4=gemma4.parts(t, p, cfg, i, ops) if cfg.arch == "gemma4" else None,
                )
            )
            if cfg.post_norms and (
                self.layers[-1].post_attn_norm is None or self.layers[-1].post_ffn_norm is None
            ):
                raise ModelLoadError(f"model file lacks {p}post_attention_norm / post_ffw_norm")
            if cfg.qk_norm and (self.layers[-1].q_norm is None or self.layers[-1].k_norm is None):
                raise ModelLoadError(f"model file lacks {p}attn_q_norm / attn_k_norm")
            if tp.active:
                self.layers[-1] = shard_layer(self.layers[-1], cfg, tp)
            self.layers[-1] = pack_layer(self.layers[-1], ops)
            gguf.release_pages()  # the layer holds its own copies: the file's pages need not stay
        if tp.active:  # the forward sees this rank's heads; the KV cache holds only them
            k0, k1 = tp.part(cfg.n_kv_heads, what="KV heads")
            group = cfg.n_heads // cfg.n_kv_heads
            self.cfg = replace(cfg, n_heads=(k1 - k0) * group, n_kv_heads=k1 - k0)
        self.rope, self.rope_swa = rope_tables(cfg, t)  # gemma3: the sliding-window layers' own
        self.ple = gemma4.per_layer_inputs(t, cfg, ops)  # gemma4 E2B / E4B: per-layer embeddings
        self.q_temp = attention_temperature.factors(cfg.ctx_size, cfg.attn_temp_scale, cfg.attn_temp_floor)
        # gemma: embeddings times sqrt(hidden), as llama.cpp's fp32 ggml_scale(sqrtf(n_embd))
        self.embed_scale = np.sqrt(np.float32(cfg.hidden)) if cfg.embed_scale else None
        # one native call per layer where it applies; a tensor-parallel rank keeps the per-op path
        self.fused = (
            None
            if tp.active or self.q_temp is not None  # strata_layer has no query temperature
            else fused_layer.describe_all(self.ops, self.layers, self.cfg, self.rope, self.rope_swa)
        )

    def forward(self, ids: np.ndarray, meta: AttentionMeta, kv: list[tuple[np.ndarray, np.ndarray]]) -> Array:
        """Hidden states after the final norm, [T, hidden], for the step's flat tokens."""
        cfg, ops, eps = self.cfg, self.ops, self.cfg.rms_eps
        n = ids.shape[0]
        x = ops.embed(self.embedding, ids)
        if self.embed_scale is not None:
            x = x * self.embed_scale  # one correctly rounded fp32 multiply per element
        ple = gemma4.layer_inputs(ops, self.ple, ids, x, cfg)  # gemma4 E2B / E4B, else None
        if self.fused is not None:  # the same kernels in the same order, one call per layer
            self.fused.run(x, meta, kv)
            return ops.rmsnorm(x, self.norm, cfg.rms_eps)
        normed = None  # x's next norm where the down projection's launch made it (fused_norm)
        for i, (layer, (k_cache, v_cache)) in enumerate(zip(self.layers, kv, strict=True)):
            window = cfg.window(i)
            rope = self.rope_swa if window else self.rope
            h, normed = ops.rmsnorm(x, layer.attn_norm, cfg.rms_eps) if normed is None else normed, None
            sinks = None if layer.oai is None else layer.oai.sinks  # gpt-oss
            attend = (cfg.attn_scale, window, cfg.attn_softcap, sinks)
            caches, a = (k_cache, v_cache), None  # a: q/k/v to attention as one op (fused_rope.py)
            if layer.g4 is not None:  # gemma4: V normed; a shared-KV layer computes no K or V
                q = gemma4.qkv(ops, h, layer, layer.g4, cfg, i, meta, rope, caches)
            elif (a := fused_rope.qkv_attention(self, h, layer, meta, rope, caches, attend)) is None:
                q = self._qkv(h, layer, meta, rope, k_cache, v_cache)
            if a is None:
                plain = cfg.attn_scale is None and not window and not cfg.attn_softcap and layer.oai is None
                a = ops.attention(q, k_cache, v_cache, meta, *(() if plain else attend))
            o, bo = a.reshape(n, -1), layer.oai and layer.oai.bo
            if layer.post_attn_norm is None and not self.tp.active:  # x + o and its norm (fused_norm)
                x, h = add_norm(ops, o, layer.wo, x, layer.ffn_norm, cfg.rms_eps, bo)
            else:
                o = self.tp.all_reduce(ops.linear(o, layer.wo, bo))
                x = x + (o if layer.post_attn_norm is None else ops.rmsnorm(o, layer.post_attn_norm, eps))
                h = ops.rmsnorm(x, layer.ffn_norm, cfg.rms_eps)
            if layer.oai is not None:
                f = gpt_oss.moe(ops, h, layer.router, layer.experts or [], layer.oai, cfg.n_experts_used)
            elif layer.experts is not None and layer.g4 is None:  # gemma4's: gemma4.ffn_out
                f = self._moe(h, layer)
            else:
                act = ops.gelu_mul if cfg.ffn_act == "gelu" else ops.silu_mul
                assert layer.w_gate is not None and layer.w_up is not None and layer.w_down is not None
                gated = gated_linear(ops, h, layer.gate_up, cfg.ffn_act == "gelu")
                if gated is None:
                    if layer.gate_up is not None:
                        gate, up = fused_linear(ops, h, layer.gate_up)
                    else:
                        gate, up = ops.linear(h, layer.w_gate), ops.linear(h, layer.w_up)
                    gated = act(gate, up)
                if layer.g4 is None and layer.post_ffn_norm is None and not self.tp.active:
                    nxt = self.layers[i + 1].attn_norm if i + 1 < len(self.layers) else self.norm
                    x, normed = add_norm(ops, gated, layer.w_down, x, nxt, cfg.rms_eps)  # x + f, normed
                    continue
                f = ops.linear(gated, layer.w_down)
            f = self.tp.all_reduce(f) if layer.g4 is None else gemma4.ffn_out(ops, x, f, layer, cfg)
            if layer.post_ffn_norm is not None:
                f = ops.rmsnorm(f, layer.post_ffn_norm, cfg.rms_eps)
            x = x + f if layer.g4 is None else gemma4.layer_out(ops, x + f, layer.g4, ple, i, cfg.rms_eps)
        return ops.rmsnorm(x, self.norm, cfg.rms_eps) if normed is None else normed

    def _qkv(
        self, h: Array, layer: Layer, meta: AttentionMeta, rope: RopeTable, k_cache: Array, v_cache: Array
    ) -> Array:
        """The rotated queries [T, heads, d]; K and V (normed where the model says) written to the cache."""
        cfg, ops, n = self.cfg, self.ops, h.shape[0]
        if (q := fused_rope.qkv_rope(self, h, layer, meta, rope, k_cache, v_cache)) is not None:
            return q  # the projections, RoPE and the cache write as one op (fused_rope.py)
        if layer.qkv is not None:
            q, k, v = fused_linear(ops, h, layer.qkv)
        else:
            q, k, v = (ops.linear(h, layer.wq, layer.bq), ops.linear(h, layer.wk, layer.bk),
                       ops.linear(h, layer.wv, layer.bv))  # fmt: skip
        q = q.reshape(n, cfg.n_heads, cfg.head_dim)
        k = k.reshape(n, cfg.n_kv_heads, cfg.head_dim)
        v = v.reshape(n, cfg.n_kv_heads, cfg.head_dim)
        if layer.q_norm is not None and layer.k_norm is not None:
            q = ops.rmsnorm(q, layer.q_norm, cfg.rms_eps)
            k = ops.rmsnorm(k, layer.k_norm, cfg.rms_eps)
        temp = self.q_temp  # mistral3: the queries scaled after RoPE, as llama.cpp
        after = None if temp is None else lambda q: attention_temperature.apply(q, meta.positions, temp)
        return rope_kv_write(ops, q, k, v, meta, rope, k_cache, v_cache, after)  # RoPE and the cache write

    def _moe(self, h: Array, layer: Layer) -> Array:
        """Mixture of experts, batch-invariant: a row's experts, weights and sum depend on that
        row alone (experts.py: the router's top-k and softmax, the sum in ascending expert id)."""
        assert layer.router is not None and layer.experts is not None
        ops, experts = self.ops, layer.experts

        def ffn(expert: int, x: Array) -> Array:
            gate, up, down = experts[expert]
            return ops.linear(ops.silu_mul(ops.linear(x, gate), ops.linear(x, up)), down)

        return mix(h, ops.linear(h, layer.router), self.cfg.n_experts_used, ffn)

    def logits(self, hidden: Array, out: np.ndarray | None = None) -> Array:
        """fp32 logits [R, vocab] for the selected rows only (soft-capped where the model says);
        `out` may receive them (see `Ops.linear`)."""
        logits = self.ops.linear(hidden, self.output, out=out)
        return self.ops.softcap(logits, self.cfg.final_softcap) if self.cfg.final_softcap else logits
