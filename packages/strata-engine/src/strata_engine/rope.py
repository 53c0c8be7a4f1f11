"""Rotary position embedding as the model file asks: its base, its scaling and its factors.

A file's RoPE is more than `rope.freq_base`: Llama 3.1+ files carry per-pair frequency factors
(`rope_freqs.weight`), long-context files scale positions linearly or by YaRN
(`rope.scaling.*`), and Phi-3.5 / Phi-4-mini carry LongRoPE factor tables. Each is read here as
llama.cpp reads it (llama-model.cpp's hyper-parameters, llama-context.cpp's YaRN attention
factor, ggml's `rope_yarn`), and the cos/sin table is computed once in float64 with exactmath:
the same bits on every machine, for any batch. Anything this module cannot compute is refused by
name at load, never rotated the plain way.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from strata_engine import exactmath
from strata_engine.api import ModelLoadError
from strata_engine.kernels.base import RopeTable

ScalingKind = Literal["none", "linear", "yarn", "longrope"]
SCALING_KINDS: tuple[ScalingKind, ...] = ("none", "linear", "yarn", "longrope")
# llama.cpp's YaRN defaults (llama-hparams.h); the files of the families Strata runs do not
# override them (only grok's loader reads the keys), so another value is refused, not guessed
YARN_BETA_FAST = 32.0
YARN_BETA_SLOW = 1.0
# keys llama.cpp reads only for families Strata does not run; a file that sets one is refused
# unless it holds the default, since its computation would then depend on it
DEFAULT_ONLY_KEYS = {
    "rope.scaling.yarn_beta_fast": YARN_BETA_FAST,
    "rope.scaling.yarn_beta_slow": YARN_BETA_SLOW,
    "rope.scaling.yarn_log_multiplier": 0.0,
    "rope.scaling.yarn_attn_factor": 1.0,
}
# the YaRN keys llama.cpp does read for some families (its per-architecture load_arch_hparams):
# there they are applied, not refused
YARN_KEYS_READ = {
    "mistral3": (
        "rope.scaling.yarn_beta_fast",
        "rope.scaling.yarn_beta_slow",
        "rope.scaling.yarn_log_multiplier",
    ),
}
# tensors that carry RoPE factors, per architecture that reads them (llama.cpp's loaders)
LLAMA_FACTORS = ("rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight")
FACTOR_TENSORS = {
    "llama": LLAMA_FACTORS,
    "mistral3": LLAMA_FACTORS,
    "phi3": ("rope_factors_long.weight", "rope_factors_short.weight"),
    "gemma4": ("rope_freqs.weight",),  # the global layers' proportional RoPE (the sliding ones: none)
}
# the `{arch}.` keys read here: gguf_checks counts them as read
KEYS = (
    "rope.scaling.type",
    "rope.scaling.factor",
    "rope.scale_linear",
    "rope.scaling.attn_factor",
    "rope.scaling.original_context_length",
    *DEFAULT_ONLY_KEYS,
)


@dataclass(frozen=True)
class RopeScaling:
    """How positions are scaled, as llama.cpp's context computes it for the file.

    `freq_scale` is 1/factor (1 for `none`); YaRN blends interpolated and extrapolated angles
    per rotation pair (`ext_factor` 1) between the correction dims set by the original context;
    `attn_factor` is the context-wide magnitude factor (llama.cpp's cparams.yarn_attn_factor,
    with the file's `rope.scaling.attn_factor` folded in)."""

    kind: ScalingKind = "none"
    freq_scale: float = 1.0
    original_ctx: int = 0
    attn_factor: float = 1.0
    ext_factor: float = 0.0
    beta_fast: float = YARN_BETA_FAST  # the ramp's ends (rope.scaling.yarn_beta_*, where read)
    beta_slow: float = YARN_BETA_SLOW

    @property
    def active(self) -> bool:
        return self.freq_scale != 1.0 or self.attn_factor != 1.0 or self.ext_factor != 0.0


def _real(arch: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ModelLoadError(f"GGUF metadata {arch}.{name} must be a finite number, got {value!r}")
    return float(value)


def read_scaling(arch: str, meta: Mapping[str, Any], ctx_train: int) -> RopeScaling:
    """The file's `{arch}.rope.scaling.*` as llama.cpp reads it; an unknown kind, a factor that
    is not positive, or a YaRN parameter llama.cpp would not use for this family is refused."""

    def get(name: str, default: Any = None) -> Any:
        return meta.get(f"{arch}.{name}", default)

    read_here = YARN_KEYS_READ.get(arch, ())
    for name, default in DEFAULT_ONLY_KEYS.items():
        if name not in read_here and get(name) is not None and _real(arch, name, get(name)) != default:
            raise ModelLoadError(
                f"GGUF metadata {arch}.{name} = {get(name)!r}: llama.cpp does not read it for {arch} "
                f"files (it assumes {default}), so Strata refuses a file that needs another value"
            )
    kind = get("rope.scaling.type", "linear")  # llama.cpp's default when the key is absent
    if kind not in SCALING_KINDS:
        raise ModelLoadError(
            f"GGUF metadata {arch}.rope.scaling.type = {kind!r} is not a RoPE scaling Strata knows "
            f"({', '.join(SCALING_KINDS)})"
        )
    factor = get("rope.scaling.factor")
    factor = get("rope.scale_linear", 0.0) if factor is None else factor  # the older key name
    factor = _real(arch, "rope.scaling.factor", factor)
    if factor < 0:
        raise ModelLoadError(f"GGUF metadata {arch}.rope.scaling.factor = {factor} must not be negative")
    freq_scale = 1.0 if factor == 0.0 or kind == "none" else 1.0 / factor
    original = get("rope.scaling.original_context_length", ctx_train)
    if isinstance(original, bool) or not isinstance(original, int) or not 0 < original <= 2**31 - 1:
        raise ModelLoadError(
            f"GGUF metadata {arch}.rope.scaling.original_context_length = {original!r} is not a positive integer"
        )
    attn_factor = _real(arch, "rope.scaling.attn_factor", get("rope.scaling.attn_factor", 1.0))
    ext_factor = 1.0 if kind == "yarn" else 0.0
    yarn = {name: _real(arch, name, get(name, DEFAULT_ONLY_KEYS[name])) for name in read_here}
    log_mul = yarn.get("rope.scaling.yarn_log_multiplier", 0.0)
    if ext_factor:
        # llama-context.cpp: get_mscale(factor, 1) (over get_mscale(factor, log_mul) where the file
        # has a log multiplier), then cancelled by the factor ggml's rope_yarn applies again (so
        # that the magnitude is get_mscale once); computed in float64 here
        scale = 1.0 / freq_scale

        def mscale(m: float) -> float:
            return 1.0 if scale <= 1.0 else 0.1 * m * float(exactmath.log(scale)) + 1.0

        magnitude = mscale(1.0) / mscale(log_mul) if log_mul != 0.0 else mscale(1.0)
        attn_factor *= magnitude / (1.0 + 0.1 * float(exactmath.log(scale)))
    return RopeScaling(
        kind,
        freq_scale,
        original,
        attn_factor,
        ext_factor,
        yarn.get("rope.scaling.yarn_beta_fast", YARN_BETA_FAST),
        yarn.get("rope.scaling.yarn_beta_slow", YARN_BETA_SLOW),
    )


def read_factors(
    arch: str, tensors: Mapping[str, np.ndarray], scaling: RopeScaling, ctx: int, rope_dim: int
) -> np.ndarray | None:
    """The per-pair frequency factors this model rotates with, or None.

    Llama 3.1+ files hold `rope_freqs.weight`; LongRoPE files (Phi-3.5, Phi-4-mini, llama files
    with `rope.scaling.type = longrope`) hold long and short tables, and llama.cpp takes the long
    one when the context served is longer than the original context. `tensors` maps the factor
    tensors the file has to their fp32 values (which architectures may have them: FACTOR_TENSORS,
    checked with every other tensor by gguf_checks)."""
    if "rope_freqs.weight" in tensors and scaling.kind == "longrope":
        raise ModelLoadError(
            "tensor rope_freqs.weight: a LongRoPE file takes rope_factors_long/short instead"
        )
    if "rope_freqs.weight" in tensors:
        chosen = "rope_freqs.weight"
    elif any(name.startswith("rope_factors_") for name in tensors):
        if FACTOR_TENSORS.get(arch) == LLAMA_FACTORS and scaling.kind != "longrope":
            raise ModelLoadError(
                f"tensors rope_factors_long/short: {arch} files read them only with rope.scaling.type = longrope"
            )
        chosen = "rope_factors_long.weight" if ctx > scaling.original_ctx else "rope_factors_short.weight"
        if chosen not in tensors:
            return None  # llama.cpp rotates without factors when the table it picks is absent
    else:
        return None
    values = np.asarray(tensors[chosen], dtype=np.float64).reshape(-1)
    if values.shape != (rope_dim // 2,):
        raise ModelLoadError(
            f"tensor {chosen} has {values.size} factors; RoPE over {rope_dim} dims needs {rope_dim // 2}"
        )
    if not (np.isfinite(values).all() and (values > 0).all()):
        raise ModelLoadError(f"tensor {chosen}: every RoPE factor must be a positive finite number")
    return values


def _corr_dims(rope_dim: int, scaling: RopeScaling, base: float) -> tuple[float, float]:
    """The YaRN ramp's ends in rotation pairs (ggml_rope_yarn_corr_dims), in float64."""

    def dim(beta: float) -> float:
        ratio = scaling.original_ctx / (beta * 2.0 * math.pi)
        return rope_dim * float(exactmath.log(ratio)) / (2.0 * float(exactmath.log(base)))

    low, high = dim(scaling.beta_fast), dim(scaling.beta_slow)
    return max(0.0, math.floor(low)), min(rope_dim - 1.0, math.ceil(high))


def rope_table(
    ctx: int,
    rope_dim: int,
    base: float,
    interleaved: bool,
    scaling: RopeScaling = RopeScaling(),
    factors: np.ndarray | None = None,
    freq_scale: float | None = None,
) -> RopeTable:
    """cos/sin per absolute position, computed in float64 with exactmath (the same bits on every
    machine, unlike numpy's or libm's sin/cos) and stored fp32: the same for any batch.

    Pair i of position p turns by p * base^(-2i/d) / factor_i, scaled as ggml's rope_yarn does:
    linear scaling multiplies by `freq_scale`; YaRN blends that with the unscaled angle along a
    ramp over the pairs and scales cos and sin by its magnitude factor. `freq_scale` overrides
    the scaling's (gemma3's sliding-window layers rotate unscaled)."""
    half = rope_dim // 2
    inv = exactmath.exp(-(np.arange(half, dtype=np.float64) * 2.0 / rope_dim) * exactmath.log(base))
    scale = scaling.freq_scale if freq_scale is None else freq_scale
    mscale = scaling.attn_factor
    if factors is not None:
        inv = inv / factors
    if scaling.ext_factor:
        low, high = _corr_dims(rope_dim, scaling, base)
        ramp = 1.0 - np.clip((np.arange(half, dtype=np.float64) - low) / max(0.001, high - low), 0.0, 1.0)
        mix = ramp * scaling.ext_factor
        inv = inv * (scale * (1.0 - mix) + mix)
        mscale *= 1.0 + 0.1 * float(exactmath.log(1.0 / scale))
    elif scale != 1.0:
        inv = inv * scale
    angles = np.arange(ctx, dtype=np.float64)[:, None] * inv[None, :]
    sin, cos = exactmath.sin_cos(angles)
    if mscale != 1.0:
        sin, cos = sin * mscale, cos * mscale
    return RopeTable(
        cos=cos.astype(np.float32), sin=sin.astype(np.float32), dim=rope_dim, interleaved=interleaved
    )
