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
which `tl.split`s take apart in registers.
"""

from __future__ import annotations

import triton
import triton.language as tl

from strata_engine.kernels.triton.float_chain import accumulate, value
from strata_engine.kernels.triton.ieee import canonical_nan
from strata_engine.kernels.triton.packed import block_offset, head_offset, scales
from strata_engine.kernels.triton.wtypes import Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K, Q8_0

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
    w = _words(wf_ptr, qw, live)
    if WT == Q8_0:  # a byte a weight (w + 128): w's int8 is the byte with its top bit flipped
        lo = w ^ TOPS
        hi = _words(wf_ptr, qw + 64, live) ^ TOPS
    else:
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
def _limbs(s0, s1, s2, LIMBS: tl.constexpr):
    """f of one block from its limbs' sums: value's number (k = 3: the exact sum formed in
    int64 and converted once, the value value's fp64 steps give)."""
    if LIMBS == 3:
        f = (s2.to(tl.int64) * 65536 + (s1 * 256 + s0).to(tl.int64)).to(tl.float32)
    else:
        f = value(s0, s1, s2, LIMBS)
    return f


@triton.jit
def _values(acc, LIMBS: tl.constexpr, HALVES: tl.constexpr):
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
        f0 = _limbs(s0, s1, s2, LIMBS)
        f1 = _limbs(t0, t1, t2, LIMBS)
    else:
        even, odd = tl.split(tl.reshape(acc, (bn, 2, 4, 2)))  # jl = 0, 1: [BN, jh, t]
        s0, s2 = tl.split(tl.permute(even, (0, 2, 1)))
        s1, _ = tl.split(tl.permute(odd, (0, 2, 1)))
        f0 = _limbs(s0, s1, s2, LIMBS)
        f1 = f0
    return f0, f1


@triton.jit(do_not_specialize=["M", "N", "nb", "GB"])
def _mma_kernel(
    q_ptr, s_ptr, dsum_ptr, wq_ptr, wf_ptr, b_ptr, r_ptr, y_ptr, M, N, nb, GB,
    WT: tl.constexpr, KQ: tl.constexpr, BB: tl.constexpr, SB: tl.constexpr, SCB: tl.constexpr,
    LIMBS: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_RES: tl.constexpr, BN: tl.constexpr,
):  # fmt: skip
    rn = tl.program_id(0) * BN + tl.arange(0, BN)
    live = rn < (N + 15) // 16 * 16  # outputs of the packed groups (a partial group's are zero)
    group = tl.multiple_of((rn // 16).to(tl.int64) * GB, 16)  # GB is (matmul_quantised checks)
    gw = (rn // 16).to(tl.int64) * (GB // 4)  # the group's first word
    o = rn % 16
    HALVES: tl.constexpr = 2 if WT == Q6_K else 1  # Q6_K: each half's sum, for its own scale
    col = tl.arange(0, 16 * HALVES)  # the activation tile's columns: (row, limb, half)
    kp = tl.arange(0, 32)
    if HALVES == 2:  # column 8 j + 2 t + h: half h's 16 inputs of limb j of row t
        j = col >> 3
        tok = tl.program_id(1) * TOKENS + ((col >> 1) & 3)
        cmask = ((tok < M) & (j < LIMBS))[None, :] & ((kp >> 4)[:, None] == (col & 1)[None, :])
    else:  # column 8 jh + 2 t + jl: limb 2 jh + jl of row t
        j = (col >> 3) * 2 + (col & 1)
        tok = tl.program_id(1) * TOKENS + ((col >> 1) & 3)
        cmask = ((tok < M) & (j < LIMBS))[None, :]
    # 0 (N is not negative), which the compiler cannot know: the high nibbles' word then keeps
    # its top byte as a byte of that word, and each 4 bytes pass to the MMA as the one register
    zero = N >> 31
    rows = tl.program_id(1) * TOKENS + tl.arange(0, TOKENS)
    rmask = rows < M
    acc = tl.zeros((BN, TOKENS), tl.float32)
    for b in range(0, nb):  # the blocks in order: the float sequence is C's
        blk = group + block_offset(b, KQ, BB, SB)
        w8 = _weights(wf_ptr, gw + (block_offset(b, KQ, BB, SB) + SCB) // 4 + o, live, zero, WT)
        ws0, ws1, mn = scales(wq_ptr, wf_ptr, blk, group + head_offset(b, BB, SB), o, live, WT, KQ)
        xrow = (tok.to(tl.int64) * nb + b) * LIMBS + j
        x = tl.load(q_ptr + xrow[None, :] * 32 + kp[:, None], mask=cmask, other=0)
        f0, f1 = _values(tl.dot(w8, x, out_dtype=tl.int32), LIMBS, HALVES)
        xb = rows.to(tl.int64) * nb + b
        s = tl.broadcast_to(tl.load(s_ptr + xb, mask=rmask, other=0.0)[None, :], (BN, TOKENS))
        dsum = tl.broadcast_to(tl.load(dsum_ptr + xb, mask=rmask, other=0.0)[None, :], (BN, TOKENS))
        acc = accumulate(
            acc, f0, f1, tl.broadcast_to(ws0[:, None], (BN, TOKENS)), tl.broadcast_to(ws1[:, None], (BN, TOKENS)),
            tl.broadcast_to(mn[:, None], (BN, TOKENS)), s, dsum, WT,
        )  # fmt: skip
    if HAS_BIAS:
        acc = acc + tl.load(b_ptr + rn, mask=rn < N, other=0.0)[:, None]
    acc = canonical_nan(acc)
    at = rows.to(tl.int64)[None, :] * N + rn[:, None]
    if HAS_RES:  # the residual stream's x + y, the model's fp32 addition
        acc = tl.load(r_ptr + at, mask=rmask[None, :] & (rn < N)[:, None], other=0.0) + acc
    tl.store(y_ptr + at, acc, mask=rmask[None, :] & (rn < N)[:, None])


def grid(m: int, n: int, bn: int) -> tuple[int, int]:
    return (triton.cdiv(n, bn), triton.cdiv(m, TOKENS.value))
