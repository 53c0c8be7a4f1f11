"""The integer matmul: y = x W^T (+ bias) on q8-packed weights, the C kernels' bits on a GPU.

The arithmetic contract is native/q8.h's and native/limb.c's (their top comments):
activations quantised per block of 32 (quantize.py), weights as packed by strata_q8_pack
(packed.py), and per output and block b (Q6_K, Q2_K: per half of 16, its own scale), in that order:

    S   = sum_k w_k * l_j,k per limb j           exact int32 sums: any order, any instruction
    f   = (float)S                                k = 1
          (float)(S_1 * 256 + S_0)                k = 2 (exact in int32)
          (float)((double)S_2 * 65536 + (S_1 * 256 + S_0))   k = 3 (exact in fp64, one rounding)
    acc = fma(wscale * s, f, acc)
    acc = fma(wmin, dsum, acc)                    Q4_1, Q5_1;  fma(dmin * m, -dsum, acc) Q4_K, Q5_K
                                                  Q2_K: after both halves' scales, each half's
                                                  min on its own dsum (unpack2.py)

from acc = 0, then y = acc (+ bias). Each line is one IEEE operation (`tl.fma`, never a
multiply-add the compiler may fuse or split; fusion is off where a compiler runs), so the bits
are the C kernels' on any device: the integer sums are where devices differ in speed, and they
cannot differ in value.

Two paths compute it, both with integer `tl.dot` (int8 x int8 into int32): `_tile_kernel`
(prefill: tiles of BLOCK_M rows by BLOCK_N outputs) and mmadecode.py's kernel (decode, up to
ROWS_MAX rows: the weights as the MMA's wide operand, each row's limbs as columns of the small
one). They share every float step (float_chain.py), and their integer sums are equal
because they are exact, so a row's bits cannot depend on which path ran; `matmul` picks by row
count. Every runtime integer is unspecialised: one binary per kernel, type and limb count.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from strata_engine.kernels.triton import grid, mmadecode, mmapair, unpack2
from strata_engine.kernels.triton.float_chain import accumulate, value
from strata_engine.kernels.triton.ieee import INTERPRETED, LAUNCH, canonical_nan, fit
from strata_engine.kernels.triton.packed import (
    PackedWeight,
    block_offset,
    halves,
    head_offset,
    layout,
    quants,
    scales,
)
from strata_engine.kernels.triton.quantize import Quantised, quantize
from strata_engine.kernels.triton.wtypes import IQ2_S, IQ2_XS, Q2_K, Q6_K

# The tile path's tile (BLOCK_N: whole groups of 16 outputs) and the decode path's outputs a
# program: speed choices only. Under the interpreter each program (and each nested jit call in
# it) costs Python time, so there a program takes many more outputs. 256 decode outputs a
# program are 4 MMAs of 64 a warpgroup, where the compiler feeds the weights to them by ldmatrix
# (128 converts them byte by byte through shared memory: bench/gpu_static.py shows it).
BLOCK_M, BLOCK_N = (64, 1024) if INTERPRETED else (16, 32)
MMA_N = 1024 if INTERPRETED else 256
ROWS_MAX = 8  # calls of at most this many rows take the decode path: a speed choice only
PATHS = ("auto", "tile", "mma")


@triton.jit
def _tile_sum(q_ptr, xb, rmask, k, w8, j, WT: tl.constexpr, HALF: tl.constexpr, LIMBS: tl.constexpr):
    """S_j for a tile of rows: int8 limb plane [BM, 32] @ int8 quants [32, BN] into int32 (Q6_K,
    Q2_K, IQ2_XS, IQ2_S: half HALF's sum, the other half's activations zeroed)."""
    x = tl.load(q_ptr + (xb * LIMBS + j)[:, None] * 32 + k[None, :], mask=rmask[:, None], other=0)
    if WT == Q6_K or WT == Q2_K or WT == IQ2_XS or WT == IQ2_S:  # noqa: SIM109 (constexpr tests)
        x = tl.where((k[None, :] >> 4) == HALF, x, tl.zeros_like(x))
    return tl.dot(x, w8, out_dtype=tl.int32)


@triton.jit
def _tile_value(q_ptr, xb, rmask, k, w8, WT: tl.constexpr, HALF: tl.constexpr, LIMBS: tl.constexpr):
    """f of a tile: the limbs' sums of one block (or Q6_K half), combined and converted once."""
    sa = _tile_sum(q_ptr, xb, rmask, k, w8, 0, WT, HALF, LIMBS)
    sb = tl.zeros_like(sa)
    sc = tl.zeros_like(sa)
    if LIMBS >= 2:
        sb = _tile_sum(q_ptr, xb, rmask, k, w8, 1, WT, HALF, LIMBS)
    if LIMBS == 3:
        sc = _tile_sum(q_ptr, xb, rmask, k, w8, 2, WT, HALF, LIMBS)
    return value(sa, sb, sc, LIMBS)


