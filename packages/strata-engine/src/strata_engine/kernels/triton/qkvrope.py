"""The q/k/v projections, RoPE and the KV cache write in one decode launch.

A decode step's attention took two launches before the attention itself: the q/k/v projections
(mmadecode.py, or mmapair.py where v's type differs from q's and k's) and RoPE with the cache
write (rope.py's rope_write). Here program (i, g, r) runs the projection's program for output
tile i (of one weight, or of two as mmapair.py runs them: the tiles of the first, then the
second's), then takes an integer arrival count of its unit: U = max(BN, D) outputs of its weight
(whole heads: BN a multiple of the head size D, or D a multiple of BN, and every weight's width
a multiple of D). The unit's last program to arrive (an acq_rel atomic, after every program of
every tile of the unit has stored its outputs; no float atomics) rotates the unit's heads for
the group's rows with rope.py's `_rotate` (the queries to the output, the keys into the K cache's
slot) and copies its V heads into the V cache with kv.py's `store_row`, then resets the count.

Each output's operations are its projection's own (the same program, the same K ranges: the
bits never depend on the tiling), and each rotated or stored value's those of rope_write, which
reads those very outputs: the bits are those of the separate launches. With ATTN, the unit's
last program then counts its heads into their KV heads' arrival counts, and the last to arrive
runs the attention (qkvattn.py).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from strata_engine.kernels.base import AttentionMeta, RopeTable
from strata_engine.kernels.triton import attention, intmatmul, kv, mmadecode, mmapair, qkvattn
from strata_engine.kernels.triton.ieee import INTERPRETED, LAUNCH, fit
from strata_engine.kernels.triton.packed import PackedWeight, halves, layout
from strata_engine.kernels.triton.quantize import Quantised
from strata_engine.kernels.triton.rope import _rotate

ATOK = mmadecode.TOKENS.value if INTERPRETED else 1  # tokens an attention program (a speed choice only)


@triton.jit
def _unit(
    y_ptr, NW, base, u, qo_ptr, kc_ptr, vc_ptr, pos_ptr, slots_ptr, cos_ptr, sin_ptr, M, HQ, HK, D, HALF,
    U: tl.constexpr, INTERLEAVED: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK: tl.constexpr,
    TAIL: tl.constexpr, KV: tl.constexpr, VB: tl.constexpr,
):  # fmt: skip
    """Unit u of a weight whose outputs y [M, NW] are the columns base .. of [q | k | v]: its
    heads, for the group's rows, as rope_write writes them."""
    c0 = u * U  # the unit's first output of its weight
    h0 = (base + c0) // D  # its first head of [q | k | v]
    nh = tl.minimum(U, NW - c0) // D
    nq = tl.maximum(tl.minimum(HQ - h0, nh), 0)
    k0 = tl.maximum(h0, HQ)
    nk = tl.maximum(tl.minimum(HQ + HK, h0 + nh) - k0, 0)
    v0 = tl.maximum(h0, HQ + HK)
    nv = tl.maximum(h0 + nh - v0, 0) * D
    first = tl.program_id(1) * mmadecode.TOKENS
    for r in range(first, tl.minimum(first + mmadecode.TOKENS, M)):
        row = (first * 0 + r).to(tl.int64)  # (the interpreter's loop index is a Python int)
        src = y_ptr + row * NW + c0
        pos = tl.load(pos_ptr + row).to(tl.int64)
        slot = tl.load(slots_ptr + row).to(tl.int64)
        _rotate(src, qo_ptr + (row * HQ + h0) * D, pos, cos_ptr, sin_ptr, nq, D, HALF,
                INTERLEAVED, BLOCK_H, BLOCK, TAIL, 0, True)  # fmt: skip
        _rotate(src + (k0 - h0) * D, kc_ptr + (slot * HK + (k0 - HQ)) * D, pos, cos_ptr, sin_ptr, nk, D, HALF,
                INTERLEAVED, BLOCK_H, BLOCK, TAIL, KV, True)  # fmt: skip
        for v in range(0, nv, VB):
            kv.store_row(src + (v0 - h0) * D, vc_ptr + (slot * HK + (v0 - HQ - HK)) * D,
                         v + tl.arange(0, VB), nv, KV, True)  # fmt: skip


