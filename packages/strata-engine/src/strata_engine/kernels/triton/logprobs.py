"""Full-vocabulary log-softmax, one program per row, in the C kernel's arithmetic
(logprobs.c strata_log_softmax), so a row's log-probabilities are the CPU's bits:

- the max is max_n's: the largest non-NaN value (a max is exact in any order), and where that
  is a zero, the first zero of the row (the sign a scalar scan keeps);
- the sum of e^(x - max) runs over 16-float steps in order with Kahan compensation in each of
  16 lanes (the last step's padding lanes zero), vector.h's own e^x;
- the lanes' sums minus their compensations are added in double in lane order, and log_d (in
  double, ieee.py) gives the log of the total, rounded once to fp32;
- out = (x - max) - lse.

The compensated sum is a chain of V/16 steps per row (C's order): on a GPU a row is one
program."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from strata_engine.kernels.triton import ieee

BLOCK = 1024  # columns per step of the max and output passes (order-free: no effect on bits)
UNROLL = 16  # 16-float steps of the compensated sum whose loads are issued together (no effect on the bits)
ROWS = 64 if ieee.INTERPRETED else 1  # rows a program (a speed choice only: ieee.INTERPRETED)


@triton.jit(do_not_specialize=["R", "V"])
def _log_softmax_kernel(x_ptr, out_ptr, R, V, ROWS: tl.constexpr, BLOCK: tl.constexpr, UNROLL: tl.constexpr):
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    rmask = (r < R)[:, None]
    rbase = r.to(tl.int64) * V
    base = rbase[:, None]  # [ROWS, 1]
    cols = tl.arange(0, BLOCK)[None, :]
    best = tl.full([ROWS, BLOCK], float("-inf"), tl.float32)
    first_zero = tl.full([ROWS, BLOCK], V, tl.int32)
    for v0 in range(0, V, BLOCK):
        at = v0 + cols
        x = tl.load(x_ptr + base + at, mask=rmask & (at < V), other=float("-inf"))
        best = ieee.vmax(x, best)
        first_zero = tl.minimum(first_zero, tl.where(x == 0.0, at, V))
    mx = tl.max(best, axis=1)  # exact in any order: only a zero's sign depends on it
    fz = tl.min(first_zero, axis=1)
    mx = tl.where(mx == 0.0, tl.load(x_ptr + rbase + fz, mask=(r < R) & (fz < V), other=0.0), mx)
    mx = mx[:, None]

    lanes = tl.arange(0, 16)[None, :]
    acc = tl.zeros([ROWS, 16], dtype=tl.float32)
    comp = tl.zeros([ROWS, 16], dtype=tl.float32)
    # whole chunks of UNROLL steps of 16: their loads and e^x depend on nothing the chain
    # computes, so they are issued together and the chain runs on values already there
    whole = V // (16 * UNROLL) * (16 * UNROLL)
    for i0 in range(0, whole, 16 * UNROLL):
        for u in tl.static_range(UNROLL):
            e = ieee.exp(tl.load(x_ptr + base + i0 + 16 * u + lanes, mask=rmask, other=0.0) - mx)
            y = e - comp
            t = acc + y
            comp = (t - acc) - y
            acc = t
    for i in range(whole, V, 16):  # the rest, a step at a time (the last step's padding lanes zero)
        m = i + lanes < V
        e = ieee.exp(tl.load(x_ptr + base + i + lanes, mask=rmask & m, other=0.0) - mx)
        e = tl.where(m, e, 0.0)
        y = e - comp
        t = acc + y
        comp = (t - acc) - y
        acc = t
    d = acc.to(tl.float64) - comp.to(tl.float64)
    total = tl.zeros([ROWS], dtype=tl.float64)
    for k in tl.static_range(16):
        total = total + ieee.lane(d, k, 16)
    lse = ieee.log_d(total).to(tl.float32)[:, None]

    for v0 in range(0, V, BLOCK):
        at = v0 + cols
        live = rmask & (at < V)
        x = tl.load(x_ptr + base + at, mask=live, other=0.0)
        tl.store(out_ptr + base + at, ieee.canonical_nan((x - mx) - lse), mask=live)


def log_softmax(logits: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """fp32 log-probabilities of each row of [R, V] logits, on the logits' device, C's bits;
    into `out` where given (fp32, contiguous, the logits' shape). `out` may be the logits
    themselves: each value written depends on the row's whole sum, so every read of the row
    comes first (the same bits; the static decode path keeps one [rows, vocab] buffer so)."""
    logits = logits.float().contiguous()
    if out is None:
        out = torch.empty_like(logits)
    assert out.shape == logits.shape and out.dtype == torch.float32 and out.is_contiguous()
    rows, vocab = logits.shape
    if rows and vocab:
        per = ieee.fit(rows, ROWS)
        _log_softmax_kernel[(triton.cdiv(rows, per),)](
            logits, out, rows, vocab, ROWS=per, BLOCK=BLOCK, UNROLL=UNROLL, **ieee.LAUNCH
        )
    return out


def log_softmax_reference(logits: torch.Tensor) -> torch.Tensor:
    """float64 log-softmax: a sanity check of the arithmetic's accuracy, not of its bits."""
    return torch.log_softmax(logits.double(), dim=-1)
