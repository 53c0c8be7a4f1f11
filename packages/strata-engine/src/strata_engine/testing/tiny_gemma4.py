"""A tiny random Gemma 4 GGUF (llama.cpp's gemma4 text model), for comparisons with llama.cpp.

Written with gguf.GGUFWriter under the keys and tensor names llama.cpp's gemma4 loader reads:
three layers covering each layer kind Strata computes, with the two head geometries of the
released files: a sliding-window layer (heads of 32, two KV heads, RoPE base 10000 over all 32,
no factors) with attn_v and a layer_output_scale; a global layer (heads of 64, one KV head, RoPE
base 1e6 with the `rope_freqs` factors, 3/4 of them 1e30 as the converter writes for
proportional RoPE) without attn_v (K's projection read for V) and with a scale; a sliding layer
without a scale; a
final soft-cap small enough to bend the logits; a window small enough that a 37-token prompt
slides; the `gemma4` BPE vocabulary (bpe_vocab.gemma4_vocab). The matrices are F32 or one
packed type; norms, scales, factors and routers stay F32 (llama.cpp's quantize keeps routers).
The "moe" variant (26B-A4B's parts) makes layer 0 a mixture-of-experts layer with one fused
`ffn_gate_up_exps` and per-expert down scales, layer 1 one with separate gate and up experts and
all three per-expert scales, and keeps layer 2 dense: four experts, two per token.

`Gemma4Reference` is the text model written out in float64 from its description (Hugging
Face's Gemma 4 and llama.cpp's graph), sharing no code with the engine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from gguf import GGMLQuantizationType as QT
from gguf import GGUFWriter

from strata_engine.testing.bpe_vocab import gemma4_vocab
from strata_engine.testing.reference_forward import ReferenceModel
from strata_engine.testing.tiny_models import _write, add_weight

ARCH = "gemma4"
HIDDEN = 64
N_LAYERS = 3
SLIDING = (True, False, True)
HAS_V = (True, False, True)  # layer 1: no attn_v (use_alternative_attention)
HAS_SCALE = (True, True, False)  # layer 2: no layer_output_scale
N_HEADS = 4
KV_HEADS = (2, 1, 2)  # per layer: the sliding layers' 2, the global layer's 1
HEAD_DIM, HEAD_DIM_SWA = 64, 32  # the global and the sliding layers' head sizes
FFN = 96
CTX = 128
WINDOW = 8
ROPE_BASE, ROPE_BASE_SWA = 1e6, 10000.0
SOFTCAP = 15.0
PLE_DIM = 32  # the "e2b" variant's per-layer embedding width
# the "e2b" variant (E2B / E4B's parts): five layers, the last two reading the KV caches of
# layers 1 (sliding) and 2 (global), their FFNs twice as wide, per-layer embeddings
E2B_SLIDING = (True, True, False, True, False)
E2B_KV_HEADS = (2, 2, 1, 2, 1)
E2B_SHARED = 2
# the "moe" variant: experts per layer, used per token, their FFN size; which layers route how
N_EXPERTS, N_USED, EXPERT_FFN = 4, 2, 32
MOE_FORM = ("fused", "separate", None)
VOCAB = gemma4_vocab()
VOCAB_SIZE = len(VOCAB["tokenizer.ggml.tokens"])


def write_gemma4(
    path: Path, seed: int = 0, matrices: QT = QT.F32, exact: bool = False, variant: str = "dense"
) -> Path:
    """Write the tiny Gemma 4 at `path` (seeded random weights), its matrices in `matrices`.
    `exact` draws uniform integers scaled by one multiply (the same bytes on every machine, for
    the golden hashes); `variant` "e2b" adds per-layer embeddings and shared-KV layers, "moe"
    mixture-of-experts layers."""
    rng = np.random.default_rng(seed)
    e2b, moe = variant == "e2b", variant == "moe"
    sliding, kv_heads = (E2B_SLIDING, E2B_KV_HEADS) if e2b else (SLIDING, KV_HEADS)
    n_layers, shared = len(sliding), E2B_SHARED if e2b else 0
    ffns = [FFN * (2 if e2b and i >= n_layers - shared else 1) for i in range(n_layers)]

    def noise(shape: tuple[int, ...] | int, std: float) -> np.ndarray:
        if exact:
            return rng.integers(-(2**16), 2**16, size=shape) * (std * 3**0.5 / 2**16)
        return rng.normal(0.0, std, size=shape)

    w = GGUFWriter(str(path), ARCH)
    w.add_name("tiny gemma4 model")
    w.add_block_count(n_layers)
    w.add_context_length(CTX)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(ffns if e2b else FFN)
    w.add_embedding_length_per_layer_input(PLE_DIM if e2b else 0)  # required by llama.cpp
    w.add_shared_kv_layers(shared)
    if moe:
        w.add_expert_count(N_EXPERTS)
        w.add_expert_used_count(N_USED)
        w.add_expert_feed_forward_length(EXPERT_FFN)
    w.add_head_count(N_HEADS)
    w.add_head_count_kv(list(kv_heads))
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_key_length_swa(HEAD_DIM_SWA)
    w.add_value_length_swa(HEAD_DIM_SWA)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_rope_dimension_count_swa(HEAD_DIM_SWA)
    w.add_rope_freq_base(ROPE_BASE)
    w.add_rope_freq_base_swa(ROPE_BASE_SWA)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_sliding_window(WINDOW)
    w.add_sliding_window_pattern(list(sliding))
    w.add_final_logit_softcapping(SOFTCAP)
    w.add_vocab_size(VOCAB_SIZE)
    w.add_tokenizer_model(VOCAB["tokenizer.ggml.model"])
    w.add_token_list(VOCAB["tokenizer.ggml.tokens"])
    w.add_token_types(VOCAB["tokenizer.ggml.token_type"])
    w.add_token_merges(VOCAB["tokenizer.ggml.merges"])
    w.add_bos_token_id(VOCAB["tokenizer.ggml.bos_token_id"])
    w.add_eos_token_id(VOCAB["tokenizer.ggml.eos_token_id"])
    w.add_add_bos_token(True)

    def f32(name: str, values: np.ndarray) -> None:
        w.add_tensor(name, np.asarray(values, dtype=np.float32))

    def norm(name: str, n: int = HIDDEN) -> None:  # stored with Gemma's +1 already added
        f32(name, 1.0 + noise(n, 0.1))

    def matrix(name: str, shape: tuple[int, int], std: float) -> None:
        add_weight(w, name, noise(shape, std), matrices, rng)

    matrix("token_embd.weight", (VOCAB_SIZE, HIDDEN), 0.5)
    f32("rope_freqs.weight", np.where(np.arange(HEAD_DIM // 2) < HEAD_DIM // 8, 1.0, 1e30))
    if e2b:
        matrix("per_layer_token_embd.weight", (VOCAB_SIZE, n_layers * PLE_DIM), 0.5)
        matrix("per_layer_model_proj.weight", (n_layers * PLE_DIM, HIDDEN), 0.3)
        norm("per_layer_proj_norm.weight", PLE_DIM)
    for i in range(n_layers):
        p = f"blk.{i}."
        d = HEAD_DIM_SWA if sliding[i] else HEAD_DIM
        q_out, kv_out = N_HEADS * d, kv_heads[i] * d
        owns_kv = i < n_layers - shared
        norm(p + "attn_norm.weight")
        matrix(p + "attn_q.weight", (q_out, HIDDEN), 0.15)
        if owns_kv:
            matrix(p + "attn_k.weight", (kv_out, HIDDEN), 0.15)
        if owns_kv and HAS_V[i % 3]:
            matrix(p + "attn_v.weight", (kv_out, HIDDEN), 0.15)
        norm(p + "attn_q_norm.weight", d)
        if owns_kv:
            norm(p + "attn_k_norm.weight", d)
        matrix(p + "attn_output.weight", (HIDDEN, q_out), 0.15)
        norm(p + "post_attention_norm.weight")
        norm(p + "ffn_norm.weight")
        matrix(p + "ffn_gate.weight", (ffns[i], HIDDEN), 0.15)
        matrix(p + "ffn_up.weight", (ffns[i], HIDDEN), 0.15)
        matrix(p + "ffn_down.weight", (HIDDEN, ffns[i]), 0.15)
        norm(p + "post_ffw_norm.weight")
        if moe and MOE_FORM[i]:
            _experts(p, MOE_FORM[i], noise, f32, norm, matrix)
        if HAS_SCALE[i % 3]:
            f32(p + "layer_output_scale.weight", np.array([0.5 + 0.4 * (i % 3)]))
        if e2b:
            matrix(p + "inp_gate.weight", (PLE_DIM, HIDDEN), 0.3)
            matrix(p + "proj.weight", (HIDDEN, PLE_DIM), 0.3)
            norm(p + "post_norm.weight")
    norm("output_norm.weight")
    _write(w)
    return path


def _experts(p: str, form: str, noise: Any, f32: Any, norm: Any, matrix: Any) -> None:
    """Layer `p`'s router, its input scale, the two extra norms, the experts ("fused": one
    gate_up tensor and down scales, as 26B-A4B's file; "separate": gate, up and all three scales)."""
    e, f = N_EXPERTS, EXPERT_FFN
    f32(p + "ffn_gate_inp.weight", noise((e, HIDDEN), 1.0))
    f32(p + "ffn_gate_inp.scale", 1.0 + noise(HIDDEN, 0.2))
    for name in ("pre_ffw_norm_2", "post_ffw_norm_1", "post_ffw_norm_2"):
        norm(f"{p}{name}.weight")
    if form == "fused":
        matrix(p + "ffn_gate_up_exps.weight", (e, 2 * f, HIDDEN), 0.15)
    else:
        matrix(p + "ffn_gate_exps.weight", (e, f, HIDDEN), 0.15)
        matrix(p + "ffn_up_exps.weight", (e, f, HIDDEN), 0.15)
    matrix(p + "ffn_down_exps.weight", (e, HIDDEN, f), 0.15)
    for x in ("down",) if form == "fused" else ("gate", "up", "down"):
        f32(f"{p}ffn_{x}_exps.scale", 1.0 + noise(e, 0.4))


