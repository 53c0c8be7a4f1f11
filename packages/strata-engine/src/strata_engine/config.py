"""Model hyper-parameters read from GGUF metadata; architectures differ only by switches."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from strata_engine.api import ModelLoadError

SUPPORTED_ARCHITECTURES = ("llama", "qwen2", "qwen3", "qwen3moe", "phi3")
# Named so that a file of a known but unsupported family gets a precise refusal.
UNSUPPORTED_ARCHITECTURES = {
    "gemma": "GeGLU and logit soft-capping kernels",
    "gemma2": "GeGLU, logit soft-capping and sliding-window attention kernels",
    "gemma3": "GeGLU and sliding-window attention kernels",
    "qwen2moe": "shared experts",
}


@dataclass(frozen=True)
class ModelConfig:
    arch: str
    n_layers: int
    hidden: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn: int
    vocab_size: int
    ctx_size: int
    rope_base: float
    rope_dim: int
    rope_style: Literal["interleaved", "neox"]  # llama GGUFs: pairs (2i, 2i+1); qwen: (i, i+d/2)
    rms_eps: float
    qkv_bias: bool  # qwen2
    qk_norm: bool  # qwen3: per-head RMSNorm on q and k before RoPE
    n_experts: int = 0  # mixture of experts (qwen3moe, Mixtral-style llama): experts per layer
    n_experts_used: int = 0  # experts each token is routed to (top-k of the router)

    @classmethod
    def from_metadata(cls, meta: dict[str, Any]) -> ModelConfig:
        arch = meta.get("general.architecture")
        if arch not in SUPPORTED_ARCHITECTURES:
            missing = (
                f"; it needs {UNSUPPORTED_ARCHITECTURES[arch]}" if arch in UNSUPPORTED_ARCHITECTURES else ""
            )
            raise ModelLoadError(
                f"unsupported architecture {arch!r}{missing} (supported: {', '.join(SUPPORTED_ARCHITECTURES)})"
            )

        def key(name: str, default: Any = None) -> Any:
            value = meta.get(f"{arch}.{name}", default)
            if value is None:
                raise ModelLoadError(f"GGUF metadata lacks {arch}.{name}")
            return value

        hidden = int(key("embedding_length"))
        n_heads = int(key("attention.head_count"))
        head_dim = int(key("attention.key_length", hidden // n_heads))
        vocab = meta.get(f"{arch}.vocab_size") or len(meta.get("tokenizer.ggml.tokens", []))
        n_experts = int(meta.get(f"{arch}.expert_count") or 0)
        n_used = int(meta.get(f"{arch}.expert_used_count") or 0)
        if n_experts and not 0 < n_used <= n_experts:
            raise ModelLoadError(f"GGUF metadata: {arch}.expert_used_count {n_used} is not in 1..{n_experts}")
        if arch == "qwen3moe" and not n_experts:
            raise ModelLoadError("GGUF metadata lacks qwen3moe.expert_count")
        # phi3.attention.sliding_window is ignored, as llama.cpp does (its Phi-3 SWA is disabled)
        return cls(
            arch=arch,
            n_layers=int(key("block_count")),
            hidden=hidden,
            n_heads=n_heads,
            n_kv_heads=int(key("attention.head_count_kv", n_heads)),
            head_dim=head_dim,
            ffn=int(key("feed_forward_length", 0 if n_experts else None)),
            vocab_size=int(vocab),
            ctx_size=int(key("context_length", 4096)),
            rope_base=float(key("rope.freq_base", 10000.0)),
            rope_dim=int(key("rope.dimension_count", head_dim)),
            rope_style="interleaved" if arch == "llama" else "neox",
            rms_eps=float(key("attention.layer_norm_rms_epsilon", 1e-6)),
            qkv_bias=arch == "qwen2",
            qk_norm=arch in ("qwen3", "qwen3moe"),
            n_experts=n_experts,
            n_experts_used=n_used,
        )
