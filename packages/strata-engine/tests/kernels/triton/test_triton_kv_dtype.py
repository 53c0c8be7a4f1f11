"""A bf16 or fp16 KV cache on Triton (kernels/triton/kv.py) is the C kernels' cache bit for bit:
each value rounded as attention.c rounds it when written, widened as it widens it when read, and
the paged attention over it the C attention's output (run under TRITON_INTERPRET=1 without a GPU)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from strata_engine.testing import triton_setup  # (before triton: TRITON_INTERPRET=1 without a GPU)

pytest.importorskip(
    "triton", reason="the Triton kernels need `pip install triton` (the engine's [gpu] extra)"
)

import triton
import triton.language as tl

from strata_engine.kernels.native.backend import NativeOps
from strata_engine.kernels.torch_backend import kv_tensor
from strata_engine.kernels.triton import attention, kv
from strata_engine.testing.triton_checks import (
    LENGTHS,
    POSITIONS,
    TOKEN_SEQ,
    assert_c_bits,
    attention_meta,
    paged_cache,
)
from strata_engine.testing.triton_setup import on

KINDS = {"bf16": (np.uint16, torch.bfloat16, 1), "fp16": (np.float16, torch.float16, 2)}


# inf, NaNs, fp16's overflow tie and the value below it, 2^-25 (a tie to zero) and above, the
# least fp16 normal and the value below it, fp32's largest and least values, -0
SPECIAL = [0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0x477FF000, 0x477FEFFF, 0x33000000]
SPECIAL += [0x33000001, 0x38800000, 0x387FFFFF, 0x7F7FFFFF, 0x00000001, 0x80000000]


def _hard_values() -> np.ndarray:
    """fp32 values around every rounding case: ties, subnormals of both types, overflow, NaN."""
    rng = np.random.default_rng(3)
    bits = np.concatenate(
        [
            rng.integers(0, 2**32, 4000, dtype=np.uint64).astype(np.uint32),
            (rng.integers(0x32000000, 0x48000000, 4000, dtype=np.uint64) & ~np.uint64(0xFFF)).astype(
                np.uint32
            ),
            np.array(SPECIAL, np.uint32),
        ]
    )
    bits[4000:8000] |= rng.integers(0, 2, 4000, dtype=np.uint32) << 31
    return bits.view(np.float32)


@pytest.mark.parametrize("name", KINDS)
def test_rounding_is_c(name: str) -> None:
    """kv.write, as the backend writes K and V (both caches in one launch, to scattered slots),
    stores each value as C's kv_write rounds it."""
    np_type, torch_type, _ = KINDS[name]
    x = _hard_values()  # rows of 64 (zeros padding the last): a program a row and cache, not a value
    x = np.concatenate([x, np.zeros(-len(x) % 64, np.float32)]).reshape(-1, 1, 64)
    c, cv = np.zeros(x.shape, np_type), np.zeros(x.shape, np_type)
    slots = np.random.default_rng(5).permutation(x.shape[0])
    NativeOps(1).kv_write(x, -x, c, cv, slots)
    dk, dv = (torch.zeros(c.shape, dtype=torch_type, device=triton_setup.DEVICE) for _ in "kv")
    kv.write(on(x), on(-x), dk, dv, on(slots))
    for got, want in ((dk, c), (dv, cv)):
        assert np.array_equal(got.view(torch.int16).cpu().numpy().view(np.uint16), want.view(np.uint16))
    c = c[slots]  # x's values in x's order, for the check below
    if name == "fp16":  # and both are IEEE's round to nearest even (numpy's conversion), NaN aside
        finite = ~np.isnan(x)
        with np.errstate(over="ignore"):  # to inf, as C rounds them
            want = x[finite].astype(np.float16)
        assert np.array_equal(c[finite].view(np.uint16), want.view(np.uint16))


@triton.jit
def _widen_kernel(raw_ptr, out_ptr, KV: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, kv.widen(tl.load(raw_ptr + offs), KV))


