"""Model hyper-parameters read from GGUF metadata; architectures differ only by switches."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from strata_engine.api import ModelLoadError
from strata_engine.hybrid import HybridConfig, read_hybrid
from strata_engine.rope import RopeScaling, read_scaling

SUPPORTED_ARCHITECTURES = (
    "llama", "qwen2", "qwen3", "qwen3moe", "phi3", "gemma", "gemma2", "gemma3", "mistral3", "gpt-oss", "qwen35",
    "qwen35moe", "qwen3next", "gemma4",
)  # fmt: skip
INTERLEAVED_ROPE = ("llama", "mistral3")  # llama.cpp's LLAMA_ROPE_TYPE_NORM (the rest: NEOX)
GEMMA = ("gemma", "gemma2", "gemma3")
# Named so that a file of a known but unsupported family gets a precise refusal.
UNSUPPORTED_ARCHITECTURES = {
    "gemma3n": "per-layer embeddings, AltUp and LAuReL blocks",
    "qwen2moe": "shared experts",
    "gemma4-assistant": "Gemma 4's multi-token-prediction drafter, which attends over another model's KV cache",
}
# The Gemma 4 parts Strata does not compute (the released dense, E2B / E4B and 26B-A4B text
# models load without them); the vision and audio towers live in separate mmproj files, which
# are not language models and are refused by architecture.
GEMMA4_REFUSED = {
    "per-layer": "per-layer query-head counts are not supported",
    "expert sizes": "per-layer expert FFN sizes are not supported (llama.cpp sizes every layer's experts by the first)",
    "shared KV": "a layer reading the KV cache of an earlier layer of another kind is not supported",
    "tensor parallelism": "Gemma 4 with tensor parallelism is not supported (its layers' KV heads differ)",
}
# llama.cpp's Gemma 2 defaults when the file lacks the keys (gemma-2-*: 50 and 30, window 4096)
GEMMA2_DEFAULTS = {
    "attn_logit_softcapping": 50.0,
    "final_logit_softcapping": 30.0,
    "attention.sliding_window": 4096,
}
# The model sizes llama.cpp recognises by layer count (26, 42, 46 / 62 layers) whose queries it
# scales by 1/sqrt(hidden / heads) instead of 1/sqrt(key_length): Gemma 2 27B and Gemma 3 27B.
GEMMA_27B_LAYERS = {"gemma2": 46, "gemma3": 62}


# Upper bounds on what a header may claim before the tensors are checked against it (see
# gguf_checks): far above any released model, low enough that no loop or table sized by them
# runs away. The tensors' shapes then pin every size exactly.
MAX_COUNT = 2**31 - 1
MAX_LAYERS = 4096


def _int(name: str, value: Any, low: int, high: int) -> int:
    """An integer hyper-parameter in [low, high], or a `ModelLoadError` naming the key."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ModelLoadError(f"GGUF metadata {name} must be an integer, got {type(value).__name__}")
    if not low <= value <= high:
        raise ModelLoadError(f"GGUF metadata {name} = {value} is not in {low}..{high}")
    return value


