"""The weight types the kernels read: strata_kernels.h's table strata_wtypes, for Python and Triton.

Each type's sizes are written once, as a row of that C table: the kernels index it directly and
this module reads it from the header (native/header.py), so the loader (weights.py), the
K-quant packer's buffers (kquants.py) and the Triton kernels (triton/wtypes.py) cannot disagree
with the C on a block's size. A type the table has no row for is dequantised to fp32 at load.
"""

from __future__ import annotations

from dataclasses import dataclass

from gguf import GGMLQuantizationType as QT

from strata_engine.kernels.native.header import INTERFACE

# How a type's blocks become the kernels' layout at load (enum strata_wpack)
PACK_STORED = INTERFACE.constant("WP_STORED")  # as stored (F32)
# the file's blocks, held as stored with HALF_SCALES (weights.held) or widened (weights.widen_scales)
PACK_WIDEN = INTERFACE.constant("WP_WIDEN")
# added to a WP_WIDEN type's code: its blocks as stored, fp16 scale fields (strata_kernels.h)
HALF_SCALES = INTERFACE.constant("WT_HALF_SCALES")
PACK_KQUANT = INTERFACE.constant("WP_KQUANT")  # rearranged by strata_kquant_pack (kquants.py)
PACK_CODEBOOK = INTERFACE.constant(
    "WP_CODEBOOK"
)  # fp32 scale + 4-bit indices a 32 (transcode.codebook_blocks)
PACK_GRID = INTERFACE.constant("WP_GRID")  # as stored, if every scale is finite (transcode.grid_blocks)
# The arithmetics that read a type (enum strata_wreads), or'ed in WeightType.reads
READS_FP32 = INTERFACE.constant("READS_FP32")
READS_Q8 = INTERFACE.constant("READS_Q8")
READS_LIMB = INTERFACE.constant("READS_LIMB")


@dataclass(frozen=True)
class WeightType:
    """One row of strata_wtypes (the header's comments say what each field means)."""

    qtype: QT
    code: int  # the kernel type code: the GGML id (enum strata_wtype)
    values: int
    stored_bytes: int
    kernel_bytes: int
    scale_fields: int
    pack: int
    reads: int

    @property
    def device_bytes(self) -> int:
        """Bytes a block in the layout the Triton kernels read: the file's own for the types C
        repacks (they read GGUF K-quant blocks), else the C kernels' (F32, widened scales)."""
        return self.stored_bytes if self.pack == PACK_KQUANT else self.kernel_bytes

    def row_bytes(self, in_features: int, device: bool = False) -> int:
        """Bytes of one row of `in_features` values in the C kernels' layout (or the device's)."""
        return in_features // self.values * (self.device_bytes if device else self.kernel_bytes)


def _types() -> dict[QT, WeightType]:
    codes = INTERFACE.enums["strata_wtype"]
    table = INTERFACE.tables["strata_wtypes"]
    return {
        QT[name.removeprefix("WT_")]: WeightType(QT[name.removeprefix("WT_")], code, **table[code])
        for name, code in codes.items()
        if code in table
    }


TYPES = _types()  # GGML type -> its row, for every type the kernels read
BY_CODE = {t.code: t for t in TYPES.values()}  # kernel type code -> its row
