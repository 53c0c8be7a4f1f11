"""y = x W^T (+ bias) on stored GGUF blocks, and row gathers: the fp32 mode's quantised matmul in
the C kernels' order, so the CPU's bits.

native/matmul.c (`strata_matmul`, its few-row fused path and its panel path alike) computes each
output as internal.h's dot_1 over the dequantised row: 16 lanes of FMAs over k = 0, 16, 32, ...
in order (per block of 32: the low half's 16 weights, then the high half's, as `dequant_block`
gives them), then vf_hsum's fixed tree, then + bias. `_matmul_kernel` does the same: it
dequantises each block once for its tile (dequant.block: the block's scales decoded once, its
quants read as whole bytes), feeds the two halves to two `tl.fma` steps of a [BM, BN, 16]
accumulator, and ends with ieee.hsum16. CUDA-core FMAs, no `tl.dot` (whose order the compiler
chooses). A program owns a BM x BN tile of outputs; the tile sizes change which outputs share a
program, never an output's operations, so any tile (and any batch) gives the same bits.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from strata_engine.kernels.triton import ieee
from strata_engine.kernels.triton.dequant import block, row_offsets
from strata_engine.kernels.triton.wtypes import F32

# (rows, outputs) a program: a speed choice only (which outputs share a program, never an
# output's operations). On a GPU one row (decode) takes a tile of one row, so that no FMA is
# spent on padding, and more rows share each dequantised block.
ROW_TILE, TILE = (1, 64), (16, 32)
GATHER_TILE = (64, 64) if ieee.INTERPRETED else (16, 8)  # (rows, blocks) a program; no reduction


def gpu_tile(m: int, n: int) -> tuple[int, int]:
    """A GPU's tile: one binary per kernel and type for decode, one for more rows."""
    return ROW_TILE if m == 1 else TILE


def interpreter_tile(m: int, n: int) -> tuple[int, int]:
    """Under Triton's interpreter an operation costs about the same for 16 values or 16,000
    (ieee.INTERPRETED): the whole call in as few programs as the sizes allow."""
    return min(64, triton.next_power_of_2(m)), min(1024, triton.next_power_of_2(n))


tile_for = interpreter_tile if ieee.INTERPRETED else gpu_tile


@triton.jit(do_not_specialize=["M", "N", "nb", "row_bytes"])
def _matmul_kernel(
    x_ptr, wq_ptr, wf_ptr, b_ptr, y_ptr, M, N, nb, row_bytes,
    HAS_BIAS: tl.constexpr, KT: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
):  # fmt: skip
    rm = tl.program_id(1) * BM + tl.arange(0, BM)
    rn = tl.program_id(0) * BN + tl.arange(0, BN)
    xs = x_ptr + rm.to(tl.int64)[:, None] * nb * 32 + tl.arange(0, 16)[None, :]
    mrow = (rm < M)[:, None]
    live = rn < N
    r = row_offsets(rn, row_bytes)
    wm = live[:, None]
    acc = tl.zeros([BM, BN, 16], dtype=tl.float32)
    for b in range(0, nb):  # the blocks in order, each as two halves of 16: dot_1's sequence
        lo, hi = block(wq_ptr, wf_ptr, r, b, row_bytes, wm, KT)
        x = tl.load(xs + b * 32, mask=mrow, other=0.0)
        acc = tl.fma(x[:, None, :], lo[None, :, :], acc)
        x = tl.load(xs + b * 32 + 16, mask=mrow, other=0.0)
        acc = tl.fma(x[:, None, :], hi[None, :, :], acc)
    y = ieee.hsum16(acc.reshape(BM * BN, 16), BM * BN).reshape(BM, BN)
    if HAS_BIAS:
        y = y + tl.load(b_ptr + rn, mask=live, other=0.0)[None, :]
    y = ieee.canonical_nan(y)
    tl.store(y_ptr + rm.to(tl.int64)[:, None] * N + rn[None, :], y, mask=mrow & live[None, :])


@triton.jit(do_not_specialize=["n", "K", "nb", "row_bytes"])
def _gather_kernel(
    ids_ptr, wq_ptr, wf_ptr, out_ptr, n, K, nb, row_bytes,
    KT: tl.constexpr, BR: tl.constexpr, BB: tl.constexpr,
):  # fmt: skip
    t = tl.program_id(0) * BR + tl.arange(0, BR)
    live = t < n
    rows = tl.load(ids_ptr + t, mask=live, other=0)
    lane = tl.arange(0, 16)[None, :]
    out = out_ptr + t.to(tl.int64)[:, None] * K
    r = row_offsets(rows, row_bytes)
    wm = live[:, None]
    b0 = tl.program_id(1) * BB
    for b in range(b0, tl.minimum(b0 + BB, nb)):
        lo, hi = block(wq_ptr, wf_ptr, r, b, row_bytes, wm, KT)
        k = b * 32 + lane
        tl.store(out + k, lo, mask=wm & (k < K))
        tl.store(out + k + 16, hi, mask=wm & (k + 16 < K))


def matmul(
    x: torch.Tensor, wq: torch.Tensor, wf: torch.Tensor, kt: int, n: int, k: int, row_bytes: int,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:  # fmt: skip
    """y [M, n] = x [M, k] @ W^T (+ bias) for a weight stored as `wq` bytes / `wf` float view
    (quantised: k is whole blocks of 32; fp32 weights go to fmatmul.py)."""
    if kt == F32 or k % 32:
        raise ValueError(f"matmul.py reads quantised blocks of 32 (type {kt}, {k} inputs)")
    x = x.to(torch.float32).contiguous()
    m = x.shape[0]
    y = torch.empty(m, n, dtype=torch.float32, device=x.device)
    if m and n:
        bm, bn = tile_for(m, n)
        grid = (triton.cdiv(n, bn), triton.cdiv(m, bm))
        _matmul_kernel[grid](
            x, wq, wf, bias if bias is not None else y, y, m, n, k // 32, row_bytes,
            HAS_BIAS=bias is not None, KT=kt, BM=bm, BN=bn, **ieee.LAUNCH,
        )  # fmt: skip
    return y


def gather_rows(
    ids: torch.Tensor, wq: torch.Tensor, wf: torch.Tensor, kt: int, k: int, row_bytes: int
) -> torch.Tensor:
    """fp32 rows `ids` of the stored weight (the embedding lookup): strata_gather_rows' bits."""
    ids = ids.to(device=wq.device, dtype=torch.int32).contiguous()
    out = torch.empty(ids.shape[0], k, dtype=torch.float32, device=wq.device)
    if ids.shape[0] and k:
        nb = triton.cdiv(k, 32)
        br, bb = GATHER_TILE
        grid = (triton.cdiv(ids.shape[0], br), triton.cdiv(nb, bb))
        _gather_kernel[grid](
            ids, wq, wf, out, ids.shape[0], k, nb, row_bytes, KT=kt, BR=br, BB=bb, **ieee.LAUNCH
        )
    return out
