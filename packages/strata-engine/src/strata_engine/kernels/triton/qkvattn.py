"""The attention inside qkvrope.py's decode launch (its `qkv_rope_attention`): the per-KV-head count.

qkvrope.py's launch, whose unit of whole heads ends with the unit's last program rotating the
unit's heads and writing its K and V rows, takes a second integer arrival count here, one per KV
head: after its rotation and cache writes (and a barrier), a unit's last program adds to each
KV head's count the number of that KV head's heads it held (its group's query heads, its K head,
its V head; no float atomics, acq_rel). The program whose addition completes a KV head's count
(GROUP + 2 heads of every row group: every row's queries rotated, every row's K and V written, so
that a row may read a position another row of the launch wrote) resets it and runs attention.py's
program for that KV head over every row of the launch: the same operations in the same order as
the attention launch (window, soft-cap, sinks, scale as it takes them), its output rows quantised
for the output projection in the integer modes as it quantises them. The bits are those of the
qkv_rope launch then the attention launch.
"""

from __future__ import annotations

import triton
import triton.language as tl

from strata_engine.kernels.triton import attention


@triton.jit
def _overlap(a0, a1, b0, b1):
    return tl.maximum(tl.minimum(a1, b1) - tl.maximum(a0, b0), 0)


@triton.jit
def arrive(
    NW, base, u, U: tl.constexpr, cnt_ptr, q_ptr, k_ptr, v_ptr, tables_ptr, seq_ptr, pos_ptr, s_ptr, r_ptr,
    sink_ptr, out_ptr, xq_ptr, xs_ptr, xdsum_ptr, M, HQ, HK, D, max_blocks, block_size, s_stride, scale,
    softcap, window,
    AD: tl.constexpr, KV: tl.constexpr, GROUP: tl.constexpr, ATOK: tl.constexpr, BLOCK_G: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, SOFTCAP: tl.constexpr, UNROLL: tl.constexpr,
    SINKS: tl.constexpr, LIMBS: tl.constexpr, SHIFT: tl.constexpr, XMAX: tl.constexpr, MIN_EXP: tl.constexpr,
):  # fmt: skip
    """Unit u of a weight whose outputs are the columns base .. base + NW of [q | k | v]: its heads
    counted into their KV heads' counts (cnt_ptr[j]); the last arrival of a KV head attends."""
    c0 = u * U
    h0 = (base + c0) // D
    h1 = h0 + tl.minimum(U, NW - c0) // D
    for j in range(0, HK):
        held = (
            _overlap(h0, h1, j * GROUP, j * GROUP + GROUP)
            + _overlap(h0, h1, HQ + j, HQ + j + 1)
            + _overlap(h0, h1, HQ + HK + j, HQ + HK + j + 1)
        )
        if held > 0:
            done = tl.atomic_add(cnt_ptr + j, held, sem="acq_rel", scope="gpu")
            if done + held == (GROUP + 2) * tl.num_programs(1):
                tl.atomic_xchg(cnt_ptr + j, 0, sem="relaxed", scope="gpu")
                for t in range(0, M, ATOK):
                    attention.program(
                        (tl.program_id(0) * 0 + t).to(tl.int64), j, q_ptr, k_ptr, v_ptr, tables_ptr, seq_ptr,
                        pos_ptr, s_ptr, r_ptr, sink_ptr, out_ptr, xq_ptr, xs_ptr, xdsum_ptr, M, HQ, HK,
                        max_blocks, block_size, s_stride, scale, softcap, window, AD, KV, GROUP, ATOK, BLOCK_G,
                        BLOCK_N, BLOCK_D, SOFTCAP, UNROLL, SINKS, LIMBS, SHIFT, XMAX, MIN_EXP,
                    )  # fmt: skip