@triton.jit(
    do_not_specialize=["M", "N", "N2", "nb", "GB", "GB2", "PER", "T1", "UT", "U1", "HQ", "HK", "D", "HALF",
                       "a_blocks", "a_bsize", "a_stride", "a_window"]
)  # fmt: skip
def _qkv_rope_kernel(
    q_ptr, s_ptr, dsum_ptr, wq_ptr, wf_ptr, y_ptr, f_ptr, wq2_ptr, wf2_ptr, y2_ptr, f2_ptr, cnt_ptr,
    qo_ptr, kc_ptr, vc_ptr, pos_ptr, slots_ptr, cos_ptr, sin_ptr,
    M, N, N2, nb, GB, GB2, PER, T1, UT, U1, HQ, HK, D, HALF,
    WT: tl.constexpr, KQ: tl.constexpr, BB: tl.constexpr, SB: tl.constexpr, SCB: tl.constexpr,
    WT2: tl.constexpr, KQ2: tl.constexpr, BB2: tl.constexpr, SB2: tl.constexpr, SCB2: tl.constexpr,
    LIMBS: tl.constexpr, BN: tl.constexpr, SPLIT: tl.constexpr, CR: tl.constexpr, U: tl.constexpr,
    INTERLEAVED: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK: tl.constexpr, TAIL: tl.constexpr,
    KV: tl.constexpr, VB: tl.constexpr,
    a_tables, a_seq, a_s, a_r, a_sink, a_out, a_xq, a_xs, a_xdsum, a_blocks, a_bsize, a_stride, a_scale, a_cap,
    a_window, ATTN: tl.constexpr, AD: tl.constexpr, GROUP: tl.constexpr, ATOK: tl.constexpr,
    BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, SOFTCAP: tl.constexpr,
    UNROLL: tl.constexpr, SINKS: tl.constexpr, QLIMBS: tl.constexpr, SHIFT: tl.constexpr, XMAX: tl.constexpr,
    MIN_EXP: tl.constexpr,
):  # fmt: skip
    """Program (i, g, r): tile i of the weights' (the first's while i < T1), rows 4 g .., blocks
    r PER ..; its unit's last program the unit's RoPE and cache writes."""
    t = tl.program_id(0)
    mmapair.program(
        q_ptr, s_ptr, dsum_ptr, wq_ptr, wf_ptr, y_ptr, y_ptr, f_ptr, wq2_ptr, wf2_ptr, y2_ptr, y2_ptr, f2_ptr,
        cnt_ptr, M, N, N2, nb, GB, GB2, PER, T1, WT, KQ, BB, SB, SCB, WT2, KQ2, BB2, SB2, SCB2, LIMBS, False,
        BN, SPLIT, CR,
    )  # fmt: skip
    tl.debug_barrier()  # this program's stores of its tile before the unit's reads
    TPU: tl.constexpr = U // BN  # tiles a unit
    first = t < T1
    u = tl.where(first, t, t - T1) // TPU
    unit = tl.where(first, u, U1 + u)  # of both weights' units
    run = tl.program_id(0) >= 0
    if SPLIT or TPU > 1:  # the unit's last program: every tile of the unit is stored
        at = tl.num_programs(0) * tl.num_programs(1) + tl.program_id(1) * UT + unit
        done = tl.atomic_add(cnt_ptr + at, 1, sem="acq_rel", scope="gpu")
        run = done == tl.num_programs(2) * TPU - 1
        if run:
            tl.atomic_xchg(cnt_ptr + at, 0, sem="relaxed", scope="gpu")
    if run:
        if first:
            _unit(y_ptr, N, N * 0, u, qo_ptr, kc_ptr, vc_ptr, pos_ptr, slots_ptr, cos_ptr, sin_ptr, M, HQ, HK,
                  D, HALF, U, INTERLEAVED, BLOCK_H, BLOCK, TAIL, KV, VB)  # fmt: skip
        else:
            _unit(y2_ptr, N2, N, u, qo_ptr, kc_ptr, vc_ptr, pos_ptr, slots_ptr, cos_ptr, sin_ptr, M, HQ, HK,
                  D, HALF, U, INTERLEAVED, BLOCK_H, BLOCK, TAIL, KV, VB)  # fmt: skip
        if ATTN:  # the unit's heads counted into their KV groups; a group's last arrival attends
            tl.debug_barrier()  # this unit's rotated queries and cache rows stored before its count
            qkvattn.arrive(
                tl.where(first, N, N2), tl.where(first, 0, N), u, U,
                cnt_ptr + tl.num_programs(0) * tl.num_programs(1) + tl.num_programs(1) * UT,
                qo_ptr, kc_ptr, vc_ptr, a_tables, a_seq, pos_ptr, a_s, a_r, a_sink, a_out, a_xq, a_xs, a_xdsum,
                M, HQ, HK, D, a_blocks, a_bsize, a_stride, a_scale, a_cap, a_window,
                AD, KV, GROUP, ATOK, BLOCK_G, BLOCK_N, BLOCK_D, SOFTCAP, UNROLL, SINKS, QLIMBS, SHIFT, XMAX,
                MIN_EXP,
            )  # fmt: skip


