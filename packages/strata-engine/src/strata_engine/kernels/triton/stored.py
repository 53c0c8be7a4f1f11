"""Weights on the kernels' device, in the block layout the Triton kernels read.

The engine's `Weight` keeps F32, F16, BF16, Q2_K, IQ2_XS, IQ2_S and Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 as
stored in `raw` (the device reads those bytes, the last five with their fp16 scales widened to fp32
first: `as_q8_0`, weights.widened; an IQ2 type's grid is put
before them, dequant.py, for the fp32 matmul; the integer kernels read them as packed.py expands them);
K-quants (Q4_K, Q5_K, Q6_K) are in the CPU kernels' own layout there
(kquants.py), so where `Weight.source` holds their GGUF bytes (a `TensorInfo`) the GPU reads those
(4.5 to 6.6 bits a weight), otherwise it reads the fp32 copy. Q3_K and IQ1_M, which the CPU
holds as stored, go to the device as the GGUF Q6_K blocks of the same values (transcode.to_q6_k,
`as_q8_0` for the integer kernels). The grid types (IQ2_XXS, IQ3_XXS, IQ3_S, IQ1_S), which the
CPU reads as held, reach the integer kernels as the CPU holds them where the device decodes the
type (every one of them: `for_packing`, the file's 1.56 to 3.44 bits a weight, grid.py); in the
fp32 matmul ("native-fp32") they go to the device as the Q8_0 blocks of the same values
(`as_q8_0`, 8.5 bits a weight). The 4-bit codebook types (IQ4_NL, IQ4_XS, MXFP4) reach the integer
kernels as the CPU holds them (`for_packing`: the C packer's bytes at the file's 4.25-4.5 bits a
weight, looked up on the device, codebook.py); the fp32 matmul ("native-fp32") still reads them
as the Q8_0 blocks of the same values (`as_q8_0`, 8.5 bits a weight).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from gguf import GGMLQuantizationType as QT

from strata_engine.gguf_loader import TensorInfo
from strata_engine.kernels import kquants, transcode
from strata_engine.kernels.torch_backend import tensor
from strata_engine.kernels.triton import grid
from strata_engine.kernels.triton.dequant import GRIDS, row_bytes
from strata_engine.kernels.weight_types import HALF_SCALES, PACK_KQUANT, PACK_STORED, TYPES
from strata_engine.kernels.weights import Weight, widen_scales, widened

# the types C repacks at load (strata_wtypes' WP_KQUANT) are kept as GGUF bytes on the device
RAW_TYPES = {qtype: t.code for qtype, t in TYPES.items() if t.pack == PACK_KQUANT}
# the types the CPU holds in a form of their own, sent to the device as Q8_0 blocks (as_q8_0)
HELD_AS_Q8_0 = transcode.CODEBOOK_TYPES | transcode.GRID_TYPES
# the K-grid types the CPU holds as stored that the device reads as their Q6_K rewrite (to_q6_k)
HELD_AS_Q6_K = transcode.Q6_K_TYPES


@dataclass(frozen=True)
class StoredWeight:
    """[out, in] weight on the device: `wq` its bytes, `wf` the same bytes seen as fp32/fp16."""

    kt: int
    out_features: int
    in_features: int
    row_bytes: int
    wq: torch.Tensor
    wf: torch.Tensor


def _pack(
    kt: int, data: np.ndarray | torch.Tensor, out_f: int, in_f: int, device: torch.device
) -> StoredWeight:
    grid = GRIDS.get(kt)
    if grid is not None:  # an IQ2 type: its grid first (dequant.py)
        data = np.concatenate([grid.view(np.uint8), np.asarray(data).view(np.uint8).reshape(-1)])
    wq = tensor(data).reshape(-1).to(device=device, dtype=torch.uint8).contiguous()
    wf = wq.view(torch.float16 if kt in RAW_TYPES.values() or grid is not None else torch.float32)
    return StoredWeight(kt, out_f, in_f, row_bytes(kt, in_f), wq, wf)


def from_gguf(
    data: np.ndarray, qtype: QT, shape: tuple[int, int], device: torch.device | str
) -> StoredWeight:
    """A weight from its bytes as stored in a GGUF file ([out, in] = `shape`)."""
    out_f, in_f = shape
    device = torch.device(device)
    blocks = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
    wt = TYPES.get(qtype)
    if qtype in HELD_AS_Q6_K:
        q6 = transcode.to_q6_k(blocks, qtype)
        if q6 is None:  # the loader widens such a tensor: no kernel reads these blocks
            raise ValueError(f"{qtype.name} blocks that no Q6_K block equals: no Triton kernel reads them")
        return from_gguf(q6, QT.Q6_K, shape, device)
    if wt is not None and wt.code in GRIDS:  # an IQ2 type, as stored after its grid (dequant.py)
        return _pack(wt.code, torch.from_numpy(blocks.copy()), out_f, in_f, device)
    if qtype in HELD_AS_Q8_0:
        q8 = transcode.to_q8_0(blocks, qtype)
        if q8 is None:  # a grid type's non-finite scale: no kernel reads these blocks
            raise ValueError(f"{qtype.name} blocks with a non-finite scale: no Triton kernel reads them")
        return _pack(TYPES[QT.Q8_0].code, torch.from_numpy(q8), out_f, in_f, device)
    if wt is not None and wt.pack in (PACK_KQUANT, PACK_STORED):
        return _pack(wt.code, torch.from_numpy(blocks.copy()), out_f, in_f, device)
    if wt is not None:
        return _pack(wt.code, torch.from_numpy(widen_scales(blocks, qtype)), out_f, in_f, device)
    raise ValueError(f"no Triton kernel reads {qtype.name} blocks")


def as_q8_0(w: Weight) -> Weight:
    """A codebook- or grid-type weight as the Q8_0 blocks of the same values (the device's form),
    a held Q3_K or IQ1_M one as its Q6_K rewrite (in the C kernels' layout, for the packer), a
    Q4_0 ... Q8_0 one held as stored (fp16 scales) widened (`weights.widened`: the layout the
    device reads, and the packer then packs with fp32 scales); any other weight as it is."""
    w = widened(w)
    src = w.source
    if isinstance(src, TensorInfo) and src.qtype in HELD_AS_Q6_K and w.kernel_type == TYPES[src.qtype].code:
        q6 = transcode.to_q6_k(src.data, src.qtype)
        assert q6 is not None  # the loader held these blocks: their rewrite is exact
        return Weight(
            w.name, w.out_features, w.in_features, TYPES[QT.Q6_K].code, kquants.pack(q6, QT.Q6_K), src
        )
    if (
        not isinstance(src, TensorInfo)
        or src.qtype not in HELD_AS_Q8_0
        or w.kernel_type != TYPES[src.qtype].code
    ):
        return w
    q8 = transcode.to_q8_0(src.data, src.qtype)
    assert q8 is not None  # the loader held these blocks: every scale finite, never refused
    return Weight(w.name, w.out_features, w.in_features, TYPES[QT.Q8_0].code, q8, src)


def for_packing(w: Weight) -> Weight:
    """The weight the C packer packs for the device's integer kernels: a codebook-type weight as
    the loader holds it (the file's blocks, WT_HALF_SCALES: the device decodes that packing,
    codebook.py), a grid-type one as stored (grid.py), any other as `as_q8_0` gives it."""
    src = w.source
    if (
        isinstance(src, TensorInfo)
        and src.qtype in transcode.CODEBOOK_TYPES
        and w.kernel_type == TYPES[src.qtype].code | HALF_SCALES
    ):
        return w
    if isinstance(src, TensorInfo) and src.qtype in transcode.GRID_TYPES and w.kernel_type in grid.HELD:
        return w  # a grid type the device decodes, as stored (grid.py)
    return as_q8_0(w)


def from_weight(w: Weight, device: torch.device) -> StoredWeight:
    """The engine's weight on `device`: packed K-quant bytes when it has them, else its `raw`."""
    src = w.source
    q6_codes = (
        (TYPES[QT.Q6_K].code, TYPES[src.qtype].code)
        if isinstance(src, TensorInfo) and src.qtype in TYPES
        else ()
    )
    if isinstance(src, TensorInfo) and src.qtype in HELD_AS_Q6_K and w.kernel_type in q6_codes:
        return from_gguf(src.data, src.qtype, (w.out_features, w.in_features), device)  # its Q6_K rewrite
    w = as_q8_0(w)
    if (
        isinstance(src, TensorInfo)
        and src.qtype in RAW_TYPES
        and w.in_features % TYPES[src.qtype].values == 0
    ):
        return from_gguf(src.data, src.qtype, (w.out_features, w.in_features), device)
    return _pack(w.kernel_type, w.raw, w.out_features, w.in_features, device)
