"""The hybrid recurrent families `qwen35` (Qwen3.5 / 3.6 dense), `qwen35moe` (the same layers
with routed experts and a gated shared expert in place of the FFN) and `qwen3next` (Qwen3-Next:
qwen35moe's layers with beta and alpha from one fused projection and value heads grouped over the
key heads): which layers are Gated DeltaNet layers and their sizes, read from GGUF metadata as
llama.cpp reads them (llama_model_<arch>::load_arch_hparams), and the tensors those layers read,
with their shapes.

Kept apart from config.py so that the attention-only families' switches stay where they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from strata_engine.api import ModelLoadError

HYBRID_ARCHITECTURES = ("qwen35", "qwen35moe", "qwen3next")
MAX_SIZE = 2**20  # far above any released model's DeltaNet sizes; the tensors pin them exactly


@dataclass(frozen=True)
class HybridConfig:
    """A hybrid model's recurrent layers: layer i is a DeltaNet layer where `recurrent[i]`."""

    recurrent: tuple[bool, ...]
    d_conv: int  # ssm.conv_kernel: the short convolution's width (its window keeps d_conv - 1 rows)
    d_state: int  # ssm.state_size: the DeltaNet head size, keys and values alike
    n_k_heads: int  # ssm.group_count
    n_v_heads: int  # ssm.time_step_rank; value head h reads key head h % n_k_heads
    sections: tuple[int, ...]  # rope.dimension_sections (IMROPE; every section reads the text position)
    # qwen35moe: experts per layer (0: the dense SwiGLU FFN), the routed and the shared experts' sizes
    n_experts: int = 0
    arch: str = "qwen35"
    ffn_exp: int = 0  # expert_feed_forward_length (llama.cpp's default: feed_forward_length / k)
    ffn_shexp: int = 0  # expert_shared_feed_forward_length (default: feed_forward_length)

    @property
    def fused_beta_alpha(self) -> bool:
        """qwen3next: beta and alpha from one ssm_ba, per key head [beta | alpha] of its
        value heads (llama.cpp's mixed_ba split); the others: ssm_beta and ssm_alpha."""
        return self.arch == "qwen3next"

    def key_heads(self) -> np.ndarray:
        """The key head each value head reads: h // (n_v / n_k) for qwen3next (its repeat
        interleave, [k0_v0, k0_v1, k1_v2, k1_v3]); h % n_k for qwen35 (ggml's broadcast)."""
        heads = np.arange(self.n_v_heads)
        return (
            heads // (self.n_v_heads // self.n_k_heads)
            if self.arch == "qwen3next"
            else heads % self.n_k_heads
        )

    @property
    def key_dim(self) -> int:
        return self.d_state * self.n_k_heads

    @property
    def value_dim(self) -> int:
        return self.d_state * self.n_v_heads

    @property
    def state_bytes(self) -> int:
        """One sequence's recurrent state over all DeltaNet layers (fp32 window and matrices)."""
        per_layer = (self.d_conv - 1) * self.conv_dim + self.n_v_heads * self.d_state**2
        return 4 * per_layer * sum(self.recurrent)

    @property
    def conv_dim(self) -> int:
        """Channels of the short convolution: [q | k | v]."""
        return 2 * self.key_dim + self.value_dim


def _size(arch: str, meta: Mapping[str, Any], name: str, default: int | None = None) -> int:
    key = f"{arch}.{name}"
    value = meta.get(key, default)
    if value is None:
        raise ModelLoadError(f"GGUF metadata lacks {key}")
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SIZE:
        raise ModelLoadError(f"GGUF metadata {key} = {value!r} is not an integer in 1..{MAX_SIZE}")
    return value