def tiling(widths: list[int], d: int) -> tuple[int, int] | None:
    """(BN, U) for weights of these output counts and heads of d (mmapair.py's BN), or None
    where a unit of whole heads does not fit them (neither of BN and d divides the other, or a
    weight's width is not whole heads)."""
    bn = fit(max(widths), intmatmul.MMA_N, 16)
    unit = max(bn, d)
    if d <= 0 or unit % bn or unit % d or any(w % d for w in widths):
        return None
    return bn, unit


def fits(
    m: int, k: int, weights: list[PackedWeight], limbs: int, heads: tuple[int, int, int], table: RopeTable,
    k_cache: torch.Tensor, v_cache: torch.Tensor,
) -> bool:  # fmt: skip
    """Whether `qkv_rope` takes one launch for these: 1 to ROWS_MAX rows of k inputs, one or two
    weights in the activations' limbs whose outputs are [q | k | v] (heads (HQ, HK, D)) in whole
    heads, a rotation of at most D dims, both caches of one type."""
    hq, hk, d = heads
    widths = [w.out_features for w in weights]
    return (
        0 < m <= intmatmul.ROWS_MAX
        and k > 0
        and k % 32 == 0
        and 1 <= len(weights) <= 2
        and hq > 0
        and hk > 0
        and sum(widths) == (hq + 2 * hk) * d
        and all(w.limbs == limbs and w.in_features == k and w.group_bytes % 16 == 0 for w in weights)
        and table.dim // 2 > 0
        and table.dim <= d
        and k_cache.dtype == v_cache.dtype
        and k_cache.dtype in kv.KV_CODES
        and tiling(widths, d) is not None
    )


