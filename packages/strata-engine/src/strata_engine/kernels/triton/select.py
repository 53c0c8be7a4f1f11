"""What the host reads of a log-probability row, selected on the device: the row's K best (id,
value) pairs in `logprobs.best_first`'s order, its first NaN, and its values at requested ids.

A greedy or scoring request reads a few entries of a row, not the vocabulary: this kernel lets
the step copy back K + a few values a row instead of the whole row (row_reads.py decides which
rows may). Only comparisons and loads: every value is the row's own bits.

The order is one int64 key per entry: the value's fp32 bits mapped to an integer that orders as
the floats do (NaN as -inf, -0.0 as +0.0), times 2^32, plus (2^31 - 1 - id), so a larger key is
a better entry and equal values go to the lower id; keys are distinct, so the top K is unique.
One program per row (ROWS rows under the interpreter, a speed choice only) runs over the row in
blocks of BLOCK and keeps the K best keys so far: a block's keys that beat the K-th best (few,
after the first blocks of a real row) each take the K-th best's place, largest first; the K kept
are put in order once, at the end. No sort of the row, and no sort network: comparisons and
reductions of exact integers only.

The output is one int32 tensor [S, 2K + 2 + M] (S rows selected), read back in one copy: the K ids (-1 past the
row's end), the K values' bits, the first NaN's id (-1 for none) and bits, the M values' bits.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import triton
import triton.language as tl

from strata_engine.kernels.rows import Row, RowRead, SparseRow, bucket
from strata_engine.kernels.triton import draw, ieee

BLOCK = 1024  # columns a step (order-free: no effect on which entries are selected)
GATHER = 64  # requested ids a step of the gather
ROWS = 64 if ieee.INTERPRETED else 1  # rows a program (a speed choice only: ieee.INTERPRETED)
KEY_MIN = -(2**63)  # below every entry's key: padding past the row's end
NEG_INF_KEY = int(np.array([-np.inf], np.float32).view(np.int32)[0]) ^ 0x7FFFFFFF  # -inf's (and NaN's)


@triton.jit
def _keys(x, at, V, NEG_INF_KEY: tl.constexpr, KEY_MIN: tl.constexpr):
    """Each entry's int64 key (see the module docstring); KEY_MIN past the row's end."""
    bits = x.to(tl.int32, bitcast=True)
    key = bits ^ ((bits >> 31) & 0x7FFFFFFF)  # negative floats: the magnitude's order reversed
    key = tl.where(x == 0.0, 0, key)  # -0.0 == +0.0: a tie, broken by the id
    key = tl.where(x != x, NEG_INF_KEY, key)  # NaN counts as -inf
    key64 = key.to(tl.int64) * 4294967296 + (2147483647 - at).to(tl.int64)
    return tl.where(at < V, key64, KEY_MIN)


@triton.jit(do_not_specialize=["S", "V", "M", "W"])
def _select_kernel(
    x_ptr,
    rows_ptr,
    want_ptr,
    out_ptr,
    S,
    V,
    M,
    W,
    K: tl.constexpr,
    BLOCK: tl.constexpr,
    GATHER: tl.constexpr,
    ROWS: tl.constexpr,
    NEG_INF_KEY: tl.constexpr,
    KEY_MIN: tl.constexpr,
):
    p = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    live = (p < S)[:, None]  # [ROWS, 1]
    src = tl.load(rows_ptr + p, mask=p < S, other=0)
    row = x_ptr + src.to(tl.int64)[:, None] * V
    out = out_ptr + p.to(tl.int64)[:, None] * W
    cols = tl.arange(0, BLOCK)[None, :]
    ks = tl.arange(0, K)[None, :]
    best = tl.full([ROWS, K], KEY_MIN, tl.int64)
    kth = tl.min(best, axis=1)[:, None]  # each row's K-th best key so far
    first_nan = tl.min(tl.full([ROWS, BLOCK], V, tl.int32), axis=1)[:, None]
    for v0 in range(0, V, BLOCK):
        at = v0 + cols
        x = tl.load(row + at, mask=live & (at < V), other=float("-inf"))
        first_nan = tl.minimum(first_nan, tl.min(tl.where(x != x, at, V), axis=1)[:, None])
        keys = tl.where(live, _keys(x, at, V, NEG_INF_KEY, KEY_MIN), KEY_MIN)
        # each key here that beats its row's K-th best, largest first, takes the K-th best's place
        beat = tl.minimum(tl.sum((keys > kth).to(tl.int32), axis=1), K)
        for _ in range(tl.max(beat, axis=0)):
            m = tl.max(keys, axis=1)[:, None]
            place = tl.min(tl.where(best == kth, ks, K), axis=1)[:, None]
            best = tl.where((ks == place) & (m > kth), m, best)
            kth = tl.min(best, axis=1)[:, None]
            keys = tl.where(keys == m, KEY_MIN, keys)
    rest = best  # in order, best first: K extractions (no sort network, whose order is the same)
    best = tl.full([ROWS, K], KEY_MIN, tl.int64)
    for j in range(K):
        m = tl.max(rest, axis=1)[:, None]
        best = tl.where(ks == j, m, best)
        rest = tl.where(rest == m, KEY_MIN, rest)
    valid = best != KEY_MIN
    ids = tl.where(valid, 2147483647 - (best & 0xFFFFFFFF), 0)
    values = tl.load(row + ids, mask=live & valid, other=float("-inf"))
    kmask = live & (ks < K)
    tl.store(out + ks, tl.where(valid, ids, -1).to(tl.int32), mask=kmask)
    tl.store(out + K + ks, values.to(tl.int32, bitcast=True), mask=kmask)
    has_nan = first_nan < V
    nan_value = tl.load(row + first_nan, mask=live & has_nan, other=0.0)
    tl.store(out + 2 * K, tl.where(has_nan, first_nan, -1), mask=live)
    tl.store(out + 2 * K + 1, nan_value.to(tl.int32, bitcast=True), mask=live)
    for m0 in range(0, M, GATHER):
        mi = m0 + tl.arange(0, GATHER)[None, :]
        wanted = live & (mi < M)
        idx = tl.load(want_ptr + p.to(tl.int64)[:, None] * M + mi, mask=wanted, other=-1)
        got = tl.load(row + idx, mask=wanted & (idx >= 0) & (idx < V), other=0.0)
        tl.store(out + 2 * K + 2 + mi, got.to(tl.int32, bitcast=True), mask=wanted)


def select(lp: torch.Tensor, rows: torch.Tensor, k: int, want: torch.Tensor, extra: int = 0) -> torch.Tensor:
    """For each row index in `rows` [S] of fp32 `lp` [R, V]: the packed selection (module
    docstring) of that row's `k` best entries (k a power of two, 2..BLOCK) and its values at
    `want` [S, M] int32 (-1: padding), and `extra` columns left for the draw (draw.py)."""
    assert k >= 2 and k & (k - 1) == 0 and k <= BLOCK, "k: a power of two from 2 to BLOCK"
    lp = lp.float().contiguous()
    vocab = lp.shape[1]
    rows = rows.to(lp.device, torch.int64).contiguous()
    want = want.to(lp.device, torch.int32).contiguous()
    assert want.shape[0] == rows.shape[0]
    n, m = want.shape
    out = torch.empty((n, 2 * k + 2 + m + extra), dtype=torch.int32, device=lp.device)
    if n:
        per = ieee.fit(n, ROWS)
        _select_kernel[(triton.cdiv(n, per),)](
            lp, rows, want, out, n, vocab, m, out.shape[1], K=k, BLOCK=BLOCK, GATHER=GATHER, ROWS=per,
            NEG_INF_KEY=NEG_INF_KEY, KEY_MIN=KEY_MIN, **ieee.LAUNCH,
        )  # fmt: skip
    return out


def unpack(out: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`select`'s packed rows (on the host) as (top ids [R, k], top values [R, k] fp32, first NaN
    ids [R] (-1: none), their values [R] fp32, requested values [R, M] fp32)."""
    return (
        out[:, :k],
        out[:, k : 2 * k].view(np.float32),
        out[:, 2 * k],
        out[:, 2 * k + 1 : 2 * k + 2].view(np.float32)[:, 0],
        out[:, 2 * k + 2 :].view(np.float32),
    )


