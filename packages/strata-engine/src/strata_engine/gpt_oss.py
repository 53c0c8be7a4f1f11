"""gpt-oss (llama.cpp's openai-moe): what its layers add to the shared transformer (model.py).

llama.cpp's graph (src/models/openai-moe.cpp, build_moe_ffn): attention with q/k/v and output
biases and a learnt sink logit per head (the kernels' `sinks`); the FFN norm is stored as
post_attention_norm; every layer is a mixture of experts whose router has a bias, whose top-k
logits are softmaxed into the weights (LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT), and whose
experts have biases and the clamped SwiGLU (ggml_swiglu_oai, alpha 1.702, limit 7). Kept here so
that the shared forward only asks a layer whether it has these parts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, cast

import numpy as np

from strata_engine.api import ModelLoadError
from strata_engine.experts import mix
from strata_engine.gguf_loader import TensorInfo, required
from strata_engine.kernels.base import Array, Ops
from strata_engine.kernels.weights import vector

ALPHA, LIMIT = 1.702, 7.0  # llama.cpp's constants for LLM_FFN_SWIGLU_OAI_MOE (as float32)
# gpt-oss tensors read beyond the shared ones, by their per-layer suffix
TENSORS = (
    "attn_sinks.weight", "attn_output.bias", "post_attention_norm.weight", "ffn_gate_inp.bias",
    "ffn_gate_exps.bias", "ffn_up_exps.bias", "ffn_down_exps.bias",
)  # fmt: skip
# what gpt-oss is refused on, and why (check_backend; docs/engine.md's generated section)
REFUSED = {
    "with tensor parallelism": "its output and expert biases are not sharded",
    "with `rope.freq_base_swa` other than `rope.freq_base`": "its sliding-window table would need YaRN too",
}


class SwigluOps(Protocol):
    def swiglu_oai(self, gate: Array, up: Array, alpha: float, limit: float) -> Array:
        """ggml's swiglu_oai: x = min(gate, limit), y = clamp(up, -limit, limit),
        x * sigmoid(alpha * x) * (y + 1), elementwise (the native kernels and torch have it)."""
        ...


@dataclass(frozen=True)
class Parts:
    """One gpt-oss layer's sinks and biases, fp32 as stored."""

    sinks: np.ndarray  # [n_heads]: each head's extra softmax logit
    bo: np.ndarray  # [hidden]: the attention output's bias
    router_bias: np.ndarray  # [n_experts]
    gate_bias: np.ndarray  # [n_experts, ffn]
    up_bias: np.ndarray  # [n_experts, ffn]
    down_bias: np.ndarray  # [n_experts, hidden]


def tensors(tensors: Mapping[str, TensorInfo], ops: Ops, tensor_parallel: bool) -> dict[str, TensorInfo]:
    """The file's tensors with each layer's post_attention_norm (gpt-oss's FFN norm, applied to
    the residual before the experts) under the name the shared forward reads, ffn_norm; after
    `check_backend`."""
    check_backend(ops, tensor_parallel)
    return {name.replace(".post_attention_norm.", ".ffn_norm."): info for name, info in tensors.items()}


def parts(t: Mapping[str, TensorInfo], prefix: str) -> Parts:
    """The layer's sinks and biases, each required (llama.cpp's loader requires them too)."""

    def need(name: str) -> np.ndarray:
        info = required(t, prefix + name)
        return vector(info).reshape(info.shape)  # an expert bias: [n_experts, n]

    return Parts(
        sinks=need("attn_sinks.weight"),
        bo=need("attn_output.bias"),
        router_bias=need("ffn_gate_inp.bias"),
        gate_bias=need("ffn_gate_exps.bias"),
        up_bias=need("ffn_up_exps.bias"),
        down_bias=need("ffn_down_exps.bias"),
    )


def check_backend(ops: Ops, tensor_parallel: bool) -> None:
    """Refuse what gpt-oss's parts are not built for: a backend without the clamped SwiGLU and
    attention sinks (every backend here has them; a new one must say so), and tensor parallelism
    (the output bias would be added once per rank)."""
    if not hasattr(ops, "swiglu_oai"):
        raise ModelLoadError(
            f"gpt-oss needs attention sinks and the clamped SwiGLU, which the {ops.name} kernels do not "
            "have: run it on the CPU kernels (--kernels native)"
        )
    if tensor_parallel:
        raise ModelLoadError("gpt-oss with tensor parallelism is not supported (its biases are not sharded)")


def moe(ops: Ops, h: Array, router: Any, experts: list[Any], p: Parts, k: int) -> Array:
    """gpt-oss's mixture of experts in experts.py's fixed orders (llama.cpp's SOFTMAX_WEIGHT
    gating): the router with its bias; each expert's gate and up with their biases, the clamped
    SwiGLU, down with its bias."""

    def ffn(expert: int, x: Array) -> Array:
        gate_w, up_w, down_w = experts[expert]
        gate = ops.linear(x, gate_w, p.gate_bias[expert])
        up = ops.linear(x, up_w, p.up_bias[expert])
        act = cast(SwigluOps, ops).swiglu_oai(gate, up, ALPHA, LIMIT)  # present: check_backend
        return ops.linear(act, down_w, p.down_bias[expert])

    return mix(h, ops.linear(h, router, p.router_bias), k, ffn)
