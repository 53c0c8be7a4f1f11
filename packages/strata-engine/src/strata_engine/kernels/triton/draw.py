"""The draw at temperature > 0 on the device: the sampler's rule (`Sampler.draw`), bit for bit.

The sampler draws from integer weights, floor(e^x * 2^32) of each score shifted by the row's
maximum (`exactmath.draw_weights`), so every sum is exact in any order and the device can add
them in parallel and still draw the host's token. This kernel computes the same float64
operations as exactmath's `exp` (clamp, k by rounding, Cody-Waite, Taylor to degree 13 by
Horner, times 2^k; no FMA: kernels launch with `enable_fp_fusion=False`) and the same integer
rule for top-k, top-p and the draw:

- scores s = lp / temperature (float64, correctly rounded), NaN as -inf; top-k: s below the
  k-th best (from the selection's listing, select.py) is -inf;
- top-p keeps the best ids (weight descending, ties to the lower id) while the weight before
  each is below top_p * total: every id heavier than c, and the first ids (by id) of weight c,
  where c is the least weight whose heavier ids sum below top_p * total (a binary search over
  the weights' range, one pass a step);
- the token is the first id whose running sum passes floor(u * total), u the request's own
  uniform, taken on the host (row_reads.py).

One program a row; each pass runs over the row in blocks of BLOCK. The output is one int32
pair of int32 a row, written where the caller says (the last two columns of the row's selection,
so the step still copies back once): the drawn id (-1: the row has no finite maximum; the host
applies the greedy rule, as the sampler does) and the bits of its fp32 log-probability.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from strata_engine import exactmath
from strata_engine.kernels.rows import DeviceDraw
from strata_engine.kernels.triton import ieee

BLOCK = 1024  # columns a step: sums of integers, so no effect on the draw
SEARCH_STEPS = exactmath.WEIGHT_BITS + 1  # halvings of [1, 2^32]: the top-p weight c is found
# exactmath's constants as constexprs (Python floats: Triton makes them float64 constants exactly)
CUTOFF: tl.constexpr = exactmath.WEIGHT_CUTOFF
SCALE: tl.constexpr = 2.0**exactmath.WEIGHT_BITS
INV_LN2: tl.constexpr = exactmath.INV_LN2
LN2_HI: tl.constexpr = exactmath.LN2_HI
LN2_LO: tl.constexpr = exactmath.LN2_LO
ROUND: tl.constexpr = 6755399441055744.0  # 1.5 * 2^52: (y + ROUND) - ROUND is np.rint(y), |y| < 2^51
C = exactmath.EXP_TAYLOR  # 1/13!, ..., 1/0!
C13: tl.constexpr = C[0]
C12: tl.constexpr = C[1]
C11: tl.constexpr = C[2]
C10: tl.constexpr = C[3]
C9: tl.constexpr = C[4]
C8: tl.constexpr = C[5]
C7: tl.constexpr = C[6]
C6: tl.constexpr = C[7]
C5: tl.constexpr = C[8]
C4: tl.constexpr = C[9]
C3: tl.constexpr = C[10]
C2: tl.constexpr = C[11]
C1: tl.constexpr = C[12]
C0: tl.constexpr = C[13]


@triton.jit
def exp(x):
    """exactmath.exp for x in [WEIGHT_CUTOFF, 0], float64, operation by operation: k = rint(x /
    ln2) (by adding and subtracting 1.5 * 2^52), r by Cody-Waite, Taylor to degree 13 by Horner
    (a multiply, then an add: no FMA), times 2^k (k in [-35, 0]: one exact multiplication)."""
    k = (x * INV_LN2 + ROUND) - ROUND
    r = (x - k * LN2_HI) - k * LN2_LO
    e = tl.full(r.shape, C13, tl.float64)
    e = e * r + C12
    e = e * r + C11
    e = e * r + C10
    e = e * r + C9
    e = e * r + C8
    e = e * r + C7
    e = e * r + C6
    e = e * r + C5
    e = e * r + C4
    e = e * r + C3
    e = e * r + C2
    e = e * r + C1
    e = e * r + C0
    two_k = ((k.to(tl.int64) + 1023) << 52).to(tl.float64, bitcast=True)
    return e * two_k


@triton.jit
def _weights(s, m):
    """exactmath.draw_weights(s - m): floor(e^x * 2^32) as int64, 0 below CUTOFF (and for NaN)."""
    x = s - m
    live = x >= CUTOFF
    w = (exp(tl.where(live, x, 0.0)) * SCALE).to(tl.int64)  # exact product; truncation is floor
    return tl.where(live, w, 0)


@triton.jit
def _scores(row, at, V, t, kth):
    """The row's scores at `at`: lp / temperature in float64, NaN and the top-k cut as -inf."""
    lp = tl.load(row + at, mask=at < V, other=float("-inf"))
    s = lp.to(tl.float64) / t  # float64 division is correctly rounded (PTX div.rn.f64)
    s = tl.where(s != s, float("-inf"), s)
    return tl.where(s < kth, float("-inf"), s)


@triton.jit
def _heavier(row, V, t, kth, m, c, BLOCK: tl.constexpr):
    """The sum of the weights above c (exact)."""
    cols = tl.arange(0, BLOCK)
    g = tl.zeros([], tl.int64)
    for v0 in range(0, V, BLOCK):
        w = _weights(_scores(row, v0 + cols, V, t, kth), m)
        g += tl.sum(tl.where(w > c, w, 0), axis=0)
    return g


