"""The types the KV cache stores its values as (the engine's `kv_cache_dtype`, the server's
`--kv-cache-dtype`).

fp32 (the default) stores K and V exactly. bf16 and fp16 halve the cache: each value is rounded
to nearest even when written (one integer routine in attention.c, the same bits on every target
and on Triton) and widened exactly to fp32 when attention reads it, so every operation after the
read is fp32's and a position's stored bits depend on its own K/V alone (batch-invariant). The
cache arrays carry the type: float32, uint16 (bf16's bits) or float16 numpy arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from strata_engine.kernels.native.header import INTERFACE

# name -> the host array's dtype; the C code (enum strata_kvtype) follows from it
KV_DTYPES: dict[str, type[np.generic]] = {"fp32": np.float32, "bf16": np.uint16, "fp16": np.float16}
_CODES = {
    np.dtype(np.float32): INTERFACE.constant("KV_F32"),
    np.dtype(np.uint16): INTERFACE.constant("KV_BF16"),
    np.dtype(np.float16): INTERFACE.constant("KV_F16"),
}


def check_kv_dtype(name: str) -> str:
    """`name` if it is a KV cache type, else ValueError naming the choices (refused at start)."""
    if name not in KV_DTYPES:
        raise ValueError(f"unknown KV cache dtype {name!r}: choose one of {', '.join(KV_DTYPES)}")
    return name


def kv_bytes(name: str) -> int:
    """Bytes a stored K or V value takes."""
    return np.dtype(KV_DTYPES[check_kv_dtype(name)]).itemsize


def kv_type(cache: Any) -> int:
    """The C kernels' code (enum strata_kvtype) for a cache array, from its dtype."""
    return _CODES[np.dtype(cache.dtype)]


def kv_dtype_name(cache: Any) -> str:
    """The KV type name of a host cache array."""
    return next(name for name, dt in KV_DTYPES.items() if np.dtype(dt) == np.dtype(cache.dtype))
