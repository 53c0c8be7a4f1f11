"""Tiny random GGUFs of the architectures beyond llama/qwen2/qwen3's dense BPE models: llama
with a SentencePiece vocabulary (Llama 2 / TinyLlama / Mistral), phi3 (fused QKV and gate-up),
qwen3moe and Mixtral-style llama with experts, gemma / gemma2 / gemma3 (GeGLU, embedding scale,
soft-capping, post-norms, sliding-window layers, qk-norm, two RoPE bases), mistral3 (YaRN with its
own betas and log multiplier, attention temperature). Written with gguf.GGUFWriter using the metadata
keys and tensor names llama.cpp reads, weights in the types the kernels keep packed (F32, Q4_0,
Q4_1, Q8_0), so that llama.cpp and Strata can run the same file; plus a float64 reference.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from gguf import GGMLQuantizationType as QT
from gguf import GGUFWriter

from strata_engine.testing.reference_forward import ReferenceModel
from strata_engine.testing.spm_vocab import add_spm_tokenizer, load_golden
from strata_engine.testing.tiny_models import _add_tokenizer, _write, add_weight

HIDDEN = 128
N_LAYERS = 2
N_HEADS = 4
N_KV_HEADS = 2
HEAD_DIM = 32
FFN = 256
CTX = 128
PACKED_TYPES = (QT.Q4_0, QT.Q8_0, QT.Q4_1, QT.F32)


@dataclass(frozen=True)
class ArchSpec:
    name: str
    arch: str
    spm: bool  # SentencePiece vocabulary (else the tiny byte-level BPE one)
    n_experts: int = 0
    n_experts_used: int = 0
    type_offset: int = 0
    n_layers: int = N_LAYERS
    window: int = 0  # gemma2/3: attention.sliding_window (small, so that a 37-token prompt slides)


ARCH_SPECS = (
    ArchSpec("llama-spm", "llama", spm=True),
    ArchSpec("phi3", "phi3", spm=True, type_offset=1),
    ArchSpec("qwen3moe", "qwen3moe", spm=False, n_experts=4, n_experts_used=2, type_offset=2),
    ArchSpec("mixtral", "llama", spm=True, n_experts=4, n_experts_used=2, type_offset=3),
    ArchSpec("gemma", "gemma", spm=True),
    ArchSpec("gemma2", "gemma2", spm=True, type_offset=1, window=8),
    # six layers: gemma3's pattern makes layers 0-4 sliding (RoPE base 10000), layer 5 global (1e6)
    ArchSpec("gemma3", "gemma3", spm=True, type_offset=2, n_layers=6, window=8),
    # YaRN x4 over an original context of 16, which is also the temperature's position floor:
    # a 37-token prompt crosses three factors (1, 1 + 0.5 ln 2, 1 + 0.5 ln 3)
    ArchSpec("mistral3", "mistral3", spm=False, type_offset=3),
)
GEMMA2_ATTN_SOFTCAP = 4.0  # small enough that the tiny model's scores are really capped
GEMMA2_FINAL_SOFTCAP = 6.0
GEMMA3_ROPE_BASE = 1_000_000.0
MISTRAL3_KEYS = {  # key suffix -> value, written as float32 (the original context as uint32)
    "attention.temperature_scale": 0.5,
    "rope.scaling.factor": 4.0,
    "rope.scaling.yarn_beta_fast": 2.0,  # not llama.cpp's defaults (32, 1): the ramp spans pairs 0..5
    "rope.scaling.yarn_beta_slow": 0.25,
    "rope.scaling.yarn_log_multiplier": 0.5,
}
MISTRAL3_ORIGINAL_CTX = 16


def vocab_size(spec: ArchSpec) -> int:
    if spec.spm:
        return len(load_golden()["vocab"]["tokens"])
    from strata_engine.testing.tiny_models import VOCAB_SIZE

    return VOCAB_SIZE


def write_arch_model(
    path: Path, spec: ArchSpec, seed: int = 0, types: tuple[QT, ...] = PACKED_TYPES, exact: bool = False
) -> Path:
    """Write `spec` as a GGUF at `path` (random, seeded weights); 2-D and expert weights take
    `types` in turn (norms and the MoE router are F32, as converters store them). `exact` draws
    uniform integers scaled by one multiply instead of normals (whose sampler may call libm's log):
    the same file bytes on every machine, for the golden hashes."""
    rng = np.random.default_rng(seed)

    def noise(shape: tuple[int, ...] | int, std: float) -> np.ndarray:
        if exact:  # uniform with standard deviation std
            return rng.integers(-(2**16), 2**16, size=shape) * (std * 3**0.5 / 2**16)
        return rng.normal(0.0, std, size=shape)

    n_vocab = vocab_size(spec)
    w = GGUFWriter(str(path), spec.arch)
    # not "phi3": llama.cpp then looks up Phi-3's own special tokens, absent from this vocabulary
    w.add_name(f"tiny {spec.arch if spec.arch != 'phi3' else 'fused-projection'} model")
    w.add_block_count(spec.n_layers)
    gemma = spec.arch.startswith("gemma")
    w.add_context_length(CTX)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(N_HEADS)
    w.add_head_count_kv(N_KV_HEADS)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_rope_freq_base(GEMMA3_ROPE_BASE if spec.arch == "gemma3" else 10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n_vocab)
    if spec.arch == "qwen3moe" or gemma:
        w.add_key_length(HEAD_DIM)
        w.add_value_length(HEAD_DIM)
    if spec.window:
        w.add_sliding_window(spec.window)
    if spec.arch == "gemma2":
        w.add_attn_logit_softcapping(GEMMA2_ATTN_SOFTCAP)
        w.add_final_logit_softcapping(GEMMA2_FINAL_SOFTCAP)
    if spec.arch == "mistral3":
        w.add_string("mistral3.rope.scaling.type", "yarn")
        w.add_uint32("mistral3.rope.scaling.original_context_length", MISTRAL3_ORIGINAL_CTX)
        for key, value in MISTRAL3_KEYS.items():
            w.add_float32(f"mistral3.{key}", value)
    if spec.n_experts:
        w.add_expert_count(spec.n_experts)
        w.add_expert_used_count(spec.n_experts_used)
        if spec.arch == "qwen3moe":
            w.add_expert_feed_forward_length(FFN)
    if spec.spm:
        add_spm_tokenizer(w, load_golden()["vocab"])
    else:
        _add_tokenizer(w, "qwen2")
    offset = spec.type_offset % len(types)
    cycle = itertools.cycle(types[offset:] + types[:offset])

    def matrix(name: str, shape: tuple[int, ...], std: float) -> None:
        add_weight(w, name, noise(shape, std), next(cycle), rng)

    def vec(name: str, n: int) -> None:
        w.add_tensor(name, (1.0 + noise(n, 0.1)).astype(np.float32))

    q_out, kv_out = N_HEADS * HEAD_DIM, N_KV_HEADS * HEAD_DIM
    matrix("token_embd.weight", (n_vocab, HIDDEN), 0.5)
    for i in range(spec.n_layers):
        p = f"blk.{i}."
        vec(p + "attn_norm.weight", HIDDEN)
        if spec.arch == "phi3":
            matrix(p + "attn_qkv.weight", (q_out + 2 * kv_out, HIDDEN), 0.08)
        else:
            matrix(p + "attn_q.weight", (q_out, HIDDEN), 0.08)
            matrix(p + "attn_k.weight", (kv_out, HIDDEN), 0.08)
            matrix(p + "attn_v.weight", (kv_out, HIDDEN), 0.08)
        if spec.arch in ("qwen3moe", "gemma3"):
            vec(p + "attn_q_norm.weight", HEAD_DIM)
            vec(p + "attn_k_norm.weight", HEAD_DIM)
        matrix(p + "attn_output.weight", (HIDDEN, q_out), 0.08)
        if spec.arch in ("gemma2", "gemma3"):
            vec(p + "post_attention_norm.weight", HIDDEN)
        vec(p + "ffn_norm.weight", HIDDEN)
        if spec.n_experts:
            e = spec.n_experts
            w.add_tensor(p + "ffn_gate_inp.weight", noise((e, HIDDEN), 0.3).astype(np.float32))
            matrix(p + "ffn_gate_exps.weight", (e, FFN, HIDDEN), 0.08)
            matrix(p + "ffn_up_exps.weight", (e, FFN, HIDDEN), 0.08)
            matrix(p + "ffn_down_exps.weight", (e, HIDDEN, FFN), 0.08)
        elif spec.arch == "phi3":
            matrix(p + "ffn_up.weight", (2 * FFN, HIDDEN), 0.08)  # [gate; up]
            matrix(p + "ffn_down.weight", (HIDDEN, FFN), 0.08)
        else:
            matrix(p + "ffn_gate.weight", (FFN, HIDDEN), 0.08)
            matrix(p + "ffn_up.weight", (FFN, HIDDEN), 0.08)
            matrix(p + "ffn_down.weight", (HIDDEN, FFN), 0.08)
        if spec.arch in ("gemma2", "gemma3"):
            vec(p + "post_ffw_norm.weight", HIDDEN)
    vec("output_norm.weight", HIDDEN)
    if not gemma:  # Gemma ties the output head to the embedding
        matrix("output.weight", (n_vocab, HIDDEN), 0.5)
    _write(w)
    return path


class ArchReference(ReferenceModel):
    """The float64 reference forward with phi3's fused projections and MoE layers (llama.cpp's
    routing: softmax over all experts, top-k, weights renormalised over the k)."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.n_used = int(self.meta.get(f"{self.arch}.expert_used_count", 0))
        w = self.w
        for i in range(self.n_layers):
            p = f"blk.{i}."
            if p + "attn_qkv.weight" in w:
                qkv = w.pop(p + "attn_qkv.weight")
                q_rows, kv_rows = self.n_heads * self.head_dim, self.n_kv * self.head_dim
                w[p + "attn_q.weight"], w[p + "attn_k.weight"], w[p + "attn_v.weight"] = qkv.split(
                    [q_rows, kv_rows, kv_rows]
                )
            if self.arch == "phi3":
                w[p + "ffn_gate.weight"], w[p + "ffn_up.weight"] = w.pop(p + "ffn_up.weight").chunk(2)

    gelu_fp16 = False  # emulate llama.cpp's GELU: a table indexed by fp16(x), values rounded to fp16

    def _gelu(self, x: torch.Tensor) -> torch.Tensor:
        if not self.gelu_fp16:
            return torch.nn.functional.gelu(x, approximate="tanh")
        y = torch.nn.functional.gelu(x.half().double(), approximate="tanh").half().double()
        return torch.where(x <= -10, torch.zeros_like(x), torch.where(x >= 10, x, y))

    # Gemma as the papers and HF describe it, in float64: embeddings times sqrt(hidden), RMSNorm
    # with the stored weight (the GGUF converter folded in the +1), GeGLU with tanh GELU,
    # gemma2's soft-capped scores and logits, post-norms, sliding windows on even layers
    # (gemma2) or all but every sixth (gemma3, whose sliding layers use RoPE base 10000).
    def _gemma(self, key: str, default: float | None = None):
        return self.meta.get(f"{self.arch}.{key}", default)

    def _embed(self, ids: list[int]) -> torch.Tensor:
        x = super()._embed(ids)
        return x * self.hidden**0.5 if self.arch.startswith("gemma") else x

    def _layer(self, i: int, x: torch.Tensor, causal: torch.Tensor) -> torch.Tensor:
        if not self.arch.startswith("gemma"):
            return super()._layer(i, x, causal)
        w, p = self.w, f"blk.{i}."
        sliding = {"gemma2": i % 2 == 0, "gemma3": i % 6 < 5}.get(self.arch, False)
        allowed = causal
        if sliding:
            pos = torch.arange(x.shape[0])
            allowed = causal & (pos[None, :] > pos[:, None] - self._gemma("attention.sliding_window"))
        global_base = self.base
        self.base = 10000.0 if sliding and self.arch == "gemma3" else global_base
        try:
            h = self._rms(x, w[p + "attn_norm.weight"])
            o = self._attention(i, h, allowed, self._gemma("attn_logit_softcapping", 0.0))
        finally:
            self.base = global_base
        if p + "post_attention_norm.weight" in w:
            o = self._rms(o, w[p + "post_attention_norm.weight"])
        x = x + o
        f = self._ffn(i, self._rms(x, w[p + "ffn_norm.weight"]))
        if p + "post_ffw_norm.weight" in w:
            f = self._rms(f, w[p + "post_ffw_norm.weight"])
        return x + f

    def _ffn(self, i: int, h: torch.Tensor) -> torch.Tensor:
        if self.n_used:
            return self._moe(i, h)
        if not self.arch.startswith("gemma"):
            return super()._ffn(i, h)
        w, p = self.w, f"blk.{i}."
        gate = self._gelu(h @ w[p + "ffn_gate.weight"].T)
        return (gate * (h @ w[p + "ffn_up.weight"].T)) @ w[p + "ffn_down.weight"].T

    def _head(self, x: torch.Tensor) -> torch.Tensor:
        final_cap = self._gemma("final_logit_softcapping", 0.0) if self.arch.startswith("gemma") else 0.0
        if not final_cap:
            return super()._head(x)
        logits = self._rms(x, self.w["output_norm.weight"]) @ self.w["token_embd.weight"].T
        return torch.log_softmax(torch.tanh(logits / final_cap) * final_cap, dim=-1)

    # mistral3 as Hugging Face's Ministral 3 describes it, in float64: YaRN RoPE on adjacent pairs
    # (frequencies blended along the ramp between the beta corrections, magnitude
    # get_mscale(factor, 1) / get_mscale(factor, log multiplier)), and the rotated queries times
    # 1 + scale * ln(1 + floor(p / original context)).
    def _m3(self, key: str) -> float:
        return float(self.meta[f"mistral3.{key}"])

    def _rope(self, x: torch.Tensor) -> torch.Tensor:
        if self.arch != "mistral3":
            return super()._rope(x)
        t, h, d = x.shape[0], x.shape[1], self.rope_dim
        factor, original = self._m3("rope.scaling.factor"), self._m3("rope.scaling.original_context_length")

        def corr(beta: float) -> float:
            return d * math.log(original / (beta * 2 * math.pi)) / (2 * math.log(self.base))

        low = max(0, math.floor(corr(self._m3("rope.scaling.yarn_beta_fast"))))
        high = min(d - 1, math.ceil(corr(self._m3("rope.scaling.yarn_beta_slow"))))
        pair = torch.arange(d // 2, dtype=torch.float64)
        extrapolated = self.base ** (-2 * pair / d)
        ramp = 1 - torch.clamp((pair - low) / max(0.001, high - low), 0, 1)
        freqs = extrapolated / factor * (1 - ramp) + extrapolated * ramp
        log_mul = self._m3("rope.scaling.yarn_log_multiplier")
        magnitude = (0.1 * math.log(factor) + 1) / (0.1 * log_mul * math.log(factor) + 1)
        ang = torch.arange(t, dtype=torch.float64)[:, None] * freqs[None, :]
        rot = torch.polar(torch.full_like(ang, magnitude), ang)[:, None, :]
        z = torch.view_as_complex(x[..., :d].reshape(t, h, d // 2, 2).contiguous())
        return torch.cat((torch.view_as_real(z * rot).reshape(t, h, d), x[..., d:]), dim=-1)

    def _q_factor(self, t: int) -> torch.Tensor | float:
        if self.arch != "mistral3":
            return 1.0
        steps = torch.floor(
            torch.arange(t, dtype=torch.float64) / self._m3("rope.scaling.original_context_length")
        )
        return (1 + self._m3("attention.temperature_scale") * torch.log1p(steps))[:, None, None]
