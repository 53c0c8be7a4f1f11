"""The types the KV cache stores its values as (the engine's `kv_cache_dtype`, the server's
`--kv-cache-dtype`).

fp32 (the default) stores K and V exactly. bf16 and fp16 halve the cache: each value is rounded
to nearest even when written (one integer routine in attention.c, the same bits on every target
and on Triton) and widened exactly to fp32 when attention reads it, so every operation after the
read is fp32's and a position's stored bits depend on its own K/V alone (batch-invariant). The
cache arrays carry the type: float32, uint16 (bf16's bits) or float16 numpy arrays.

q8_0 stores llama.cpp's q8_0 blocks (32 values as an fp16 scale and 32 int8, 34 bytes: 1.06 bytes a
value, 3.8x less than fp32); written from IEEE divisions and integer steps (attention.c), read
exactly as scale times integer. Its blocks lie within a head, so the head size must be a multiple
of 32 (every common model's is). Its cache arrays are uint8, each (slot, head) holding D / 32
blocks.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from strata_engine.kernels.native.header import INTERFACE

# name -> the host array's dtype; the C code (enum strata_kvtype) follows from it
KV_DTYPES: dict[str, type[np.generic]] = {
    "fp32": np.float32,
    "bf16": np.uint16,
    "fp16": np.float16,
    "q8_0": np.uint8,
}
_CODES = {
    np.dtype(np.float32): INTERFACE.constant("KV_F32"),
    np.dtype(np.uint16): INTERFACE.constant("KV_BF16"),
    np.dtype(np.float16): INTERFACE.constant("KV_F16"),
    np.dtype(np.uint8): INTERFACE.constant("KV_Q8_0"),
}
Q8_0_BLOCK = (32, 34)  # values, bytes: a q8_0 block (attention.c's KV_Q8_BLOCK)


def check_kv_dtype(name: str) -> str:
    """`name` if it is a KV cache type, else ValueError naming the choices (refused at start)."""
    if name not in KV_DTYPES:
        raise ValueError(f"unknown KV cache dtype {name!r}: choose one of {', '.join(KV_DTYPES)}")
    return name


def kv_head_width(name: str, head_dim: int) -> int:
    """Elements of the cache array's dtype that one position's K (or V) of one head takes;
    ValueError where the type cannot hold a head of this size (refused at start)."""
    if check_kv_dtype(name) != "q8_0":
        return head_dim
    values, nbytes = Q8_0_BLOCK
    if head_dim % values:
        raise ValueError(
            f"the q8_0 KV cache needs a head size that is a multiple of {values}, not {head_dim}"
        )
    return head_dim // values * nbytes


def kv_head_bytes(name: str, head_dim: int) -> int:
    """Bytes one position's K (or V) of one head takes in the cache."""
    return kv_head_width(name, head_dim) * np.dtype(KV_DTYPES[name]).itemsize


def kv_type(cache: Any) -> int:
    """The C kernels' code (enum strata_kvtype) for a cache array, from its dtype."""
    return _CODES[np.dtype(cache.dtype)]


def kv_dtype_name(cache: Any) -> str:
    """The KV type name of a host cache array."""
    return next(name for name, dt in KV_DTYPES.items() if np.dtype(dt) == np.dtype(cache.dtype))
