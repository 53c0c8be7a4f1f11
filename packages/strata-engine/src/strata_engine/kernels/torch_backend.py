"""`TorchOps`: the engine's ops in plain PyTorch (MKL GEMMs, SDPA).

Correct, but a row's bits depend on the batch shape: the fallback where the native kernels
cannot build, and the "invariance off" switch for tests and benchmarks. Imported only when
chosen, so an engine on the native kernels never loads torch.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from strata_engine.kernels.base import Array, AttentionMeta, RopeTable
from strata_engine.kernels.weights import Weight


def tensor(a: np.ndarray | torch.Tensor) -> torch.Tensor:
    """The engine's numpy arrays as tensors sharing their memory (tensors pass through)."""
    return torch.from_numpy(a) if isinstance(a, np.ndarray) else a


def kv_tensor(c: np.ndarray | torch.Tensor) -> torch.Tensor:
    """A KV cache array as a tensor of its type (kv_types.py: uint16 arrays hold bf16 bits)."""
    if isinstance(c, np.ndarray) and c.dtype == np.uint16:
        return torch.from_numpy(c.view(np.int16)).view(torch.bfloat16)
    return tensor(c)


def q8_0_blocks(x: torch.Tensor) -> torch.Tensor:
    """K or V rows [T, KVH, D] as q8_0 cache bytes [T, KVH, D / 32 * 34], by attention.c's rule
    (ggml's reference: d = amax / 127, q = x * (1 / d) rounded half away from zero)."""
    b = x.float().reshape(*x.shape[:-1], -1, 32)
    d = b.abs().amax(-1, keepdim=True) / 127
    d16 = d.to(torch.float16)
    bad = ~torch.isfinite(b).all(-1, keepdim=True) | torch.isinf(d16)
    d16 = torch.where(bad, torch.tensor(float("nan"), dtype=torch.float16), d16)
    v = b * torch.where(d == 0, 0.0, 1 / d)
    a = v.abs().nan_to_num(0.0)
    q = torch.sign(v) * (a.floor() + (2 * (a - a.floor())).floor())  # roundf, exactly
    q = torch.where(bad | (d16 == 0), 0.0, q)
    out = torch.cat((d16.view(torch.uint8), q.to(torch.int8).view(torch.uint8)), dim=-1)
    return out.reshape(*x.shape[:-1], -1)


def q8_0_values(c: torch.Tensor) -> torch.Tensor:
    """q8_0 cache bytes [..., D / 32 * 34] widened exactly to fp32 [..., D]."""
    b = c.reshape(*c.shape[:-1], -1, 34)
    d = b[..., :2].contiguous().view(torch.float16).float()
    q = b[..., 2:].contiguous().view(torch.int8).float()
    return (d * q).reshape(*c.shape[:-1], -1)


def _widened(rows: torch.Tensor) -> torch.Tensor:
    """Cache rows as fp32 (a q8_0 cache's bytes widened, the others converted)."""
    return q8_0_values(rows) if rows.dtype == torch.uint8 else rows.float()


