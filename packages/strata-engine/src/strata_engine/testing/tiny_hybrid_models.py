"""A tiny random `qwen35` GGUF (Qwen3.5 / 3.6 dense: Gated DeltaNet layers interleaved with gated
full-attention layers), its `qwen35moe` variant (experts in place of the FFN), its `qwen3next`
variant (qwen35moe with beta and alpha from one fused `ssm_ba`, per key head [beta | alpha]
of its value heads; value head h reads key head h // (n_v / n_k) instead of h % n_k; plain NEOX
RoPE without sections) and their float64 reference forward, independent of the engine's code.

The file uses the metadata keys and tensor names llama.cpp reads for LLM_ARCH_QWEN35,
LLM_ARCH_QWEN35MOE and LLM_ARCH_QWEN3NEXT (src/models/qwen35.cpp, qwen35moe.cpp, qwen3next.cpp),
so that llama.cpp and Strata run the same bytes. The reference follows llama.cpp's graph as read
there:

- every layer: x += mixer(rms(x, attn_norm)); x += ffn(rms(x, post_attention_norm)), the ffn
  SwiGLU (qwen35), or for qwen35moe the routed experts (softmax over all the router's logits,
  top-k, the k weights renormalised to sum 1) plus the shared expert's SwiGLU times
  sigmoid(ffn_gate_inp_shexp . h);
- a full-attention layer (every `full_attention_interval`-th, 1-based): attn_q gives per head
  [query | gate]; RMS q/k norms; NEOX RoPE on the first `rope.dimension_count` dims (the IMROPE
  sections all read the token's position for text); softmax(q k / sqrt(d)) v times sigmoid(gate);
- a DeltaNet layer: attn_qkv then a causal depthwise convolution of width `ssm.conv_kernel` over
  the [q | k | v] channels (the window starts at zeros) and SiLU; q and k L2-normalised
  (x / max(|x|, eps)); per value head h (key head h % n_k_heads) the gated delta rule
  S = exp(g) S; S += k (beta (v - S^T k))^T; o = S^T q / sqrt(d_k), with
  g = softplus(alpha + ssm_dt.bias) * ssm_a and beta = sigmoid(ssm_beta x); then
  rms(o, ssm_norm) * silu(attn_gate x) per head and ssm_out.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, GGUFWriter
from gguf import GGMLQuantizationType as QT

from strata_engine.testing.reference_forward import ReferenceModel
from strata_engine.testing.tiny_models import VOCAB_SIZE, _add_tokenizer, _write, encode_tensor

CTX = 128


@dataclass(frozen=True)
class HybridSpec:
    """The tiny file's shapes: recurrent layers are those where (i + 1) % interval != 0."""

    n_layers: int = 4
    interval: int = 2
    hidden: int = 64
    ffn: int = 128
    n_heads: int = 4
    n_kv_heads: int = 2
    head_dim: int = 32
    rope_dim: int = 16  # partial rotary, as Qwen3.5's 64 of 256
    sections: tuple[int, int, int, int] = (3, 3, 2, 0)  # sum = rope_dim / 2
    d_conv: int = 4
    d_state: int = 16  # the DeltaNet head size (keys and values)
    n_k_heads: int = 2  # ssm.group_count
    n_v_heads: int = 4  # ssm.time_step_rank
    eps: float = 1e-6
    n_experts: int = 0  # > 0: a qwen35moe file (or qwen3next, with `qwen3next`)
    qwen3next: bool = False  # fused ssm_ba, value heads grouped over key heads, no sections
    n_used: int = 2
    ffn_exp: int = 32  # expert_feed_forward_length
    ffn_shexp: int = 64  # expert_shared_feed_forward_length
    ctx: int = CTX  # context_length (a bench's larger file: longer prompts)

    @property
    def arch(self) -> str:
        return "qwen3next" if self.qwen3next else "qwen35moe" if self.n_experts else "qwen35"

    def recurrent(self, i: int) -> bool:
        return (i + 1) % self.interval != 0


SPEC = HybridSpec()
SPEC_MOE = HybridSpec(n_experts=4)
SPEC_NEXT = HybridSpec(n_experts=4, qwen3next=True)


