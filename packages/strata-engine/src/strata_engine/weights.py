"""Weights as stored in the GGUF file, and their exact fp32 dequantisation.

Types the native kernels read directly (F32, Q4_0, Q4_1, Q8_0) stay in their block format
and are dequantised panel by panel inside the matmul. Every other type gguf-py can
dequantise (F16, BF16, Q5_*, K-quants, IQ types, ...) is dequantised to fp32 at load time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from gguf import GGMLQuantizationType as QT
from gguf import quants

from strata_engine.api import ModelLoadError
from strata_engine.gguf_loader import TensorInfo

NATIVE_TYPES = {QT.F32: 0, QT.Q4_0: 2, QT.Q4_1: 3, QT.Q8_0: 8}  # GGML type -> kernel type code


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
    """A 2-D weight [out, in]: raw bytes in a native kernel type, plus a lazy fp32 copy."""

    name: str
    out_features: int
    in_features: int
    kernel_type: int  # native kernel type code
    raw: torch.Tensor  # uint8 blocks (or fp32 bytes)
    _dense: torch.Tensor | None = None

    @classmethod
    def from_info(cls, info: TensorInfo) -> Weight:
        if len(info.shape) != 2:
            raise ModelLoadError(f"tensor {info.name}: expected 2 dimensions, got {info.shape}")
        out_f, in_f = info.shape
        if info.qtype in NATIVE_TYPES and in_f % 32 == 0:
            raw = torch.from_numpy(np.array(info.data))  # a private copy: the mmap is read-only
            return cls(info.name, out_f, in_f, NATIVE_TYPES[info.qtype], raw)
        dense = torch.from_numpy(np.ascontiguousarray(dequantize(info)))
        return cls(info.name, out_f, in_f, 0, dense.view(torch.uint8).reshape(-1), dense)

    def dense(self) -> torch.Tensor:
        """fp32 [out, in] (dequantised once on first use; used by the torch fallback ops)."""
        if self._dense is None:
            if self.kernel_type == 0:
                self._dense = self.raw.view(torch.float32).reshape(self.out_features, self.in_features)
            else:
                qtype = next(q for q, code in NATIVE_TYPES.items() if code == self.kernel_type)
                values = quants.dequantize(self.raw.numpy(), qtype)
                self._dense = torch.from_numpy(np.asarray(values, dtype=np.float32)).reshape(
                    self.out_features, self.in_features
                )
        return self._dense


def vector(info: TensorInfo) -> torch.Tensor:
    """A 1-D tensor (norm weight, bias) as fp32."""
    return torch.from_numpy(np.ascontiguousarray(dequantize(info)).reshape(-1).copy())
