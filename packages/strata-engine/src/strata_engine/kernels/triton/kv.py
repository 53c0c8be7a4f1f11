"""The KV cache's 2-byte types on the device (kv_types.py): attention.c's integer routines as
Triton functions, so a stored value and its widening are the C kernels' bits (NaN included).

The device cache keeps each type's torch dtype (bfloat16, float16) as its label; the kernels read
and write its bits through an int16 view. KV codes are attention.c's: 0 fp32, 1 bf16, 2 fp16.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from strata_engine.kernels.triton import ieee

BLOCK = 1024
KV_CODES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}


@triton.jit
def narrow(x, KV: tl.constexpr):
    """fp32 -> bf16 (KV 1) or fp16 (KV 2) bits as int16, round to nearest even (f32_to_bf16,
    f32_to_f16)."""
    u = x.to(tl.uint32, bitcast=True)
    a = u & 0x7FFFFFFF
    if KV == 1:
        b = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
        b = tl.where(a > 0x7F800000, 0x7FC0, b)
    else:
        r = a - 0x38000000  # the normal case, exponent rebiased
        normal = (r + 0xFFF + ((r >> 13) & 1)) >> 13
        e = (a >> 23).to(tl.int32)  # the subnormal case in units of 2^-24 (a shift of 25: zero)
        shift = tl.maximum(tl.minimum(126 - e, 25), 1).to(tl.uint32)
        m = (a & 0x7FFFFF) | 0x800000
        q = m >> shift
        rem = m - (q << shift)
        half = (m * 0 + 1) << (shift - 1)
        q = tl.where((rem > half) | ((rem == half) & ((q & 1) == 1)), q + 1, q)
        b = tl.where(a >= 0x38800000, normal, q)
        b = tl.where(a >= 0x477FF000, 0x7C00, b)
        b = tl.where(a > 0x7F800000, 0x7E00, b) | ((u >> 16) & 0x8000)
    return b.to(tl.uint16).to(tl.int16, bitcast=True)


@triton.jit
def widen(raw, KV: tl.constexpr):
    """bf16 (KV 1) or fp16 (KV 2) bits, loaded as int16, -> their fp32 value, exactly."""
    h = raw.to(tl.uint16, bitcast=True).to(tl.uint32)
    if KV == 1:
        u = h << 16
    else:
        sign = (h & 0x8000) << 16
        e = (h >> 10) & 0x1F
        m = h & 0x3FF
        normal = sign | ((e + 112) << 23) | (m << 13)
        special = sign | 0x7F800000 | (m << 13)
        sub = (m.to(tl.float32) * 5.9604644775390625e-08).to(
            tl.uint32, bitcast=True
        ) | sign  # m * 2^-24, exact
        u = tl.where(e == 0x1F, special, tl.where(e == 0, sub, normal))
    return u.to(tl.float32, bitcast=True)


@triton.jit(do_not_specialize=["WK", "WV"])
def _write_kernel(k_ptr, v_ptr, kc_ptr, vc_ptr, slots_ptr, WK, WV, KV: tl.constexpr, BLOCK: tl.constexpr):
    """Token t's K row (program 0 on axis 1) or V row (1) into its cache's slot: a copy, no
    arithmetic (a 2-byte cache's values rounded by `narrow`, as attention.c rounds them)."""
    t = tl.program_id(0).to(tl.int64)
    slot = tl.load(slots_ptr + t).to(tl.int64)
    offs = tl.program_id(2).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    if tl.program_id(1) == 0:
        store_row(k_ptr + t * WK, kc_ptr + slot * WK, offs, WK, KV)
    else:
        store_row(v_ptr + t * WV, vc_ptr + slot * WV, offs, WV, KV)


@triton.jit
def store_row(src, dst, offs, W, KV: tl.constexpr, CG: tl.constexpr = False):
    """The row's values at offs (< W) from src into dst, a 2-byte cache's rounded (`narrow`);
    CG: src read past the SM's L1 (outputs other programs of the launch stored: qkvrope.py)."""
    mask = offs < W
    CACHE: tl.constexpr = ".cg" if CG else ""
    x = tl.load(src + offs, mask=mask, other=0.0, cache_modifier=CACHE)
    if KV == 0:
        tl.store(dst + offs, x, mask=mask)
    else:
        tl.store(dst + offs, narrow(x, KV), mask=mask)


def write(
    k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor
) -> None:
    """Rows k [T, ...] and v [T, ...] into the caches' slots (distinct, in range: flat indices
    into [slots, ...]), both in one launch, each value as the cache's type stores it (C's bits)."""
    if k_cache.dtype != v_cache.dtype:
        raise ValueError(f"K cache {k_cache.dtype}, V cache {v_cache.dtype}: one type for both")
    t = k.shape[0]
    if not t:
        return
    k, v = k.float().contiguous(), v.float().contiguous()
    wk, wv = k.numel() // t, v.numel() // t
    code = KV_CODES[k_cache.dtype]
    kc, vc = (c if code == 0 else c.view(torch.int16) for c in (k_cache, v_cache))
    block = min(BLOCK, triton.next_power_of_2(max(wk, wv)))
    grid = (t, 2, triton.cdiv(max(wk, wv), block))
    _write_kernel[grid](k, v, kc, vc, slots.contiguous(), wk, wv, KV=code, BLOCK=block, **ieee.LAUNCH)
