"""The q/k/v projections, RoPE and the KV cache write in one launch (kernels/triton/qkvrope.py)
against the C kernels, bit for bit.

The reference is the C code: strata_q8_matmul / strata_limb_matmul through NativeOps.linear for
q, k and v on the bytes strata_q8_pack wrote, then NativeOps.rope (strata_rope) on q and k and
NativeOps.kv_write (strata_kv_write) into numpy caches of each type. Without a GPU these run
under Triton's interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from strata_engine.testing import triton_setup  # noqa: F401  (before triton: TRITON_INTERPRET=1 without a GPU)

pytest.importorskip(
    "triton", reason="the Triton kernels need `pip install triton` (the engine's [gpu] extra)"
)

from gguf import GGMLQuantizationType as QT

from strata_engine.gguf_loader import TensorInfo
from strata_engine.kernels.base import RopeTable
from strata_engine.kernels.native.backend import NativeOps
from strata_engine.kernels.torch_backend import kv_tensor
from strata_engine.kernels.triton import intmatmul, mmadecode, packed, qkvrope
from strata_engine.kernels.triton.quantize import quantize
from strata_engine.kernels.weights import Weight
from strata_engine.testing.tiny_models import encode_tensor
from strata_engine.testing.triton_setup import DEVICE, on

pytestmark = pytest.mark.filterwarnings("ignore:(overflow|invalid value) encountered:RuntimeWarning")

K = 256  # 8 blocks, one super-block
HQ, HK, D = 4, 2, 32  # q 128 outputs, k and v 64 each
SLOTS = 8
# (numpy cache type, torch cache type)
CACHES = {
    "fp32": (np.float32, torch.float32),
    "bf16": (np.uint16, torch.bfloat16),
    "fp16": (np.float16, torch.float16),
}


def _data(n: int, qtype: QT, rng: np.random.Generator) -> np.ndarray:
    values = rng.normal(0, 0.05, size=(n, K)).astype(np.float32)
    return np.ascontiguousarray(encode_tensor(values, qtype, rng)).reshape(-1)


def _table(dim: int, interleaved: bool) -> RopeTable:
    ang = np.arange(16)[:, None] * 10000.0 ** (-np.arange(dim // 2) * 2.0 / dim)[None, :]
    return RopeTable(np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32), dim, interleaved)


@pytest.mark.parametrize(
    "runs,cache,dim,interleaved",
    [
        ((QT.Q4_K,), "fp32", D, True),  # q/k/v stacked as one weight, llama's pairs
        ((QT.Q4_K, QT.Q6_K), "bf16", D, False),  # [q; k] and v as Q4_K_M's layers: neox halves
        ((QT.Q4_K, QT.Q6_K), "fp16", 16, True),  # a partial rotation: the dims past it copied
    ],
    ids=("stacked-fp32-pairs", "pair-bf16-neox", "pair-fp16-partial"),
)
@pytest.mark.parametrize("rows", (1, 5))
def test_one_launch_gives_the_c_kernels_bits(
    monkeypatch, rows: int, runs: tuple[QT, ...], cache: str, dim: int, interleaved: bool
) -> None:
    """The rotated queries and both caches: the C kernels' projections, rope and cache write,
    one program a tile and split along K, with units of several heads (BN 64) and heads of
    several tiles (BN 16)."""
    rng = np.random.default_rng(rows + len(runs))
    c = NativeOps(1, q8=True, limbs=3)
    types = (runs[0], runs[0], runs[-1])  # q, k, v
    data = [_data(n, t, rng) for n, t in zip((HQ * D, HK * D, HK * D), types, strict=True)]
    members = [
        c.pack(Weight.from_info(TensorInfo("w", (len(d) // _row(t), K), t, d)))
        for d, t in zip(data, types, strict=True)
    ]
    stacked = [np.concatenate(data)] if len(runs) == 1 else [np.concatenate(data[:2]), data[2]]
    weights = [
        packed.from_packed(c.pack(Weight.from_info(TensorInfo("w", (len(d) // _row(t), K), t, d))), DEVICE)
        for d, t in zip(stacked, runs, strict=True)
    ]
    x = rng.normal(0, 1, size=(rows, K)).astype(np.float32)
    table = _table(dim, interleaved)
    pos = np.array([3, 15, 0, 9, 1][:rows], np.int32)
    slots = np.array([5, 0, 7, 2, 6][:rows], np.int64)
    q, k, v = (c.linear(x, w).reshape(rows, -1, D) for w in members)
    want_q, want_k = c.rope(q, pos, table), c.rope(k, pos, table)
    np_type, torch_type = CACHES[cache]
    kc, vc = (np.zeros((SLOTS, HK, D), np_type) for _ in range(2))
    c.kv_write(want_k, v, kc, vc, slots)
    bits = torch.int32 if cache == "fp32" else torch.int16
    xq = quantize(on(x), 3)
    # fresh buffers full of NaN: a unit rotated before its outputs are stored reads no stale values
    empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, **k: _nan(empty(*a, **k)))
    for bn in (64, 16):
        monkeypatch.setattr(intmatmul, "MMA_N", bn)
        assert qkvrope.tiling([w.out_features for w in weights], D) == (bn, max(bn, D))
        for programs in (1, 64):
            monkeypatch.setattr(mmadecode, "PROGRAMS", programs)
            kd, vd = (torch.zeros((SLOTS, HK, D), dtype=torch_type, device=DEVICE) for _ in range(2))
            args = (on(pos), on(slots), table, on(table.cos), on(table.sin), kd, vd)
            assert qkvrope.fits(rows, K, weights, 3, (HQ, HK, D), table, kd, vd)
            got = qkvrope.qkv_rope(xq, weights, (HQ, HK, D), *args)
            where = f"BN {bn}, {programs} programs"
            assert torch.equal(got.view(torch.int32), on(want_q).view(torch.int32)), f"queries, {where}"
            assert torch.equal(kd.view(bits), kv_tensor(kc).view(bits)), f"K cache, {where}"
            assert torch.equal(vd.view(bits), kv_tensor(vc).view(bits)), f"V cache, {where}"
    assert not mmadecode.counts(torch.device(DEVICE), 1).any(), "every count is back to zero"


def _nan(t: torch.Tensor) -> torch.Tensor:
    return t.fill_(float("nan")) if t.is_floating_point() else t


def _row(t: QT) -> int:
    """Bytes a row of K inputs of type t."""
    from gguf import GGML_QUANT_SIZES

    block, size = GGML_QUANT_SIZES[t]
    return K // block * size


def test_what_one_launch_does_not_take() -> None:
    """Head sizes no tile divides, widths not whole heads, a rotation wider than a head, and
    more rows than the decode path's: not `fits` (the backend then runs the separate launches)."""
    assert qkvrope.tiling([96 * 6], 96) is None  # BN 1024 under the interpreter: 96 divides neither
    assert qkvrope.tiling([128 + 8, 64], 32) is None
    assert qkvrope.tiling([128, 64], 32) == (128, 128)
    rng = np.random.default_rng(0)
    c = NativeOps(1, q8=True, limbs=3)
    d = _data((HQ + 2 * HK) * D, QT.Q4_K, rng)
    w = packed.from_packed(
        c.pack(Weight.from_info(TensorInfo("w", ((HQ + 2 * HK) * D, K), QT.Q4_K, d))), DEVICE
    )
    kd = torch.zeros((SLOTS, HK, D), device=DEVICE)
    assert qkvrope.fits(1, K, [w], 3, (HQ, HK, D), _table(D, True), kd, kd)
    assert not qkvrope.fits(9, K, [w], 3, (HQ, HK, D), _table(D, True), kd, kd)
    assert not qkvrope.fits(1, K, [w], 3, (HQ, HK, D), _table(2 * D, True), kd, kd)
    assert not qkvrope.fits(1, K, [w], 3, (HQ - 1, HK, D), _table(D, True), kd, kd)
    assert not qkvrope.fits(1, K, [w], 1, (HQ, HK, D), _table(D, True), kd, kd)


