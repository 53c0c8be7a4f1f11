"""The transformer (llama / qwen2 / qwen3), written once, calling `Ops` for every heavy step.

The forward pass takes a flat batch of tokens from any number of sequences (prefill
chunks and decode steps mixed), writes their K/V into the paged cache first, then attends.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from strata_engine import exactmath
from strata_engine.api import ModelLoadError
from strata_engine.config import ModelConfig
from strata_engine.gguf_loader import GGUFFile
from strata_engine.ops import AttentionMeta, Ops, RopeTable
from strata_engine.weights import Weight, vector


@dataclass
class Layer:
    attn_norm: torch.Tensor
    wq: Weight
    wk: Weight
    wv: Weight
    wo: Weight
    bq: torch.Tensor | None
    bk: torch.Tensor | None
    bv: torch.Tensor | None
    q_norm: torch.Tensor | None
    k_norm: torch.Tensor | None
    ffn_norm: torch.Tensor
    w_gate: Weight
    w_up: Weight
    w_down: Weight


def rope_table(cfg: ModelConfig) -> RopeTable:
    """cos/sin per absolute position, computed in float64 with exactmath (the same bits on every
    machine, unlike numpy's or libm's sin/cos) and stored fp32: the same for any batch."""
    half = cfg.rope_dim // 2
    inv = exactmath.exp(
        -(np.arange(half, dtype=np.float64) * 2.0 / cfg.rope_dim) * exactmath.log(cfg.rope_base)
    )
    angles = np.arange(cfg.ctx_size, dtype=np.float64)[:, None] * inv[None, :]
    sin, cos = exactmath.sin_cos(angles)
    return RopeTable(
        cos=torch.from_numpy(cos.astype(np.float32)),
        sin=torch.from_numpy(sin.astype(np.float32)),
        dim=cfg.rope_dim,
        interleaved=cfg.rope_style == "interleaved",
    )


class Transformer:
    def __init__(self, gguf: GGUFFile, cfg: ModelConfig, ops: Ops) -> None:
        self.cfg = cfg
        self.ops = ops
        t = gguf.tensors

        def need(name: str):
            if name not in t:
                raise ModelLoadError(f"model file lacks tensor {name}")
            return t[name]

        def opt_vec(name: str) -> torch.Tensor | None:
            return vector(t[name]) if name in t else None

        self.embedding = Weight.from_info(need("token_embd.weight"))
        self.output = Weight.from_info(t["output.weight"]) if "output.weight" in t else self.embedding
        self.norm = vector(need("output_norm.weight"))
        self.layers = []
        for i in range(cfg.n_layers):
            p = f"blk.{i}."
            self.layers.append(
                Layer(
                    attn_norm=vector(need(p + "attn_norm.weight")),
                    wq=Weight.from_info(need(p + "attn_q.weight")),
                    wk=Weight.from_info(need(p + "attn_k.weight")),
                    wv=Weight.from_info(need(p + "attn_v.weight")),
                    wo=Weight.from_info(need(p + "attn_output.weight")),
                    bq=opt_vec(p + "attn_q.bias"),
                    bk=opt_vec(p + "attn_k.bias"),
                    bv=opt_vec(p + "attn_v.bias"),
                    q_norm=opt_vec(p + "attn_q_norm.weight"),
                    k_norm=opt_vec(p + "attn_k_norm.weight"),
                    ffn_norm=vector(need(p + "ffn_norm.weight")),
                    w_gate=Weight.from_info(need(p + "ffn_gate.weight")),
                    w_up=Weight.from_info(need(p + "ffn_up.weight")),
                    w_down=Weight.from_info(need(p + "ffn_down.weight")),
                )
            )
        self.rope = rope_table(cfg)

    @torch.inference_mode()
    def forward(
        self, ids: torch.Tensor, meta: AttentionMeta, kv: list[tuple[torch.Tensor, torch.Tensor]]
    ) -> torch.Tensor:
        """Hidden states after the final norm, [T, hidden], for the step's flat tokens."""
        cfg, ops = self.cfg, self.ops
        n = ids.shape[0]
        x = ops.embed(self.embedding, ids)
        for layer, (k_cache, v_cache) in zip(self.layers, kv, strict=True):
            h = ops.rmsnorm(x, layer.attn_norm, cfg.rms_eps)
            q = ops.linear(h, layer.wq, layer.bq).view(n, cfg.n_heads, cfg.head_dim)
            k = ops.linear(h, layer.wk, layer.bk).view(n, cfg.n_kv_heads, cfg.head_dim)
            v = ops.linear(h, layer.wv, layer.bv).view(n, cfg.n_kv_heads, cfg.head_dim)
            if layer.q_norm is not None and layer.k_norm is not None:
                q = ops.rmsnorm(q, layer.q_norm, cfg.rms_eps)
                k = ops.rmsnorm(k, layer.k_norm, cfg.rms_eps)
            q = ops.rope(q, meta.positions, self.rope)
            k = ops.rope(k, meta.positions, self.rope)
            ops.kv_write(k, v, k_cache, v_cache, meta.slots)
            a = ops.attention(q, k_cache, v_cache, meta).view(n, -1)
            x = x + ops.linear(a, layer.wo)
            h = ops.rmsnorm(x, layer.ffn_norm, cfg.rms_eps)
            x = x + ops.linear(
                ops.silu_mul(ops.linear(h, layer.w_gate), ops.linear(h, layer.w_up)), layer.w_down
            )
        return ops.rmsnorm(x, self.norm, cfg.rms_eps)

    @torch.inference_mode()
    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """fp32 logits [R, vocab] for the selected rows only."""
        return self.ops.linear(hidden, self.output)
