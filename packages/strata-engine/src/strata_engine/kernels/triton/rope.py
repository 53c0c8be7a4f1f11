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
from strata_engine.kernels.triton.ieee import LAUNCH


@triton.jit
def _rope_kernel(
    x_ptr, y_ptr, pos_ptr, cos_ptr, sin_ptr, H, D, HALF,
    INTERLEAVED: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK: tl.constexpr, TAIL: tl.constexpr,
):  # fmt: skip
    t = tl.program_id(0)
    hs = tl.arange(0, BLOCK_H)[:, None]
    i = tl.arange(0, BLOCK)[None, :]
    mask = (hs < H) & (i < HALF)
    pos = tl.load(pos_ptr + t).to(tl.int64)
    c = tl.load(cos_ptr + pos * HALF + i, mask=i < HALF, other=0.0)
    s = tl.load(sin_ptr + pos * HALF + i, mask=i < HALF, other=0.0)
    row = (t.to(tl.int64) * H + hs) * D
    base = x_ptr + row
    if INTERLEAVED:
        ia = 2 * i
        ib = 2 * i + 1
    else:
        ia = i
        ib = i + HALF
    a = tl.load(base + ia, mask=mask, other=0.0)
    b = tl.load(base + ib, mask=mask, other=0.0)
    ac, bs, as_, bc = a * c, b * s, a * s, b * c
    tl.store(y_ptr + row + ia, ac - bs, mask=mask)
    tl.store(y_ptr + row + ib, as_ + bc, mask=mask)
    if TAIL:  # the dims past the rotated ones, copied as they are
        for c0 in range(2 * HALF, D, BLOCK):
            m = (hs < H) & (c0 + i < D)
            tl.store(y_ptr + row + c0 + i, tl.load(base + c0 + i, mask=m, other=0.0), mask=m)


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
