"""Weights as stored in the GGUF file, and their exact fp32 dequantisation.

Types the native kernels read directly (a row of strata_kernels.h's strata_wtypes, read by
weight_types.py: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (these five as the file's own bytes,
fp16 scales and all: `held`), Q2_K, Q4_K, Q5_K, Q6_K, the grid
types IQ2_XXS, IQ3_XXS, IQ3_S, IQ1_S and the K-grid types IQ2_XS, IQ2_S, Q3_K, IQ1_M as stored,
and the 4-bit codebook types IQ4_NL, IQ4_XS and MXFP4 as stored) stay in block
form and are dequantised inside the matmul. TQ1_0 and TQ2_0, whose values are exactly a scale
times small integers, are rewritten at load as Q8_0 blocks with the same values (transcode.py).
Every other type gguf-py can dequantise is dequantised to fp32 at load time.
"""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass

import numpy as np
from gguf import GGML_QUANT_SIZES, quants
from gguf import GGMLQuantizationType as QT

from strata_engine.api import ModelLoadError
from strata_engine.gguf_loader import TensorInfo
from strata_engine.kernels import kquants, transcode
from strata_engine.kernels.native import NativeUnavailable
from strata_engine.kernels.weight_types import (
    HALF_SCALES,
    PACK_CODEBOOK,
    PACK_GRID,
    PACK_KQUANT,
    PACK_STORED,
    TYPES,
)

# GGML type -> kernel type code (strata_kernels.h's enum strata_wtype: WT_<GGML name> = its GGML id)
NATIVE_TYPES = {qtype: t.code for qtype, t in TYPES.items()}


def held(data: np.ndarray) -> np.ndarray:
    """A WP_WIDEN type's blocks as the kernels hold them (kernel type code | HALF_SCALES): the
    file's bytes themselves, uint8 and 1-D, a view where they are contiguous (no copy: a mapped
    file's pages stay the file's, which the OS may drop and read again)."""
    return np.asarray(data).view(np.uint8).reshape(-1)


def widen_scales(blocks: np.ndarray, qtype: QT) -> np.ndarray:
    """The widened block layout (the kernel type code without HALF_SCALES; the GPU's): each
    leading fp16 field (scale d, Q4_1's min m) widened to fp32, quants unchanged. fp16 -> fp32 is
    exact, so the values are gguf-py's."""
    type_size, n_half = TYPES[qtype].stored_bytes, TYPES[qtype].scale_fields
    blocks = blocks.reshape(-1, type_size)
    out = np.empty((blocks.shape[0], type_size + 2 * n_half), dtype=np.uint8)
    out[:, 4 * n_half :] = blocks[:, 2 * n_half :]
    out[:, : 4 * n_half].view(np.float32)[:] = blocks[:, : 2 * n_half].view(np.float16)
    return out.reshape(-1)


def dequantize(info: TensorInfo) -> np.ndarray:
    """fp32 values of a stored tensor, shaped like its torch shape (gguf-py's dequantizer)."""
    if info.qtype == QT.F32:
        return info.data.view(np.float32).reshape(info.shape)
    try:
        values = quants.dequantize(info.data, info.qtype)
    except NotImplementedError as exc:
        raise ModelLoadError(f"tensor {info.name}: weight type {info.qtype.name} is not supported") from exc
    return np.asarray(values, dtype=np.float32).reshape(info.shape)