def qkv_rope(
    xq: Quantised, weights: list[PackedWeight], heads: tuple[int, int, int], positions: torch.Tensor,
    slots: torch.Tensor, table: RopeTable, cos: torch.Tensor, sin: torch.Tensor, k_cache: torch.Tensor,
    v_cache: torch.Tensor, qo: torch.Tensor | None = None, attend: tuple[tuple, dict] | None = None,
) -> torch.Tensor:  # fmt: skip
    """The rotated queries [M, HQ, D] of x's q/k/v projections (`weights`' outputs one after
    another: [q | k | v]), the rotated keys and the values written to the caches' slots: the bits
    of the projections (matmul_quantised, matmul_pair) then rope.rope_write, in one launch where
    `fits`. With `attend` (qkvattn.py: attention.launch_args' arguments for the queries `qo`), the
    attention of each KV head's group runs in the same launch."""
    m, nb = xq.s.shape
    hq, hk, d = heads
    widths = [w.out_features for w in weights]
    tiles = tiling(widths, d)
    if tiles is None:
        raise ValueError(f"outputs {widths} and heads of {d}: no unit of whole heads fits them")
    bn, unit = tiles
    dev = xq.q.device
    parts = [(w, torch.empty(m, w.out_features, dtype=torch.float32, device=dev)) for w in weights]
    second = parts[1] if len(parts) == 2 else (weights[0], parts[0][1])
    t1 = triton.cdiv(widths[0], bn)
    t2 = triton.cdiv(widths[1], bn) if len(parts) == 2 else 0
    u1 = triton.cdiv(widths[0], unit)
    ut = u1 + (triton.cdiv(widths[1], unit) if len(parts) == 2 else 0)
    grid, per = mmadecode.plan(m, (t1 + t2) * bn, nb, bn)
    split = grid[2] > 1
    if split:
        scratch = [
            torch.empty(grid[1] * nb * halves(w.wtype) * mmadecode.TOKENS.value * t * bn,
                        dtype=torch.float32, device=dev)
            for w, t in ((weights[0], t1), (second[0], t2)) if t
        ]  # fmt: skip
        if len(scratch) == 1:  # one weight: the second's (never read)
            scratch.append(scratch[0])
    else:
        scratch, per = [parts[0][1], second[1]], nb
    cnt = mmadecode.counts(dev, grid[0] * grid[1] + grid[1] * ut + hk)
    cr = 1 if m == 1 else 2 if m == 2 else mmadecode.TOKENS.value
    code = kv.KV_CODES[k_cache.dtype]
    kc, vc = (c if code == 0 else c.view(torch.int16) for c in (k_cache, v_cache))
    qo = torch.empty(m, hq, d, dtype=torch.float32, device=dev) if qo is None else qo
    half = table.dim // 2
    second_layout = {f"{k}2": v for k, v in layout(second[0].wtype).items()}
    _qkv_rope_kernel[grid](
        xq.q.view(torch.int32), xq.s, xq.dsum, weights[0].wq, weights[0].wf, parts[0][1], scratch[0],
        second[0].wq, second[0].wf, second[1], scratch[1], cnt, qo, kc, vc, positions, slots.contiguous(),
        cos, sin, m, widths[0], second[0].out_features if t2 else 0, nb, weights[0].group_bytes,
        second[0].group_bytes, per, t1, ut, u1, hq, hk, d, half,
        LIMBS=xq.limbs, BN=bn, SPLIT=split, CR=cr if split else mmadecode.TOKENS.value, U=unit,
        INTERLEAVED=table.interleaved, BLOCK_H=triton.next_power_of_2(max(unit // d, 1)),
        BLOCK=triton.next_power_of_2(half), TAIL=2 * half < d, KV=code, VB=min(kv.BLOCK, triton.next_power_of_2(unit)),
        **_attention(qo, attend), num_stages=mmadecode.STAGES, **layout(weights[0].wtype), **second_layout,
        **LAUNCH,
    )  # fmt: skip
    return qo


def _attention(qo: torch.Tensor, attend: tuple[tuple, dict] | None) -> dict:
    """The kernel's attention arguments: attention.launch_args' (its program's), or none."""
    if attend is None:
        names = ("AD", "GROUP", "ATOK", "BLOCK_G", "BLOCK_N", "BLOCK_D", "UNROLL")
        ptrs = dict.fromkeys(
            ("a_tables", "a_seq", "a_s", "a_r", "a_sink", "a_out", "a_xq", "a_xs", "a_xdsum"), qo
        )
        return {**ptrs, "a_blocks": 0, "a_bsize": 0, "a_stride": 0, "a_scale": 1.0, "a_cap": 0.0, "a_window": 0,
                "ATTN": False, **dict.fromkeys(names, 1), "SOFTCAP": False, "SINKS": False, "QLIMBS": 0,
                "SHIFT": 0, "XMAX": 0, "MIN_EXP": 0}  # fmt: skip
    args, consts = attend
    keys = ("a_tables", "a_seq", None, "a_s", "a_r", "a_sink", "a_out", "a_xq", "a_xs", "a_xdsum", None, None, None,
            "a_blocks", "a_bsize", "a_stride", "a_scale", "a_cap", "a_window")  # fmt: skip
    named = {k: v for k, v in zip(keys, args[3:], strict=True) if k is not None}
    c = dict(consts)
    c.pop("KV")
    return {**named, "ATTN": True, "AD": c.pop("D"), "QLIMBS": c.pop("LIMBS"), "ATOK": ATOK, **c}


def qkv_rope_attention(
    xq: Quantised, weights: list[PackedWeight], heads: tuple[int, int, int], positions: torch.Tensor,
    slots: torch.Tensor, table: RopeTable, cos: torch.Tensor, sin: torch.Tensor, k_cache: torch.Tensor,
    v_cache: torch.Tensor, meta: AttentionMeta, token_seq: torch.Tensor, block_tables: torch.Tensor,
    max_position: int, scale: float | None, window: int, softcap: float, sinks: torch.Tensor | None,
    limbs: int | None, qo: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, Quantised | None]:  # fmt: skip
    """The rotated queries [M, HQ, D], the attention's output [M, HQ, D] and, with `limbs`, its rows
    quantised: the bits of qkv_rope then attention.attention_quantize (same arguments), in
    one launch (qkvattn.arrive in qkv_rope's; `fits` and, with `limbs`, attention.quantizes(D)); `qo` may hold the queries."""
    m, (hq, _, d) = xq.s.shape[0], heads
    qo = torch.empty(m, hq, d, dtype=torch.float32, device=xq.q.device) if qo is None else qo
    out, xo, args, consts = attention.launch_args(
        qo, k_cache, v_cache, meta, positions, token_seq, block_tables, max_position, scale, window, softcap,
        sinks, limbs,
    )  # fmt: skip
    qkv_rope(xq, weights, heads, positions, slots, table, cos, sin, k_cache, v_cache, qo, (args, consts))
    return qo, out, xo