@triton.jit
def _kept(w, c, gc, j, p):
    """Top-p's keep rule for weights w whose rank among weight c (by id) is j."""
    before = gc + j * c  # the weight ahead of an id of weight c in the sorted order
    return (w > c) | ((w == c) & ((before == 0) | (before.to(tl.float64) < p)))


@triton.jit(do_not_specialize=["V"])
def _draw_kernel(
    lp_ptr,
    sel_ptr,
    ints_ptr,
    floats_ptr,
    V,
    BLOCK: tl.constexpr,
    SEARCH_STEPS: tl.constexpr,
):
    d = tl.program_id(0)
    src = tl.load(ints_ptr + 3 * d)  # the row of lp
    kth_at = tl.load(ints_ptr + 3 * d + 1)  # where the selection holds the k-th best (-1: no cut)
    out_at = tl.load(ints_ptr + 3 * d + 2)  # where the draw goes
    t = tl.load(floats_ptr + 3 * d)
    top_p = tl.load(floats_ptr + 3 * d + 1)
    u = tl.load(floats_ptr + 3 * d + 2)
    row = lp_ptr + src * V
    cols = tl.arange(0, BLOCK)
    kth32 = tl.load(sel_ptr + tl.maximum(kth_at, 0)).to(tl.float32, bitcast=True)
    kth = kth32.to(tl.float64) / t
    kth = tl.where((kth_at < 0) | (kth != kth), float("-inf"), kth)
    # the maximum, then the total weight
    m = tl.full([], float("-inf"), tl.float64)
    for v0 in range(0, V, BLOCK):
        m = tl.maximum(m, tl.max(_scores(row, v0 + cols, V, t, kth), axis=0))
    total = tl.zeros([], tl.int64)
    for v0 in range(0, V, BLOCK):
        total += tl.sum(_weights(_scores(row, v0 + cols, V, t, kth), m), axis=0)
    # top-p: c, the least weight whose heavier ids weigh below p (c = 0: every id is kept)
    p = top_p * total.to(tl.float64)
    c = tl.zeros([], tl.int64)
    gc = tl.zeros([], tl.int64)
    if top_p < 1.0:
        lo = tl.full([], 1, tl.int64)
        hi = tl.full([], 4294967296, tl.int64)
        for _ in range(SEARCH_STEPS):
            mid = (lo + hi) // 2
            below = _heavier(row, V, t, kth, m, mid, BLOCK).to(tl.float64) < p
            hi = tl.where(below, mid, hi)
            lo = tl.where(below | (lo == hi), lo, mid + 1)  # p = 0: no weight is below it
        c = lo
        gc = _heavier(row, V, t, kth, m, c, BLOCK)
        kept_total = tl.zeros([], tl.int64)
        j0 = tl.zeros([], tl.int64)
        for v0 in range(0, V, BLOCK):
            w = _weights(_scores(row, v0 + cols, V, t, kth), m)
            of_c = (w == c).to(tl.int64)
            j = j0 + tl.cumsum(of_c, axis=0) - of_c
            kept_total += tl.sum(tl.where(_kept(w, c, gc, j, p), w, 0), axis=0)
            j0 += tl.sum(of_c, axis=0)
        total = kept_total
    # the draw: the first id whose running sum passes floor(u * total)
    target = tl.minimum((u * total.to(tl.float64)).to(tl.int64), total - 1)
    drawn = tl.full([], -1, tl.int64)
    running = tl.zeros([], tl.int64)
    j0 = tl.zeros([], tl.int64)
    for v0 in range(0, V, BLOCK):
        at = v0 + cols
        w = _weights(_scores(row, at, V, t, kth), m)
        of_c = (w == c).to(tl.int64)
        j = j0 + tl.cumsum(of_c, axis=0) - of_c
        w = tl.where(_kept(w, c, gc, j, p), w, 0)
        past = running + tl.cumsum(w, axis=0) > target
        hit = tl.min(tl.where(past, at, V), axis=0)
        drawn = tl.where((drawn < 0) & (hit < V), hit, drawn)
        running += tl.sum(w, axis=0)
        j0 += tl.sum(of_c, axis=0)
    drawn = tl.where(total > 0, drawn, -1)
    value = tl.load(row + tl.maximum(drawn, 0))
    tl.store(sel_ptr + out_at, drawn.to(tl.int32))
    tl.store(sel_ptr + out_at + 1, value.to(tl.int32, bitcast=True))


def draw(
    lp: torch.Tensor,
    rows: list[int],
    kth_at: list[int],
    draws: list[DeviceDraw],
    sel: torch.Tensor,
    out_at: list[int],
) -> None:
    """Draw one token from each row `rows[i]` of fp32 log-probabilities `lp` [R, V] by `draws[i]`
    (module docstring). `sel` is the step's int32 selection (select.py): `kth_at[i]` is where it
    holds that row's k-th best value's bits (-1: no top-k cut), and the draw's (id, value bits)
    are written at `out_at[i]`, `out_at[i] + 1` (flat offsets)."""
    if not rows:
        return
    ints = torch.tensor([v for row in zip(rows, kth_at, out_at, strict=True) for v in row], dtype=torch.int64)
    floats = torch.tensor([v for d in draws for v in (d.temperature, d.top_p, d.u)], dtype=torch.float64)
    _draw_kernel[(len(rows),)](
        lp, sel.view(-1), ints.to(lp.device), floats.to(lp.device), lp.shape[1],
        BLOCK=BLOCK, SEARCH_STEPS=SEARCH_STEPS, **ieee.LAUNCH,
    )  # fmt: skip
