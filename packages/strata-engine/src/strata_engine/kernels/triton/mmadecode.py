"""The decode matmul on tensor cores: intmatmul.py's contract for 1 to 8 rows, one MMA per block.

A decode step multiplies a few rows by every weight once, so its cost is reading the weights
and turning them into integer products. Here the weights are the MMA's big operand (a tile of
BN outputs by one block of 32 inputs, read as whole 4-byte words of the packed layout and split
into nibbles in registers), and the activations the small one: its 16 columns are (row, limb)
pairs, 4 rows of up to 3 limbs, so one integer `tl.dot` gives every limb sum of every row for
the block. The sums are exact (int8 x int8 into int32), hence the same integers as the C
kernels' whatever the instruction; each (row, output) then runs intmatmul's float steps
(float_chain.py) per block, in block order, so the bits are the C kernels'.

Each thread's MMA operand register holds 4 consecutive inputs of one output, which in the
packed layout are the low (or high) nibbles of one 4-byte word: the word masked with 0x0F0F0F0F
(or shifted, then masked) is the register, and the compiler keeps it whole when all 4 bytes are
taken from one word value (`_bytes`). The columns are placed so that each thread's accumulator
fragment (columns 2q, 2q + 1 of every 8) holds a row's every limb: column 8 jh + 2 t + jl for row
t and limb j = 2 jh + jl (limb 3 always zero), and Q6_K's 32 columns 8 j + 2 t + h (h its half),
which `tl.split`s take apart in registers. The activations arrive as 4-byte words (copied
asynchronously, as the weights are) and are split into bytes in registers.

A GPU needs more programs than a decode's output tiles give (16 for a 4,096-output projection at
batch 1, on 132 SMs), so a launch with fewer than PROGRAMS is split along K (`plan`): each
program forms the block values f of its range of blocks (exact integer sums rounded once: the
same values whichever program forms them) and writes them to a scratch; the tile's last
program to finish, counted by an int32 atomic, runs the float steps over every block in block
order and resets the count. No float is ever summed across programs, so the bits are those of
one program a tile.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from strata_engine.kernels.triton import codebook, grid, unpack2, wtypes
from strata_engine.kernels.triton.codebook import IQ4_NL_H, IQ4_XS_H, MXFP4_H
from strata_engine.kernels.triton.float_chain import accumulate, epilogue, value
from strata_engine.kernels.triton.ieee import INTERPRETED
from strata_engine.kernels.triton.packed import block_offset, head_offset, header, scales, super_scales
from strata_engine.kernels.triton.wtypes import Q2_K, Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K, Q8_0

TOPS = tl.constexpr(-0x7F7F7F80)  # 0x80808080 as an int32: every byte's top bit
TOKENS = tl.constexpr(4)  # rows a program: 4 rows x 4 limb slots, the 16 columns of the activations


@triton.jit
def _words(wf_ptr, qw, live):
    """The 4-byte words of quad rows 0-3 (bytes c: element 4 r + c of each half) of every
    output, from `qw` (the word of its quants in quad row 0): int32 [BN, 4]."""
    r = tl.arange(0, 4)[None, :]
    w = tl.load(wf_ptr + qw[:, None] + r * 16, mask=live[:, None], other=0.0)
    return w.to(tl.int32, bitcast=True)


@triton.jit
def _plane(wf_ptr, at, live):
    """A plane's word (byte c: output o's bits for element c of every quad row): int32 [BN, 1]."""
    return tl.load(wf_ptr + at[:, None], mask=live[:, None], other=0.0).to(tl.int32, bitcast=True)


@triton.jit
def _bytes(word):
    """int8 [BN, 4, 4]: the four bytes of each word of [BN, 4], byte c at [., r, c]."""
    e0 = word.to(tl.int8)
    e1 = (word >> 8).to(tl.int8)
    e2 = (word >> 16).to(tl.int8)
    e3 = (word >> 24).to(tl.int8)
    return tl.join(tl.join(e0, e2), tl.join(e1, e3)).reshape(word.shape[0], 4, 4)


@triton.jit
def _weights(wf_ptr, qw, live, zero, WT: tl.constexpr):
    """The signed quants of one block for BN outputs as the dot's int8 [BN, 32] operand, in
    element order (packed.quants' values), built from whole words: each byte of a word is one
    weight's int8 (the low or high nibble of 4 packed bytes, a fifth bit or a high pair from the
    planes added in place, the type's offset subtracted bytewise without borrows)."""
    if WT == Q2_K:  # a plane of 2-bit pairs a half (unpack2.py), offset 0
        lo, hi = unpack2.pairs(wf_ptr, qw, live)
    elif WT == Q8_0 or WT == wtypes.IQ2_XS or WT == wtypes.IQ2_S:  # a byte a weight, w + 128: its int8
        # is the byte with its top bit flipped (the IQ2 types' expansion, kgrid.py: w + 64, 64 added first)
        ADD: tl.constexpr = 0 if WT == Q8_0 else 0x40404040
        lo = (_words(wf_ptr, qw, live) + ADD) ^ TOPS
        hi = (_words(wf_ptr, qw + 64, live) + ADD) ^ TOPS
    elif WT == IQ4_NL_H or WT == IQ4_XS_H or WT == MXFP4_H:  # noqa: SIM109 (the indices' codebook integers)
        lo, hi = codebook.words(_words(wf_ptr, qw, live), WT)
    else:
        w = _words(wf_ptr, qw, live)
        lo = w & 0x0F0F0F0F
        hi = (w >> 4) & 0x0F0F0F0F
        if WT == Q4_1 or WT == Q4_K:  # noqa: SIM109 (no further step hides hi's top nibble)
            hi = hi | zero
        r = tl.arange(0, 4)[None, :]
        if WT == Q5_K or WT == Q5_0 or WT == Q5_1:  # noqa: SIM109 (constexpr tests)
            # bit r (low half) or 4 + r (high half) of the plane's byte is the fifth bit
            hb = _plane(wf_ptr, qw + 64, live)
            lo = lo | (((hb >> r) & 0x01010101) << 4)
            hi = hi | (((hb >> (r + 4)) & 0x01010101) << 4)
        elif WT == Q6_K:  # half h's plane, bits 2r and 2r + 1
            lo = lo | (((_plane(wf_ptr, qw + 64, live) >> (2 * r)) & 0x03030303) << 4)
            hi = hi | (((_plane(wf_ptr, qw + 80, live) >> (2 * r)) & 0x03030303) << 4)
        # v - offset in every byte (v below 128 - offset): (v + 128 - offset) ^ 128, no carries
        if WT == Q4_0:
            lo = (lo + 0x78787878) ^ TOPS
            hi = (hi + 0x78787878) ^ TOPS
        elif WT == Q5_0:
            lo = (lo + 0x70707070) ^ TOPS
            hi = (hi + 0x70707070) ^ TOPS
        elif WT == Q6_K:
            lo = (lo + 0x60606060) ^ TOPS
            hi = (hi + 0x60606060) ^ TOPS
    bn: tl.constexpr = qw.shape[0]
    both = tl.join(_bytes(lo), _bytes(hi))  # [BN, r, c, half]
    return tl.permute(both, (0, 3, 1, 2)).reshape(bn, 32)


@triton.jit
def _limbs(s0, s1, s2, LIMBS: tl.constexpr, WT: tl.constexpr):
    """f of one block from its limbs' sums: value's number, V = S_2 65536 + S_1 256 + S_0 rounded
    to fp32 once. k = 3: for the types whose |w| <= 16 (Q4_0, Q4_1, Q4_K, Q5_0, MXFP4; Q6_K's and Q2_K's
    halves of 16 inputs with |w| <= 32), T = S_2 256 + S_1 stays below 2^24 in magnitude (|S_2| <= 32 x 16
    x 127, the top digit of |X| <= 8355711; |S_1| <= 32 x 16 x 128), so T and S_0 are exact
    fp32 values and fma(T, 256, S_0) is V with one rounding: 4 instructions where the int64 sum
    and its conversion take 5. The wider types form V in int64 and convert it once."""
    if LIMBS == 3:
        if WT == Q4_0 or WT == Q4_1 or WT == Q4_K or WT == Q5_0 or WT == Q6_K or WT == Q2_K or WT == MXFP4_H:  # noqa: SIM109
            f = tl.fma((s2 * 256 + s1).to(tl.float32), 256.0, s0.to(tl.float32))
        else:
            f = (s2.to(tl.int64) * 65536 + (s1 * 256 + s0).to(tl.int64)).to(tl.float32)
    else:
        f = value(s0, s1, s2, LIMBS)
    return f


@triton.jit
def _values(acc, LIMBS: tl.constexpr, HALVES: tl.constexpr, WT: tl.constexpr):
    """f per (output, row) of each half from the dot's int32 sums: two [BN, TOKENS]. One half:
    [BN, 16], column 8 jh + 2 t + jl holds limb 2 jh + jl of row t; two: [BN, 32], column
    8 j + 2 t + h holds limb j of row t, half h. Either way each thread's accumulator fragment
    (columns 2q, 2q + 1 of every 8) holds a row's every limb, so the splits move no data."""
    bn: tl.constexpr = acc.shape[0]
    if HALVES == 2:
        h0, h1 = tl.split(tl.reshape(acc, (bn, 4, 4, 2)))  # [BN, j, t] a half
        even0, odd0 = tl.split(tl.reshape(tl.permute(h0, (0, 2, 1)), (bn, 4, 2, 2)))  # [BN, t, jh]
        even1, odd1 = tl.split(tl.reshape(tl.permute(h1, (0, 2, 1)), (bn, 4, 2, 2)))
        s0, s2 = tl.split(even0)
        s1, _ = tl.split(odd0)
        t0, t2 = tl.split(even1)
        t1, _ = tl.split(odd1)
        f0 = _limbs(s0, s1, s2, LIMBS, WT)
        f1 = _limbs(t0, t1, t2, LIMBS, WT)
    else:
        even, odd = tl.split(tl.reshape(acc, (bn, 2, 4, 2)))  # jl = 0, 1: [BN, jh, t]
        s0, s2 = tl.split(tl.permute(even, (0, 2, 1)))
        s1, _ = tl.split(tl.permute(odd, (0, 2, 1)))
        f0 = _limbs(s0, s1, s2, LIMBS, WT)
        f1 = f0
    return f0, f1


@triton.jit
def _block_values(q_ptr, wq_ptr, wf_ptr, group, gw, o, live, zero, tok, j, cmask, nb, b,
                  WT: tl.constexpr, KQ: tl.constexpr, BB: tl.constexpr, SB: tl.constexpr,
                  SCB: tl.constexpr, LIMBS: tl.constexpr, HALVES: tl.constexpr,
                  ONE: tl.constexpr = False):  # fmt: skip
    """f of block b per (output, row) of each half: the block's one MMA and its limbs' sums.
    ONE (Q6_K, one row): the 16 columns of one half's layout with the row slot t as the half
    (column 8 jh + 2 h + jl), so f0's slot h is half h's f of the row (f1 unused)."""
    # every type's block and scale sizes are multiples of 16 bytes (as the group's, GB): the
    # block's first word a multiple of 4, so the copies of a thread's consecutive words are wide
    if grid.held(WT):  # `group` the rows' bytes as stored (grid.py)
        w8 = grid.weights(wq_ptr, wf_ptr, group, b, live, WT)
    else:
        qw = tl.multiple_of(gw + (block_offset(b, KQ, BB, SB) + SCB) // 4, 4)
        w8 = _weights(wf_ptr, qw + o, live, zero, WT)
    xrow = (tok.to(tl.int64) * nb + b) * LIMBS + j
    # the activations as 4-byte words (q_ptr is the int8 limbs seen as int32), split into bytes
    # in registers: word kw of a column holds its inputs 4 kw .. 4 kw + 3
    kw = tl.arange(0, 8)
    if ONE:  # column 8 jh + 2 h + jl takes half h's 16 inputs
        wmask = cmask[None, :] & ((kw >> 2)[:, None] == ((tl.arange(0, 16) >> 1) & 3)[None, :])
    elif HALVES == 2:  # column 2 t + h (of every 8) takes half h's 16 inputs
        wmask = cmask[None, :] & ((kw >> 2)[:, None] == (tl.arange(0, 32) & 1)[None, :])
    else:
        wmask = tl.broadcast_to(cmask[None, :], (8, 16))
    xw = tl.load(q_ptr + xrow[None, :] * 8 + kw[:, None], mask=wmask, other=0)  # [8, C] int32
    e0 = xw.to(tl.int8)
    e1 = (xw >> 8).to(tl.int8)
    e2 = (xw >> 16).to(tl.int8)
    e3 = (xw >> 24).to(tl.int8)
    x4 = tl.join(tl.join(e0, e2), tl.join(e1, e3))  # [8, C, 2, 2]: byte 2 p + q at [., ., p, q]
    COLS: tl.constexpr = 16 if ONE else 16 * HALVES
    x = tl.permute(x4, (0, 2, 3, 1)).reshape(32, COLS)
    return _values(tl.dot(w8, x, out_dtype=tl.int32), LIMBS, 1 if ONE else HALVES, WT)


@triton.jit
def _chain(acc, f0, f1, q_ptr, wq_ptr, wf_ptr, s_ptr, dsum_ptr, group, o, live, rows, rmask, nb, b,
           WT: tl.constexpr, KQ: tl.constexpr, BB: tl.constexpr, SB: tl.constexpr, LIMBS: tl.constexpr):  # fmt: skip
    """Block b's float steps on acc (float_chain.accumulate, the C kernels' sequence)."""
    bn: tl.constexpr = acc.shape[0]
    nt: tl.constexpr = acc.shape[1]
    if grid.held(WT):  # `group` the rows' bytes as stored
        ws0, ws1, mn, mn1 = grid.scales(wq_ptr, group, b, live, WT)
    else:
        ws0, ws1, mn, mn1 = scales(wq_ptr, wf_ptr, group + block_offset(b, KQ, BB, SB),
                                   group + head_offset(b, BB, SB), o, live, WT, KQ)  # fmt: skip
    xb = rows.to(tl.int64) * nb + b
    s = tl.broadcast_to(tl.load(s_ptr + xb, mask=rmask, other=0.0)[None, :], (bn, nt))
    d0, d1 = unpack2.dsums(q_ptr, s_ptr, dsum_ptr, xb, rmask, LIMBS, WT, True)
    dsum, dsum1 = tl.broadcast_to(d0[None, :], (bn, nt)), tl.broadcast_to(d1[None, :], (bn, nt))
    if WT == Q6_K or WT == Q2_K or WT == wtypes.IQ2_XS or WT == wtypes.IQ2_S:  # noqa: SIM109 (both halves' scales as a pair)
        w01 = tl.broadcast_to(tl.join(ws0, ws1)[:, None, :], (bn, nt, 2))
        w0, w1 = tl.split(w01)
    else:
        w0 = tl.broadcast_to(ws0[:, None], (bn, nt))
        w1 = w0
    mn, mn1 = tl.broadcast_to(mn[:, None], (bn, nt)), tl.broadcast_to(mn1[:, None], (bn, nt))
    return accumulate(acc, f0, f1, w0, w1, mn, mn1, s, dsum, dsum1, WT)


@triton.jit
def _pair_writes(BN: tl.constexpr):
    """The split path's pair scratch (PS 2: output o's rows t and halves h at (o TOKENS + t) 2
    + h) as offsets in the MMA accumulator's order: [FA, 2, FW, 8, TOKENS, 2] (a, r, w, l, t, h)
    for output 16 FW a + 16 w + 8 r + l (at BN 256 warpgroup fragment a, register half r, warp
    w, lane group l). Only h is contiguous, so the stores' layout is the accumulator's own (no
    move through shared memory), and a warp's store covers 8 outputs' 256 bytes."""
    FA: tl.constexpr = (BN + 63) // 64
    FW: tl.constexpr = BN // (16 * FA)
    a = tl.arange(0, FA)[:, None, None, None, None, None]
    r = tl.arange(0, 2)[None, :, None, None, None, None]
    w = tl.arange(0, FW)[None, None, :, None, None, None]
    lane = tl.arange(0, 8)[None, None, None, :, None, None]
    t = tl.arange(0, TOKENS)[None, None, None, None, :, None]
    h = tl.arange(0, 2)[None, None, None, None, None, :]
    return ((((a * FW + w) * 16 + r * 8 + lane) * TOKENS + t) * 2 + h).to(tl.int32)


@triton.jit
def _pair_reads(BN: tl.constexpr, CR: tl.constexpr):
    """_pair_writes' offsets for the float steps' reads: [CR, 2, BN / 2, 2] (t, e, p, h) for
    output 2 p + e, so that each thread holds outputs 2 p and 2 p + 1 with every row, the
    layout in which a block's scale bytes arrive (no move through shared memory for them)."""
    t = tl.arange(0, CR)[:, None, None, None]
    e = tl.arange(0, 2)[None, :, None, None]
    p = tl.arange(0, BN // 2)[None, None, :, None]
    h = tl.arange(0, 2)[None, None, None, :]
    return (((p * 2 + e) * TOKENS + t) * 2 + h).to(tl.int32)


@triton.jit
def _superblock(acc, f_ptr, q_ptr, wq_ptr, wf_ptr, s_ptr, dsum_ptr, cat, group, o, live, rows, rmask, nb, sb,
                WT: tl.constexpr, BB: tl.constexpr, SB: tl.constexpr, HALVES: tl.constexpr,
                BN: tl.constexpr, TAIL: tl.constexpr, PS: tl.constexpr, LIMBS: tl.constexpr):  # fmt: skip
    """The split path's float steps over blocks sb TAIL .. sb TAIL + TAIL - 1 (TAIL 4 or 8: one
    K-quant super-block's, or half of it), in block order, unrolled: the operations of _chain on
    the scratch's f, with the header (d, dmin) read once for them and each block's scale bytes
    at a constant offset from the super-block's. The scratch's f are read unmasked (it holds
    every row slot and output of the tile; those past the live ones are never stored)."""
    bn: tl.constexpr = acc.shape[0]
    nt: tl.constexpr = acc.shape[1]
    head = group + head_offset(sb * TAIL, BB, SB)
    d, dmin, hx = header(wf_ptr, head, o, live, WT)  # (IQ4_XS: d, scales_l, scales_h)
    for i in tl.static_range(TAIL):
        b = sb * TAIL + i
        at = cat + b * (HALVES * TOKENS * BN)
        if PS == 2:  # both halves' f side by side (_pair_reads' order)
            f4 = tl.permute(tl.load(f_ptr + at, cache_modifier=".cg"), (2, 1, 0, 3))
            f0, f1 = tl.split(tl.reshape(f4, (bn, nt, 2)))
        else:
            f0 = tl.load(f_ptr + at, cache_modifier=".cg")
            f1 = f0
            if HALVES == 2:
                f1 = tl.load(f_ptr + at + TOKENS * BN, cache_modifier=".cg")
        ws0, ws1, mn, mn1 = super_scales(wq_ptr, head + SB + (b & 7) * BB, b & 7, o, live, d, dmin, hx, WT)
        xb = rows.to(tl.int64) * nb + b
        s = tl.broadcast_to(tl.load(s_ptr + xb, mask=rmask, other=0.0)[None, :], (bn, nt))
        d0, d1 = unpack2.dsums(q_ptr, s_ptr, dsum_ptr, xb, rmask, LIMBS, WT, True)
        acc = accumulate(
            acc, f0, f1, tl.broadcast_to(ws0[:, None], (bn, nt)), tl.broadcast_to(ws1[:, None], (bn, nt)),
            tl.broadcast_to(mn[:, None], (bn, nt)), tl.broadcast_to(mn1[:, None], (bn, nt)), s,
            tl.broadcast_to(d0[None, :], (bn, nt)), tl.broadcast_to(d1[None, :], (bn, nt)), WT,
        )  # fmt: skip
    return acc


@triton.jit(do_not_specialize=["M", "N", "nb", "GB", "PER"])
def _mma_kernel(
    q_ptr, s_ptr, dsum_ptr, wq_ptr, wf_ptr, b_ptr, r_ptr, y_ptr, f_ptr, cnt_ptr, M, N, nb, GB, PER,
    WT: tl.constexpr, KQ: tl.constexpr, BB: tl.constexpr, SB: tl.constexpr, SCB: tl.constexpr,
    LIMBS: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_RES: tl.constexpr, BN: tl.constexpr,
    SPLIT: tl.constexpr, CR: tl.constexpr,
):  # fmt: skip
    """Program (i, g, r): outputs i BN .. of rows 4 g .., blocks r PER .. (SPLIT: each program's
    K range; else PER is nb and r 0)."""
    program(q_ptr, s_ptr, dsum_ptr, wq_ptr, wf_ptr, b_ptr, r_ptr, y_ptr, f_ptr, cnt_ptr, M, N, nb, GB, PER,
            tl.program_id(0), tl.num_programs(0).to(tl.int64),
            WT, KQ, BB, SB, SCB, LIMBS, HAS_BIAS, HAS_RES, BN, SPLIT, CR)  # fmt: skip


@triton.jit
def program(
    q_ptr, s_ptr, dsum_ptr, wq_ptr, wf_ptr, b_ptr, r_ptr, y_ptr, f_ptr, cnt_ptr, M, N, nb, GB, PER, t, ntiles,
    WT: tl.constexpr, KQ: tl.constexpr, BB: tl.constexpr, SB: tl.constexpr, SCB: tl.constexpr,
    LIMBS: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_RES: tl.constexpr, BN: tl.constexpr,
    SPLIT: tl.constexpr, CR: tl.constexpr,
):  # fmt: skip
    """_mma_kernel's program for output tile t of the weight's ntiles (int64): the tile's
    arrival counts at cnt_ptr (one a group of rows), its scratch at f_ptr (mmapair.py runs two
    weights' tiles in one launch, each with its own)."""
    rn = t * BN + tl.arange(0, BN)
    live = rn < (N + 15) // 16 * 16  # outputs of the packed groups (a partial group's are zero)
    group = tl.multiple_of((rn // 16).to(tl.int64) * GB, 16)  # GB is (matmul_quantised checks)
    if grid.held(WT):  # an output's row as stored, not its group
        group = grid.rows(rn, GB)
    gw = (rn // 16).to(tl.int64) * (GB // 4)  # the group's first word
    o = rn % 16
    HALVES: tl.constexpr = 2 if WT == Q6_K or WT == Q2_K or WT == wtypes.IQ2_XS or WT == wtypes.IQ2_S else 1  # noqa: SIM109
    # split along K, Q6_K's f in the scratch: for several rows an output's rows and halves side
    # by side, stored in the MMA accumulator's layout and read in the one the scales arrive in
    # (neither moves through shared memory), for 1 row a plane a half (fewer instructions there)
    PS: tl.constexpr = 2 if HALVES == 2 and CR > 1 else 1
    # split along K at batch 1 (CR 1), Q6_K: one row's two halves take the 16 columns of the
    # other types' layout, the half as the row slot (_block_values' ONE), so the MMA is 64x16
    # and each thread forms half as many f, stored as one [BN, 4] whose slot h goes to half h's
    # plane (slot stride TOKENS row planes: the scratch's layout is unchanged)
    ONE: tl.constexpr = SPLIT and HALVES == 2 and CR == 1
    col = tl.arange(0, 16 * HALVES)  # the activation tile's columns: (row, limb, half)
    if ONE:  # column 8 jh + 2 h + jl: limb 2 jh + jl of half h of the group's one row
        col = tl.arange(0, 16)
        j = (col >> 3) * 2 + (col & 1)
        tok = tl.program_id(1) * TOKENS + (col & 0)
        cmask = (tok < M) & (j < LIMBS) & (((col >> 1) & 3) < 2)
    elif HALVES == 2:  # column 8 j + 2 t + h: half h's 16 inputs of limb j of row t
        j = col >> 3
        tok = tl.program_id(1) * TOKENS + ((col >> 1) & 3)
        cmask = (tok < M) & (j < LIMBS)  # the column's (half h's inputs: _block_values)
    else:  # column 8 jh + 2 t + jl: limb 2 jh + jl of row t
        j = (col >> 3) * 2 + (col & 1)
        tok = tl.program_id(1) * TOKENS + ((col >> 1) & 3)
        cmask = (tok < M) & (j < LIMBS)
    # 0 (N is not negative), which the compiler cannot know: the high nibbles' word then keeps
    # its top byte as a byte of that word, and each 4 bytes pass to the MMA as the one register
    zero = N >> 31
    rows = tl.program_id(1) * TOKENS + tl.arange(0, TOKENS)
    rmask = rows < M
    if SPLIT:
        # this program's K range: each block's f (exact integers rounded once, so the same
        # values whichever program forms them) to the scratch, [group of rows, tile, block, ...]:
        # a block's [half, row, output] (PS 1: only the live rows', a row's outputs contiguous)
        # or [output, row, half] (PS 2, `_pair_writes`), at constant offsets from the tile's
        first = tl.program_id(2) * PER
        tbase = (tl.program_id(1).to(tl.int64) * ntiles + t) * nb * (HALVES * TOKENS * BN)
        SLOT: tl.constexpr = TOKENS if ONE else 1  # a row slot's stride, in row planes
        fat = (tbase - t * BN) + ((tl.arange(0, TOKENS) * SLOT)[None, :] * BN + rn[:, None])
        fmask = rmask[None, :] & live[:, None]
        if ONE:  # row slots 0 and 1: the row's halves
            fmask = (tl.arange(0, TOKENS) < 2)[None, :] & live[:, None]
        for b in range(first, tl.minimum(first + PER, nb)):
            f0, f1 = _block_values(
                q_ptr, wq_ptr, wf_ptr, group, gw, o, live, zero, tok, j, cmask, nb, b,
                WT, KQ, BB, SB, SCB, LIMBS, HALVES, ONE,
            )  # fmt: skip
            at = fat + b * (HALVES * TOKENS * BN)
            if PS == 2:  # in the accumulator's order, every row slot (the scratch has their room)
                FA: tl.constexpr = (BN + 63) // 64  # _pair_writes' order
                f6 = tl.reshape(tl.join(f0, f1), (FA, BN // (16 * FA), 2, 8, TOKENS, 2))
                fb = tbase + b * (HALVES * TOKENS * BN)
                tl.store(f_ptr + fb + _pair_writes(BN), tl.permute(f6, (0, 2, 1, 3, 4, 5)))
            else:
                tl.store(f_ptr + at, f0, mask=fmask)
                if HALVES == 2 and not ONE:  # the second half's plane
                    tl.store(f_ptr + at + TOKENS * BN, f1, mask=fmask)
        # the last program of this tile to finish (an integer count: no float atomics) runs
        # the float steps over every block, in block order, and resets the count
        tl.debug_barrier()
        tile = tl.program_id(1) * ntiles + t
        done = tl.atomic_add(cnt_ptr + tile, 1, sem="acq_rel", scope="gpu")
        if done == tl.num_programs(2) - 1:
            # the float steps for the rows a group can have live (CR: 1, 2 or 4; at batch 1 one)
            crows = tl.program_id(1) * TOKENS + tl.arange(0, CR)
            cmask_ = crows < M
            if PS == 2:  # an output's rows and halves contiguous
                cat = tbase + _pair_reads(BN, CR)
            else:
                cat = tbase + (tl.arange(0, CR)[None, :] * BN + tl.arange(0, BN)[:, None])
            cfmask = cmask_[None, :] & live[:, None]
            cacc = tl.zeros((BN, CR), tl.float32)
            if KQ:  # a super-block an iteration: its header read once, its 8 blocks unrolled
                # blocks an iteration (a K-quant's nb is a multiple of 8): the fewest instructions
                # a block in the compiled loop (sm_90, Triton 3.9.0's ptxas), per `tail_blocks`
                TB: tl.constexpr = 8 if WT == Q6_K else 4
                for sb in range(0, nb // TB):
                    cacc = _superblock(cacc, f_ptr, q_ptr, wq_ptr, wf_ptr, s_ptr, dsum_ptr, cat, group, o, live,
                                       crows, cmask_, nb, sb, WT, BB, SB, HALVES, BN, TB, PS, LIMBS)  # fmt: skip
            else:
                for b in range(0, nb):
                    at = cat + b * (HALVES * TOKENS * BN)
                    f0 = tl.load(f_ptr + at, mask=cfmask, cache_modifier=".cg")
                    cacc = _chain(cacc, f0, f0, q_ptr, wq_ptr, wf_ptr, s_ptr, dsum_ptr, group, o, live, crows,
                                  cmask_, nb, b, WT, KQ, BB, SB, LIMBS)  # fmt: skip
            tl.atomic_xchg(cnt_ptr + tile, 0, sem="relaxed", scope="gpu")
            epilogue(cacc, b_ptr, r_ptr, y_ptr, rn, crows, cmask_, N, HAS_BIAS, HAS_RES)
    else:
        acc = tl.zeros((BN, TOKENS), tl.float32)
        for b in range(0, nb):  # the blocks in order: the float sequence is C's
            f0, f1 = _block_values(
                q_ptr, wq_ptr, wf_ptr, group, gw, o, live, zero, tok, j, cmask, nb, b,
                WT, KQ, BB, SB, SCB, LIMBS, HALVES,
            )  # fmt: skip
            acc = _chain(acc, f0, f1, q_ptr, wq_ptr, wf_ptr, s_ptr, dsum_ptr, group, o, live, rows, rmask, nb, b,
                         WT, KQ, BB, SB, LIMBS)  # fmt: skip
        epilogue(acc, b_ptr, r_ptr, y_ptr, rn, rows, rmask, N, HAS_BIAS, HAS_RES)


# Programs a decode launch should give a GPU at least: an H100's or H200's 132 SMs (under the
# interpreter a few, so that the tests' small shapes take the split path too). A speed choice
# only: a K range's blocks give the same f wherever they are formed, and the float steps always
# run over every block in order, so the bits never depend on it.
PROGRAMS = 4 if INTERPRETED else 132
MIN_PER = 2  # blocks a K range takes at least
# the K loop's software pipeline: the next block's weights and activations copied (cp.async)
# while this one is computed; 2 stages keep the loop at 0.147 warp-instructions a weight for
# Q6_K (3: 0.157), and the split along K gives each SM programs enough to hide the rest
STAGES = 2
_counts: dict[str, torch.Tensor] = {}


def plan(m: int, n: int, nb: int, bn: int) -> tuple[tuple[int, int, int], int]:
    """(grid, blocks a K range) of a decode launch: (output tiles, groups of 4 rows, K ranges),
    the K split (each range's integer sums formed by its own program, the float steps run by
    the tile's last) only when the tiles alone give fewer than PROGRAMS programs."""
    tiles, groups = triton.cdiv(n, bn), triton.cdiv(m, TOKENS.value)
    ranges = min(triton.cdiv(PROGRAMS, tiles * groups), nb // MIN_PER)
    if ranges <= 1:
        return (tiles, groups, 1), nb
    per = nb // ranges  # at least `ranges` ranges, the last one shorter
    return (tiles, groups, triton.cdiv(nb, per)), per


def tail_blocks(wt: int, kq: bool) -> int:
    """Blocks an iteration of the split path's float-steps loop (the kernel's TB): a K-quant's
    4 (Q6_K: 8), the others' 1."""
    return (8 if wt == Q6_K.value else 4) if kq else 1


def counts(device: torch.device, size: int) -> torch.Tensor:
    """The split path's arrival counts (int32, zero between launches: the last program of a
    tile resets its own), one buffer per device, allocated once (grown when a launch needs
    more)."""
    key = str(device)
    if key not in _counts or _counts[key].numel() < size:
        _counts[key] = torch.zeros(max(size, 4096), dtype=torch.int32, device=device)
    return _counts[key]


def launch(args: tuple, m: int, n: int, nb: int, gb: int, bn: int, halves: int, consts: dict) -> None:
    """_mma_kernel over `args` (q, s, dsum, wq, wf, bias, residual, y), split along K by `plan`."""
    grid, per = plan(m, n, nb, bn)
    y = args[-1]
    split = grid[2] > 1
    if split:
        scratch = torch.empty(
            grid[1] * nb * halves * TOKENS.value * grid[0] * bn, dtype=torch.float32, device=y.device
        )
        cnt = counts(y.device, grid[0] * grid[1])
    else:
        scratch, cnt, per = y, y, nb
    cr = 1 if m == 1 else 2 if m == 2 else TOKENS.value  # rows a group's float steps take
    args = (args[0].view(torch.int32), *args[1:])  # the limbs as words (32 bytes a block)
    _mma_kernel[grid](
        *args, scratch, cnt, m, n, nb, gb, per,
        BN=bn, SPLIT=split, CR=cr if split else TOKENS.value, num_stages=STAGES, **consts,
    )  # fmt: skip