def _float(name: str, value: Any) -> float:
    """A finite real hyper-parameter, or a `ModelLoadError` naming the key."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ModelLoadError(f"GGUF metadata {name} must be a finite number, got {value!r}")
    return float(value)


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
    qk_norm: bool  # qwen3: per-head RMSNorm on q and k before RoPE
    n_experts: int = 0  # mixture of experts (qwen3moe, Mixtral-style llama, qwen35moe, qwen3next)
    n_experts_used: int = 0  # experts each token is routed to (top-k of the router)
    # Gemma switches (defaults: the llama/qwen arithmetic, untouched)
    ffn_act: Literal["silu", "gelu"] = "silu"  # gelu: GeGLU with GELU's tanh approximation
    embed_scale: bool = False  # embeddings times sqrt(hidden)
    attn_scale: float | None = None  # query scale; None: 1/sqrt(head_dim)
    attn_softcap: float = 0.0  # gemma2: scores -> cap * tanh(scores / cap)
    final_softcap: float = 0.0  # gemma2: logits -> cap * tanh(logits / cap)
    post_norms: bool = False  # gemma2/3: RMSNorm on the attention and FFN outputs before the residual
    sliding_window: int = 0  # tokens a sliding-window layer attends to (itself included)
    swa_layers: tuple[bool, ...] = ()  # per layer: True for a sliding-window layer
    rope_base_swa: float | None = None  # gemma3: RoPE base of the sliding-window layers
    rope_scaling: RopeScaling = field(
        default_factory=RopeScaling
    )  # linear / YaRN / LongRoPE, as the file asks (rope.py)
    # mistral3: queries times 1 + attn_temp_scale * ln(floor(p / attn_temp_floor) + 1) after
    # RoPE (attention_temperature.py); 0: none
    attn_temp_scale: float = 0.0
    attn_temp_floor: int = 0
    hybrid: HybridConfig | None = None  # qwen35, qwen35moe, qwen3next: the DeltaNet layers (hybrid.py)
    # gemma4: the sliding layers' head and RoPE sizes (0: the global ones') and the KV heads per
    # layer (empty: n_kv_heads everywhere; then n_kv_heads is the largest)
    head_dim_swa: int = 0
    rope_dim_swa: int = 0
    kv_heads: tuple[int, ...] = ()
    ffn_sizes: tuple[int, ...] = ()  # gemma4 (E2B): per layer where the file lists them
    kv_source: tuple[int, ...] = ()  # gemma4 (E2B, E4B): the layer whose KV cache each reads
    ple_dim: int = 0  # gemma4 (E2B, E4B): the per-layer embeddings' width (0: none)

    def ffn_size(self, layer: int) -> int:
        return self.ffn_sizes[layer] if self.ffn_sizes else self.ffn

    def owns_kv(self, layer: int) -> bool:
        """Whether `layer` writes a KV cache of its own (gemma4's last layers read another's)."""
        return not self.kv_source or self.kv_source[layer] == layer

    def heads(self, layer: int) -> tuple[int, int]:
        """(KV heads, head size) of `layer`: its KV cache's geometry (gemma4's differ by layer)."""
        kv = self.kv_heads[layer] if self.kv_heads else self.n_kv_heads
        return kv, self.head_dim_swa if self.head_dim_swa and self.window(layer) else self.head_dim

    def window(self, layer: int) -> int:
        """The attention window of `layer` (0: full causal attention)."""
        return self.sliding_window if self.swa_layers and self.swa_layers[layer] else 0

    @classmethod
    def from_metadata(cls, meta: Mapping[str, Any]) -> ModelConfig:
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

        def count(name: str, default: int | None = None, low: int = 1, high: int = MAX_COUNT) -> int:
            return _int(f"{arch}.{name}", key(name, default), low, high)

        def real(name: str, default: float) -> float:
            return _float(f"{arch}.{name}", key(name, default))

        if arch == "gemma4":  # before a per-layer list reaches the integer reads below
            _gemma4_refusals(meta)
        hidden = count("embedding_length")
        n_heads = count("attention.head_count")
        head_dim = count("attention.key_length", hidden // n_heads or None)
        n_tokens = len(meta.get("tokenizer.ggml.tokens") or ())
        vocab = count("vocab_size", n_tokens or None)
        n_experts = count("expert_count", 0, low=0)
        n_used = count("expert_used_count", 0, low=0)
        if n_experts and not 0 < n_used <= n_experts:
            raise ModelLoadError(f"GGUF metadata: {arch}.expert_used_count {n_used} is not in 1..{n_experts}")
        if arch == "mistral3" and n_experts:
            raise ModelLoadError(
                "GGUF metadata: mistral3.expert_count is set: mistral3 with experts (ffn_gate_inp) is not supported"
            )
        if arch in ("qwen3moe", "gpt-oss", "qwen35moe", "qwen3next") and not n_experts:
            raise ModelLoadError(f"GGUF metadata lacks {arch}.expert_count")
        n_layers = count("block_count", high=MAX_LAYERS)
        kv_heads = (
            _gemma4_list(meta, "attention.head_count_kv", n_layers, n_heads) if arch == "gemma4" else ()
        )
        ffn_sizes = _gemma4_list(meta, "feed_forward_length", n_layers) if arch == "gemma4" else ()
        n_kv_heads = max(kv_heads) if kv_heads else count("attention.head_count_kv", n_heads)
        if n_heads % n_kv_heads:
            raise ModelLoadError(
                f"GGUF metadata: {arch}.attention.head_count {n_heads} is not a multiple of "
                f"{arch}.attention.head_count_kv {n_kv_heads}"
            )
        if count("attention.value_length", head_dim) != head_dim:
            raise ModelLoadError(f"{arch}: attention.value_length differs from key_length (not supported)")
        if (  # llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX (gpt-oss: its own, gpt_oss.py)
            n_experts and arch != "gpt-oss" and key("expert_gating_func", 1) != 1
        ):
            raise ModelLoadError(
                f"GGUF metadata {arch}.expert_gating_func = {key('expert_gating_func')!r}: only softmax routing (1) is supported"
            )
        rope_dim = count("rope.dimension_count", head_dim)
        if rope_dim > head_dim or rope_dim % 2:
            raise ModelLoadError(
                f"GGUF metadata: {arch}.rope.dimension_count {rope_dim} is not an even number up to "
                f"the head size {head_dim}"
            )
        rope_base = real("rope.freq_base", 10000.0)
        rms_eps = real("attention.layer_norm_rms_epsilon", 1e-6)
        if rope_base <= 0 or rms_eps < 0:
            raise ModelLoadError(f"GGUF metadata: {arch}.rope.freq_base must be > 0 and the RMS epsilon >= 0")
        # phi3.attention.sliding_window is ignored, as llama.cpp does (its Phi-3 SWA is disabled)
        gemma = _gemma_switches(arch, meta, n_layers, hidden, n_heads, head_dim)
        if arch == "gemma4":
            gemma = _gemma4_switches(meta, n_layers, head_dim, rope_dim)
        if arch == "gpt-oss":
            gemma = _gpt_oss_switches(meta, n_layers, head_dim, rope_dim, rope_base)
        ctx_train = count("context_length", 4096)
        temperature = _temperature(arch, meta)
        scaling = read_scaling(arch, meta, ctx_train)
        return cls(
            arch=arch,
            n_layers=n_layers,
            hidden=hidden,
            n_heads=n_heads,
            n_kv_heads=n_kv_heads,
            head_dim=head_dim,
            ffn=max(ffn_sizes)
            if ffn_sizes
            else count("feed_forward_length", 0 if n_experts else None, low=0),
            ffn_sizes=ffn_sizes,
            vocab_size=vocab,
            ctx_size=ctx_train,
            rope_base=rope_base,
            rope_dim=rope_dim,
            rope_style="interleaved" if arch in INTERLEAVED_ROPE else "neox",
            rms_eps=rms_eps,
            qk_norm=arch in ("qwen3", "qwen3moe", "gemma3", "gemma4"),
            n_experts=n_experts,
            n_experts_used=n_used,
            rope_scaling=scaling,
            attn_temp_floor=scaling.original_ctx if temperature else 0,
            attn_temp_scale=temperature,
            hybrid=read_hybrid(arch, meta, n_layers),
            kv_heads=kv_heads,
            **gemma,
        )


def _temperature(arch: str, meta: Mapping[str, Any]) -> float:
    """mistral3's attention temperature scale (llama.cpp's f_attn_temp_scale, a float32), 0 if
    none. Its position floor is the YaRN original context, which llama.cpp refuses to be 0."""
    if arch != "mistral3":
        return 0.0
    name = f"{arch}.attention.temperature_scale"
    scale = float(np.float32(_float(name, meta.get(name, 0.0))))
    original = meta.get(f"{arch}.rope.scaling.original_context_length")
    if scale != 0.0 and original == 0:
        raise ModelLoadError(
            f"GGUF metadata {name} = {scale:g} needs {arch}.rope.scaling.original_context_length > 0 "
            "(its position floor), as llama.cpp requires"
        )
    return scale


def _gemma_switches(
    arch: str, meta: Mapping[str, Any], n_layers: int, hidden: int, n_heads: int, head_dim: int
) -> dict[str, Any]:
    """The Gemma family's differences, read as llama.cpp reads them (llama-model.cpp).

    Norm weights are used as stored: the GGUF converter already added Gemma's +1 (checked
    against llama.cpp in test_arch_models). gemma2 alternates sliding-window (even) and global
    (odd) layers; gemma3 has five sliding-window layers then one global (layer % 6 == 5), the
    sliding ones with RoPE base 10000 (or rope.freq_base_swa).
    """
    if arch not in GEMMA:
        return {}

    def get(name: str, default: Any = None) -> Any:
        return meta.get(f"{arch}.{name}", default)

    def real(name: str, default: float) -> float:
        return _float(f"{arch}.{name}", get(name, default))

    def count(name: str, default: int | None) -> int:
        return _int(f"{arch}.{name}", get(name, default), 0, MAX_COUNT)

    heads_dim = max(1, hidden // n_heads) if n_layers == GEMMA_27B_LAYERS.get(arch) else head_dim
    out: dict[str, Any] = {
        "ffn_act": "gelu",
        "embed_scale": True,
        "attn_scale": 1.0 / math.sqrt(heads_dim),
    }
    if arch == "gemma2":
        out["attn_softcap"] = real("attn_logit_softcapping", GEMMA2_DEFAULTS["attn_logit_softcapping"])
        out["final_softcap"] = real("final_logit_softcapping", GEMMA2_DEFAULTS["final_logit_softcapping"])
        out["sliding_window"] = count(
            "attention.sliding_window", int(GEMMA2_DEFAULTS["attention.sliding_window"])
        )
        out["swa_layers"] = tuple(i % 2 == 0 for i in range(n_layers))
        out["post_norms"] = True
    elif arch == "gemma3":
        window = get("attention.sliding_window")
        if window is None:
            raise ModelLoadError("GGUF metadata lacks gemma3.attention.sliding_window")
        out["final_softcap"] = real("final_logit_softcapping", 0.0)
        out["sliding_window"] = count("attention.sliding_window", None)
        out["swa_layers"] = _swa_pattern(arch, get("attention.sliding_window_pattern", 6), n_layers)
        out["rope_base_swa"] = real("rope.freq_base_swa", 10000.0)
        out["post_norms"] = True
    if (
        out.get("rope_base_swa", 1.0) <= 0
        or out.get("attn_softcap", 0.0) < 0
        or out.get("final_softcap", 0.0) < 0
    ):
        raise ModelLoadError(f"{arch}: rope.freq_base_swa must be > 0 and the soft-caps >= 0")
    return out


def _gemma4_refusals(meta: Mapping[str, Any]) -> None:
    """The Gemma 4 parts Strata does not compute, each refused naming its key and what it
    would need (GEMMA4_REFUSED, listed in docs/engine.md's generated section)."""
    arch = "gemma4"

    def get(name: str) -> Any:
        return meta.get(f"{arch}.{name}")

    for name in ("attention.head_count",):
        if isinstance(get(name), list):
            raise ModelLoadError(
                f"GGUF metadata {arch}.{name} is a per-layer list: {GEMMA4_REFUSED['per-layer']}"
            )
    if get("expert_count") in (None, 0):
        get("expert_feed_forward_length")  # read by llama.cpp for the experts only (none here)
        return
    ffn = get("expert_feed_forward_length")  # the experts' size (26B-A4B), required with them
    if isinstance(ffn, list):
        raise ModelLoadError(
            f"GGUF metadata {arch}.expert_feed_forward_length: {GEMMA4_REFUSED['expert sizes']}"
        )
    if ffn is None:
        raise ModelLoadError(f"GGUF metadata lacks {arch}.expert_feed_forward_length (the experts' FFN size)")
    _int(f"{arch}.expert_feed_forward_length", ffn, 1, MAX_COUNT)


def _kv_sources(shared: Any, swa: tuple[bool, ...], n_layers: int) -> tuple[int, ...]:
    """Which layer's KV cache each layer reads, as llama.cpp's gemma4 reuse rule: the last
    `attention.shared_kv_layers` layers read the last sliding (a sliding layer) or the last
    global (a global layer) layer before them; () when none is shared."""
    n = _int("gemma4.attention.shared_kv_layers", shared, 0, n_layers)
    if not n:
        return ()
    first = n_layers - n
    if first < 2:  # llama.cpp asserts it
        raise ModelLoadError(
            f"GGUF metadata gemma4.attention.shared_kv_layers = {n} leaves fewer than 2 layers"
        )
    out = tuple(i if i < first else first - (2 if swa[i] else 1) for i in range(n_layers))
    if any(swa[src] != swa[i] for i, src in enumerate(out)):
        raise ModelLoadError(f"gemma4: {GEMMA4_REFUSED['shared KV']}")
    return out


def _gemma4_list(meta: Mapping[str, Any], key: str, n_layers: int, divides: int = 0) -> tuple[int, ...]:
    """A gemma4 value the file lists per layer (the converter writes the KV heads of the sliding
    and the global layers as one list, and E2B's doubled FFN sizes), each dividing `divides`
    where given; () where the file has one number."""
    name = f"gemma4.{key}"
    value = meta.get(name)
    if not isinstance(value, list):
        return ()
    if len(value) != n_layers:
        raise ModelLoadError(f"GGUF metadata {name} lists {len(value)} layers, not {n_layers}")
    out = tuple(_int(name, v, 1, MAX_COUNT) for v in value)
    if divides and any(divides % h for h in out):
        raise ModelLoadError(
            f"GGUF metadata {name} = {value}: each must divide attention.head_count {divides}"
        )
    return out


def _gemma4_switches(meta: Mapping[str, Any], n_layers: int, head_dim: int, rope_dim: int) -> dict[str, Any]:
    """Gemma 4's text model as llama.cpp's gemma4 loader reads it (src/models/gemma4.cpp): the
    sliding layers from the per-layer flags `attention.sliding_window_pattern` (required), their
    RoPE base `rope.freq_base_swa` (llama.cpp's default 10000) and no frequency factors; queries
    unscaled (f_attention_scale 1.0: the q/k norms stand in for it); the final soft-cap 30 when
    the key is absent (llama.cpp's hparams default, applied whenever non-zero); GeGLU, the
    embedding scale and the post-norms as in gemma3. Per layer (gemma4.py): V RMS-normed without
    a weight, K's projection read for V where attn_v is absent, and layer_output_scale."""
    arch = "gemma4"

    def get(name: str, default: Any = None) -> Any:
        value = meta.get(f"{arch}.{name}", default)
        if value is None:
            raise ModelLoadError(f"GGUF metadata lacks {arch}.{name}")
        return value

    head_dim_swa = _int(
        f"{arch}.attention.key_length_swa", get("attention.key_length_swa", head_dim), 1, MAX_COUNT
    )
    if get("attention.value_length_swa", head_dim_swa) != head_dim_swa:
        raise ModelLoadError(
            f"{arch}: attention.value_length_swa differs from key_length_swa (llama.cpp refuses it)"
        )
    rope_dim_swa = _int(
        f"{arch}.rope.dimension_count_swa", get("rope.dimension_count_swa", rope_dim), 2, MAX_COUNT
    )
    if rope_dim_swa > head_dim_swa or rope_dim_swa % 2:
        raise ModelLoadError(
            f"GGUF metadata: {arch}.rope.dimension_count_swa {rope_dim_swa} is not an even number up to "
            f"the sliding layers' head size {head_dim_swa}"
        )
    pattern = get("attention.sliding_window_pattern")
    if not isinstance(pattern, list):  # llama.cpp reads it with get_arr: a number is refused there too
        raise ModelLoadError(
            f"GGUF metadata {arch}.attention.sliding_window_pattern must be {n_layers} booleans"
        )
    out: dict[str, Any] = {
        "ffn_act": "gelu",
        "embed_scale": True,
        "attn_scale": 1.0,
        "post_norms": True,
        "sliding_window": _int(
            f"{arch}.attention.sliding_window", get("attention.sliding_window"), 1, MAX_COUNT
        ),
        "swa_layers": _swa_pattern(arch, pattern, n_layers),
        "rope_base_swa": _float(f"{arch}.rope.freq_base_swa", get("rope.freq_base_swa", 10000.0)),
        "final_softcap": _float(f"{arch}.final_logit_softcapping", get("final_logit_softcapping", 30.0)),
        "head_dim_swa": head_dim_swa,
        "rope_dim_swa": rope_dim_swa,
    }
    out["ple_dim"] = _int(
        f"{arch}.embedding_length_per_layer_input", get("embedding_length_per_layer_input", 0), 0, MAX_COUNT
    )
    out["kv_source"] = _kv_sources(get("attention.shared_kv_layers", 0), out["swa_layers"], n_layers)
    if out["rope_base_swa"] <= 0 or out["final_softcap"] < 0:
        raise ModelLoadError(f"{arch}: rope.freq_base_swa must be > 0 and the soft-cap >= 0")
    return out


def _gpt_oss_switches(
    meta: Mapping[str, Any], n_layers: int, head_dim: int, rope_dim: int, rope_base: float
) -> dict[str, Any]:
    """gpt-oss as llama.cpp's openai-moe loader reads it: sliding-window layers by
    load_swa_pattern(2) (even layers slide, odd ones are global), the window from
    attention.sliding_window; queries scaled by 1.0f / sqrtf(n_rot) in float32; the sliding
    layers rotate as the global ones (their own base only with rope.freq_base_swa, which Strata
    refuses unless it is the global base: its sliding table has no YaRN). The attention sinks,
    biases and the MoE's gating and clamped SwiGLU are gpt_oss.py's."""
    arch = "gpt-oss"
    window = meta.get(f"{arch}.attention.sliding_window")
    if window is None:
        raise ModelLoadError(f"GGUF metadata lacks {arch}.attention.sliding_window")
    if rope_dim != head_dim:
        raise ModelLoadError(f"GGUF metadata: {arch}.rope.dimension_count must be the head size {head_dim}")
    base_swa = meta.get(f"{arch}.rope.freq_base_swa")
    if base_swa is not None and _float(f"{arch}.rope.freq_base_swa", base_swa) != rope_base:
        raise ModelLoadError(
            f"GGUF metadata {arch}.rope.freq_base_swa = {base_swa!r} differs from rope.freq_base: not supported"
        )
    return {
        "attn_scale": float(np.float32(1.0) / np.sqrt(np.float32(rope_dim))),
        "sliding_window": _int(f"{arch}.attention.sliding_window", window, 1, MAX_COUNT),
        "swa_layers": _swa_pattern(arch, meta.get(f"{arch}.attention.sliding_window_pattern", 2), n_layers),
    }


def _swa_pattern(arch: str, pattern: Any, n_layers: int) -> tuple[bool, ...]:
    """Which layers slide, as llama.cpp's load_swa_pattern reads `attention.sliding_window_pattern`:
    a list of per-layer flags, or a period n whose last layer is global (0: every layer slides)."""
    if isinstance(pattern, list):
        if len(pattern) != n_layers or not all(isinstance(v, bool) for v in pattern):
            raise ModelLoadError(
                f"GGUF metadata {arch}.attention.sliding_window_pattern must be {n_layers} booleans"
            )
        return tuple(pattern)
    n = _int(f"{arch}.attention.sliding_window_pattern", pattern, 0, MAX_LAYERS)
    return tuple(n == 0 or i % n < n - 1 for i in range(n_layers))
