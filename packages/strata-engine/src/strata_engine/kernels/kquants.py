"""K-quant blocks (Q4_K, Q5_K, Q6_K) rearranged, exactly, into the layout the C kernels read.

Most published GGUFs are Q4_K_M (Q4_K and Q6_K blocks) or Q5_K_M. The kernels dequantise one
sub-block of 32 at a time, so at load each sub-block is given its quants contiguously and the
fp16 scales are widened to fp32; native/kquant_pack.c does it (and documents the layout) in
C, at memory speed, because the 0.9 GB of a 1.7B model's blocks took seconds in numpy.
"""

from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType as QT

from strata_engine.kernels.host import default_threads
from strata_engine.kernels.native import load
from strata_engine.kernels.weight_types import TYPES


def pack(data: np.ndarray, qtype: QT) -> np.ndarray:
    """The raw GGUF bytes of a K-quant tensor in the kernels' layout (uint8, 1-D).

    Raises NativeUnavailable where the kernels cannot be built (no C compiler): the caller
    then keeps the tensor as fp32, as it does for any type the kernels do not read.
    """
    lib, _ = load()
    wt = TYPES[qtype]  # a type whose pack is WP_KQUANT; its sizes from strata_wtypes
    blocks = np.ascontiguousarray(data, dtype=np.uint8).reshape(-1, wt.stored_bytes)
    out = np.empty(len(blocks) * wt.kernel_bytes, dtype=np.uint8)
    lib.strata_kquant_pack(wt.code, blocks.ctypes.data, len(blocks), out.ctypes.data, default_threads())
    return out
