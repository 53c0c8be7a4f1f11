"""The draw at temperature > 0 on the device: the sampler's rule (`Sampler.draw`), bit for bit.

The sampler draws from integer weights, floor(e^x * 2^32) of each score shifted by the row's
maximum (`exactmath.draw_weights`), so every sum is exact in any order and the device can add
them in parallel and still draw the host's token. This kernel computes the same float64
operations as exactmath's `exp` (clamp, k by rounding, Cody-Waite, Taylor to degree 13 by
Horner, times 2^k; no FMA: kernels launch with `enable_fp_fusion=False`) and the same integer
rule for top-k, top-p and the draw:

- scores s = lp / temperature (float64, correctly rounded), NaN as -inf; top-k: s below the
  k-th best is -inf; the row's maximum and k-th best are read from its selection (select.py);
- top-p keeps the best ids (weight descending, ties to the lower id) while the weight before
  each is below top_p * total: every id heavier than c, and the first ids (by id) of weight c,
  where c is the least weight whose heavier ids sum below top_p * total;
- the token is the first id whose running sum (in id order) passes floor(u * total), u the
  request's own uniform, taken on the host (row_reads.py).

One program a row, and one pass over the row in blocks of BLOCK: the total weight and each
block's. Then without top-p, the block where the running sum passes the target is weighed again
to find the id. With top-p, when the ids heavier than the selection's lightest are all listed
and weigh at least top_p * total (a peaked row: checked exactly, by their sum), c and the draw
come from the K listed ids alone; else c is found by a binary search over the weights' range
(34 more passes: 33 steps and c's own sum) and the draw by two more. The result is a pair of
int32 a row, written in the last two columns of the row's selection (so the step still copies
back once): the drawn id (-1: the row has no finite maximum; the host applies the greedy rule,
as the sampler does) and the bits of its fp32 log-probability.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from strata_engine import exactmath
from strata_engine.kernels.rows import DeviceDraw
from strata_engine.kernels.triton import ieee

BLOCK = 1024  # columns a step: sums of integers, so no effect on the draw
CHUNKS = 512  # blocks a row may have (a vocabulary of up to 524,288 ids): their sums are kept
SEARCH_STEPS = exactmath.WEIGHT_BITS + 1  # halvings of [1, 2^32]: the top-p weight c is found
# exactmath's constants as constexprs (Python floats: Triton makes them float64 constants exactly)
CUTOFF = tl.constexpr(exactmath.WEIGHT_CUTOFF)
SCALE = tl.constexpr(2.0**exactmath.WEIGHT_BITS)
INV_LN2 = tl.constexpr(exactmath.INV_LN2)
LN2_HI = tl.constexpr(exactmath.LN2_HI)
LN2_LO = tl.constexpr(exactmath.LN2_LO)
ROUND = tl.constexpr(6755399441055744.0)  # 1.5 * 2^52: (y + ROUND) - ROUND is np.rint(y), |y| < 2^51
C = exactmath.EXP_TAYLOR  # 1/13!, ..., 1/0!
C13 = tl.constexpr(C[0])
C12 = tl.constexpr(C[1])
C11 = tl.constexpr(C[2])
C10 = tl.constexpr(C[3])
C9 = tl.constexpr(C[4])
C8 = tl.constexpr(C[5])
C7 = tl.constexpr(C[6])
C6 = tl.constexpr(C[7])
C5 = tl.constexpr(C[8])
C4 = tl.constexpr(C[9])
C3 = tl.constexpr(C[10])
C2 = tl.constexpr(C[11])
C1 = tl.constexpr(C[12])
C0 = tl.constexpr(C[13])


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


@triton.jit
def _draw_in_list(ids, lw, listed, wl, c_none, p, u, V):
    """The top-p draw from the listing alone, when every id heavier than its lightest is listed
    and they weigh at least p (so c, the whole of c's group and every kept id are listed): the
    kernel's rules on K ids, K x K comparisons instead of passes over the row."""
    heavier = tl.sum(tl.where(lw[None, :] > lw[:, None], lw[None, :], 0), axis=1)  # G(lw_i)
    c = tl.min(tl.where(listed & (lw > wl) & (heavier.to(tl.float64) < p), lw, c_none), axis=0)
    gc = tl.sum(tl.where(lw > c, lw, 0), axis=0)
    of_c = listed & (lw == c)
    j = tl.sum((of_c[None, :] & (ids[None, :] < ids[:, None])).to(tl.int64), axis=1)
    kw = tl.where(listed & _kept(lw, c, gc, j, p), lw, 0)
    total = tl.sum(kw, axis=0)
    target = tl.minimum((u * total.to(tl.float64)).to(tl.int64), total - 1)
    before = tl.sum(tl.where(ids[None, :] < ids[:, None], kw[None, :], 0), axis=1)  # in id order
    return tl.min(tl.where((kw > 0) & (before + kw > target), ids, V), axis=0)


@triton.jit(do_not_specialize=["V"])
def _draw_kernel(
    lp_ptr,
    sel_ptr,
    ints_ptr,
    floats_ptr,
    V,
    K: tl.constexpr,
    BLOCK: tl.constexpr,
    CHUNKS: tl.constexpr,
    SEARCH_STEPS: tl.constexpr,
):
    d = tl.program_id(0)
    src = tl.load(ints_ptr + 4 * d)  # the row of lp
    at_sel = tl.load(ints_ptr + 4 * d + 1)  # where the row's selection starts in `sel`
    top_k = tl.load(ints_ptr + 4 * d + 2)  # 0: no cut
    out_at = tl.load(ints_ptr + 4 * d + 3)  # where the draw goes
    t = tl.load(floats_ptr + 3 * d)
    top_p = tl.load(floats_ptr + 3 * d + 1)
    u = tl.load(floats_ptr + 3 * d + 2)
    row = lp_ptr + src * V
    cols = tl.arange(0, BLOCK)
    chunk = tl.arange(0, CHUNKS)
    c_none = tl.full([], 4294967296, tl.int64)  # 2^32: the heaviest weight (p = 0 keeps the best)
    # the selection: the row's K best (ids, value bits); the k-th best is the top-k cut
    ks = tl.arange(0, K)
    ids = tl.load(sel_ptr + at_sel + ks).to(tl.int64)
    listed = ids >= 0
    lv = tl.load(sel_ptr + at_sel + K + ks).to(tl.float32, bitcast=True)
    kth = tl.sum(tl.where(ks == top_k - 1, lv, 0.0), axis=0).to(tl.float64) / t  # one term
    kth = tl.where((top_k <= 0) | (kth != kth), float("-inf"), kth)
    s_list = tl.where(listed, lv.to(tl.float64) / t, float("-inf"))
    s_list = tl.where((s_list != s_list) | (s_list < kth), float("-inf"), s_list)
    m = tl.max(s_list, axis=0)  # the row's maximum is listed
    lw = tl.where(listed, _weights(s_list, m), 0)
    wl = tl.min(tl.where(listed, lw, c_none), axis=0)
    listed_above = tl.sum(tl.where(lw > wl, lw, 0), axis=0)
    # one pass: the total weight, each block's, and the weight above the listing's lightest
    total = tl.zeros([], tl.int64)
    above = tl.zeros([], tl.int64)
    sums = tl.zeros([CHUNKS], tl.int64)
    for v0 in range(0, V, BLOCK):
        w = _weights(_scores(row, v0 + cols, V, t, kth), m)
        block_sum = tl.sum(w, axis=0)
        sums = tl.where(chunk == v0 // BLOCK, block_sum, sums)
        total += block_sum
        above += tl.sum(tl.where(w > wl, w, 0), axis=0)
    p = top_p * total.to(tl.float64)
    drawn = tl.full([], -1, tl.int64)
    if top_p >= 1.0:  # every id kept: the block whose running sum passes the target, then the id
        target = tl.minimum((u * total.to(tl.float64)).to(tl.int64), total - 1)
        at_block = tl.min(tl.where(tl.cumsum(sums, axis=0) > target, chunk, CHUNKS), axis=0)
        running = tl.sum(tl.where(chunk < at_block, sums, 0), axis=0)
        at = at_block * BLOCK + cols
        w = _weights(_scores(row, at, V, t, kth), m)
        drawn = tl.min(tl.where(running + tl.cumsum(w, axis=0) > target, at, V), axis=0).to(tl.int64)
    elif (p > 0.0) & (above == listed_above) & (above.to(tl.float64) >= p):
        drawn = _draw_in_list(ids, lw, listed, wl, c_none, p, u, V)
    else:  # top-p beyond the listing: c by a binary search over the weights, one pass a step
        lo = tl.full([], 1, tl.int64)
        hi = c_none
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
        target = tl.minimum((u * kept_total.to(tl.float64)).to(tl.int64), kept_total - 1)
        running = tl.zeros([], tl.int64)
        j0 = tl.zeros([], tl.int64)
        for v0 in range(0, V, BLOCK):
            at = v0 + cols
            w = _weights(_scores(row, at, V, t, kth), m)
            of_c = (w == c).to(tl.int64)
            j = j0 + tl.cumsum(of_c, axis=0) - of_c
            w = tl.where(_kept(w, c, gc, j, p), w, 0)
            hit = tl.min(tl.where(running + tl.cumsum(w, axis=0) > target, at, V), axis=0)
            drawn = tl.where((drawn < 0) & (hit < V), hit, drawn)
            running += tl.sum(w, axis=0)
            j0 += tl.sum(of_c, axis=0)
    drawn = tl.where(total > 0, drawn, -1)
    value = tl.load(row + tl.maximum(drawn, 0))
    tl.store(sel_ptr + out_at, drawn.to(tl.int32))
    tl.store(sel_ptr + out_at + 1, value.to(tl.int32, bitcast=True))


def draw(
    lp: torch.Tensor, rows: list[int], draws: list[DeviceDraw], sel: torch.Tensor, k: int, at: list[int]
) -> None:
    """Draw one token from each row `rows[i]` of fp32 log-probabilities `lp` [R, V] by `draws[i]`
    (module docstring). `sel` is the step's selection (select.py: the `k` best ids and their
    values' bits first, two columns left at the end of each row); row `at[i]` of it is row
    `rows[i]`'s, and the draw's (id, value bits) are written in its last two columns."""
    if not rows:
        return
    vocab, width = lp.shape[1], sel.shape[1]
    assert vocab <= CHUNKS * BLOCK, f"a vocabulary of at most {CHUNKS * BLOCK} ids"
    ints = [(row, j * width, d.top_k if d.top_k < vocab else 0, j * width + width - 2)
            for row, d, j in zip(rows, draws, at, strict=True)]  # fmt: skip
    floats = [(d.temperature, d.top_p, d.u) for d in draws]
    _draw_kernel[(len(rows),)](
        lp, sel.view(-1), torch.tensor(ints, dtype=torch.int64).to(lp.device),
        torch.tensor(floats, dtype=torch.float64).to(lp.device), vocab,
        K=k, BLOCK=BLOCK, CHUNKS=CHUNKS, SEARCH_STEPS=SEARCH_STEPS, **ieee.LAUNCH,
    )  # fmt: skip
