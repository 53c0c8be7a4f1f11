"""A tiny random gpt-oss GGUF (llama.cpp's openai-moe) and its float64 reference forward.

Written with gguf.GGUFWriter under the keys and tensor names llama.cpp reads for gpt-oss: q/k/v
and output biases, a sink logit per head, the FFN norm as post_attention_norm, a router with a
bias, experts with biases, YaRN over a small original context, and a sliding window small enough
that a 37-token prompt slides (even layers, as llama.cpp's pattern of 2). The experts are F32
or MXFP4 (as the released files store them); everything else is F32.

The reference follows the model as OpenAI's and Hugging Face's code describe it, in float64, with
llama.cpp's YaRN (ramp ends floored and ceiled) so that it answers for the same file.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from gguf import GGMLQuantizationType as QT
from gguf import GGUFWriter

from strata_engine.testing.reference_forward import ReferenceModel
from strata_engine.testing.tiny_models import VOCAB_SIZE, _add_tokenizer, _write, add_weight

ARCH = "gpt-oss"
HIDDEN = 64
N_LAYERS = 2  # layer 0 slides, layer 1 is global
N_HEADS = 4
N_KV_HEADS = 2
HEAD_DIM = 32
FFN = 64  # each expert's
N_EXPERTS = 4
N_USED = 2
CTX = 128
WINDOW = 8
ROPE_BASE = 150000.0
YARN_FACTOR = 4.0
YARN_ORIGINAL_CTX = 16
SWIGLU_ALPHA, SWIGLU_LIMIT = 1.702, 7.0


def write_gpt_oss(path: Path, seed: int = 0, experts: QT = QT.F32, exact: bool = False) -> Path:
    """Write the tiny gpt-oss at `path` (seeded random weights); the expert matrices in `experts`.
    `exact` draws uniform integers scaled by one multiply (the same bytes on every machine)."""
    rng = np.random.default_rng(seed)

    def noise(shape: tuple[int, ...] | int, std: float) -> np.ndarray:
        if exact:
            return rng.integers(-(2**16), 2**16, size=shape) * (std * 3**0.5 / 2**16)
        return rng.normal(0.0, std, size=shape)

    w = GGUFWriter(str(path), ARCH)
    w.add_name("tiny gpt-oss model")
    w.add_block_count(N_LAYERS)
    w.add_context_length(CTX)
    w.add_embedding_length(HIDDEN)
    w.add_head_count(N_HEADS)
    w.add_head_count_kv(N_KV_HEADS)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_rope_freq_base(ROPE_BASE)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(VOCAB_SIZE)
    w.add_sliding_window(WINDOW)
    w.add_expert_count(N_EXPERTS)
    w.add_expert_used_count(N_USED)
    w.add_expert_feed_forward_length(FFN)
    w.add_string(f"{ARCH}.rope.scaling.type", "yarn")
    w.add_float32(f"{ARCH}.rope.scaling.factor", YARN_FACTOR)
    w.add_uint32(f"{ARCH}.rope.scaling.original_context_length", YARN_ORIGINAL_CTX)
    _add_tokenizer(w, "gpt-4o")

    def f32(name: str, values: np.ndarray) -> None:
        w.add_tensor(name, np.asarray(values, dtype=np.float32))

    def norm(name: str) -> None:
        f32(name, 1.0 + noise(HIDDEN, 0.1))

    q_out, kv_out, e = N_HEADS * HEAD_DIM, N_KV_HEADS * HEAD_DIM, N_EXPERTS
    f32("token_embd.weight", noise((VOCAB_SIZE, HIDDEN), 0.5))
    for i in range(N_LAYERS):
        p = f"blk.{i}."
        norm(p + "attn_norm.weight")
        for name, rows in (("attn_q", q_out), ("attn_k", kv_out), ("attn_v", kv_out)):
            f32(p + name + ".weight", noise((rows, HIDDEN), 0.12))
            f32(p + name + ".bias", noise(rows, 0.1))
        f32(p + "attn_output.weight", noise((HIDDEN, q_out), 0.12))
        f32(p + "attn_output.bias", noise(HIDDEN, 0.1))
        f32(p + "attn_sinks.weight", noise(N_HEADS, 1.5))  # a real share of each head's softmax
        norm(p + "post_attention_norm.weight")
        f32(p + "ffn_gate_inp.weight", noise((e, HIDDEN), 0.3))
        f32(p + "ffn_gate_inp.bias", noise(e, 0.3))
        # scaled so that the SwiGLU's clamp at 7 cuts some gate and up values
        for name, shape, std in (
            ("ffn_gate_exps", (e, FFN, HIDDEN), 0.6), ("ffn_up_exps", (e, FFN, HIDDEN), 0.6),
            ("ffn_down_exps", (e, HIDDEN, FFN), 0.05),
        ):  # fmt: skip
            if exact and experts == QT.MXFP4:  # stored blocks drawn directly: no quantiser's arithmetic
                w.add_tensor(p + name + ".weight", _mxfp4_blocks(shape, std, rng), raw_dtype=QT.MXFP4)
            else:
                add_weight(w, p + name + ".weight", noise(shape, std), experts, rng)
        f32(p + "ffn_gate_exps.bias", noise((e, FFN), 0.5))
        f32(p + "ffn_up_exps.bias", noise((e, FFN), 0.5))
        f32(p + "ffn_down_exps.bias", noise((e, HIDDEN), 0.1))
    norm("output_norm.weight")
    f32("output.weight", noise((VOCAB_SIZE, HIDDEN), 0.5))
    _write(w)
    return path


def _mxfp4_blocks(shape: tuple[int, ...], std: float, rng: np.random.Generator) -> np.ndarray:
    """Random MXFP4 blocks (an e8m0 exponent, 32 fp4 codes) of values about `std` in size: the
    same bytes on every machine."""
    rows, cols = math.prod(shape[:-1]), shape[-1]
    data = rng.integers(0, 256, size=(rows * cols // 32, 17), dtype=np.uint8)
    exponent = 128 + round(math.log2(std / 4.5))  # mean |code| 4.5 in units of 2^(e - 128)
    data[:, 0] = rng.integers(exponent - 1, exponent + 1, size=len(data))
    return data.reshape(*shape[:-1], cols // 32 * 17)


class GptOssReference(ReferenceModel):
    """gpt-oss in float64: biased projections, YaRN RoPE on (i, i + d/2) pairs, attention with a
    sink logit per head (in the softmax, no value), even layers windowed, the MoE with the softmax
    over the router's top-k logits and the clamped SwiGLU, x * sigmoid(1.702 x) * (y + 1)."""

    sinks = True  # False: the same graph without them (to show they reach the logprobs)

    def _rope(self, x: torch.Tensor) -> torch.Tensor:
        t, d = x.shape[0], self.rope_dim

        def corr(beta: float) -> float:
            return d * math.log(YARN_ORIGINAL_CTX / (beta * 2 * math.pi)) / (2 * math.log(self.base))

        low, high = max(0, math.floor(corr(32.0))), min(d - 1, math.ceil(corr(1.0)))
        pair = torch.arange(d // 2, dtype=torch.float64)
        extrapolated = self.base ** (-2 * pair / d)
        ramp = 1 - torch.clamp((pair - low) / max(0.001, high - low), 0, 1)
        freqs = extrapolated / YARN_FACTOR * (1 - ramp) + extrapolated * ramp
        magnitude = 0.1 * math.log(YARN_FACTOR) + 1
        ang = torch.arange(t, dtype=torch.float64)[:, None] * freqs[None, :]
        rot = torch.polar(torch.full_like(ang, magnitude), ang)[:, None, :]
        z = torch.complex(x[..., : d // 2], x[..., d // 2 : d]) * rot
        return torch.cat((z.real, z.imag, x[..., d:]), dim=-1)

    def _layer(self, i: int, x: torch.Tensor, causal: torch.Tensor) -> torch.Tensor:
        w, p, t = self.w, f"blk.{i}.", x.shape[0]
        allowed = causal
        if i % 2 == 0:
            pos = torch.arange(t)
            allowed = causal & (pos[None, :] > pos[:, None] - WINDOW)
        h = self._rms(x, w[p + "attn_norm.weight"])
        q = (h @ w[p + "attn_q.weight"].T + w[p + "attn_q.bias"]).reshape(t, N_HEADS, HEAD_DIM)
        k = (h @ w[p + "attn_k.weight"].T + w[p + "attn_k.bias"]).reshape(t, N_KV_HEADS, HEAD_DIM)
        v = (h @ w[p + "attn_v.weight"].T + w[p + "attn_v.bias"]).reshape(t, N_KV_HEADS, HEAD_DIM)
        q, k = self._rope(q), self._rope(k)
        rep = N_HEADS // N_KV_HEADS
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        s = torch.einsum("thd,shd->hts", q, k) / HEAD_DIM**0.5
        s = s.masked_fill(~allowed, float("-inf"))
        if self.sinks:
            sink = w[p + "attn_sinks.weight"][:, None, None].expand(N_HEADS, t, 1)
            probs = torch.softmax(torch.cat((s, sink), dim=-1), -1)[..., :-1]
        else:
            probs = torch.softmax(s, -1)
        a = torch.einsum("hts,shd->thd", probs, v).reshape(t, -1)
        x = x + a @ w[p + "attn_output.weight"].T + w[p + "attn_output.bias"]
        return x + self._moe(i, self._rms(x, w[p + "post_attention_norm.weight"]))

    def _moe(self, i: int, h: torch.Tensor) -> torch.Tensor:
        w, p = self.w, f"blk.{i}."
        logits = h @ w[p + "ffn_gate_inp.weight"].T + w[p + "ffn_gate_inp.bias"]
        top = torch.topk(logits, N_USED, dim=-1)
        weights = torch.softmax(top.values, dim=-1)
        out = torch.zeros_like(h)
        for r in range(h.shape[0]):
            for j in range(N_USED):
                e = int(top.indices[r, j])
                gate = w[p + "ffn_gate_exps.weight"][e] @ h[r] + w[p + "ffn_gate_exps.bias"][e]
                up = w[p + "ffn_up_exps.weight"][e] @ h[r] + w[p + "ffn_up_exps.bias"][e]
                gate, up = gate.clamp(max=SWIGLU_LIMIT), up.clamp(-SWIGLU_LIMIT, SWIGLU_LIMIT)
                act = gate * torch.sigmoid(SWIGLU_ALPHA * gate) * (up + 1)
                y = w[p + "ffn_down_exps.weight"][e] @ act + w[p + "ffn_down_exps.bias"][e]
                out[r] += weights[r, j] * y
        return out