@dataclass
class Weight:
    """A 2-D weight [out, in]: blocks in the kernels' layout, plus a lazy fp32 copy."""

    name: str
    out_features: int
    in_features: int
    kernel_type: int  # native kernel type code
    raw: np.ndarray  # uint8 blocks in the kernels' layout (see held), or fp32 bytes
    source: TensorInfo | None = None  # the tensor as stored, for the torch fallback's dequantisation
    _dense: np.ndarray | None = None

    @classmethod
    def from_info(cls, info: TensorInfo) -> Weight:
        if len(info.shape) != 2:
            raise ModelLoadError(f"tensor {info.name}: expected 2 dimensions, got {info.shape}")
        out_f, in_f = info.shape
        wt = TYPES.get(info.qtype)
        if wt is not None and in_f % wt.values == 0 and in_f % 32 == 0:
            data = None
            if wt.pack == PACK_STORED:  # its bytes (a caller may hand in typed values: F16 as float16)
                data = np.array(info.data).view(np.uint8).reshape(-1)
            elif wt.pack == PACK_CODEBOOK and info.qtype in transcode.HELD_CODEBOOK:  # the file's blocks
                return cls(info.name, out_f, in_f, wt.code | HALF_SCALES, held(info.data), info)
            elif wt.pack == PACK_CODEBOOK:
                data = transcode.codebook_blocks(info.data, info.qtype)
            elif wt.pack == PACK_GRID:  # None where a scale is not finite: fp32 below
                data = transcode.grid_blocks(info.data, info.qtype)
            elif wt.pack == PACK_KQUANT:
                with suppress(NativeUnavailable):  # no kernels to read the layout: fp32 below
                    data = kquants.pack(info.data, info.qtype)
            else:  # the file's own blocks, fp16 scales read where read
                return cls(info.name, out_f, in_f, wt.code | HALF_SCALES, held(info.data), info)
            if data is not None:
                return cls(info.name, out_f, in_f, wt.code, data, info)
        rewritten = _transcoded(info) if in_f % GGML_QUANT_SIZES[info.qtype][0] == 0 else None
        if rewritten is not None:
            code, data = rewritten
            return cls(info.name, out_f, in_f, code, data, info)
        dense = np.ascontiguousarray(dequantize(info))
        return cls(info.name, out_f, in_f, 0, dense.view(np.uint8).reshape(-1), info, dense)

    def dense(self) -> np.ndarray:
        """fp32 [out, in] (dequantised once on first use; used by the torch fallback ops)."""
        if self._dense is None:
            if self.kernel_type == 0:
                self._dense = self.raw.view(np.float32).reshape(self.out_features, self.in_features)
            else:
                assert self.source is not None
                self._dense = np.ascontiguousarray(dequantize(self.source))
        return self._dense


def _transcoded(info: TensorInfo) -> tuple[int, np.ndarray] | None:
    """A type the kernels have no unpacking of, as the kernels' Q8_0 blocks with the same values
    (transcode.py), or None (the caller widens it to fp32)."""
    if info.qtype in transcode.TYPES and info.shape[1] % 32 == 0:
        data = transcode.to_q8_0(info.data, info.qtype)
        return None if data is None else (TYPES[QT.Q8_0].code, data)
    return None


def widened(w: Weight) -> Weight:
    """A weight held as stored (HALF_SCALES) in the widened layout of the same values (for the
    GPU, whose kernels read that layout: fp32 scales; IQ4_NL and MXFP4 transcode.codebook_blocks);
    any other weight as it is."""
    if w.kernel_type & ~0xFF or not w.kernel_type & HALF_SCALES:  # repacked, or not held so
        return w
    qtype = next(q for q, t in TYPES.items() if t.code == w.kernel_type & ~HALF_SCALES)
    wide = transcode.codebook_blocks if TYPES[qtype].pack == PACK_CODEBOOK else widen_scales
    return Weight(w.name, w.out_features, w.in_features, TYPES[qtype].code, wide(w.raw, qtype), w.source)


def vector(info: TensorInfo) -> np.ndarray:
    """A 1-D tensor (norm weight, bias) as fp32."""
    return np.ascontiguousarray(dequantize(info)).reshape(-1).copy()


def split_rows(w: Weight, sizes: list[int]) -> list[Weight]:
    """Consecutive row ranges of a weight as weights of their own, sharing its packed blocks.

    A matmul output row depends only on its own weight row, so a fused projection (phi3's
    attn_qkv and gate-up) split here gives the same bits as the unfused one, and the blocks
    stay in their stored format.
    """
    if sum(sizes) != w.out_features:
        raise ModelLoadError(f"tensor {w.name}: {w.out_features} rows cannot be split as {sizes}")
    row_bytes = w.raw.size // w.out_features
    parts, start = [], 0
    for n in sizes:
        name = f"{w.name}[{start}:{start + n}]"
        source = None
        if w.kernel_type != 0 and w.source is not None:  # the torch fallback dequantises from it
            src_row = w.source.data.nbytes // w.out_features
            data = w.source.data[start * src_row : (start + n) * src_row]
            source = TensorInfo(name, (n, w.in_features), w.source.qtype, data)
        raw = w.raw[start * row_bytes : (start + n) * row_bytes]
        parts.append(Weight(name, n, w.in_features, w.kernel_type, raw, source))
        start += n
    return parts


def packed_experts(info: TensorInfo) -> list[Weight]:
    """A 3-D expert tensor [n_experts, out, in] as one weight per expert, blocks kept packed."""
    if len(info.shape) != 3:
        raise ModelLoadError(f"tensor {info.name}: expected 3 dimensions, got {info.shape}")
    n, out_f, in_f = info.shape
    flat = Weight.from_info(TensorInfo(info.name, (n * out_f, in_f), info.qtype, info.data))
    return split_rows(flat, [out_f] * n)
