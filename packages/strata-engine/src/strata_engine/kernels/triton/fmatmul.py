"""y = x W^T (+ bias) for fp32 weights in the C kernels' order (internal.h dot_1), the CPU's bits.

Each output is 16 lanes of FMAs over k = 0, 16, 32, ... (the last step zero-padded), then
vf_hsum's fixed tree, then + bias: the sequence every C matmul path gives an fp32 weight, in
every mode (the integer modes leave fp32 weights, such as a MoE router or a weight stored as
F16/BF16 and widened at load, unpacked). CUDA-core FMAs, no tensor cores: fp32 weights are the
rare small ones. A program owns a BM x BN tile of outputs; the tile sizes change which outputs
share a program, never an output's operations."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from strata_engine.kernels.triton import ieee

BM, BN = (64, 64) if ieee.INTERPRETED else (8, 16)  # a speed choice only (see ieee.INTERPRETED)


@triton.jit(do_not_specialize=["M", "N", "K"])
def _dot1_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, HAS_BIAS: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr
):
    rm = tl.program_id(1) * BM + tl.arange(0, BM)
    rn = tl.program_id(0) * BN + tl.arange(0, BN)
    lanes = tl.arange(0, 16)
    xrow = x_ptr + rm.to(tl.int64)[:, None] * K
    wrow = w_ptr + rn.to(tl.int64)[:, None] * K
    acc = tl.zeros([BM, BN, 16], dtype=tl.float32)
    for k0 in range(0, K, 16):
        km = k0 + lanes < K
        x = tl.load(xrow + k0 + lanes[None, :], mask=(rm < M)[:, None] & km[None, :], other=0.0)
        w = tl.load(wrow + k0 + lanes[None, :], mask=(rn < N)[:, None] & km[None, :], other=0.0)
        acc = tl.fma(x[:, None, :], w[None, :, :], acc)
    y = ieee.hsum16(acc.reshape(BM * BN, 16), BM * BN).reshape(BM, BN)
    if HAS_BIAS:
        y = y + tl.load(b_ptr + rn, mask=rn < N, other=0.0)[None, :]
    out = y_ptr + rm.to(tl.int64)[:, None] * N + rn[None, :]
    tl.store(out, ieee.canonical_nan(y), mask=(rm < M)[:, None] & (rn < N)[None, :])


def matmul(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """y [M, N] = x [M, K] @ w [N, K]^T (+ bias), fp32 weights, C's bits."""
    x = x.float().contiguous()
    m, k = x.shape
    n = w.shape[0]
    y = torch.empty(m, n, dtype=torch.float32, device=x.device)
    if m and n:
        bm, bn = ieee.fit(m, BM), ieee.fit(n, BN, 16)
        grid = (triton.cdiv(n, bn), triton.cdiv(m, bm))
        _dot1_kernel[grid](
            x,
            w,
            bias if bias is not None else y,
            y,
            m,
            n,
            k,
            HAS_BIAS=bias is not None,
            BM=bm,
            BN=bn,
            **ieee.LAUNCH,
        )
    return y
