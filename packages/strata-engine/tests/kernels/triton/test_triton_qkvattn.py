"""The q/k/v projections, RoPE, the KV cache write and the attention in one launch
(kernels/triton/qkvattn.py) against the separate launches (qkvrope.qkv_rope, then
attention.attention_quantize), bit for bit: the queries, both caches, the attention's output and
its quantised rows. The separate launches are the C kernels' bits (test_triton_qkvrope,
test_triton_kernels). Without a GPU these run under Triton's interpreter."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from strata_engine.testing import triton_setup  # noqa: F401  (before triton: TRITON_INTERPRET=1 without a GPU)

pytest.importorskip(
    "triton", reason="the Triton kernels need `pip install triton` (the engine's [gpu] extra)"
)

from gguf import GGMLQuantizationType as QT

from strata_engine.gguf_loader import TensorInfo
from strata_engine.kernels.base import AttentionMeta, RopeTable
from strata_engine.kernels.native.backend import NativeOps
from strata_engine.kernels.triton import attention, intmatmul, mmadecode, packed, qkvrope
from strata_engine.kernels.triton.quantize import quantize
from strata_engine.kernels.weights import Weight
from strata_engine.testing.tiny_models import encode_tensor
from strata_engine.testing.triton_setup import DEVICE, on

pytestmark = pytest.mark.filterwarnings("ignore:(overflow|invalid value) encountered:RuntimeWarning")

K = 256
HQ, HK, D = 4, 2, 32  # two query heads a KV head
BS = 4  # positions a cache block
TABLES = np.array([[3, 0, 5, 1], [2, 6, 4, 7]], np.int32)
# (sequence, position) of each row: row 4 (the second row group) reads the position row 3 writes
ROWS = [(0, 6), (1, 9), (1, 10), (0, 7), (0, 8)]


def _weight(c: NativeOps, n: int, qtype: QT, rng: np.random.Generator) -> packed.PackedWeight:
    values = rng.normal(0, 0.05, size=(n, K)).astype(np.float32)
    data = np.ascontiguousarray(encode_tensor(values, qtype, rng)).reshape(-1)
    return packed.from_packed(c.pack(Weight.from_info(TensorInfo("w", (n, K), qtype, data))), DEVICE)


def _table() -> RopeTable:
    ang = np.arange(16)[:, None] * 10000.0 ** (-np.arange(D // 2) * 2.0 / D)[None, :]
    return RopeTable(np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32), D, True)


@pytest.mark.parametrize(
    "runs,cache,extras",
    [
        ((QT.Q4_K, QT.Q6_K), torch.float32, False),  # Q4_K_M's layers, llama's plain attention
        ((QT.Q4_K,), torch.float16, True),  # stacked; a scale, a window, a soft-cap and sinks
    ],
    ids=("pair-fp32", "stacked-fp16-extras"),
)
@pytest.mark.parametrize("rows", (1, 5))
def test_one_launch_gives_the_separate_launches_bits(
    monkeypatch, rows: int, runs: tuple[QT, ...], cache: torch.dtype, extras: bool
) -> None:
    """Split along K and not, units of several heads (BN 64) and heads of several tiles (BN 16),
    positions past the first cache block, rows of one sequence across row groups."""
    rng = np.random.default_rng(rows + len(runs))
    c = NativeOps(1, q8=True, limbs=3)
    widths = [(HQ + 2 * HK) * D] if len(runs) == 1 else [(HQ + HK) * D, HK * D]
    weights = [_weight(c, n, t, rng) for n, t in zip(widths, runs, strict=True)]
    xq = quantize(on(rng.normal(0, 1, size=(rows, K)).astype(np.float32)), 3)
    seq = np.array([s for s, _ in ROWS[:rows]], np.int32)
    pos = np.array([p for _, p in ROWS[:rows]], np.int32)
    slots = (TABLES[seq, pos // BS].astype(np.int64) * BS + pos % BS).astype(np.int64)
    meta = AttentionMeta(pos, seq, TABLES, slots, BS)
    table = _table()
    old = torch.from_numpy(rng.normal(0, 1, size=(2, 8, BS, HK, D)).astype(np.float32)).to(cache)
    sinks = on(rng.normal(0, 1, size=HQ).astype(np.float32)) if extras else None
    attend = (0.3, 5, 2.5, sinks) if extras else (None, 0, 0.0, None)  # scale, window, softcap, sinks
    rope_args = (on(pos), on(slots), table, on(table.cos), on(table.sin))
    bound = TABLES.shape[1] * BS - 1

    def separate() -> tuple:
        kd, vd = (on(old[i].clone()) for i in range(2))
        q = qkvrope.qkv_rope(xq, weights, (HQ, HK, D), *rope_args, kd, vd)
        out, oq = attention.attention_quantize(
            q, kd, vd, meta, on(pos), on(seq), on(TABLES), bound, *attend, 3
        )
        return q, kd, vd, out, oq

    def one() -> tuple:
        kd, vd = (on(old[i].clone()) for i in range(2))
        q, out, oq = qkvrope.qkv_rope_attention(
            xq, weights, (HQ, HK, D), *rope_args, kd, vd, meta, on(seq), on(TABLES), bound, *attend, 3
        )
        return q, kd, vd, out, oq

    want = separate()
    # fresh buffers full of NaN: a group attended before its heads are stored reads no stale values
    empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, **k: _nan(empty(*a, **k)))
    for bn, programs in ((64, 1), (16, 64)):
        monkeypatch.setattr(intmatmul, "MMA_N", bn)
        monkeypatch.setattr(mmadecode, "PROGRAMS", programs)
        got = one()
        where = f"BN {bn}, {programs} programs"
        for name, g, w in zip(("queries", "K cache", "V cache", "output"), got, want, strict=False):
            assert torch.equal(_bits(g), _bits(w)), f"{name}, {where}"
        for name in ("q", "s", "dsum"):
            assert torch.equal(_bits(getattr(got[4], name)), _bits(getattr(want[4], name))), (
                f"rows' {name}, {where}"
            )
    assert not mmadecode.counts(torch.device(DEVICE), 1).any(), "every count is back to zero"


def _bits(t: torch.Tensor) -> torch.Tensor:
    return (
        t.view(torch.int32) if t.element_size() == 4 else t.view(torch.int16) if t.element_size() == 2 else t
    )


def _nan(t: torch.Tensor) -> torch.Tensor:
    return t.fill_(float("nan")) if t.is_floating_point() else t


def test_the_backend_op_is_its_two_ops_in_one_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    """TritonOps.qkv_attention gives qkv_rope's caches and then attention's output (and its
    quantised rows, the output projection's input) with their bits, in one launch; a head size
    whose attention rows are not quantised is refused (None: the model's two ops)."""
    from strata_engine.kernels.triton.backend import TritonOps

    rng = np.random.default_rng(7)
    c = NativeOps(1, q8=True, limbs=3)
    values = rng.normal(0, 0.05, size=((HQ + 2 * HK) * D, K)).astype(np.float32)
    data = np.ascontiguousarray(encode_tensor(values, QT.Q4_K, rng)).reshape(-1)
    runs = [
        (
            c.pack(Weight.from_info(TensorInfo("w", ((HQ + 2 * HK) * D, K), QT.Q4_K, data))),
            (HQ * D, HK * D, HK * D),
        )
    ]
    x = rng.normal(0, 1, size=(2, K)).astype(np.float32)
    seq, pos = np.array([0, 1], np.int32), np.array([6, 9], np.int32)
    slots = (TABLES[seq, pos // BS].astype(np.int64) * BS + pos % BS).astype(np.int64)
    meta = AttentionMeta(pos, seq, TABLES, slots, BS)
    old = torch.from_numpy(rng.normal(0, 1, size=(2, 8, BS, HK, D)).astype(np.float32))
    ops = TritonOps(DEVICE, limbs=3)

    def caches() -> tuple[torch.Tensor, torch.Tensor]:
        return on(old[0].clone()), on(old[1].clone())

    kd, vd = caches()
    q = ops.qkv_rope(x, runs, (HQ, HK, D), pos, _table(), kd, vd, slots)
    assert q is not None, "the layer takes the q/k/v launch"
    want = (kd, vd, ops.attention(q, kd, vd, meta), ops._made[1].q)
    launches: list[int] = []
    fused = qkvrope.qkv_rope_attention
    monkeypatch.setattr(qkvrope, "qkv_rope_attention", lambda *a, **k: launches.append(1) or fused(*a, **k))
    kg, vg = caches()
    out = ops.qkv_attention(x, runs, (HQ, HK, D), _table(), kg, vg, meta)
    assert out is not None and launches == [1], "one launch ran both"
    got = (kg, vg, out, ops._made[1].q)
    for name, g, w in zip(("K cache", "V cache", "output", "output digits"), got, want, strict=True):
        assert torch.equal(
            _bits(g) if g.is_floating_point() else g, _bits(w) if w.is_floating_point() else w
        ), name
    monkeypatch.setattr(attention, "quantizes", lambda d: False)  # a head size the attention keeps in fp32
    assert ops.qkv_attention(x, runs, (HQ, HK, D), _table(), *caches(), meta) is None, "refused"
    assert launches == [1]
