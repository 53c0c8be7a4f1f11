"""Paged grouped-query attention over the engine's KV blocks in the C kernel's arithmetic
(attention.c attend_one, attend_group), for prefill and decode alike: a (token, head)'s output
is the CPU's bits.

One program per (token, KV head) on a GPU (TOK tokens a program under the interpreter, where a
wider tensor costs nothing more) serves the GROUP query heads that share that KV head, so each
K and V row is read once for all of them. For each head, over the positions start..pos of its
sequence (start = 0, or pos + 1 - window on sliding-window layers), in C's order:

1. scores s_j = dot_1(q, k_j) * scale: 16 FMA lanes walked over D in 16-float steps (the last
   zero-padded), then vf_hsum's tree; soft-capped (softcap * tanh(s_j / softcap)) where asked;
   the max as max_n's (the largest value; where that is a zero, the first zero);
2. numerators e_j = e^(s_j - max) with vector.h's e^x;
3. sum = ((e_0 + e_1) + e_2) + ... in position order, inv = 1 / sum;
4. out[d] = fma(e_j * inv, v_j[d], out[d]) over j in position order, the D lanes side by side.

With a sink (gpt-oss: a learnt logit per head, no value) the max of step 1 also takes the sink,
and its numerator e^(sink - max) is added to the sum of step 3 after the positions', as C does
(attention.c softmax_numerators).

A bf16 or fp16 cache (kv.py) is widened to fp32 as each K and V value is loaded.

Steps 1 and 2 take BLOCK_N positions at a time. Steps 3 and 4 are C's sequential chains: they
fix the order of every addition over the positions, so a (token, head)'s positions cannot be
split across programs (flash-decoding's splits would add in another order); a program walks its
whole context, and no empty split exists to launch. The scores and numerators wait between the
steps in a scratch row per (token, head) of max_position + 1 floats (rounded up to whole
blocks), and step 1 leaves each position's K/V row offset in a scratch row per (token, KV head),
so step 4's chain reads a V row without a block-table lookup. max_position is a bound the caller
knows without reading the positions (the block tables' width), so that no launch depends on a
position read back to the host; each token's loops end at its own position, read on the device.

Every integer argument that changes from step to step is left unspecialised, so one binary per
model serves every step.

A program's work is the device function `program` (tokens t0 .., one KV head), which qkvattn.py
runs inside the q/k/v launch with the same arguments (`launch_args`): the same bits there.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from strata_engine.kernels.base import AttentionMeta
from strata_engine.kernels.torch_backend import tensor
from strata_engine.kernels.triton import ieee, kv, quantize

BLOCK_N = 32  # positions per step of the scores and numerators (no effect on the bits)
# positions a step of the sum and of the V chain, whose loads are issued together (no effect on
# the bits; a divisor of BLOCK_N, so that a step past the end stays in the scratch's last block):
# 32 in the attention's own launch on a GPU; 4 inside the q/k/v launch (qkvattn.py: launch_args'
# constexprs), whose registers are the matmul's too (on sm_90 any change to this loop there takes
# its one-program-a-tile form from 128 registers to 167), and under the interpreter (every step
# past the end costs it as much as one before)
UNROLL = 4 if ieee.INTERPRETED else 32
FUSED_UNROLL = 4
TOK = 16 if ieee.INTERPRETED else 1  # tokens a program (a speed choice only: ieee.INTERPRETED)


@triton.jit(do_not_specialize=["T", "H", "KVH", "max_blocks", "block_size", "s_stride", "window"])
def _attention_kernel(
    q_ptr, k_ptr, v_ptr, tables_ptr, seq_ptr, pos_ptr, s_ptr, r_ptr, sink_ptr, out_ptr,
    xq_ptr, xs_ptr, xdsum_ptr,
    T, H, KVH, max_blocks, block_size, s_stride, scale, softcap, window,
    D: tl.constexpr, KV: tl.constexpr, GROUP: tl.constexpr, TOK: tl.constexpr, BLOCK_G: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, SOFTCAP: tl.constexpr, UNROLL: tl.constexpr,
    SINKS: tl.constexpr, LIMBS: tl.constexpr, SHIFT: tl.constexpr, XMAX: tl.constexpr,
    MIN_EXP: tl.constexpr,
):  # fmt: skip
    program(
        tl.program_id(0).to(tl.int64) * TOK, tl.program_id(1),
        q_ptr, k_ptr, v_ptr, tables_ptr, seq_ptr, pos_ptr, s_ptr, r_ptr, sink_ptr, out_ptr,
        xq_ptr, xs_ptr, xdsum_ptr, T, H, KVH, max_blocks, block_size, s_stride, scale, softcap, window,
        D, KV, GROUP, TOK, BLOCK_G, BLOCK_N, BLOCK_D, SOFTCAP, UNROLL, SINKS, LIMBS, SHIFT, XMAX, MIN_EXP,
    )  # fmt: skip


@triton.jit
def program(
    t0, kvh, q_ptr, k_ptr, v_ptr, tables_ptr, seq_ptr, pos_ptr, s_ptr, r_ptr, sink_ptr, out_ptr,
    xq_ptr, xs_ptr, xdsum_ptr,
    T, H, KVH, max_blocks, block_size, s_stride, scale, softcap, window,
    D: tl.constexpr, KV: tl.constexpr, GROUP: tl.constexpr, TOK: tl.constexpr, BLOCK_G: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, SOFTCAP: tl.constexpr, UNROLL: tl.constexpr,
    SINKS: tl.constexpr, LIMBS: tl.constexpr, SHIFT: tl.constexpr, XMAX: tl.constexpr,
    MIN_EXP: tl.constexpr,
):  # fmt: skip
    """The attention of tokens t0 .. t0 + TOK (those below T) for KV head kvh: the launch's
    program (t0 / TOK, kvh); qkvattn.py runs it in the q/k/v launch."""
    # TOK tokens a program (1 on a GPU), each with its own positions: [TOK, ...] tensors
    tt = t0 + tl.arange(0, TOK)
    tmask = tt < T
    pos = tl.load(pos_ptr + tt, mask=tmask, other=0)
    table = tables_ptr + tl.load(seq_ptr + tt, mask=tmask, other=0).to(tl.int64) * max_blocks
    start = tl.where((window > 0) & (pos + 1 > window), pos + 1 - window, 0)
    n = pos + 1 - start  # positions start .. pos; scratch index j is position start + j
    n_most = tl.max(n, axis=0)
    g = tl.arange(0, BLOCK_G)
    tg = tmask[:, None] & (g < GROUP)[None, :]  # [TOK, BLOCK_G]
    head = tt[:, None] * H + kvh * GROUP + g[None, :]  # rows of q / out
    srow = s_ptr + head * s_stride  # the heads' scores, then numerators
    rrow = r_ptr + (tt * KVH + kvh) * s_stride  # each position's K/V row offset
    qrow = q_ptr + head * D
    lanes = tl.arange(0, 16)
    jj = tl.arange(0, BLOCK_N)

    # 1. the scores, and their max
    best = tl.full([TOK, BLOCK_G], float("-inf"), tl.float32)
    first_zero = tl.zeros([TOK, BLOCK_G], dtype=tl.int32) + n[:, None]
    for j0 in range(0, n_most, BLOCK_N):
        j = j0 + jj
        jmask = j[None, :] < n[:, None]  # [TOK, BLOCK_N]
        p = start[:, None] + j[None, :]
        blk = tl.load(table[:, None] + p // block_size, mask=jmask & tmask[:, None], other=0).to(tl.int64)
        row = ((blk * block_size + p % block_size) * KVH + kvh) * D  # a valid row past the end too
        tl.store(rrow[:, None] + j[None, :], row, mask=tmask[:, None])
        acc = tl.zeros([TOK, BLOCK_G, BLOCK_N, 16], dtype=tl.float32)
        for c in tl.static_range(0, D, 16):
            dmask = (c + lanes < D)[None, None, :]
            qc = tl.load(qrow[:, :, None] + c + lanes[None, None, :], mask=tg[:, :, None] & dmask, other=0.0)
            if KV == 0:
                kc = tl.load(
                    k_ptr + row[:, :, None] + c + lanes[None, None, :],
                    mask=jmask[:, :, None] & dmask,
                    other=0.0,
                )
            else:  # a 2-byte cache's values widened exactly: every operation after is fp32's
                kc = kv.widen(
                    tl.load(
                        k_ptr + row[:, :, None] + c + lanes[None, None, :],
                        mask=jmask[:, :, None] & dmask,
                        other=0,
                    ),
                    KV,
                )
            acc = tl.fma(qc[:, :, None, :], kc[:, None, :, :], acc)
        rows: tl.constexpr = TOK * BLOCK_G * BLOCK_N
        s = ieee.hsum16(acc.reshape(rows, 16), rows).reshape(TOK, BLOCK_G, BLOCK_N)
        s = s * scale
        if SOFTCAP:
            s = softcap * ieee.tanh(tl.div_rn(s, softcap))
        live = tg[:, :, None] & jmask[:, None, :]
        tl.store(srow[:, :, None] + j[None, None, :], s, mask=live)
        # a max is exact in any order (NaN never wins, as in C); only a zero's sign is not
        best = ieee.vmax(tl.max(tl.where(live & (s == s), s, float("-inf")), axis=2), best)
        at = tl.where(live & (s == 0.0), j[None, None, :], n[:, None, None])
        first_zero = tl.minimum(first_zero, tl.min(at, axis=2))
    tl.debug_barrier()
    zero = tl.load(srow + first_zero, mask=tg & (best == 0.0), other=0.0)
    mx = tl.where(best == 0.0, zero, best)
    if SINKS:  # gpt-oss: the head's sink takes part in the max (C: if (sink > m) m = sink)
        sink = tl.load(sink_ptr + kvh * GROUP + g, mask=g < GROUP, other=0.0)[None, :]
        mx = tl.where(sink > mx, sink, mx)

    # 2. the numerators, in place of the scores; -0.0 past the end (to the end of the block),
    # the identity of addition, so that steps 3 and 4 may run past the end without a mask
    for j0 in range(0, n_most, BLOCK_N):
        j = j0 + jj
        jmask = (j[None, :] < n[:, None])[:, None, :]
        s = tl.load(srow[:, :, None] + j[None, None, :], mask=tg[:, :, None] & jmask, other=0.0)
        e = tl.where(jmask, ieee.exp(s - mx[:, :, None]), -0.0)
        tl.store(srow[:, :, None] + j[None, None, :], e, mask=tg[:, :, None])
    tl.debug_barrier()

    # 3. their sum in position order, UNROLL positions a step (so that their loads are issued
    # together): a -0.0 past the end leaves the sum as it is
    total = tl.zeros([TOK, BLOCK_G], dtype=tl.float32)
    for j0 in range(0, n_most, UNROLL):
        for u in tl.static_range(UNROLL):
            total = total + tl.load(srow + (j0 + u), mask=tg, other=0.0)
    if SINKS:  # the sink's numerator e^(sink - max), added after the positions' sum
        sink_e = ieee.exp(tl.load(sink_ptr + kvh * GROUP + g, mask=g < GROUP, other=0.0)[None, :] - mx)
        total = total + sink_e
    inv = tl.div_rn(1.0, tl.where(tg, total, 1.0))

    # 4. the weighted sum of the V rows in position order, UNROLL positions a step likewise;
    # past the end the weight is -0.0 * inv = -0.0 and the V row is read as +0.0, so that
    # fma(-0.0, +0.0, o) = o exactly, whatever o (a -0.0 included)
    d = tl.arange(0, BLOCK_D)
    o = tl.zeros([TOK, BLOCK_G, BLOCK_D], dtype=tl.float32)
    for j0 in range(0, n_most, UNROLL):
        for u in tl.static_range(UNROLL):
            width = tl.where(j0 + u < n, D, 0)  # each token's live V lanes: none past its end
            vrow = v_ptr + tl.load(rrow + (j0 + u), mask=tmask, other=0)
            if KV == 0:
                v = tl.load(vrow[:, None] + d[None, :], mask=d[None, :] < width[:, None], other=0.0)
            else:  # widened; +0.0 past the end as fp32's
                v = kv.widen(
                    tl.load(vrow[:, None] + d[None, :], mask=d[None, :] < width[:, None], other=0), KV
                )
            w = tl.load(srow + (j0 + u), mask=tg, other=0.0) * inv
            o = tl.fma(w[:, :, None], v[:, None, :], o)
    out = out_ptr + head[:, :, None] * D + d[None, None, :]
    tl.store(out, o, mask=tg[:, :, None] & (d < D)[None, None, :])
    if LIMBS > 0:
        # the integer modes: the output rows [T, H D] quantised here for the attention output's
        # matmul (quantize.store_blocks' operations, as RMSNorm and SwiGLU do theirs), each block
        # of 32 lanes inside one head (D a multiple of 32 and BLOCK_D == D: attention() checks)
        DB: tl.constexpr = BLOCK_D // 32  # blocks a head
        NBLK: tl.constexpr = TOK * BLOCK_G * DB
        bi = tl.arange(0, NBLK)  # o's blocks in its row-major order (token, head, block)
        bt = bi // (BLOCK_G * DB)
        bg = (bi // DB) % BLOCK_G
        btt = t0 + bt
        blocks = (btt * H + kvh * GROUP + bg) * DB + bi % DB  # in the [T, H D / 32] grid
        ok = (btt < T) & (bg < GROUP)
        quantize.store_blocks(
            tl.reshape(o, (NBLK, 32)), blocks, ok, xq_ptr, xs_ptr, xdsum_ptr, LIMBS, SHIFT, XMAX, MIN_EXP
        )


def attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMeta,
    positions: torch.Tensor, token_seq: torch.Tensor, block_tables: torch.Tensor, max_position: int,
    scale: float | None = None, window: int = 0, softcap: float = 0.0, sinks: torch.Tensor | None = None,
) -> torch.Tensor:  # fmt: skip
    """Attention output [T, H, D], C's bits; the index tensors are `meta`'s, already on q's
    device, and `max_position` bounds every position in the step (it sizes the scratch only).
    `scale` defaults to 1/sqrt(D); `window` > 0 attends to the last `window` positions only;
    `softcap` > 0 caps the scores; `sinks` [H] fp32 on q's device (gpt-oss) adds one logit per
    head to the max and the denominator, with no value."""
    return attention_quantize(
        q, k_cache, v_cache, meta, positions, token_seq, block_tables, max_position, scale, window, softcap,
        sinks, None,
    )[0]  # fmt: skip


def quantizes(head_size: int) -> bool:
    """Whether the attention kernel can quantise its output rows: each block of 32 inside one
    head (a power of two of at least 32 lanes, every lane of the program's tile live)."""
    return head_size >= 32 and triton.next_power_of_2(head_size) == head_size


def attention_quantize(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMeta,
    positions: torch.Tensor, token_seq: torch.Tensor, block_tables: torch.Tensor, max_position: int,
    scale: float | None, window: int, softcap: float, sinks: torch.Tensor | None, limbs: int | None,
) -> tuple[torch.Tensor, quantize.Quantised | None]:  # fmt: skip
    """attention()'s output and, with `limbs`, its rows [T, H D] quantised in the same launch
    (quantize.quantize's bits; the head size must pass `quantizes`)."""
    out, xq, args, consts = launch_args(
        q, k_cache, v_cache, meta, positions, token_seq, block_tables, max_position, scale, window, softcap,
        sinks, limbs,
    )  # fmt: skip
    t, kvh = out.shape[0], k_cache.shape[2]
    if t:
        tok = ieee.fit(t, TOK)
        _attention_kernel[(triton.cdiv(t, tok), kvh)](
            *args, TOK=tok, **(consts | {"UNROLL": UNROLL}), **ieee.LAUNCH
        )
    return out, xq


def launch_args(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMeta,
    positions: torch.Tensor, token_seq: torch.Tensor, block_tables: torch.Tensor, max_position: int,
    scale: float | None, window: int, softcap: float, sinks: torch.Tensor | None, limbs: int | None,
) -> tuple[torch.Tensor, quantize.Quantised | None, tuple, dict]:  # fmt: skip
    """attention_quantize's output, quantised rows, and its program's arguments (all but TOK;
    UNROLL the q/k/v launch's, FUSED_UNROLL)."""
    q = q.float().contiguous()
    t, h, d = q.shape
    kvh = k_cache.shape[2]
    out = torch.empty_like(q)
    xq = None
    if limbs is not None:
        if not quantizes(d):
            raise ValueError(f"the attention kernel quantises heads of a power of two >= 32 lanes, not {d}")
        xq = quantize.allocate(t, h * d // 32, limbs, q.device)
    stride = triton.cdiv(max_position + 1, BLOCK_N) * BLOCK_N  # whole blocks: see step 2
    scores = torch.empty(t * h * stride, dtype=torch.float32, device=q.device)
    rows = torch.empty(t * kvh * stride, dtype=torch.int64, device=q.device)
    group = h // kvh
    quant = {"LIMBS": 0, "SHIFT": 0, "XMAX": 0, "MIN_EXP": 0} if xq is None else quantize.constants(xq.limbs)
    code = kv.KV_CODES[k_cache.dtype]  # a 2-byte cache's bits read through an int16 view
    if code:
        k_cache, v_cache = k_cache.view(torch.int16), v_cache.view(torch.int16)
    args = (
        q, k_cache, v_cache, block_tables, token_seq, positions, scores, rows,
        q if sinks is None else sinks, out,
        *((out, out, out) if xq is None else (xq.q, xq.s, xq.dsum)),
        t, h, kvh, block_tables.shape[1], meta.block_size, stride,
        1.0 / math.sqrt(d) if scale is None else scale, softcap, window,
    )  # fmt: skip
    consts = dict(
        D=d, KV=code, GROUP=group, BLOCK_G=triton.next_power_of_2(group), BLOCK_N=BLOCK_N,
        BLOCK_D=triton.next_power_of_2(d), SOFTCAP=softcap > 0.0, UNROLL=FUSED_UNROLL, SINKS=sinks is not None, **quant,
    )  # fmt: skip
    return out, xq, args, consts


def attention_reference(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMeta
) -> torch.Tensor:
    """float64 causal attention of each token over its sequence's cached positions 0..p (a
    sanity check of the arithmetic's accuracy, not of its bits)."""
    out = torch.empty(q.shape, dtype=torch.float64)
    group = q.shape[1] // k_cache.shape[2]
    bs = meta.block_size
    kf, vf = k_cache.double().flatten(0, 1), v_cache.double().flatten(0, 1)
    for i in range(q.shape[0]):
        p = int(meta.positions[i])
        table = tensor(meta.block_tables)[int(meta.token_seq[i])].to(torch.int64)
        j = torch.arange(p + 1)
        slots = table[j // bs] * bs + j % bs
        k = kf[slots].repeat_interleave(group, dim=1)  # [p+1, H, D]
        v = vf[slots].repeat_interleave(group, dim=1)
        s = torch.einsum("hd,jhd->hj", q[i].double(), k) / math.sqrt(q.shape[2])
        out[i] = torch.einsum("hj,jhd->hd", torch.softmax(s, -1), v)
    return out
