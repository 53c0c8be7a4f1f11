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


@triton.jit(do_not_specialize=["n"])
def _narrow_kernel(x_ptr, out_ptr, n, KV: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, narrow(tl.load(x_ptr + offs, mask=mask, other=0.0), KV), mask=mask)


def to_cache_type(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`x` as a cache of `dtype` stores it: itself for fp32, else each value rounded (C's bits)."""
    if dtype == torch.float32:
        return x  # stored as it is: no copy, no launch
    x = x.float().contiguous()
    out = torch.empty(x.shape, dtype=torch.int16, device=x.device)
    if n := x.numel():
        _narrow_kernel[(triton.cdiv(n, BLOCK),)](x, out, n, KV=KV_CODES[dtype], BLOCK=BLOCK, **ieee.LAUNCH)
    return out.view(dtype)
