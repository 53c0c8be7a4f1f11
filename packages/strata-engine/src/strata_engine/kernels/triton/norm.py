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
from strata_engine.kernels.triton.quantize import Quantised, allocate, constants, store_blocks

OUT_BLOCK = 1024  # columns written per step (elementwise: no effect on the bits)
ROWS = 64 if ieee.INTERPRETED else 1  # rows a program (a speed choice only: ieee.INTERPRETED)
CHUNK = 32  # blocks of 32 normed and quantised a step by _rmsnorm_quantize_kernel (a speed choice)
# 16-float steps of the chain whose loads are issued together (no effect on the bits): 32 on a GPU
# (512 floats); 1 under the interpreter, where a step past the row's end costs as much as another
STEPS: tl.constexpr = tl.constexpr(1 if ieee.INTERPRETED else 32)


@triton.jit(do_not_specialize=["M", "K"])
def _rmsnorm_kernel(x_ptr, w_ptr, y_ptr, M, K, eps, ROWS: tl.constexpr, OUT: tl.constexpr):
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    rmask = (r < M)[:, None]
    base = (r.to(tl.int64) * K)[:, None]
    inv = _inverse_rms(x_ptr, base, rmask, K, eps, ROWS)[:, None]
    cols = tl.arange(0, OUT)[None, :]
    for k0 in range(0, K, OUT):
        m = rmask & (k0 + cols < K)
        x = tl.load(x_ptr + base + k0 + cols, mask=m, other=0.0)
        w = tl.load(w_ptr + k0 + cols, mask=k0 + cols < K, other=0.0)
        tl.store(y_ptr + base + k0 + cols, (x * inv) * w, mask=m)


@triton.jit
def _inverse_rms(x_ptr, base, rmask, K, eps, ROWS: tl.constexpr, CACHE: tl.constexpr = ""):
    """1 / sqrt(dot_1(x, x) / K + eps) of each row, [ROWS]: the one sequence every RMSNorm runs
    (addnorm.py's too, which reads rows other programs wrote: CACHE ".cg", past the L1)."""
    lanes = tl.arange(0, 16)[None, :]
    acc = tl.zeros([ROWS, 16], dtype=tl.float32)
    # STEPS steps an iteration: their loads depend on nothing the chain computes, so they are
    # issued together and the FMAs run on values already loaded; a step past the row's end adds
    # fma(0, 0, acc) = acc (acc is never -0.0), so the same bits
    for k0 in range(0, K, 16 * STEPS):
        for u in tl.static_range(STEPS):
            k = k0 + 16 * u
            x = tl.load(
                x_ptr + base + k + lanes, mask=rmask & (k + lanes < K), other=0.0, cache_modifier=CACHE
            )
            acc = tl.fma(x, x, acc)
    mean = tl.div_rn(ieee.hsum16(acc, ROWS), K.to(tl.float32))
    return tl.div_rn(tl.full([ROWS], 1.0, tl.float32), tl.sqrt_rn(mean + eps))


@triton.jit(do_not_specialize=["K"])
def _rmsnorm_quantize_kernel(
    x_ptr, w_ptr, y_ptr, q_ptr, s_ptr, dsum_ptr, K, eps,
    LIMBS: tl.constexpr, SHIFT: tl.constexpr, XMAX: tl.constexpr, MIN_EXP: tl.constexpr,
    CB: tl.constexpr,
):  # fmt: skip
    """One row a program: its RMSNorm (the operations of _rmsnorm_kernel), and each block of
    32 of the normed row quantised as quantize.py's kernel quantises it (store_blocks)."""
    r = tl.program_id(0).to(tl.int64)
    inv = _inverse_rms(
        x_ptr, (r * K + tl.zeros([1], tl.int64))[:, None], tl.full([1, 1], 1, tl.int1), K, eps, 1
    )
    nb = K // 32
    k = tl.arange(0, 32)[None, :]
    for b0 in range(0, nb, CB):
        b = b0 + tl.arange(0, CB)
        ok = b < nb
        cols = b[:, None] * 32 + k
        x = tl.load(x_ptr + r * K + cols, mask=ok[:, None], other=0.0)
        w = tl.load(w_ptr + cols, mask=ok[:, None], other=0.0)
        y = (x * inv[:, None]) * w
        tl.store(y_ptr + r * K + cols, y, mask=ok[:, None])
        store_blocks(y, r * nb + b, ok, q_ptr, s_ptr, dsum_ptr, LIMBS, SHIFT, XMAX, MIN_EXP)


def rmsnorm_quantize(
    x: torch.Tensor, weight: torch.Tensor, eps: float, limbs: int
) -> tuple[torch.Tensor, Quantised]:
    """`rmsnorm(x, weight, eps)` of x [M, K] (K a multiple of 32) and, from the same launch, the
    normed rows quantised in `limbs` digits: the bits of `quantize(rmsnorm(...), limbs)`."""
    consts = constants(limbs)
    x = x.float().contiguous()
    m, d = x.shape
    if d % 32:
        raise ValueError(f"the integer matmul takes whole blocks of 32 inputs, not K = {d}")
    y = torch.empty_like(x)
    xq = allocate(m, d // 32, limbs, x.device)
    if m and d:
        cb = min(CHUNK, triton.next_power_of_2(d // 32))
        _rmsnorm_quantize_kernel[(m,)](
            x, weight.float().contiguous(), y, xq.q, xq.s, xq.dsum, d, eps, CB=cb, **consts, **ieee.LAUNCH
        )
    return y, xq


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