def write_qwen35(
    path: Path,
    spec: HybridSpec = SPEC,
    seed: int = 0,
    exact: bool = False,
    types: tuple[QT, ...] = (QT.F32,),
    extra: Callable[[GGUFWriter], None] | None = None,
) -> Path:
    """Write a random, seeded `qwen35` file at `path` (the tiny byte-level BPE vocabulary); the
    2-D matmul weights take `types` in turn (norms, the convolution and per-head vectors stay F32,
    as converters store them); `extra` may add keys or tensors (what a loader must refuse).
    `exact` draws uniform integers scaled by one multiply instead of normals and exponentials
    (whose samplers may call libm): the same file bytes on every machine, for golden hashes."""
    rng = np.random.default_rng(seed)
    s = spec
    w = GGUFWriter(str(path), s.arch)
    w.add_name(f"tiny {s.arch} model")
    w.add_block_count(s.n_layers)
    w.add_context_length(s.ctx)
    w.add_embedding_length(s.hidden)
    if s.n_experts:
        w.add_expert_count(s.n_experts)
        w.add_expert_used_count(s.n_used)
        w.add_expert_feed_forward_length(s.ffn_exp)
        w.add_expert_shared_feed_forward_length(s.ffn_shexp)
    else:
        w.add_feed_forward_length(s.ffn)
    w.add_head_count(s.n_heads)
    w.add_head_count_kv(s.n_kv_heads)
    w.add_key_length(s.head_dim)
    w.add_value_length(s.head_dim)
    w.add_rope_dimension_count(s.rope_dim)
    if not s.qwen3next:
        w.add_rope_dimension_sections(list(s.sections))
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(s.eps)
    w.add_full_attention_interval(s.interval)
    w.add_ssm_conv_kernel(s.d_conv)
    w.add_ssm_inner_size(s.d_state * s.n_v_heads)
    w.add_ssm_state_size(s.d_state)
    w.add_ssm_time_step_rank(s.n_v_heads)
    w.add_ssm_group_count(s.n_k_heads)
    w.add_vocab_size(VOCAB_SIZE)
    _add_tokenizer(w, "qwen2")

    def t(name: str, shape: tuple[int, ...] | int, std: float, mean: float = 0.0) -> None:
        if exact:  # uniform with standard deviation std
            values = rng.integers(-(2**16), 2**16, size=shape) * (std * 3**0.5 / 2**16)
        else:
            values = rng.normal(0.0, std, size=shape)
        w.add_tensor(name, (mean + values).astype(np.float32))

    cycle = itertools.cycle(types)

    def m(name: str, shape: tuple[int, ...], std: float) -> None:
        qtype = next(cycle)
        if qtype == QT.F32:
            return t(name, shape, std)
        if shape[-1] % GGML_QUANT_SIZES[qtype][0]:  # a K-quant needs rows of 256: Q8_0 instead
            qtype = QT.Q8_0
        values = rng.integers(-(2**16), 2**16, size=shape) * (std * 3**0.5 / 2**16)
        values = values if exact else rng.normal(0.0, std, size=shape)
        data = encode_tensor(values.reshape(-1, shape[-1]), qtype, rng)  # experts: [e * out, in]
        w.add_tensor(name, data.reshape(*shape[:-1], -1), raw_dtype=qtype)

    key_dim, value_dim = s.d_state * s.n_k_heads, s.d_state * s.n_v_heads
    m("token_embd.weight", (VOCAB_SIZE, s.hidden), 0.5)
    for i in range(s.n_layers):
        p = f"blk.{i}."
        t(p + "attn_norm.weight", s.hidden, 0.1, 1.0)
        if s.recurrent(i):
            m(p + "attn_qkv.weight", (2 * key_dim + value_dim, s.hidden), 0.15)
            m(p + "attn_gate.weight", (value_dim, s.hidden), 0.15)
            t(p + "ssm_conv1d.weight", (2 * key_dim + value_dim, s.d_conv), 0.4)
            t(p + "ssm_dt.bias", s.n_v_heads, 0.5)
            # ssm_a is -exp(A_log) as converters store it: decays between ~0.5 and ~0.97 a step
            if exact:
                a = -(0.08 + rng.integers(0, 2**16, s.n_v_heads) * (0.92 / 2**16))
            else:
                a = -np.exp(rng.uniform(-2.5, 0.0, s.n_v_heads))
            w.add_tensor(p + "ssm_a", a.astype(np.float32))
            if s.qwen3next:  # per key head [beta | alpha] of its value heads
                m(p + "ssm_ba.weight", (2 * s.n_v_heads, s.hidden), 0.3)
            else:
                m(p + "ssm_beta.weight", (s.n_v_heads, s.hidden), 0.3)
                m(p + "ssm_alpha.weight", (s.n_v_heads, s.hidden), 0.3)
            t(p + "ssm_norm.weight", s.d_state, 0.1, 1.0)
            m(p + "ssm_out.weight", (s.hidden, value_dim), 0.15)
        else:
            m(p + "attn_q.weight", (2 * s.n_heads * s.head_dim, s.hidden), 0.1)
            m(p + "attn_k.weight", (s.n_kv_heads * s.head_dim, s.hidden), 0.1)
            m(p + "attn_v.weight", (s.n_kv_heads * s.head_dim, s.hidden), 0.1)
            t(p + "attn_q_norm.weight", s.head_dim, 0.1, 1.0)
            t(p + "attn_k_norm.weight", s.head_dim, 0.1, 1.0)
            m(p + "attn_output.weight", (s.hidden, s.n_heads * s.head_dim), 0.1)
        t(p + "post_attention_norm.weight", s.hidden, 0.1, 1.0)
        if s.n_experts:  # the router and the shared gate stay F32, as converters store them
            e, fe, fs = s.n_experts, s.ffn_exp, s.ffn_shexp
            t(p + "ffn_gate_inp.weight", (e, s.hidden), 0.3)
            m(p + "ffn_gate_exps.weight", (e, fe, s.hidden), 0.15)
            m(p + "ffn_up_exps.weight", (e, fe, s.hidden), 0.15)
            m(p + "ffn_down_exps.weight", (e, s.hidden, fe), 0.15)
            t(p + "ffn_gate_inp_shexp.weight", s.hidden, 0.3)
            m(p + "ffn_gate_shexp.weight", (fs, s.hidden), 0.12)
            m(p + "ffn_up_shexp.weight", (fs, s.hidden), 0.12)
            m(p + "ffn_down_shexp.weight", (s.hidden, fs), 0.12)
        else:
            m(p + "ffn_gate.weight", (s.ffn, s.hidden), 0.12)
            m(p + "ffn_up.weight", (s.ffn, s.hidden), 0.12)
            m(p + "ffn_down.weight", (s.hidden, s.ffn), 0.12)
    t("output_norm.weight", s.hidden, 0.1, 1.0)
    m("output.weight", (VOCAB_SIZE, s.hidden), 0.3)
    if extra is not None:
        extra(w)
    _write(w)
    return path


