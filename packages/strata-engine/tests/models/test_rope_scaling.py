"""RoPE as the file asks, against llama.cpp: Llama 3.1 frequency factors, linear scaling, YaRN and
LongRoPE on tiny generated files, echo-scored far past the original context and past position
2,000; and the file keys that would change RoPE in a way Strata does not compute, refused.

Each comparison also scores the same weights without the scaling over the first 256 positions:
that run must be far from llama.cpp's, so a scaling read but not applied fails here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT
from gguf import GGUFWriter

from strata_engine.api import ModelLoadError
from strata_engine.config import ModelConfig
from strata_engine.engine import LLMEngine
from strata_engine.rope import read_factors
from strata_engine.testing.compare import engine_logprobs, llama_cpp_logprobs
from strata_engine.testing.tiny_models import TINY_SPECS, VOCAB_SIZE, write_tiny_model

CTX = 2176  # the tables' length: positions past 2,000
ORIGINAL_CTX = 512  # the scaled files' original context: most positions are past it
PROMPT = 2160
TOP = 20
TOLERANCE = 1e-3  # llama.cpp turns its angles in fp32 (theta *= theta_scale): ~4e-4 at 2,000
EARLY, LATE = 64, 2000


def llama31_factors(head_dim: int, base: float, factor: float = 8.0) -> np.ndarray:
    """Llama 3.1's per-pair factors (its converter's formula: 1 for short wavelengths, `factor`
    for long ones, smooth between), with an original context small enough that all three kinds
    of pair occur in a 64-dim head."""
    low, high = 1.0, 4.0
    low_wavelen, high_wavelen = ORIGINAL_CTX / low, ORIGINAL_CTX / high
    out = []
    for i in range(head_dim // 2):
        wavelen = 2 * math.pi * base ** (2 * i / head_dim)
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (ORIGINAL_CTX / wavelen - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


@dataclass(frozen=True)
class Variant:
    name: str
    spec_name: str  # a tiny_models spec: llama (interleaved pairs) or qwen2 (neox halves)
    extra: Callable[[GGUFWriter, str, int, float], None]  # (writer, arch, head_dim, base)


def _freqs(w: GGUFWriter, arch: str, head_dim: int, base: float) -> None:
    w.add_tensor("rope_freqs.weight", llama31_factors(head_dim, base))


def _linear(w: GGUFWriter, arch: str, head_dim: int, base: float) -> None:
    w.add_string(f"{arch}.rope.scaling.type", "linear")
    w.add_float32(f"{arch}.rope.scaling.factor", 4.0)


def _yarn(w: GGUFWriter, arch: str, head_dim: int, base: float) -> None:
    w.add_string(f"{arch}.rope.scaling.type", "yarn")
    w.add_float32(f"{arch}.rope.scaling.factor", 4.0)
    w.add_uint32(f"{arch}.rope.scaling.original_context_length", ORIGINAL_CTX)


def _longrope(w: GGUFWriter, arch: str, head_dim: int, base: float) -> None:
    w.add_string(f"{arch}.rope.scaling.type", "longrope")
    w.add_uint32(f"{arch}.rope.scaling.original_context_length", ORIGINAL_CTX)
    w.add_float32(f"{arch}.rope.scaling.attn_factor", math.sqrt(1 + math.log(4) / math.log(ORIGINAL_CTX)))
    pairs = np.arange(head_dim // 2, dtype=np.float32)
    w.add_tensor("rope_factors_long.weight", (1.0 + 0.25 * pairs).astype(np.float32))
    w.add_tensor("rope_factors_short.weight", (1.0 + 0.01 * pairs).astype(np.float32))


VARIANTS = (
    Variant("llama3.1-freqs", "llama-tied", _freqs),
    Variant("linear-x4", "llama-tied", _linear),
    Variant("yarn-x4", "qwen2-untied", _yarn),
    Variant("longrope", "llama-tied", _longrope),
)


def _write(path: Path, variant: Variant, scaled: bool) -> Path:
    spec = next(s for s in TINY_SPECS if s.name == variant.spec_name)
    base = 10000.0 if spec.arch == "llama" else 1000000.0
    extra = (lambda w: variant.extra(w, spec.arch, spec.head_dim, base)) if scaled else None
    return write_tiny_model(path, spec, seed=3, ctx=CTX, weight_type=QT.F32, extra=extra)


def _top_diff(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Per position, the largest |difference| over llama.cpp's top-TOP tokens."""
    top = np.argsort(-want, axis=1)[:, :TOP]
    return np.abs(np.take_along_axis(got, top, 1) - np.take_along_axis(want, top, 1)).max(axis=1)


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.name)
def test_rope_variant_matches_llama_cpp(variant: Variant, tmp_path: Path, llama_cpp) -> None:
    scaled = _write(tmp_path / "scaled.gguf", variant, scaled=True)
    plain = _write(tmp_path / "plain.gguf", variant, scaled=False)
    prompt = np.random.default_rng(7).integers(0, VOCAB_SIZE - 3, size=PROMPT).tolist()  # no specials
    want = llama_cpp_logprobs(llama_cpp, scaled, prompt, n_ctx=CTX)
    diff = _top_diff(engine_logprobs(scaled, prompt), want)
    print(
        f"\n{variant.name}: max |d| top-{TOP} vs llama.cpp, positions < {EARLY}: {diff[:EARLY].max():.2e}, "
        f"{EARLY}..{LATE}: {diff[EARLY:LATE].max():.2e}, >= {LATE}: {diff[LATE:].max():.2e}"
    )
    assert diff.max() <= TOLERANCE, f"{variant.name}: position {diff.argmax()} off by {diff.max():.3g}"
    unscaled = _top_diff(engine_logprobs(plain, prompt[: EARLY * 4]), want[: EARLY * 4 - 1])
    print(f"{variant.name}: the same weights unscaled: {unscaled.max():.2g}")
    assert unscaled.max() > 100 * TOLERANCE, f"{variant.name}: the scaling changes too little to test"