class Gemma4Reference(ReferenceModel):
    """Gemma 4's text model in float64: embeddings times sqrt(hidden); per layer its own head
    size and KV heads (sliding or global), q/k RMS-normed with their weights and V without one,
    NeoX RoPE (the sliding layers at their base over their RoPE size, the global ones with the
    `rope_freqs` factors), unscaled scores, the window on sliding layers, K's projection for a
    missing V; post-attention and post-FFN norms, GeGLU, the residual times layer_output_scale;
    the final norm, the tied head and the soft-cap. `gelu_fp16` emulates llama.cpp's GELU table."""

    def __init__(self, path: str) -> None:
        super().__init__(path)

        def g(key: str, default: Any = None) -> Any:
            return self.meta.get(f"gemma4.{key}", default)

        self.sliding = list(g("attention.sliding_window_pattern"))
        kv = g("attention.head_count_kv")
        self.kv_heads = list(kv) if isinstance(kv, list) else [kv] * self.n_layers
        self.head_swa = int(g("attention.key_length_swa", self.head_dim))
        self.rope_swa = int(g("rope.dimension_count_swa", self.rope_dim))
        self.base_swa = float(g("rope.freq_base_swa", 10000.0))
        self.softcap = float(g("final_logit_softcapping", 30.0))
        self.window = int(g("attention.sliding_window"))
        self.ple_dim = int(g("embedding_length_per_layer_input", 0))
        self.first_shared = self.n_layers - int(g("attention.shared_kv_layers", 0))
        self.n_used = int(g("expert_used_count", 0))
        self._kv: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # each layer's K and V (rotated, normed)
        self._ple: torch.Tensor | None = None

    gelu_fp16 = False  # llama.cpp's GELU: a table indexed by fp16(x), values rounded to fp16

    def _gelu(self, x: torch.Tensor) -> torch.Tensor:
        if not self.gelu_fp16:
            return torch.nn.functional.gelu(x, approximate="tanh")
        y = torch.nn.functional.gelu(x.half().double(), approximate="tanh").half().double()
        return torch.where(x <= -10, torch.zeros_like(x), torch.where(x >= 10, x, y))

    def _embed(self, ids: list[int]) -> torch.Tensor:
        x = self.w["token_embd.weight"][torch.tensor(ids)] * self.hidden**0.5
        if self.ple_dim:  # per-layer inputs [T, layers, width]
            t, w = len(ids), self.w
            rows = w["per_layer_token_embd.weight"][torch.tensor(ids)].reshape(t, self.n_layers, -1)
            proj = (x @ w["per_layer_model_proj.weight"].T / self.hidden**0.5).reshape(t, self.n_layers, -1)
            self._ple = (self._rms(proj, w["per_layer_proj_norm.weight"]) + rows * self.ple_dim**0.5) / 2**0.5
        return x

    def _rotate(self, x: torch.Tensor, dims: int, base: float, factors: torch.Tensor | None) -> torch.Tensor:
        t = x.shape[0]
        freqs = base ** (-torch.arange(0, dims, 2, dtype=torch.float64) / dims)
        if factors is not None:
            freqs = freqs / factors
        ang = torch.arange(t, dtype=torch.float64)[:, None] * freqs[None, :]
        z = (
            torch.complex(x[..., : dims // 2], x[..., dims // 2 : dims])
            * torch.polar(torch.ones_like(ang), ang)[:, None, :]
        )
        return torch.cat((z.real, z.imag, x[..., dims:]), dim=-1)

    def _layer(self, i: int, x: torch.Tensor, causal: torch.Tensor) -> torch.Tensor:
        w, p, t = self.w, f"blk.{i}.", x.shape[0]
        swa, kvh = self.sliding[i], self.kv_heads[i]
        d = self.head_swa if swa else self.head_dim
        h = self._rms(x, w[p + "attn_norm.weight"])
        q = (h @ w[p + "attn_q.weight"].T).reshape(t, self.n_heads, d)
        q = self._rms(q, w[p + "attn_q_norm.weight"])
        dims, base, factors = (
            (self.rope_swa, self.base_swa, None)
            if swa
            else (self.rope_dim, self.base, w["rope_freqs.weight"])
        )
        q = self._rotate(q, dims, base, factors)
        if i < self.first_shared:
            k = self._rms((h @ w[p + "attn_k.weight"].T).reshape(t, kvh, d), w[p + "attn_k_norm.weight"])
            v = (h @ w.get(p + "attn_v.weight", w[p + "attn_k.weight"]).T).reshape(t, kvh, d)
            self._kv[i] = (
                self._rotate(k, dims, base, factors),
                v / torch.sqrt((v * v).mean(-1, keepdim=True) + self.eps),
            )
        k, v = self._kv[i if i < self.first_shared else self.first_shared - (2 if swa else 1)]
        k, v = k.repeat_interleave(self.n_heads // kvh, 1), v.repeat_interleave(self.n_heads // kvh, 1)
        allowed = causal
        if swa:
            pos = torch.arange(t)
            allowed = causal & (pos[None, :] > pos[:, None] - self.window)
        s = torch.einsum("thd,shd->hts", q, k).masked_fill(~allowed, float("-inf"))
        a = torch.einsum("hts,shd->thd", torch.softmax(s, -1), v).reshape(t, -1)
        x = x + self._rms(a @ w[p + "attn_output.weight"].T, w[p + "post_attention_norm.weight"])
        h = self._rms(x, w[p + "ffn_norm.weight"])
        f = (self._gelu(h @ w[p + "ffn_gate.weight"].T) * (h @ w[p + "ffn_up.weight"].T)) @ w[
            p + "ffn_down.weight"
        ].T
        if p + "ffn_gate_inp.weight" in w:  # the dense FFN is the shared expert
            f = self._rms(f, w[p + "post_ffw_norm_1.weight"]) + self._routed(i, x)
        x = x + self._rms(f, w[p + "post_ffw_norm.weight"])
        if self._ple is not None:
            gate = self._gelu(x @ w[p + "inp_gate.weight"].T) * self._ple[:, i]
            x = x + self._rms(gate @ w[p + "proj.weight"].T, w[p + "post_norm.weight"])
        scale = w.get(p + "layer_output_scale.weight")
        return x if scale is None else x * scale[0]

    def _routed(self, i: int, x: torch.Tensor) -> torch.Tensor:
        """The routed experts of a mixture-of-experts layer on the attention block's output `x`:
        the router on rms(x) / sqrt(hidden) * ffn_gate_inp.scale, each expert's GeGLU on
        rms(x) * pre_ffw_norm_2 (gate and up from one fused tensor or two, each output times its
        expert's scale where the file has one), the mixture normed by post_ffw_norm_2."""
        w, p = self.w, f"blk.{i}."
        ones = torch.ones(self.hidden, dtype=torch.float64)
        r = self._rms(x, ones) / self.hidden**0.5 * w[p + "ffn_gate_inp.scale"]

        def scale(x: str, e: int) -> torch.Tensor | float:
            s = w.get(f"{p}ffn_{x}_exps.scale")
            return 1.0 if s is None else s[e]

        def expert(e: int, row: torch.Tensor) -> torch.Tensor:
            if p + "ffn_gate_up_exps.weight" in w:
                gate, up = (w[p + "ffn_gate_up_exps.weight"][e] @ row).chunk(2)
            else:
                gate, up = w[p + "ffn_gate_exps.weight"][e] @ row, w[p + "ffn_up_exps.weight"][e] @ row
            y = self._gelu(gate * scale("gate", e)) * (up * scale("up", e))
            return w[p + "ffn_down_exps.weight"][e] @ y * scale("down", e)

        h = self._rms(x, w[p + "pre_ffw_norm_2.weight"])
        routed = self._mixture(r @ w[p + "ffn_gate_inp.weight"].T, h, expert)
        return self._rms(routed, w[p + "post_ffw_norm_2.weight"])

    def _head(self, x: torch.Tensor) -> torch.Tensor:
        logits = (
            self._rms(x, self.w["output_norm.weight"])
            @ self.w.get("output.weight", self.w["token_embd.weight"]).T
        )
        return torch.log_softmax(torch.tanh(logits / self.softcap) * self.softcap, dim=-1)