@pytest.mark.parametrize("name", KINDS)
def test_widening_is_exact(name: str) -> None:
    """Every one of the 65,536 values widens to its exact fp32 bits (NaN payloads kept)."""
    raw = np.arange(2**16, dtype=np.uint32).astype(np.uint16)
    out = torch.empty(2**16, dtype=torch.float32, device=triton_setup.DEVICE)
    _widen_kernel[(16,)](on(raw.view(np.int16)), out, KV=KINDS[name][2], BLOCK=4096)
    want = (
        raw.astype(np.uint32) << 16
        if name == "bf16"
        else raw.view(np.float16).astype(np.float32).view(np.uint32)
    )
    assert np.array_equal(out.cpu().numpy().view(np.uint32), want)


@pytest.mark.parametrize("name", KINDS)
@pytest.mark.parametrize(("h", "kvh", "d"), [(6, 2, 64), (8, 2, 24)], ids=["gqa3", "gqa4-odd-d"])
def test_attention_over_a_2_byte_cache_is_c(name: str, h: int, kvh: int, d: int) -> None:
    np_type, torch_type, _ = KINDS[name]
    bs = 16
    k, v, tables = paged_cache(LENGTHS, kvh, d, bs, seed=h + d)
    native = NativeOps(1)
    kc, vc = np.zeros(k.shape, np_type), np.zeros(v.shape, np_type)
    slots = np.random.default_rng(d).permutation(k.shape[0] * bs)  # a scatter
    native.kv_write(k.reshape(-1, kvh, d), v.reshape(-1, kvh, d), kc, vc, slots)
    q = np.random.default_rng(d).standard_normal((len(POSITIONS), h, d)).astype(np.float32)
    meta = attention_meta(tables, TOKEN_SEQ, POSITIONS, bs)
    # the device cache as the Triton backend writes it
    kd = torch.zeros(k.shape, dtype=torch_type, device=triton_setup.DEVICE)
    vd = torch.zeros_like(kd)
    kv.write(on(k.reshape(-1, kvh, d)), on(v.reshape(-1, kvh, d)), kd, vd, on(slots))
    assert torch.equal(kd.cpu().view(torch.int16), kv_tensor(kc).view(torch.int16))
    mp = int(meta.positions.max())
    got = attention.attention(
        on(q), kd, vd, meta, on(meta.positions), on(meta.token_seq), on(meta.block_tables), mp
    ).cpu()
    assert_c_bits(got, native.attention(q, kc, vc, meta))


@pytest.mark.parametrize("name", ["fp32", *KINDS])
@pytest.mark.parametrize(("dim", "d"), [(16, 24), (8, 8)], ids=["partial", "whole"])
def test_rope_and_the_cache_write_in_one_launch(name: str, dim: int, d: int) -> None:
    """rope.rope_write (q and k rotated, k and v to their caches' slots) gives rope's queries and
    the caches rope and kv.write give, as separate launches, bit for bit."""
    from strata_engine.kernels.base import RopeTable
    from strata_engine.kernels.triton import rope

    torch_type = torch.float32 if name == "fp32" else KINDS[name][1]
    rng = np.random.default_rng(dim + d)
    t, hq, hk, slots_n = 3, 6, 2, 8
    ang = np.arange(16)[:, None] * 10000.0 ** (-np.arange(dim // 2) * 2.0 / dim)[None, :]
    table = RopeTable(np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32), dim, True)
    q, k, v = (on(rng.normal(0, 30, (t, h, d)).astype(np.float32)) for h in (hq, hk, hk))
    pos, slots = on(np.array([3, 15, 0], np.int32)), on(np.array([5, 0, 7], np.int64))
    cos, sin = on(table.cos), on(table.sin)
    caches = [torch.zeros((slots_n, hk, d), dtype=torch_type, device=triton_setup.DEVICE) for _ in range(4)]
    got = rope.rope_write(q, k, v, pos, slots, table, cos, sin, caches[0], caches[1])
    kv.write(rope.rope(k, pos, table, cos, sin), v, caches[2], caches[3], slots)
    want = rope.rope(q, pos, table, cos, sin)
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))
    bits = torch.int32 if name == "fp32" else torch.int16
    assert torch.equal(caches[0].view(bits), caches[2].view(bits)) and caches[2].view(bits).any()
    assert torch.equal(caches[1].view(bits), caches[3].view(bits))
