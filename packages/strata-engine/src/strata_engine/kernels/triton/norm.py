"""RMSNorm, one program per row (on a GPU), in the C kernel's arithmetic (elementwise.c
strata_rmsnorm):
r = 1 / sqrt(dot_1(x, x) / K + eps), then (x * r) * weight.

dot_1 is 16 lanes of FMAs walked over the row in 16-float steps (the last zero-padded), then
vf_hsum's fixed tree; the rest are single correctly rounded operations. A row's bits are the
CPU's and never depend on how many rows share the call."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from strata_engine.kernels.triton import ieee

OUT_BLOCK = 1024  # columns written per step (elementwise: no effect on the bits)
ROWS = 64 if ieee.INTERPRETED else 1  # rows a program (a speed choice only: ieee.INTERPRETED)


@triton.jit(do_not_specialize=["M", "K"])
def _rmsnorm_kernel(x_ptr, w_ptr, y_ptr, M, K, eps, ROWS: tl.constexpr, OUT: tl.constexpr):
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    rmask = (r < M)[:, None]
    base = (r.to(tl.int64) * K)[:, None]
    lanes = tl.arange(0, 16)[None, :]
    acc = tl.zeros([ROWS, 16], dtype=tl.float32)
    for k0 in range(0, K, 16):
        x = tl.load(x_ptr + base + k0 + lanes, mask=rmask & (k0 + lanes < K), other=0.0)
        acc = tl.fma(x, x, acc)
    mean = tl.div_rn(ieee.hsum16(acc, ROWS), K.to(tl.float32))
    inv = tl.div_rn(tl.full([ROWS], 1.0, tl.float32), tl.sqrt_rn(mean + eps))[:, None]
    cols = tl.arange(0, OUT)[None, :]
    for k0 in range(0, K, OUT):
        m = rmask & (k0 + cols < K)
        x = tl.load(x_ptr + base + k0 + cols, mask=m, other=0.0)
        w = tl.load(w_ptr + k0 + cols, mask=k0 + cols < K, other=0.0)
        tl.store(y_ptr + base + k0 + cols, (x * inv) * w, mask=m)


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """(x * (1 / sqrt(mean(x^2) + eps))) * weight over the last dimension, C's bits."""
    x = x.float().contiguous()
    y = torch.empty_like(x)
    d = x.shape[-1]
    rows = x.numel() // d if d else 0
    if rows:
        out = min(OUT_BLOCK, triton.next_power_of_2(d))
        per = ieee.fit(rows, ROWS)
        _rmsnorm_kernel[(triton.cdiv(rows, per),)](
            x, weight.float().contiguous(), y, rows, d, eps, ROWS=per, OUT=out, **ieee.LAUNCH
        )
    return y


def rmsnorm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """float64 RMSNorm: a sanity check of the arithmetic's accuracy, not of its bits."""
    x = x.double()
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * weight.double()