class HybridReference(ReferenceModel):
    """The float64 forward of a `qwen35` or `qwen35moe` file (the module docstring's equations),
    token by token for the recurrence, whole-prompt for attention."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        g = lambda k, d=None: self.meta.get(f"{self.arch}.{k}", d)  # noqa: E731
        self.n_used = int(g("expert_used_count", 0))
        self.interval = int(g("full_attention_interval"))
        self.d_conv = int(g("ssm.conv_kernel"))
        self.d_state = int(g("ssm.state_size"))
        self.n_k_heads = int(g("ssm.group_count"))
        self.n_v_heads = int(g("ssm.time_step_rank"))

    def _key_head(self, head: int) -> int:
        """qwen3next repeats each key head over consecutive value heads; qwen35 cycles them."""
        ratio = self.n_v_heads // self.n_k_heads
        return head // ratio if self.arch == "qwen3next" else head % self.n_k_heads

    def _rope(self, x: torch.Tensor) -> torch.Tensor:
        t, h, d = x.shape[0], x.shape[1], self.rope_dim
        freqs = self.base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        ang = torch.arange(t, dtype=torch.float64)[:, None] * freqs[None, :]
        rot = torch.polar(torch.ones_like(ang), ang)[:, None, :]
        z = torch.complex(x[..., : d // 2], x[..., d // 2 : d]) * rot  # NEOX pairs (i, i + d/2)
        return torch.cat((z.real, z.imag, x[..., d:]), dim=-1).reshape(t, h, -1)

    def _layer(self, i: int, x: torch.Tensor, causal: torch.Tensor) -> torch.Tensor:
        p = f"blk.{i}."
        h = self._rms(x, self.w[p + "attn_norm.weight"])
        recurrent = (i + 1) % self.interval != 0
        x = x + (self._delta_net(i, h) if recurrent else self._gated_attention(i, h, causal))
        return x + self._ffn(i, self._rms(x, self.w[p + "post_attention_norm.weight"]))

    def _gated_attention(self, i: int, h: torch.Tensor, causal: torch.Tensor) -> torch.Tensor:
        w, p, t, d = self.w, f"blk.{i}.", h.shape[0], self.head_dim
        qg = (h @ w[p + "attn_q.weight"].T).reshape(t, self.n_heads, 2, d)
        q, gate = qg[:, :, 0], qg[:, :, 1]
        k = (h @ w[p + "attn_k.weight"].T).reshape(t, self.n_kv, d)
        v = (h @ w[p + "attn_v.weight"].T).reshape(t, self.n_kv, d)
        q = self._rope(self._rms(q, w[p + "attn_q_norm.weight"]))
        k = self._rope(self._rms(k, w[p + "attn_k_norm.weight"]))
        rep = self.n_heads // self.n_kv
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        s = torch.einsum("thd,shd->hts", q, k) / d**0.5
        s = s.masked_fill(~causal, float("-inf"))
        a = torch.einsum("hts,shd->thd", torch.softmax(s, -1), v) * torch.sigmoid(gate)
        return a.reshape(t, -1) @ w[p + "attn_output.weight"].T

    def _delta_net(self, i: int, h: torch.Tensor) -> torch.Tensor:
        w, p, t, ds = self.w, f"blk.{i}.", h.shape[0], self.d_state
        hk, hv = self.n_k_heads, self.n_v_heads
        qkv = h @ w[p + "attn_qkv.weight"].T  # [t, conv channels]
        z = (h @ w[p + "attn_gate.weight"].T).reshape(t, hv, ds)
        if p + "ssm_ba.weight" in w:  # qwen3next: per key head [beta | alpha]
            ba = (h @ w[p + "ssm_ba.weight"].T).reshape(t, hk, 2, hv // hk)
            beta, alpha = torch.sigmoid(ba[:, :, 0].reshape(t, hv)), ba[:, :, 1].reshape(t, hv)
        else:
            beta = torch.sigmoid(h @ w[p + "ssm_beta.weight"].T)  # [t, hv]
            alpha = h @ w[p + "ssm_alpha.weight"].T
        alpha = alpha + w[p + "ssm_dt.bias"]
        g = torch.nn.functional.softplus(alpha) * w[p + "ssm_a"]  # log of the decay, < 0
        kernel = w[p + "ssm_conv1d.weight"]  # [channels, d_conv]
        padded = torch.cat((torch.zeros(self.d_conv - 1, qkv.shape[1], dtype=qkv.dtype), qkv))
        conv = torch.stack([(padded[r : r + self.d_conv] * kernel.T).sum(0) for r in range(t)])
        conv = torch.nn.functional.silu(conv)
        key_dim = hk * ds
        q = conv[:, :key_dim].reshape(t, hk, ds)
        k = conv[:, key_dim : 2 * key_dim].reshape(t, hk, ds)
        v = conv[:, 2 * key_dim :].reshape(t, hv, ds)
        q = q / torch.clamp(q.norm(dim=-1, keepdim=True), min=self.eps)
        k = k / torch.clamp(k.norm(dim=-1, keepdim=True), min=self.eps)
        state = torch.zeros(hv, ds, ds, dtype=torch.float64)  # [head, key, value]
        out = torch.empty(t, hv, ds, dtype=torch.float64)
        for r in range(t):
            for head in range(hv):
                kh, qh = k[r, self._key_head(head)], q[r, self._key_head(head)]
                s = state[head] * torch.exp(g[r, head])
                delta = beta[r, head] * (v[r, head] - s.T @ kh)
                state[head] = s + torch.outer(kh, delta)
                out[r, head] = state[head].T @ qh / ds**0.5
        normed = self._rms(out, w[p + "ssm_norm.weight"]) * torch.nn.functional.silu(z)
        return normed.reshape(t, -1) @ w[p + "ssm_out.weight"].T

    def _ffn(self, i: int, h: torch.Tensor) -> torch.Tensor:
        """qwen35moe: the routed experts plus the gated shared expert; qwen35: SwiGLU."""
        w, p = self.w, f"blk.{i}."
        if p + "ffn_gate_inp.weight" not in w:
            return super()._ffn(i, h)
        silu = torch.nn.functional.silu
        out = self._moe(i, h)
        shared = silu(h @ w[p + "ffn_gate_shexp.weight"].T) * (h @ w[p + "ffn_up_shexp.weight"].T)
        gate = torch.sigmoid(h @ w[p + "ffn_gate_inp_shexp.weight"])[:, None]
        return out + (shared @ w[p + "ffn_down_shexp.weight"].T) * gate