def read_hybrid(arch: str, meta: Mapping[str, Any], n_layers: int) -> HybridConfig | None:
    """The recurrent layers of a hybrid file (None for the other families)."""
    if arch not in HYBRID_ARCHITECTURES:
        return None
    if meta.get(f"{arch}.nextn_predict_layers", 0):
        raise ModelLoadError(
            f"{arch}: multi-token-prediction layers (nextn_predict_layers) are not supported"
        )
    interval = _size(arch, meta, "full_attention_interval", 4)
    # qwen3next rotates with plain NEOX RoPE (no sections key read); the others' IMROPE sections
    sections = [] if arch == "qwen3next" else meta.get(f"{arch}.rope.dimension_sections")
    if arch != "qwen3next" and (
        not isinstance(sections, list)
        or not 1 <= len(sections) <= 4
        or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in sections)
    ):
        raise ModelLoadError(f"GGUF metadata {arch}.rope.dimension_sections must be up to 4 counts")
    d_state = _size(arch, meta, "ssm.state_size")
    n_v = _size(arch, meta, "ssm.time_step_rank")
    n_k = _size(arch, meta, "ssm.group_count")
    if _size(arch, meta, "ssm.inner_size") != d_state * n_v or n_v % n_k:
        raise ModelLoadError(
            f"{arch}: ssm.inner_size must be ssm.state_size x ssm.time_step_rank, and the value heads "
            "a multiple of ssm.group_count"
        )
    n_experts, ffn_exp, ffn_shexp = 0, 0, 0
    if arch in ("qwen35moe", "qwen3next"):
        n_experts, ffn = _size(arch, meta, "expert_count"), meta.get(f"{arch}.feed_forward_length", 0)
        k = _size(arch, meta, "expert_used_count")
        ffn_exp = _size(arch, meta, "expert_feed_forward_length", ffn // k if isinstance(ffn, int) else None)
        ffn_shexp = _size(arch, meta, "expert_shared_feed_forward_length", ffn or None)
    return HybridConfig(
        arch=arch,
        n_experts=n_experts,
        ffn_exp=ffn_exp,
        ffn_shexp=ffn_shexp,
        recurrent=tuple((i + 1) % interval != 0 for i in range(n_layers)),
        d_conv=_size(arch, meta, "ssm.conv_kernel"),
        d_state=d_state,
        n_k_heads=n_k,
        n_v_heads=n_v,
        sections=tuple(sections or ()),
    )


def hybrid_shapes(
    hybrid: HybridConfig, n_layers: int, hidden: int, n_heads: int, n_kv_heads: int, head_dim: int, ffn: int
) -> dict[str, tuple[int, ...]]:
    """Every per-layer tensor a hybrid model reads, with its shape ([out, in] for a weight)."""
    q, kv, h = n_heads * head_dim, n_kv_heads * head_dim, hidden
    want: dict[str, tuple[int, ...]] = {}
    for i in range(n_layers):
        p = f"blk.{i}."
        want |= {p + "attn_norm.weight": (h,), p + "post_attention_norm.weight": (h,)}
        if hybrid.n_experts:  # [experts, out, in] per expert tensor; the shared gate one row
            e, fe, fs = hybrid.n_experts, hybrid.ffn_exp, hybrid.ffn_shexp
            want |= {
                p + "ffn_gate_inp.weight": (e, h),
                p + "ffn_gate_exps.weight": (e, fe, h),
                p + "ffn_up_exps.weight": (e, fe, h),
                p + "ffn_down_exps.weight": (e, h, fe),
                p + "ffn_gate_inp_shexp.weight": (h,),
                p + "ffn_gate_shexp.weight": (fs, h),
                p + "ffn_up_shexp.weight": (fs, h),
                p + "ffn_down_shexp.weight": (h, fs),
            }
        else:
            want |= {
                p + "ffn_gate.weight": (ffn, h),
                p + "ffn_up.weight": (ffn, h),
                p + "ffn_down.weight": (h, ffn),
            }
        if hybrid.recurrent[i]:
            if hybrid.fused_beta_alpha:
                want[p + "ssm_ba.weight"] = (2 * hybrid.n_v_heads, h)
            else:
                want |= {
                    p + "ssm_beta.weight": (hybrid.n_v_heads, h),
                    p + "ssm_alpha.weight": (hybrid.n_v_heads, h),
                }
            want |= {
                p + "attn_qkv.weight": (hybrid.conv_dim, h),
                p + "attn_gate.weight": (hybrid.value_dim, h),
                p + "ssm_conv1d.weight": (hybrid.conv_dim, hybrid.d_conv),
                p + "ssm_dt.bias": (hybrid.n_v_heads,),
                p + "ssm_a": (hybrid.n_v_heads,),
                p + "ssm_norm.weight": (hybrid.d_state,),
                p + "ssm_out.weight": (h, hybrid.value_dim),
            }
        else:
            want |= {
                p + "attn_q.weight": (2 * q, h),  # per head: [query | output gate]
                p + "attn_k.weight": (kv, h),
                p + "attn_v.weight": (kv, h),
                p + "attn_q_norm.weight": (head_dim,),
                p + "attn_k_norm.weight": (head_dim,),
                p + "attn_output.weight": (h, q),
            }
    return want