def read_rows(
    lp: torch.Tensor, reads: list[RowRead | None], at: Sequence[int] | None = None
) -> tuple[list[Row], int]:
    """The host's rows of fp32 log-probabilities `lp` [R, V] on the device, read as `reads` asks
    (row_reads.read_for; None: the whole row), in one copy back; and the bytes that copy moved.
    Read i is of row `at[i]` of `lp` (None: row i), so a caller whose rows hold more than it
    reads (the static decode path's bucket) picks them here, with no gather of its own.

    A full row comes back as an fp32 numpy row, any other as a `SparseRow` of the selection, with
    the token the device drew from it where its read asks for a draw (draw.py)."""
    if not reads:
        return [], 0
    vocab = lp.shape[1]
    src = list(range(len(reads))) if at is None else [int(a) for a in at]
    assert len(src) == len(reads)
    full = [i for i, r in enumerate(reads) if r is None]
    sparse = [(i, r) for i, r in enumerate(reads) if r is not None]
    parts = []
    if full:
        whole = [src[i] for i in full] == list(range(lp.shape[0]))  # every row of lp, in order
        picked_full = lp if whole else lp[torch.tensor([src[i] for i in full], device=lp.device)]
        parts.append(picked_full.view(torch.int32))
    draws = [(j, src[i], r.draw) for j, (i, r) in enumerate(sparse) if r.draw is not None]
    if sparse:
        k = bucket(max(r.top for _, r in sparse))
        want = np.full((len(sparse), max(1, *(len(r.ids) for _, r in sparse))), -1, dtype=np.int32)
        for j, (_, r) in enumerate(sparse):
            want[j, : len(r.ids)] = r.ids
        rows = torch.tensor([src[i] for i, _ in sparse], dtype=torch.int64)
        picked = select(lp, rows, k, torch.from_numpy(want), extra=2 if draws else 0)
        parts.append(picked)
        if draws:  # from the row and its selection (its maximum, its k-th best, its K best)
            draw.draw(
                lp, [i for _, i, _ in draws], [d for _, _, d in draws], picked, k, [j for j, _, _ in draws]
            )
    flat = parts[0].reshape(-1) if len(parts) == 1 else torch.cat([p.reshape(-1) for p in parts])
    host = flat.cpu().numpy()  # the step's one copy back
    out: list[Row] = [np.empty(0, np.float32)] * len(reads)
    if full:
        values = host[: len(full) * vocab].view(np.float32).reshape(len(full), vocab)
        for j, i in enumerate(full):
            out[i] = values[j]
    if sparse:
        packed = host[len(full) * vocab :].reshape(len(sparse), -1)
        top_ids, top_values, nan_ids, nan_values, got = unpack(packed, k)
        for j, (i, r) in enumerate(sparse):
            n = min(k, vocab)
            nan = int(nan_ids[j])
            out[i] = SparseRow.of(
                vocab,
                zip(top_ids[j, :n].tolist(), top_values[j, :n].tolist(), strict=True),
                None if nan < 0 else (nan, float(nan_values[j])),
                zip(r.ids, got[j, : len(r.ids)].tolist(), strict=True),
                None if r.draw is None else (int(packed[j, -2]), float(packed[j, -1:].view(np.float32)[0])),
            )
    return out, host.nbytes