def _config(arch: str = "llama", **keys: object) -> ModelConfig:
    meta = {
        "general.architecture": arch,
        f"{arch}.embedding_length": 64,
        f"{arch}.block_count": 12,
        f"{arch}.attention.head_count": 4,
        f"{arch}.feed_forward_length": 128,
        f"{arch}.context_length": 8192,
        "tokenizer.ggml.tokens": ["a"] * 9,
    }
    return ModelConfig.from_metadata(meta | {f"{arch}.{k}": v for k, v in keys.items()})


def test_scaling_read_as_llama_cpp_reads_it() -> None:
    """Defaults and the derived numbers llama-context.cpp computes (freq_scale = 1/factor; YaRN's
    magnitude 1 + 0.1 ln(factor) split between the context and ggml's rope_yarn)."""
    assert not _config().rope_scaling.active  # no key: "linear" with factor 1, as llama.cpp
    assert _config(**{"rope.scaling.type": "none", "rope.scaling.factor": 8.0}).rope_scaling.freq_scale == 1.0
    assert _config(**{"rope.scale_linear": 2.0}).rope_scaling.freq_scale == 0.5  # the older key
    yarn = _config(**{"rope.scaling.type": "yarn", "rope.scaling.factor": 4.0}).rope_scaling
    assert (yarn.ext_factor, yarn.original_ctx, yarn.freq_scale) == (1.0, 8192, 0.25)
    assert yarn.attn_factor == pytest.approx(1.0)  # get_mscale(4, 1) / (1 + 0.1 ln 4)
    gemma3 = _config(
        "gemma3",
        **{"attention.sliding_window": 512, "rope.scaling.type": "linear", "rope.scaling.factor": 8.0},
    )
    assert gemma3.rope_scaling.freq_scale == 0.125  # Gemma 3 4B/12B/27B load


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("rope.scaling.type", "dynamic", "rope.scaling.type = 'dynamic'"),
        ("rope.scaling.factor", -2.0, "must not be negative"),
        ("rope.scaling.yarn_log_multiplier", 0.1, "yarn_log_multiplier"),
        ("rope.scaling.yarn_beta_fast", 16.0, "yarn_beta_fast"),
        ("rope.scaling.original_context_length", 0, "original_context_length"),
    ],
)
def test_scaling_strata_cannot_compute_is_refused(key: str, value: object, message: str) -> None:
    with pytest.raises(ModelLoadError, match=message):
        _config(**{key: value})


def test_rope_factor_tensors_checked(tmp_path: Path) -> None:
    """A factor table of the wrong length, a non-positive factor, or factors on an architecture
    that does not read them: one load error naming the tensor."""
    llama = next(s for s in TINY_SPECS if s.arch == "llama")
    qwen2 = next(s for s in TINY_SPECS if s.arch == "qwen2")
    cases = [
        (llama, np.ones(5, dtype=np.float32), "has 5 factors"),
        (llama, np.zeros(llama.head_dim // 2, dtype=np.float32), "positive finite"),
        (qwen2, np.ones(qwen2.head_dim // 2, dtype=np.float32), "qwen2 model does not read"),
    ]
    for i, (spec, values, message) in enumerate(cases):
        path = write_tiny_model(
            tmp_path / f"{i}.gguf", spec, extra=lambda w, v=values: w.add_tensor("rope_freqs.weight", v)
        )
        with pytest.raises(ModelLoadError, match=message):
            LLMEngine(path, num_threads=1, kv_cache_mb=4)


def test_longrope_takes_the_long_table_only_past_the_original_context() -> None:
    """llama.cpp's get_rope_factors: the long factors when the context served exceeds
    rope.scaling.original_context_length, else the short ones (the comparison above serves a
    long context, so it alone would not see the choice inverted)."""
    scaling = _config(
        **{"rope.scaling.type": "longrope", "rope.scaling.original_context_length": 512}
    ).rope_scaling
    tables = {"rope_factors_long.weight": np.full(16, 4.0), "rope_factors_short.weight": np.full(16, 2.0)}
    assert read_factors("llama", tables, scaling, ctx=513, rope_dim=32).tolist() == [4.0] * 16
    assert read_factors("llama", tables, scaling, ctx=512, rope_dim=32).tolist() == [2.0] * 16
    assert read_factors("phi3", {"rope_factors_long.weight": np.full(16, 4.0)}, scaling, 512, 32) is None
