"""Two weights of different types read by one decode launch (mmadecode.py's arithmetic).

A model whose projections of one input differ in type (Q4_K_M: attn_q and attn_k Q4_K, attn_v
Q6_K in half the layers) cannot stack them into one packed weight, so each run of one type took
a launch of its own. Here the output tiles of both weights share one grid: a program whose tile
index is below the first weight's tile count runs mmadecode's program for that weight, the rest
for the second, each with its own type (constexprs), outputs, bias, scratch and arrival counts.
Each output's operations are exactly those of its own weight's launch (the same program, the
same tile, the same K ranges), so the bits are those of the two launches.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from strata_engine.kernels.triton import mmadecode


@triton.jit(do_not_specialize=["M", "N", "N2", "nb", "GB", "GB2", "PER", "T1"])
def _pair_kernel(
    q_ptr, s_ptr, dsum_ptr, wq_ptr, wf_ptr, b_ptr, y_ptr, f_ptr, wq2_ptr, wf2_ptr, b2_ptr, y2_ptr, f2_ptr,
    cnt_ptr, M, N, N2, nb, GB, GB2, PER, T1,
    WT: tl.constexpr, KQ: tl.constexpr, BB: tl.constexpr, SB: tl.constexpr, SCB: tl.constexpr,
    WT2: tl.constexpr, KQ2: tl.constexpr, BB2: tl.constexpr, SB2: tl.constexpr, SCB2: tl.constexpr,
    LIMBS: tl.constexpr, HAS_BIAS: tl.constexpr, BN: tl.constexpr, SPLIT: tl.constexpr, CR: tl.constexpr,
):  # fmt: skip
    """Program (i, g, r): the first weight's tile i while i < T1, else the second's tile i - T1."""
    program(
        q_ptr, s_ptr, dsum_ptr, wq_ptr, wf_ptr, b_ptr, y_ptr, f_ptr, wq2_ptr, wf2_ptr, b2_ptr, y2_ptr, f2_ptr,
        cnt_ptr, M, N, N2, nb, GB, GB2, PER, T1, WT, KQ, BB, SB, SCB, WT2, KQ2, BB2, SB2, SCB2, LIMBS, HAS_BIAS,
        BN, SPLIT, CR,
    )  # fmt: skip


@triton.jit
def program(
    q_ptr, s_ptr, dsum_ptr, wq_ptr, wf_ptr, b_ptr, y_ptr, f_ptr, wq2_ptr, wf2_ptr, b2_ptr, y2_ptr, f2_ptr,
    cnt_ptr, M, N, N2, nb, GB, GB2, PER, T1,
    WT: tl.constexpr, KQ: tl.constexpr, BB: tl.constexpr, SB: tl.constexpr, SCB: tl.constexpr,
    WT2: tl.constexpr, KQ2: tl.constexpr, BB2: tl.constexpr, SB2: tl.constexpr, SCB2: tl.constexpr,
    LIMBS: tl.constexpr, HAS_BIAS: tl.constexpr, BN: tl.constexpr, SPLIT: tl.constexpr, CR: tl.constexpr,
):  # fmt: skip
    """The pair launch's program (i, g, r), for the launches that add their own steps after it
    (qkvrope.py)."""
    t = tl.program_id(0)
    if t < T1:
        mmadecode.program(
            q_ptr, s_ptr, dsum_ptr, wq_ptr, wf_ptr, b_ptr, y_ptr, y_ptr, f_ptr, cnt_ptr, M, N, nb, GB, PER,
            t, T1.to(tl.int64), WT, KQ, BB, SB, SCB, LIMBS, HAS_BIAS, False, BN, SPLIT, CR,
        )  # fmt: skip
    else:
        mmadecode.program(
            q_ptr, s_ptr, dsum_ptr, wq2_ptr, wf2_ptr, b2_ptr, y2_ptr, y2_ptr, f2_ptr,
            cnt_ptr + tl.num_programs(1) * T1, M, N2, nb, GB2, PER,
            t - T1, (tl.num_programs(0) - T1).to(tl.int64), WT2, KQ2, BB2, SB2, SCB2, LIMBS, HAS_BIAS, False,
            BN, SPLIT, CR,
        )  # fmt: skip


def launch(xq: tuple, first: tuple, second: tuple, m: int, nb: int, bn: int, consts: dict) -> None:
    """_pair_kernel over activations `xq` (q, s, dsum) and two weights, each (wq, wf, bias, y,
    n, group bytes, halves, layout constexprs); split along K as one launch of both weights'
    tiles would be (mmadecode.plan), the K ranges the same for both."""
    t1, t2 = triton.cdiv(first[4], bn), triton.cdiv(second[4], bn)
    grid, per = mmadecode.plan(m, (t1 + t2) * bn, nb, bn)
    split = grid[2] > 1
    y1, y2 = first[3], second[3]
    if split:
        scratch = [
            torch.empty(grid[1] * nb * w[6] * mmadecode.TOKENS.value * t * bn, dtype=torch.float32, device=y1.device)
            for w, t in ((first, t1), (second, t2))
        ]  # fmt: skip
        cnt = mmadecode.counts(y1.device, grid[0] * grid[1])
    else:
        scratch, cnt, per = [y1, y2], y1, nb
    cr = 1 if m == 1 else 2 if m == 2 else mmadecode.TOKENS.value
    second_layout = {f"{k}2": v for k, v in second[7].items()}
    _pair_kernel[grid](
        xq[0].view(torch.int32), xq[1], xq[2], first[0], first[1], first[2], y1, scratch[0],
        second[0], second[1], second[2], y2, scratch[1], cnt, m, first[4], second[4], nb, first[5], second[5],
        per, t1, BN=bn, SPLIT=split, CR=cr if split else mmadecode.TOKENS.value, num_stages=mmadecode.STAGES,
        **first[7], **second_layout, **consts,
    )  # fmt: skip
