"""Fused dequantise + matmul (y = x W^T + b) and row gathers over stored GGUF blocks.

Batch invariance by construction: the tile sizes are constants (never chosen from M), each
program owns a BLOCK_M x BLOCK_N tile of outputs and walks K in BLOCK_K steps from 0 upwards,
carrying one fp32 accumulator (no split-K, no atomics). An output element's value is therefore
the same sequence of float operations whether its row shares the call with 0 or 500 others.
`tl.dot` runs in "ieee" fp32 (no TF32): on NVIDIA GPUs that is an FMA chain per element.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from strata_engine.kernels.triton.dequant import dequant_tile

BLOCK_M, BLOCK_N, BLOCK_K = 16, 32, 64  # fixed: the reduction order depends on these only
GATHER_BLOCK = 256  # columns per program when gathering (dequantising) rows; no reduction


@triton.jit
def _matmul_kernel(
    x_ptr, wq_ptr, wf_ptr, b_ptr, y_ptr, M, N, K, row_bytes, stride_xm, stride_ym,
    HAS_BIAS: tl.constexpr, KT: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
):  # fmt: skip
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        ks = k0 + tl.arange(0, BK)
        kmask = ks < K
        x = tl.load(
            x_ptr + rm.to(tl.int64)[:, None] * stride_xm + ks[None, :],
            mask=(rm < M)[:, None] & kmask[None, :],
            other=0.0,
        )
        w = dequant_tile(wq_ptr, wf_ptr, rn, ks, K, row_bytes, (rn < N)[:, None] & kmask[None, :], KT)
        acc = tl.dot(x, tl.trans(w), acc, input_precision="ieee")
    if HAS_BIAS:
        acc = acc + tl.load(b_ptr + rn, mask=rn < N, other=0.0)[None, :]
    tl.store(
        y_ptr + rm.to(tl.int64)[:, None] * stride_ym + rn[None, :],
        acc,
        mask=(rm < M)[:, None] & (rn < N)[None, :],
    )


@triton.jit
def _gather_kernel(ids_ptr, wq_ptr, wf_ptr, out_ptr, K, row_bytes, KT: tl.constexpr, BK: tl.constexpr):
    t = tl.program_id(0)
    ks = tl.program_id(1) * BK + tl.arange(0, BK)
    row = tl.load(ids_ptr + t + tl.zeros([1], dtype=tl.int32))
    kmask = ks < K
    vals = dequant_tile(wq_ptr, wf_ptr, row, ks, K, row_bytes, kmask[None, :], KT)
    tl.store(out_ptr + t.to(tl.int64) * K + ks[None, :], vals, mask=kmask[None, :])


def matmul(
    x: torch.Tensor, wq: torch.Tensor, wf: torch.Tensor, kt: int, n: int, k: int, row_bytes: int,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:  # fmt: skip
    """y [M, n] = x [M, k] @ W^T (+ bias) for a weight stored as `wq` bytes / `wf` float view."""
    x = x.contiguous()
    m = x.shape[0]
    y = torch.empty(m, n, dtype=torch.float32, device=x.device)
    if m:
        grid = (triton.cdiv(n, BLOCK_N), triton.cdiv(m, BLOCK_M))
        _matmul_kernel[grid](
            x, wq, wf, bias if bias is not None else y, y, m, n, k, row_bytes, x.stride(0), y.stride(0),
            HAS_BIAS=bias is not None, KT=kt, BM=BLOCK_M, BN=BLOCK_N, BK=BLOCK_K,
        )  # fmt: skip
    return y


def gather_rows(
    ids: torch.Tensor, wq: torch.Tensor, wf: torch.Tensor, kt: int, k: int, row_bytes: int
) -> torch.Tensor:
    """fp32 rows `ids` of the stored weight: the embedding lookup, and the dequantiser itself.

    Launched with multiply-add fusion off so that the values are gguf-py's bits."""
    ids = ids.to(device=wq.device, dtype=torch.int32).contiguous()
    out = torch.empty(ids.shape[0], k, dtype=torch.float32, device=wq.device)
    if ids.shape[0]:
        grid = (ids.shape[0], triton.cdiv(k, GATHER_BLOCK))
        _gather_kernel[grid](ids, wq, wf, out, k, row_bytes, KT=kt, BK=GATHER_BLOCK, **_no_fusion())
    return out


def _no_fusion() -> dict[str, bool]:
    """`enable_fp_fusion=False` where a compiler runs (the interpreter takes no such option)."""
    import os

    return {} if os.environ.get("TRITON_INTERPRET") == "1" else {"enable_fp_fusion": False}


def matmul_reference(
    x: torch.Tensor, w_dense: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """float64 x @ W^T (+ bias): the independent reference for `matmul`."""
    y = x.double() @ w_dense.double().T
    return y + bias.double() if bias is not None else y