class TorchOps:
    """Plain PyTorch ops (MKL, SDPA). Correct, but a row's bits depend on the batch shape."""

    name = "torch"
    invariant = False

    def __init__(self, num_threads: int | None = None) -> None:
        if num_threads:
            torch.set_num_threads(num_threads)

    def pack(self, w: Weight) -> Weight:
        return w

    def linear(
        self, x: Array, w: Weight, bias: Array | None = None, out: Array | None = None
    ) -> torch.Tensor:
        return F.linear(tensor(x), tensor(w.dense()), None if bias is None else tensor(bias))

    def embed(self, w: Weight, ids: Array) -> torch.Tensor:
        return tensor(w.dense())[tensor(ids).to(torch.int64)]

    def rmsnorm(self, x: Array, weight: Array, eps: float) -> torch.Tensor:
        x = tensor(x)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * tensor(weight)

    def silu_mul(self, gate: Array, up: Array) -> torch.Tensor:
        return F.silu(tensor(gate)) * tensor(up)

    def gelu_mul(self, gate: Array, up: Array) -> torch.Tensor:
        return F.gelu(tensor(gate), approximate="tanh") * tensor(up)

    def swiglu_oai(self, gate: Array, up: Array, alpha: float, limit: float) -> torch.Tensor:
        x = tensor(gate).clamp(max=limit)
        return x * torch.sigmoid(alpha * x) * (tensor(up).clamp(-limit, limit) + 1)

    def softcap(self, x: Array, cap: float) -> torch.Tensor:
        return torch.tanh(tensor(x) / cap) * cap

    def attention(
        self,
        q: Array,
        k_cache: Array,
        v_cache: Array,
        meta: AttentionMeta,
        scale: float | None = None,
        window: int = 0,
        softcap: float = 0.0,
        sinks: Array | None = None,
    ) -> torch.Tensor:
        q, k_cache, v_cache = tensor(q), kv_tensor(k_cache), kv_tensor(v_cache)
        positions, token_seq, tables = (
            tensor(meta.positions),
            tensor(meta.token_seq),
            tensor(meta.block_tables),
        )
        out = torch.empty_like(q)
        group = q.shape[1] // k_cache.shape[2]
        bs = meta.block_size
        for row in torch.unique(token_seq).tolist():
            idx = (token_seq == row).nonzero().squeeze(1)
            pos = positions[idx].to(torch.int64)
            n = int(pos.max()) + 1
            table = tables[row].to(torch.int64)
            j = torch.arange(n)
            slots = table[j // bs] * bs + j % bs
            k = _widened(k_cache.flatten(0, 1)[slots]).repeat_interleave(group, dim=1).transpose(0, 1)
            v = _widened(v_cache.flatten(0, 1)[slots]).repeat_interleave(group, dim=1).transpose(0, 1)
            mask = j[None, :] <= pos[:, None]
            if window:
                mask &= j[None, :] > pos[:, None] - window
            qh = q[idx].transpose(0, 1)
            if softcap or sinks is not None:  # SDPA cannot cap the scores or take sinks: written out
                s = qh @ k.transpose(1, 2) * (scale if scale is not None else 1.0 / math.sqrt(q.shape[2]))
                if softcap:
                    s = torch.tanh(s / softcap) * softcap
                s = s.masked_fill(~mask, float("-inf"))
                if sinks is not None:  # gpt-oss: one more logit per head in the denominator, no value
                    sink = tensor(sinks).float()[:, None, None].expand(-1, s.shape[1], 1)
                    s = torch.cat((s, sink), dim=-1)
                    o = torch.softmax(s, dim=-1)[..., :-1] @ v
                else:
                    o = torch.softmax(s, dim=-1) @ v
            else:
                o = F.scaled_dot_product_attention(qh, k, v, attn_mask=mask, scale=scale)
            out[idx] = o.transpose(0, 1)
        return out

    def rope(self, x: Array, positions: Array, table: RopeTable) -> torch.Tensor:
        x, pos = tensor(x), tensor(positions).to(torch.int64)
        cos, sin = tensor(table.cos)[pos][:, None, :], tensor(table.sin)[pos][:, None, :]
        rot, rest = x[..., : table.dim], x[..., table.dim :]
        if table.interleaved:
            a, b = rot[..., 0::2], rot[..., 1::2]
            out = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)
        else:
            half = table.dim // 2
            a, b = rot[..., :half], rot[..., half:]
            out = torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)
        return torch.cat((out, rest), dim=-1) if rest.shape[-1] else out

    def kv_write(
        self,
        k: Array,
        v: Array,
        k_cache: Array,
        v_cache: Array,
        slots: Array,
    ) -> None:
        k, v, slots = tensor(k), tensor(v), tensor(slots)
        kc, vc = kv_tensor(k_cache), kv_tensor(v_cache)  # rounded to nearest even when not fp32
        if kc.dtype == torch.uint8:  # q8_0 blocks
            k, v = q8_0_blocks(k), q8_0_blocks(v)
        kc.view(-1, *kc.shape[2:])[slots] = k.to(kc.dtype)
        vc.view(-1, *vc.shape[2:])[slots] = v.to(vc.dtype)

    def log_softmax(self, logits: Array, inplace: bool = False) -> torch.Tensor:
        logits = tensor(logits).float()
        rows = [torch.log_softmax(row, dim=-1) for row in logits]  # one row at a time
        return torch.stack(rows) if rows else logits
