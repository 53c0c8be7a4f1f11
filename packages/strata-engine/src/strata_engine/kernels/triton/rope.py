"""Rotary position embedding, both layouts: interleaved pairs (2i, 2i+1) as llama GGUFs store
q/k, and neox halves (i, i + dim/2) as qwen2/qwen3. One program per token (all its heads); each value
depends only on its own pair and its position's cos/sin (no reduction), in the C kernel's
arithmetic (elementwise.c strata_rope): a*c - b*s and a*s + b*c with separately rounded products
(launched without multiply-add contraction). The rotated rows go to a new tensor, dims past
the table's copied, so no copy of the input runs first."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from strata_engine.kernels.base import RopeTable
from strata_engine.kernels.torch_backend import tensor
from strata_engine.kernels.triton import kv
from strata_engine.kernels.triton.ieee import LAUNCH


@triton.jit
def _rope_kernel(
    x_ptr, y_ptr, pos_ptr, cos_ptr, sin_ptr, H, D, HALF,
    INTERLEAVED: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK: tl.constexpr, TAIL: tl.constexpr,
):  # fmt: skip
    t = tl.program_id(0).to(tl.int64)
    at = t * H * D
    _rotate(x_ptr + at, y_ptr + at, tl.load(pos_ptr + t).to(tl.int64), cos_ptr, sin_ptr, H, D, HALF,
            INTERLEAVED, BLOCK_H, BLOCK, TAIL, 0)  # fmt: skip


@triton.jit(do_not_specialize=["WV"])
def _rope_write_kernel(
    q_ptr, qo_ptr, k_ptr, v_ptr, kc_ptr, vc_ptr, pos_ptr, slots_ptr, cos_ptr, sin_ptr, HQ, HK, WV, D, HALF,
    INTERLEAVED: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK: tl.constexpr, TAIL: tl.constexpr,
    KV: tl.constexpr, VB: tl.constexpr,
):  # fmt: skip
    """Token t's queries rotated (program 0 on axis 1), its keys rotated into the K cache's slot
    (1), its values into the V cache's (2): `rope` twice and kv.write in one launch, the same
    operations (a 2-byte cache's values rounded by kv.narrow)."""
    t = tl.program_id(0).to(tl.int64)
    which = tl.program_id(1)
    pos = tl.load(pos_ptr + t).to(tl.int64)
    if which == 0:
        _rotate(q_ptr + t * HQ * D, qo_ptr + t * HQ * D, pos, cos_ptr, sin_ptr, HQ, D, HALF,
                INTERLEAVED, BLOCK_H, BLOCK, TAIL, 0)  # fmt: skip
    elif which == 1:
        slot = tl.load(slots_ptr + t).to(tl.int64)
        _rotate(k_ptr + t * HK * D, kc_ptr + slot * HK * D, pos, cos_ptr, sin_ptr, HK, D, HALF,
                INTERLEAVED, BLOCK_H, BLOCK, TAIL, KV)  # fmt: skip
    else:
        slot = tl.load(slots_ptr + t).to(tl.int64)
        for c0 in range(0, WV, VB):
            kv.store_row(v_ptr + t * WV, vc_ptr + slot * WV, c0 + tl.arange(0, VB), WV, KV)


@triton.jit
def _rotate(
    src, dst, pos, cos_ptr, sin_ptr, H, D, HALF,
    INTERLEAVED: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK: tl.constexpr, TAIL: tl.constexpr, KV: tl.constexpr,
    CG: tl.constexpr = False,
):  # fmt: skip
    """A token's H heads of D from src rotated into dst (KV 1, 2: as a 2-byte cache stores them).
    CG: src read past the SM's L1 (outputs other programs of the launch stored: qkvrope.py)."""
    CACHE: tl.constexpr = ".cg" if CG else ""
    hs = tl.arange(0, BLOCK_H)[:, None]
    i = tl.arange(0, BLOCK)[None, :]
    mask = (hs < H) & (i < HALF)
    c = tl.load(cos_ptr + pos * HALF + i, mask=i < HALF, other=0.0)
    s = tl.load(sin_ptr + pos * HALF + i, mask=i < HALF, other=0.0)
    row = hs.to(tl.int64) * D
    if INTERLEAVED:
        ia = 2 * i
        ib = 2 * i + 1
    else:
        ia = i
        ib = i + HALF
    a = tl.load(src + row + ia, mask=mask, other=0.0, cache_modifier=CACHE)
    b = tl.load(src + row + ib, mask=mask, other=0.0, cache_modifier=CACHE)
    ac, bs, as_, bc = a * c, b * s, a * s, b * c
    _put(dst + row + ia, ac - bs, mask, KV)
    _put(dst + row + ib, as_ + bc, mask, KV)
    if TAIL:  # the dims past the rotated ones, copied as they are
        for c0 in range(2 * HALF, D, BLOCK):
            m = (hs < H) & (c0 + i < D)
            _put(
                dst + row + c0 + i,
                tl.load(src + row + c0 + i, mask=m, other=0.0, cache_modifier=CACHE),
                m,
                KV,
            )


@triton.jit
def _put(ptr, x, mask, KV: tl.constexpr):
    if KV == 0:
        tl.store(ptr, x, mask=mask)
    else:
        tl.store(ptr, kv.narrow(x, KV), mask=mask)


def rope(
    x: torch.Tensor, positions: torch.Tensor, table: RopeTable, cos: torch.Tensor, sin: torch.Tensor
) -> torch.Tensor:
    """x [T, H, D] rotated in its first `table.dim` dims; `cos`/`sin` are the table on x's device."""
    x = x.float().contiguous()
    t, h, d = x.shape
    half = table.dim // 2
    if not (t and h and half):
        return x.clone()
    out = torch.empty_like(x)  # written whole by the kernel: no copy of x first
    _rope_kernel[(t,)](
        x, out, positions, cos, sin, h, d, half, INTERLEAVED=table.interleaved,
        BLOCK_H=triton.next_power_of_2(h), BLOCK=triton.next_power_of_2(half), TAIL=2 * half < d, **LAUNCH,
    )  # fmt: skip
    return out


def rope_write(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
    table: RopeTable, cos: torch.Tensor, sin: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
) -> torch.Tensor:  # fmt: skip
    """`rope(q)`, returned, and `rope(k)` and v written to the caches' slots as kv.write writes
    them: one launch. q [T, HQ, D], k [T, HK, D], v [T, ...]."""
    if k_cache.dtype != v_cache.dtype:
        raise ValueError(f"K cache {k_cache.dtype}, V cache {v_cache.dtype}: one type for both")
    q, k, v = (a.float().contiguous() for a in (q, k, v))
    t, hq, d = q.shape
    hk, half = k.shape[1], table.dim // 2
    if not (t and half):
        kv.write(rope(k, positions, table, cos, sin), v, k_cache, v_cache, slots)
        return rope(q, positions, table, cos, sin)
    code = kv.KV_CODES[k_cache.dtype]
    kc, vc = (c if code == 0 else c.view(torch.int16) for c in (k_cache, v_cache))
    out = torch.empty_like(q)
    wv = v.numel() // t
    _rope_write_kernel[(t, 3)](
        q, out, k, v, kc, vc, positions, slots.contiguous(), cos, sin, hq, hk, wv, d, half,
        INTERLEAVED=table.interleaved, BLOCK_H=triton.next_power_of_2(max(hq, hk)),
        BLOCK=triton.next_power_of_2(half), TAIL=2 * half < d, KV=code,
        VB=min(kv.BLOCK, triton.next_power_of_2(wv)), **LAUNCH,
    )  # fmt: skip
    return out


def rope_reference(x: torch.Tensor, positions: torch.Tensor, table: RopeTable) -> torch.Tensor:
    """float64 rotation by the table's angles, written as complex multiplication (a sanity
    check of the arithmetic's accuracy, not of its bits)."""
    x = x.double()
    pos = tensor(positions).to(torch.int64)
    c, s = tensor(table.cos).double()[pos][:, None, :], tensor(table.sin).double()[pos][:, None, :]
    rot, rest = x[..., : table.dim], x[..., table.dim :]
    if table.interleaved:
        z = torch.complex(rot[..., 0::2], rot[..., 1::2]) * torch.complex(c, s)
        out = torch.stack((z.real, z.imag), dim=-1).flatten(-2)
    else:
        half = table.dim // 2
        z = torch.complex(rot[..., :half], rot[..., half:]) * torch.complex(c, s)
        out = torch.cat((z.real, z.imag), dim=-1)
    return torch.cat((out, rest), dim=-1)
