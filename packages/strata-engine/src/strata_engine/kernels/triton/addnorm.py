"""A residual update and the RMSNorm of its result, with that norm's quantisation, in one launch.

A decode step's residual stream is updated by a matmul whose epilogue adds the residual
(attn_output, ffn_down: mmadecode's HAS_RES), and the next step reads it only through an
RMSNorm (ffn_norm, the next layer's attn_norm, or the final norm), which took a launch of its
own (norm.rmsnorm_quantize). Here program (i, g, r) runs mmadecode's program for output tile i
of rows 4 g .. with the residual added, as the separate launch does; then every program counts
its arrival on its group of rows (an int32 atomic, acq_rel: no float atomics, as gateup.py's
third count). The one that arrives last, when every tile of those rows is stored, reads the new
residual rows back whole and runs norm.py's chain on them (`_inverse_rms`, then (x * r) * w a
block of 32 at a time) and quantises each block with quantize.store_blocks: the normed rows and
the next matmul's input, written directly. It resets the count.

Each output's operations are those of the matmul's own launch, and each normed value's and
digit's those of rmsnorm_quantize (a row's norm never depends on how many rows share the
program), so the bits are those of the separate launches.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from strata_engine.kernels.triton import intmatmul, mmadecode, norm
from strata_engine.kernels.triton.ieee import INTERPRETED, LAUNCH, fit
from strata_engine.kernels.triton.packed import PackedWeight, halves, layout
from strata_engine.kernels.triton.quantize import Quantised, allocate, constants, store_blocks

# blocks of 32 normed and quantised a step (a speed choice only): on a GPU few, so that the
# epilogue takes no more registers than the matmul (sm_90: Q4_K's three forms 95, 86, 88, as the
# matmul's own launch; 32 took 142 to 146); the interpreter pays a Python step a chunk
CHUNK = 32 if INTERPRETED else 8


@triton.jit
def _norm_rows(
    y_ptr, w_ptr, h_ptr, xq_ptr, xs_ptr, xd_ptr, M, N, eps,
    LIMBS: tl.constexpr, SHIFT: tl.constexpr, XMAX: tl.constexpr, MIN_EXP: tl.constexpr, CB: tl.constexpr,
):  # fmt: skip
    """RMSNorm of the program's rows of y (norm._rmsnorm_quantize_kernel's operations) to h, and
    each block of 32 of h quantised (store_blocks: the rows' grid of N / 32 blocks a row)."""
    TOKENS: tl.constexpr = mmadecode.TOKENS
    rows = tl.program_id(1) * TOKENS + tl.arange(0, TOKENS)
    rmask = rows < M
    base = (rows.to(tl.int64) * N)[:, None]
    inv = norm._inverse_rms(y_ptr, base, rmask[:, None], N, eps, TOKENS, ".cg")
    nb = N // 32
    k = tl.arange(0, 32)[None, None, :]
    for b0 in range(0, nb, CB):
        b = b0 + tl.arange(0, CB)
        ok = rmask[:, None] & (b < nb)[None, :]  # [TOKENS, CB]
        cols = b[None, :, None] * 32 + k  # [1, CB, 32]
        x = tl.load(y_ptr + base[:, :, None] + cols, mask=ok[:, :, None], other=0.0, cache_modifier=".cg")
        w = tl.load(w_ptr + cols, mask=(b < nb)[None, :, None], other=0.0)
        h = (x * inv[:, None, None]) * w
        tl.store(h_ptr + base[:, :, None] + cols, h, mask=ok[:, :, None])
        blocks = rows.to(tl.int64)[:, None] * nb + b[None, :]
        store_blocks(
            tl.reshape(h, (TOKENS * CB, 32)), tl.reshape(blocks, (TOKENS * CB,)), tl.reshape(ok, (TOKENS * CB,)),
            xq_ptr, xs_ptr, xd_ptr, LIMBS, SHIFT, XMAX, MIN_EXP,
        )  # fmt: skip


@triton.jit(do_not_specialize=["M", "N", "nb", "GB", "PER"])
def _addnorm_kernel(
    q_ptr, s_ptr, dsum_ptr, wq_ptr, wf_ptr, b_ptr, r_ptr, y_ptr, f_ptr, cnt_ptr, nw_ptr, h_ptr,
    xq_ptr, xs_ptr, xd_ptr, M, N, nb, GB, PER, eps,
    WT: tl.constexpr, KQ: tl.constexpr, BB: tl.constexpr, SB: tl.constexpr, SCB: tl.constexpr,
    LIMBS: tl.constexpr, SHIFT: tl.constexpr, XMAX: tl.constexpr, MIN_EXP: tl.constexpr,
    HAS_BIAS: tl.constexpr, BN: tl.constexpr, SPLIT: tl.constexpr, CR: tl.constexpr, CB: tl.constexpr,
):  # fmt: skip
    """Program (i, g, r): tile i of rows 4 g .., blocks r PER .., the residual added; the last
    program of the row group the norm and its digits."""
    mmadecode.program(
        q_ptr, s_ptr, dsum_ptr, wq_ptr, wf_ptr, b_ptr, r_ptr, y_ptr, f_ptr, cnt_ptr, M, N, nb, GB, PER,
        tl.program_id(0), tl.num_programs(0).to(tl.int64),
        WT, KQ, BB, SB, SCB, LIMBS, HAS_BIAS, True, BN, SPLIT, CR,
    )  # fmt: skip
    tl.debug_barrier()  # this program's stores (its tile's outputs, if it stored them) first
    # the row group's count, past the tiles' (tiles x groups of them): every program of the
    # group arrives once, so the last sees every tile's outputs stored
    group = tl.num_programs(0) * tl.num_programs(1) + tl.program_id(1)
    done = tl.atomic_add(cnt_ptr + group, 1, sem="acq_rel", scope="gpu")
    if done == tl.num_programs(0) * tl.num_programs(2) - 1:
        tl.atomic_xchg(cnt_ptr + group, 0, sem="relaxed", scope="gpu")
        _norm_rows(y_ptr, nw_ptr, h_ptr, xq_ptr, xs_ptr, xd_ptr, M, N, eps, LIMBS, SHIFT, XMAX, MIN_EXP, CB)


def fits(m: int, k: int, pw: PackedWeight, residual: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether `linear_add_norm` takes one launch for m rows of k inputs (else the separate
    launches)."""
    n = pw.out_features
    return (
        0 < m <= intmatmul.ROWS_MAX
        and k > 0
        and n > 0
        and n % 32 == 0
        and pw.in_features == k
        and pw.group_bytes % 16 == 0
        and tuple(residual.shape) == (m, n)
        and tuple(weight.shape) == (n,)
    )


def linear_add_norm(
    xq: Quantised, pw: PackedWeight, residual: torch.Tensor, weight: torch.Tensor, eps: float,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, Quantised]:  # fmt: skip
    """(y, h, quantize(h, limbs)) for y = residual + xq @ pw^T (+ bias) and h = rmsnorm(y, weight,
    eps): the bits of matmul_quantised(..., residual=) then norm.rmsnorm_quantize, in one launch
    where `fits` (up to ROWS_MAX rows, an output count a multiple of 32)."""
    if xq.limbs != pw.limbs or not fits(xq.s.shape[0], xq.s.shape[1] * 32, pw, residual, weight):
        y = intmatmul.matmul_quantised(xq, pw, bias, residual=residual)
        h, hq = norm.rmsnorm_quantize(y, weight, eps, xq.limbs)
        return y, h, hq
    m, nb = xq.s.shape
    n = pw.out_features
    dev = xq.q.device
    y = torch.empty(m, n, dtype=torch.float32, device=dev)
    h = torch.empty_like(y)
    out = allocate(m, n // 32, xq.limbs, dev)
    bn = fit(n, intmatmul.MMA_N, 16)
    grid, per = mmadecode.plan(m, n, nb, bn)
    split = grid[2] > 1
    scratch = y
    if split:
        size = grid[1] * nb * halves(pw.wtype) * mmadecode.TOKENS.value * grid[0] * bn
        scratch = torch.empty(size, dtype=torch.float32, device=dev)
    else:
        per = nb
    cnt = mmadecode.counts(dev, grid[0] * grid[1] + grid[1])  # the tiles' counts, then the groups'
    cr = 1 if m == 1 else 2 if m == 2 else mmadecode.TOKENS.value
    b = bias.to(torch.float32).contiguous() if bias is not None else y
    _addnorm_kernel[grid](
        xq.q.view(torch.int32), xq.s, xq.dsum, pw.wq, pw.wf, b, residual.to(torch.float32).contiguous(), y,
        scratch, cnt, weight.to(torch.float32).contiguous(), h, out.q, out.s, out.dsum, m, n, nb,
        pw.group_bytes, per, eps,
        HAS_BIAS=bias is not None, BN=bn, SPLIT=split, CR=cr if split else mmadecode.TOKENS.value,
        CB=min(CHUNK, triton.next_power_of_2(n // 32)), num_stages=mmadecode.STAGES,
        **layout(pw.wtype), **constants(xq.limbs), **LAUNCH,
    )  # fmt: skip
    return y, h, out
