"""An independent float64 forward pass for tests: gguf-py's reader and dequantizer, no cache,
full causal attention, RoPE via complex rotation. It shares no code with the engine.

It runs on one torch thread: its matmuls have only a few dozen rows, and on a busy 2-core
machine spreading them over threads made each call ten times slower."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from gguf import GGUFReader
from gguf.quants import dequantize


class ReferenceModel:
    def __init__(self, path: str) -> None:
        reader = GGUFReader(path)
        self.meta = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("tokenizer.ggml.")}
        arch = self.meta["general.architecture"]
        g = lambda k, d=None: self.meta.get(f"{arch}.{k}", d)  # noqa: E731
        self.arch = arch
        self.n_layers = g("block_count")
        self.n_heads = g("attention.head_count")
        self.n_kv = g("attention.head_count_kv")
        self.hidden = g("embedding_length")
        self.head_dim = g("attention.key_length", self.hidden // self.n_heads)
        self.eps = g("attention.layer_norm_rms_epsilon")
        self.base = g("rope.freq_base", 10000.0)
        self.rope_dim = g("rope.dimension_count", self.head_dim)
        self.w: dict[str, torch.Tensor] = {}
        for t in reader.tensors:
            shape = tuple(int(d) for d in reversed(t.shape.tolist()))
            vals = dequantize(t.data, t.tensor_type).astype(np.float64).reshape(shape)
            self.w[t.name] = torch.from_numpy(vals)

    def _rms(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + self.eps) * w

    def _rope(self, x: torch.Tensor) -> torch.Tensor:
        """Rotate the first `rope_dim` dims of each head by position; the rest pass through."""
        t, h, _ = x.shape
        d = self.rope_dim
        x, rest = x[..., :d], x[..., d:]
        freqs = self.base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        ang = torch.arange(t, dtype=torch.float64)[:, None] * freqs[None, :]
        rot = torch.polar(torch.ones_like(ang), ang)[:, None, :]
        if self.arch == "llama":  # stored rows are permuted: rotate adjacent pairs
            z = torch.view_as_complex(x.reshape(t, h, d // 2, 2).contiguous())
            out = torch.view_as_real(z * rot).reshape(t, h, d)
        else:  # neox style: rotate (i, i + d/2)
            z = torch.complex(x[..., : d // 2], x[..., d // 2 :]) * rot
            out = torch.cat((z.real, z.imag), dim=-1)
        return torch.cat((out, rest), dim=-1)

    def _q_factor(self, t: int) -> torch.Tensor | float:
        """A per-position factor on the rotated queries (mistral3's temperature); here none."""
        return 1.0

    @torch.no_grad()
    def logprobs(self, ids: list[int]) -> torch.Tensor:
        """float64 log-probabilities [T, vocab] for every position (row p predicts token p+1)."""
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return self._forward(ids)
        finally:
            torch.set_num_threads(threads)

    def _forward(self, ids: list[int]) -> torch.Tensor:
        x = self._embed(ids)
        pos = torch.arange(len(ids))
        causal = pos[None, :] <= pos[:, None]  # [query, key]
        for i in range(self.n_layers):
            x = self._layer(i, x, causal)
        return self._head(x)

    def _embed(self, ids: list[int]) -> torch.Tensor:
        return self.w["token_embd.weight"][torch.tensor(ids)]

    def _layer(self, i: int, x: torch.Tensor, causal: torch.Tensor) -> torch.Tensor:
        p = f"blk.{i}."
        x = x + self._attention(i, self._rms(x, self.w[p + "attn_norm.weight"]), causal)
        return x + self._ffn(i, self._rms(x, self.w[p + "ffn_norm.weight"]))

    def _attention(
        self, i: int, h: torch.Tensor, allowed: torch.Tensor, softcap: float = 0.0
    ) -> torch.Tensor:
        """Grouped-query attention of layer i over the key positions `allowed` for each query,
        scores optionally soft-capped (softcap * tanh(s / softcap)); the output projection."""
        w, p, t = self.w, f"blk.{i}.", h.shape[0]
        q = h @ w[p + "attn_q.weight"].T + w.get(p + "attn_q.bias", 0)
        k = h @ w[p + "attn_k.weight"].T + w.get(p + "attn_k.bias", 0)
        v = h @ w[p + "attn_v.weight"].T + w.get(p + "attn_v.bias", 0)
        q = q.reshape(t, self.n_heads, self.head_dim)
        k = k.reshape(t, self.n_kv, self.head_dim)
        v = v.reshape(t, self.n_kv, self.head_dim)
        if p + "attn_q_norm.weight" in w:
            q = self._rms(q, w[p + "attn_q_norm.weight"])
            k = self._rms(k, w[p + "attn_k_norm.weight"])
        q, k = self._rope(q) * self._q_factor(t), self._rope(k)
        rep = self.n_heads // self.n_kv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        s = torch.einsum("thd,shd->hts", q, k) / self.head_dim**0.5
        if softcap:
            s = torch.tanh(s / softcap) * softcap
        s = s.masked_fill(~allowed, float("-inf"))
        a = torch.einsum("hts,shd->thd", torch.softmax(s, -1), v).reshape(t, -1)
        return a @ w[p + "attn_output.weight"].T

    def _moe(self, i: int, h: torch.Tensor) -> torch.Tensor:
        """Routed experts (the families with `n_used`, set by their reference): softmax over the
        router's logits, the top n_used renormalised to sum 1, each expert's SwiGLU weighted."""
        w, p = self.w, f"blk.{i}."

        def swiglu(e: int, row: torch.Tensor) -> torch.Tensor:
            g = torch.nn.functional.silu(w[p + "ffn_gate_exps.weight"][e] @ row)
            return w[p + "ffn_down_exps.weight"][e] @ (g * (w[p + "ffn_up_exps.weight"][e] @ row))

        return self._mixture(h @ w[p + "ffn_gate_inp.weight"].T, h, swiglu)

    def _mixture(
        self, logits: torch.Tensor, h: torch.Tensor, expert: Callable[[int, torch.Tensor], torch.Tensor]
    ) -> torch.Tensor:
        """Each row of `h` through its top n_used experts by the softmax of `logits`, their
        probabilities renormalised to sum 1, `expert(e, row)` weighted and summed."""
        probs = torch.softmax(logits, dim=-1)
        top = torch.topk(probs, self.n_used, dim=-1)
        weights = top.values / top.values.sum(-1, keepdim=True)
        out = torch.zeros_like(h)
        for r in range(h.shape[0]):
            for j in range(self.n_used):
                out[r] += weights[r, j] * expert(int(top.indices[r, j]), h[r])
        return out

    def _ffn(self, i: int, h: torch.Tensor) -> torch.Tensor:
        """SwiGLU: down(silu(gate h) * up h)."""
        w, p = self.w, f"blk.{i}."
        gate = torch.nn.functional.silu(h @ w[p + "ffn_gate.weight"].T)
        return (gate * (h @ w[p + "ffn_up.weight"].T)) @ w[p + "ffn_down.weight"].T

    def _head(self, x: torch.Tensor) -> torch.Tensor:
        x = self._rms(x, self.w["output_norm.weight"])
        head = self.w.get("output.weight", self.w["token_embd.weight"])
        return torch.log_softmax(x @ head.T, dim=-1)
