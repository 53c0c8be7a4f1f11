"""The gated delta rule of a hybrid model's DeltaNet layers on the device, in the C kernel's
arithmetic (recurrence.c delta_step, hybrid_model.delta_rule): the states stay on the device and
a row's outputs are the CPU's bits.

Per token, with S a value head's D x D state (row j: value j's weights over the keys):
S = S * decay; d_j = (v_j - tree(S[j,:] * k)) * beta; S[j,:] = S[j,:] + d_j * k;
o_j = tree(S[j,:] * q) * scale, where tree sums over the key index as C's halving tree
(p[i] + p[i + n/2], halving until one value is left). Each row j is its own chain of
operations, so one program takes a sequence, a value head and BLOCK_J rows of its state, keeps
them in registers over the sequence's tokens in order and stores them once at the end (and, at
a prefix-cache snapshot's token, into the snapshot's slot too). D is a power of two (the tree
then has no padding zero): `supported` says which head sizes run here.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from strata_engine.kernels.triton import ieee

BLOCK_J = 16  # state rows a program on a GPU (a speed choice only: rows never interact)
MAX_D = 256


def supported(d: int) -> bool:
    """Whether a state of head size `d` runs here: a power of two from 2 to MAX_D."""
    return 2 <= d <= MAX_D and d & (d - 1) == 0


@triton.jit
def _halve(p, R: tl.constexpr, N: tl.constexpr):
    """One level of C's tree on each row of p [R, N]: p[:, i] + p[:, i + N/2]."""
    a, b = tl.split(tl.permute(p.reshape(R, 2, N // 2), 0, 2, 1))
    return a + b


@triton.jit
def _tree(p, R: tl.constexpr, D: tl.constexpr):
    """tree_sum of each row of p [R, D] (D a power of two up to 256): its width halves each level."""
    if D >= 256:
        p = _halve(p, R, 256)
    if D >= 128:
        p = _halve(p, R, 128)
    if D >= 64:
        p = _halve(p, R, 64)
    if D >= 32:
        p = _halve(p, R, 32)
    if D >= 16:
        p = _halve(p, R, 16)
    if D >= 8:
        p = _halve(p, R, 8)
    if D >= 4:
        p = _halve(p, R, 4)
    p = _halve(p, R, 2)
    return p.reshape(R)


@triton.jit(do_not_specialize=["HV", "n_caps"])
def _delta_rule_kernel(
    st_ptr, slots_ptr, starts_ptr, counts_ptr, q_ptr, k_ptr, v_ptr, decay_ptr, beta_ptr, core_ptr,
    cap_row_ptr, cap_after_ptr, cap_slot_ptr, n_caps, HV, scale,
    D: tl.constexpr, BLOCK_J: tl.constexpr,
):  # fmt: skip
    r = tl.program_id(0)
    h = tl.program_id(1)
    j = tl.program_id(2) * BLOCK_J + tl.arange(0, BLOCK_J)
    i = tl.arange(0, D)
    start = tl.load(starts_ptr + r).to(tl.int64)
    count = tl.load(counts_ptr + r)
    dd = D * D
    cell = j[:, None] * D + i[None, :]  # [BLOCK_J, D]: the rows' offsets in a head's state
    head = (tl.load(slots_ptr + r).to(tl.int64) * HV + h) * dd
    s = tl.load(st_ptr + head + cell)
    for n in range(count):
        at = (start + n) * HV + h
        k = tl.load(k_ptr + at * D + i)[None, :]
        s = s * tl.load(decay_ptr + at)
        d = (tl.load(v_ptr + at * D + j) - _tree(s * k, BLOCK_J, D)) * tl.load(beta_ptr + at)
        s = s + d[:, None] * k
        o = _tree(s * tl.load(q_ptr + at * D + i)[None, :], BLOCK_J, D) * scale
        tl.store(core_ptr + at * D + j, o)
        for c in range(n_caps):  # a snapshot of this row's state after n + 1 tokens
            hit = ((tl.load(cap_row_ptr + c) == r) & (tl.load(cap_after_ptr + c) == n + 1)).to(tl.int32)
            snap = (tl.load(cap_slot_ptr + c).to(tl.int64) * HV + h) * dd
            tl.store(st_ptr + snap + cell, s, mask=cell < dd * hit)  # every cell, or none
    tl.store(st_ptr + head + cell, s)


def delta_rule(
    states: torch.Tensor,
    slots: torch.Tensor,
    starts: torch.Tensor,
    counts: torch.Tensor,
    qkv: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    decay: torch.Tensor,
    beta: torch.Tensor,
    scale: float,
    captures: tuple[tuple[int, int, int], ...] = (),
) -> torch.Tensor:
    """states [slots, HV, D, D] advanced in place by each row's tokens (rows r: slot slots[r],
    tokens starts[r] .. + counts[r] of q, k, v [T, HV, D], decay and beta [T, HV]); the outputs
    [T, HV, D] returned. captures (row, tokens done, snapshot slot): that row's state after that
    many tokens copied to the snapshot slot. Every tensor on the states' device."""
    q, k, v = (a.float().contiguous() for a in qkv)
    t, hv, d = v.shape
    core = torch.empty_like(v)
    if not t:
        return core
    block = d if ieee.INTERPRETED else min(BLOCK_J, d)
    caps = torch.tensor([list(c) for c in captures] or [[0, 0, 0]], dtype=torch.int32).T.contiguous()
    caps = caps.to(states.device)
    _delta_rule_kernel[(len(slots), hv, d // block)](
        states, slots, starts, counts, q, k, v, decay.float().contiguous(), beta.float().contiguous(), core,
        caps[0], caps[1], caps[2], len(captures), hv, scale,
        D=d, BLOCK_J=block, **ieee.LAUNCH,
    )  # fmt: skip
    return core