@triton.jit(do_not_specialize=["M", "N", "nb", "GB"])
def _tile_kernel(
    q_ptr, s_ptr, dsum_ptr, wq_ptr, wf_ptr, b_ptr, r_ptr, y_ptr, M, N, nb, GB,
    WT: tl.constexpr, KQ: tl.constexpr, BB: tl.constexpr, SB: tl.constexpr, SCB: tl.constexpr,
    LIMBS: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_RES: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
):  # fmt: skip
    rm = tl.program_id(1) * BM + tl.arange(0, BM)
    rn = tl.program_id(0) * BN + tl.arange(0, BN)
    rmask = rm < M
    live = rn < (N + 15) // 16 * 16  # outputs of the packed groups (a partial group's are zero)
    group = (rn // 16).to(tl.int64) * GB
    o = rn % 16
    k = tl.arange(0, 32)
    acc = tl.zeros((BM, BN), tl.float32)
    for b in range(0, nb):  # the blocks in order: the float sequence is C's
        if grid.held(WT):  # the rows as stored, decoded (grid.py)
            row = grid.rows(rn, GB)
            w8 = grid.quants(wq_ptr, wf_ptr, row[None, :], b, k[:, None], live[None, :], WT).to(tl.int8)
            ws0, ws1, mn, mn1 = grid.scales(wq_ptr, row, b, live, WT)
        else:
            blk = group + block_offset(b, KQ, BB, SB)
            w8 = quants(wq_ptr, (blk + SCB)[None, :], k[:, None], o[None, :], live[None, :], WT).to(tl.int8)
            ws0, ws1, mn, mn1 = scales(wq_ptr, wf_ptr, blk, group + head_offset(b, BB, SB), o, live, WT, KQ)
        xb = rm.to(tl.int64) * nb + b
        s = tl.broadcast_to(tl.load(s_ptr + xb, mask=rmask, other=0.0)[:, None], (BM, BN))
        dsum, dsum1 = unpack2.dsums(q_ptr, s_ptr, dsum_ptr, xb, rmask, LIMBS, WT, False)
        f0 = _tile_value(q_ptr, xb, rmask, k, w8, WT, 0, LIMBS)
        f1 = f0
        if WT == Q6_K or WT == Q2_K or WT == IQ2_XS or WT == IQ2_S:  # noqa: SIM109 (the second half)
            f1 = _tile_value(q_ptr, xb, rmask, k, w8, WT, 1, LIMBS)
        acc = accumulate(
            acc, f0, f1, tl.broadcast_to(ws0[None, :], (BM, BN)), tl.broadcast_to(ws1[None, :], (BM, BN)),
            tl.broadcast_to(mn[None, :], (BM, BN)), tl.broadcast_to(mn1[None, :], (BM, BN)), s,
            tl.broadcast_to(dsum[:, None], (BM, BN)), tl.broadcast_to(dsum1[:, None], (BM, BN)), WT,
        )  # fmt: skip
    if HAS_BIAS:
        acc = acc + tl.load(b_ptr + rn, mask=rn < N, other=0.0)[None, :]
    acc = canonical_nan(acc)
    at = rm.to(tl.int64)[:, None] * N + rn[None, :]
    if HAS_RES:  # the residual stream's x + y, the model's fp32 addition
        acc = tl.load(r_ptr + at, mask=rmask[:, None] & (rn < N)[None, :], other=0.0) + acc
    tl.store(y_ptr + at, acc, mask=rmask[:, None] & (rn < N)[None, :])


def matmul_quantised(
    xq: Quantised,
    pw: PackedWeight,
    bias: torch.Tensor | None = None,
    path: str = "auto",
    residual: torch.Tensor | None = None,
) -> torch.Tensor:
    """y [M, N] from activations already quantised (`quantize(x, pw.limbs)`); with `residual`
    [M, N], residual + y, added in the kernel's epilogue (the same fp32 addition as torch's)."""
    if path not in PATHS:
        raise ValueError(f"path must be one of {', '.join(PATHS)}, not {path!r}")
    if xq.limbs != pw.limbs:
        raise ValueError(f"activations in {xq.limbs} limbs, the weight expects {pw.limbs}")
    m, nb = xq.s.shape
    if nb * 32 != pw.in_features:
        raise ValueError(f"activations have {nb * 32} inputs, the weight {pw.in_features}")
    if pw.group_bytes % 16:  # every type's layout; the decode path tells the compiler so
        raise ValueError(f"a packed group of {pw.group_bytes} bytes, not a multiple of 16")
    n = pw.out_features
    y = torch.empty(m, n, dtype=torch.float32, device=xq.q.device)
    if not m or not n:
        return y
    if residual is not None and residual.shape != (m, n):
        raise ValueError(f"a residual of shape {tuple(residual.shape)} for a [{m}, {n}] result")
    if not nb:
        y = y.zero_() + (bias if bias is not None else 0.0)
        return y if residual is None else residual + y
    b = bias.to(torch.float32).contiguous() if bias is not None else y
    r = residual.to(torch.float32).contiguous() if residual is not None else y
    args = (xq.q, xq.s, xq.dsum, pw.wq, pw.wf, b, r, y)
    consts = {
        **layout(pw.wtype),
        "LIMBS": pw.limbs,
        "HAS_BIAS": bias is not None,
        "HAS_RES": residual is not None,
    }
    consts |= LAUNCH
    if path == "mma" or (path == "auto" and m <= ROWS_MAX):
        bn = fit(n, MMA_N, 16)
        mmadecode.launch(args, m, n, nb, pw.group_bytes, bn, halves(pw.wtype), consts)
    else:
        bm, bn = fit(m, BLOCK_M, 16), fit(n, BLOCK_N, 16)  # tl.dot: 16 at least
        grid = (triton.cdiv(n, bn), triton.cdiv(m, bm))
        _tile_kernel[grid](*args, m, n, nb, pw.group_bytes, BM=bm, BN=bn, **consts)
    return y


def matmul_pair(
    xq: Quantised,
    first: PackedWeight,
    second: PackedWeight,
    biases: tuple[torch.Tensor | None, torch.Tensor | None] = (None, None),
) -> tuple[torch.Tensor, torch.Tensor]:
    """(matmul_quantised(xq, first, b1), matmul_quantised(xq, second, b2)), the same bits: for up
    to ROWS_MAX rows one launch of both weights' tiles (mmapair.py), whatever their types; more
    rows, two launches of the tile path. Both biases present or both absent."""
    m, nb = xq.s.shape
    if (
        m > ROWS_MAX
        or not m
        or not nb
        or not first.out_features * second.out_features
        or (biases[0] is None) != (biases[1] is None)
        or first.limbs != second.limbs
        or first.in_features != second.in_features
    ):
        return matmul_quantised(xq, first, biases[0]), matmul_quantised(xq, second, biases[1])
    parts = []
    for pw, bias in zip((first, second), biases, strict=True):
        if xq.limbs != pw.limbs or nb * 32 != pw.in_features or pw.group_bytes % 16:
            raise ValueError("activations and weights that matmul_quantised refuses")
        y = torch.empty(m, pw.out_features, dtype=torch.float32, device=xq.q.device)
        b = bias.to(torch.float32).contiguous() if bias is not None else y
        parts.append(
            (pw.wq, pw.wf, b, y, pw.out_features, pw.group_bytes, halves(pw.wtype), layout(pw.wtype))
        )
    bn = fit(max(first.out_features, second.out_features), MMA_N, 16)
    consts = {"LIMBS": first.limbs, "HAS_BIAS": biases[0] is not None} | LAUNCH
    mmapair.launch((xq.q, xq.s, xq.dsum), parts[0], parts[1], m, nb, bn, consts)
    return parts[0][3], parts[1][3]


def matmul(
    x: torch.Tensor, pw: PackedWeight, bias: torch.Tensor | None = None, path: str = "auto"
) -> torch.Tensor:
    """y [M, N] = x [M, K] @ W^T (+ bias): strata_q8_matmul (limbs 1) or strata_limb_matmul's bits."""
    return matmul_quantised(quantize(x.to(pw.wq.device), pw.limbs), pw, bias, path)