def _module(name: str, *args: str, interpret: bool) -> None:
    """`python -m strata_engine.testing.<name> args` in a fresh process (the GPU's tiles are
    chosen when the kernels' modules are imported, which this process has done interpreted)."""
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "STRATA_TRITON_GPU_TILES")}
    if interpret:
        env |= {"TRITON_INTERPRET": "1", "STRATA_TRITON_GPU_TILES": "1"}
    done = subprocess.run([sys.executable, "-m", f"strata_engine.testing.{name}", *args], env=env,
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]


def test_the_launch_compiles_for_sm_90_without_spills(tmp_path) -> None:
    """The launch in the forms a GPU runs (testing/qkvrope_launches.py: Q4_K_M's pair and a
    stacked Q4_K weight; one program a tile, split along K for 1 row and for 4; BN 256, heads of
    128, a 2-byte cache; the pair with the attention in it, qkvattn.py) and rope.py's launch (the device functions they share) compiled for sm_90:
    no local memory, no spills."""
    specs, out = tmp_path / "specs.json", tmp_path / "stats.json"
    _module("qkvrope_launches", str(specs), interpret=True)
    recorded = [
        s for s in json.loads(specs.read_text()) if s["name"] in ("_qkv_rope_kernel", "_rope_write_kernel")
    ]
    assert len(recorded) == 10, [s["constexprs"] for s in recorded]
    assert sum(s["constexprs"].get("ATTN", False) for s in recorded) == 3, "the attention's three forms"
    specs.write_text(json.dumps(recorded))
    _module("triton_compile", "analyse", str(specs), str(out), interpret=False)
    rows = json.loads(out.read_text())
    assert len(rows) == len(recorded)
    for r in rows:
        c = r["constexprs"]
        print(c.get("WT"), c.get("WT2"), c.get("SPLIT"), c.get("CR"), c.get("ATTN"), r["registers"])
        assert r["constexprs"].get("BN", 256) == 256 and r["constexprs"].get("U", 256) == 256, (
            "the GPU's tile"
        )
        assert r["local_bytes"] == 0 and r["spill_instructions"] == 0, f"spills: {r}"
