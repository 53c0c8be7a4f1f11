"""The gated FFN's gate and up projections, SwiGLU (or GeGLU) and its quantisation in one launch.

A decode step's FFN took three launches before its down projection: gate/up (mmapair.py), the
gated product with its quantisation (activation.gated_quantize), and the down projection. Here
program (i, g, r) runs mmadecode's program for gate tile i, then for up tile i (the same BN
outputs of each: two MMAs and two accumulators a block, the same K ranges), so that the
program which finishes both tiles holds every input of act(gate) * up for those outputs: it
forms the product with activation._gated_value's operations and quantises each block of 32
outputs (BN a multiple of 32) with quantize.store_blocks, the down projection's input written
directly. Split along K, each weight's tile has its own arrival count (the last program of a
tile runs that tile's float steps, as in mmadecode); a third count a tile, taken after both,
makes the last program of the pair the one that runs the epilogue, after both tiles' outputs
are stored.

Each output's operations are those of its own weight's launch, and each product's and digit's
those of gated_quantize, so the bits are those of the separate launches.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from strata_engine.kernels.triton import intmatmul, mmadecode
from strata_engine.kernels.triton.activation import _gated_value, gated_quantize
from strata_engine.kernels.triton.ieee import LAUNCH, fit
from strata_engine.kernels.triton.packed import GRID, PackedWeight, halves, layout
from strata_engine.kernels.triton.quantize import Quantised, allocate, constants, store_blocks


@triton.jit
def _gated_blocks(
    g_ptr, u_ptr, y_ptr, xq_ptr, xs_ptr, xd_ptr, M, N, t, GELU: tl.constexpr, BN: tl.constexpr,
    LIMBS: tl.constexpr, SHIFT: tl.constexpr, XMAX: tl.constexpr, MIN_EXP: tl.constexpr,
):  # fmt: skip
    """act(gate) * up for outputs t BN .. of the program's rows, stored, and its blocks of 32
    quantised (store_blocks: the rows' block grid of N / 32 blocks a row)."""
    TOKENS: tl.constexpr = mmadecode.TOKENS
    NB: tl.constexpr = BN // 32
    rows = tl.program_id(1) * TOKENS + tl.arange(0, TOKENS)
    rn = t * BN + tl.arange(0, BN)
    at = rows.to(tl.int64)[:, None] * N + rn[None, :]
    ok = (rows < M)[:, None] & (rn < N)[None, :]
    g = tl.load(g_ptr + at, mask=ok, other=0.0, cache_modifier=".cg")
    u = tl.load(u_ptr + at, mask=ok, other=0.0, cache_modifier=".cg")
    y = _gated_value(g, u, GELU)
    tl.store(y_ptr + at, y, mask=ok)
    cb = t * NB + tl.arange(0, NB)  # the row's blocks of this tile
    blocks = rows.to(tl.int64)[:, None] * (N // 32) + cb[None, :]
    bok = (rows < M)[:, None] & (cb < N // 32)[None, :]
    store_blocks(
        tl.reshape(y, (TOKENS * NB, 32)), tl.reshape(blocks, (TOKENS * NB,)), tl.reshape(bok, (TOKENS * NB,)),
        xq_ptr, xs_ptr, xd_ptr, LIMBS, SHIFT, XMAX, MIN_EXP,
    )  # fmt: skip


@triton.jit(do_not_specialize=["M", "N", "nb", "GB", "GB2", "PER"])
def _gateup_kernel(
    q_ptr, s_ptr, dsum_ptr, wq_ptr, wf_ptr, wq2_ptr, wf2_ptr, g_ptr, u_ptr, f_ptr, f2_ptr, cnt_ptr,
    y_ptr, xq_ptr, xs_ptr, xd_ptr, M, N, nb, GB, GB2, PER,
    WT: tl.constexpr, KQ: tl.constexpr, BB: tl.constexpr, SB: tl.constexpr, SCB: tl.constexpr,
    WT2: tl.constexpr, KQ2: tl.constexpr, BB2: tl.constexpr, SB2: tl.constexpr, SCB2: tl.constexpr,
    LIMBS: tl.constexpr, SHIFT: tl.constexpr, XMAX: tl.constexpr, MIN_EXP: tl.constexpr,
    GELU: tl.constexpr, BN: tl.constexpr, SPLIT: tl.constexpr, CR: tl.constexpr,
):  # fmt: skip
    """Program (i, g, r): gate tile i, then up tile i, of rows 4 g .., blocks r PER ..; the
    pair's last program the gated product and its digits."""
    t = tl.program_id(0)
    ntiles = tl.num_programs(0).to(tl.int64)
    per_weight = tl.num_programs(1) * tl.num_programs(0)  # arrival counts a weight
    mmadecode.program(
        q_ptr, s_ptr, dsum_ptr, wq_ptr, wf_ptr, g_ptr, g_ptr, g_ptr, f_ptr, cnt_ptr, M, N, nb, GB, PER,
        t, ntiles, WT, KQ, BB, SB, SCB, LIMBS, False, False, BN, SPLIT, CR,
    )  # fmt: skip
    mmadecode.program(
        q_ptr, s_ptr, dsum_ptr, wq2_ptr, wf2_ptr, u_ptr, u_ptr, u_ptr, f2_ptr, cnt_ptr + per_weight, M, N, nb,
        GB2, PER, t, ntiles, WT2, KQ2, BB2, SB2, SCB2, LIMBS, False, False, BN, SPLIT, CR,
    )  # fmt: skip
    tl.debug_barrier()  # this program's stores of both tiles before the epilogue reads them
    if SPLIT:  # the pair's last program: both tiles' last programs have stored their outputs
        tile = 2 * per_weight + tl.program_id(1) * tl.num_programs(0) + t
        done = tl.atomic_add(cnt_ptr + tile, 1, sem="acq_rel", scope="gpu")
        if done == tl.num_programs(2) - 1:
            tl.atomic_xchg(cnt_ptr + tile, 0, sem="relaxed", scope="gpu")
            _gated_blocks(
                g_ptr, u_ptr, y_ptr, xq_ptr, xs_ptr, xd_ptr, M, N, t, GELU, BN, LIMBS, SHIFT, XMAX, MIN_EXP
            )
    else:
        _gated_blocks(
            g_ptr, u_ptr, y_ptr, xq_ptr, xs_ptr, xd_ptr, M, N, t, GELU, BN, LIMBS, SHIFT, XMAX, MIN_EXP
        )


def members(pw: PackedWeight, widths: tuple[int, ...]) -> list[PackedWeight]:
    """The members of a weight whose rows stack several (model.FusedProjection's widths) as
    packed weights of their own: views of its bytes, a member's groups of 16 outputs being
    its own where every width but the last is a multiple of 16 (else [])."""
    if len(widths) == 1:
        return [pw]
    if sum(widths) != pw.out_features or any(w % 16 for w in widths[:-1]):
        return []
    out, start = [], 0
    for width in widths:
        at, end = start // 16 * pw.group_bytes, (start + width + 15) // 16 * pw.group_bytes
        wq = pw.wq[at:end]
        wf = pw.wf if pw.wtype in GRID else pw.wf[at // 4 : end // 4]  # a grid type's: its table
        out.append(PackedWeight(pw.wtype, pw.limbs, width, pw.in_features, pw.group_bytes, wq, wf))
        start += width
    return out


def fits(xq: Quantised, gate: PackedWeight, up: PackedWeight) -> bool:
    """Whether `gated` takes one launch for these (else it makes the separate launches)."""
    m, nb = xq.s.shape
    n = gate.out_features
    return (
        0 < m <= intmatmul.ROWS_MAX
        and nb > 0
        and n > 0
        and n % 32 == 0
        and up.out_features == n
        and xq.limbs == gate.limbs == up.limbs
        and gate.in_features == up.in_features == nb * 32
        and gate.group_bytes % 16 == 0
        and up.group_bytes % 16 == 0
    )


def gated(xq: Quantised, gate: PackedWeight, up: PackedWeight, gelu: bool) -> tuple[torch.Tensor, Quantised]:
    """(y, quantize(y, limbs)) for y = act(x @ gate^T) * (x @ up^T), act silu or (gelu) gelu_tanh:
    the bits of matmul_pair then gated_quantize, in one launch where `fits` (up to ROWS_MAX rows,
    an output count a multiple of 32, both weights in the activations' limbs)."""
    if not fits(xq, gate, up):
        g, u = intmatmul.matmul_pair(xq, gate, up)
        return gated_quantize(g, u, gelu, xq.limbs)
    m, nb = xq.s.shape
    n = gate.out_features
    dev = xq.q.device
    g = torch.empty(m, n, dtype=torch.float32, device=dev)
    u = torch.empty_like(g)
    y = torch.empty_like(g)
    out = allocate(m, n // 32, xq.limbs, dev)
    bn = fit(n, intmatmul.MMA_N, 32)
    grid, per = mmadecode.plan(m, n, nb, bn)
    split = grid[2] > 1
    if split:
        scratch = [
            torch.empty(grid[1] * nb * halves(w.wtype) * mmadecode.TOKENS.value * grid[0] * bn,
                        dtype=torch.float32, device=dev)
            for w in (gate, up)
        ]  # fmt: skip
        cnt = mmadecode.counts(dev, 3 * grid[0] * grid[1])
    else:
        scratch, cnt, per = [g, u], g, nb
    cr = 1 if m == 1 else 2 if m == 2 else mmadecode.TOKENS.value
    up_layout = {f"{k}2": v for k, v in layout(up.wtype).items()}
    _gateup_kernel[grid](
        xq.q.view(torch.int32), xq.s, xq.dsum, gate.wq, gate.wf, up.wq, up.wf, g, u, scratch[0], scratch[1],
        cnt, y, out.q, out.s, out.dsum, m, n, nb, gate.group_bytes, up.group_bytes, per,
        GELU=gelu, BN=bn, SPLIT=split, CR=cr if split else mmadecode.TOKENS.value,
        num_stages=mmadecode.STAGES, **layout(gate.wtype), **up_layout, **constants(xq.limbs), **LAUNCH,
    )  # fmt: skip
    return y, out
