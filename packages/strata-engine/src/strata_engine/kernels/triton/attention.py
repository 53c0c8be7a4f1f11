"""Paged grouped-query attention over the engine's KV blocks, for prefill and decode alike.

Each (token, query head) attends over positions 0..p of its own sequence, where p is the
token's position, after the step's K/V were written. Positions are cut into splits of SPLIT
(a constant), each split walked in BLOCK_N steps with an online softmax; a second kernel
combines the splits in order 0, 1, 2, ... skipping empty ones. Every float operation depends
only on the token's position and its cache contents, never on the batch, so a position gets
the same bits from a one-shot prefill, a chunk, a prefix-cache continuation or a decode step.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from strata_engine.kernels.base import AttentionMeta
from strata_engine.kernels.torch_backend import tensor

SPLIT = 256  # KV positions per split (fixed)
BLOCK_N = 16  # KV positions per inner step (fixed)


@triton.jit
def _attn_split_kernel(
    q_ptr, k_ptr, v_ptr, tables_ptr, seq_ptr, pos_ptr, m_ptr, l_ptr, acc_ptr,
    H, KVH, D, max_blocks, block_size, n_splits, scale,
    GROUP: tl.constexpr, SPLIT: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    t = tl.program_id(0)
    h = tl.program_id(1)
    s = tl.program_id(2)
    kvh = h // GROUP
    pos = tl.load(pos_ptr + t)
    row = tl.load(seq_ptr + t).to(tl.int64)
    start = s * SPLIT
    end = tl.minimum(start + SPLIT, pos + 1)
    d = tl.arange(0, BLOCK_D)
    dmask = d < D
    q = tl.load(q_ptr + (t.to(tl.int64) * H + h) * D + d, mask=dmask, other=0.0)
    m = tl.full([], float("-inf"), tl.float32)
    l = tl.zeros([], dtype=tl.float32)  # noqa: E741
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    for j0 in range(start, end, BLOCK_N):
        j = j0 + tl.arange(0, BLOCK_N)
        jmask = j < end
        blk = tl.load(tables_ptr + row * max_blocks + j // block_size, mask=jmask, other=0).to(tl.int64)
        slot = blk * block_size + j % block_size
        kv_offs = (slot[:, None] * KVH + kvh) * D + d[None, :]
        kvmask = jmask[:, None] & dmask[None, :]
        k = tl.load(k_ptr + kv_offs, mask=kvmask, other=0.0)
        scores = tl.where(jmask, tl.sum(k * q[None, :], axis=1) * scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, axis=0))
        alpha = tl.exp(m - m_new)
        p = tl.exp(scores - m_new)
        v = tl.load(v_ptr + kv_offs, mask=kvmask, other=0.0)
        l = l * alpha + tl.sum(p, axis=0)  # noqa: E741
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        m = m_new
    part = (t.to(tl.int64) * H + h) * n_splits + s
    tl.store(m_ptr + part, m)
    tl.store(l_ptr + part, l)
    tl.store(acc_ptr + part * D + d, acc, mask=dmask)


@triton.jit
def _attn_combine_kernel(m_ptr, l_ptr, acc_ptr, out_ptr, H, D, n_splits, BLOCK_D: tl.constexpr):
    t = tl.program_id(0)
    h = tl.program_id(1)
    d = tl.arange(0, BLOCK_D)
    dmask = d < D
    first = (t.to(tl.int64) * H + h) * n_splits
    big = tl.full([], float("-inf"), tl.float32)
    for s in range(0, n_splits):
        big = tl.maximum(big, tl.load(m_ptr + first + s))
    total = tl.zeros([], dtype=tl.float32)
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    for s in range(0, n_splits):
        ms = tl.load(m_ptr + first + s)
        live = ms > float("-inf")
        w = tl.exp(tl.where(live, ms - big, 0.0))
        total = tl.where(live, total + tl.load(l_ptr + first + s) * w, total)
        part = tl.load(acc_ptr + (first + s) * D + d, mask=dmask, other=0.0)
        acc = tl.where(live, acc + part * w, acc)
    tl.store(out_ptr + (t.to(tl.int64) * H + h) * D + d, tl.div_rn(acc, total), mask=dmask)


def attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMeta,
    positions: torch.Tensor, token_seq: torch.Tensor, block_tables: torch.Tensor, max_position: int,
) -> torch.Tensor:  # fmt: skip
    """Attention output [T, H, D]; the index tensors are `meta`'s, already on q's device, and
    `max_position` is the largest position in the step (it only sizes the grid)."""
    q = q.contiguous()
    t, h, d = q.shape
    kvh = k_cache.shape[2]
    out = torch.empty_like(q)
    if not t:
        return out
    n_splits = max_position // SPLIT + 1
    m = torch.empty(t * h * n_splits, dtype=torch.float32, device=q.device)
    ell = torch.empty_like(m)
    acc = torch.empty(t * h * n_splits, d, dtype=torch.float32, device=q.device)
    block_d = triton.next_power_of_2(d)
    _attn_split_kernel[(t, h, n_splits)](
        q, k_cache, v_cache, block_tables, token_seq, positions, m, ell, acc,
        h, kvh, d, block_tables.shape[1], meta.block_size, n_splits, 1.0 / math.sqrt(d),
        GROUP=h // kvh, SPLIT=SPLIT, BLOCK_N=BLOCK_N, BLOCK_D=block_d,
    )  # fmt: skip
    _attn_combine_kernel[(t, h)](m, ell, acc, out, h, d, n_splits, BLOCK_D=block_d)
    return out


def attention_reference(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMeta
) -> torch.Tensor:
    """float64 causal attention of each token over its sequence's cached positions 0..p."""
    out = torch.empty(q.shape, dtype=torch.float64)
    group = q.shape[1] // k_cache.shape[2]
    bs = meta.block_size
    kf, vf = k_cache.double().flatten(0, 1), v_cache.double().flatten(0, 1)
    for i in range(q.shape[0]):
        p = int(meta.positions[i])
        table = tensor(meta.block_tables)[int(meta.token_seq[i])].to(torch.int64)
        j = torch.arange(p + 1)
        slots = table[j // bs] * bs + j % bs
        k = kf[slots].repeat_interleave(group, dim=1)  # [p+1, H, D]
        v = vf[slots].repeat_interleave(group, dim=1)
        s = torch.einsum("hd,jhd->hj", q[i].double(), k) / math.sqrt(q.shape[2])
        out[i] = torch.einsum("hj,jhd->hd", torch.softmax(s, -1), v)
    return out
