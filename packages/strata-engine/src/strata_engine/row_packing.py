"""A large weight repacked for the ops a slice of rows at a time, so loading never holds it twice.

The tied embedding of a large-vocabulary model is the biggest matrix in the file (Gemma 3 270M:
262,144 x 640, 171 MB of Q8_0, 42% of the file). For the integer arithmetics the LM head is
repacked (`Ops.pack`): done whole, the file's pages, the kernels' block layout and the packed
copy were all resident at once (Gemma 3 270M: +160 MB at the load's peak). Packed 8,192 rows at
a time into the final buffer, with the file's pages released after each slice, only one slice
is held twice. The packed layout is a sequence of 16-row groups, so slices of whole groups
concatenate to the whole matrix's packing (test_row_packing.py).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from strata_engine.gguf_loader import TensorInfo
from strata_engine.kernels.base import Q8_PACKED, Ops
from strata_engine.kernels.weights import Weight

SLICE_ROWS = 8192  # a multiple of the packed layout's 16-row groups
GROUP_ROWS = 16


def _rows(info: TensorInfo, start: int, n: int) -> Weight:
    row_bytes = info.data.nbytes // info.shape[0]
    part = info.data.reshape(-1)[start * row_bytes : (start + n) * row_bytes]
    return Weight.from_info(TensorInfo(info.name, (n, info.shape[1]), info.qtype, part))


def tied_head(ops: Ops, info: TensorInfo, release: Callable[[], None]) -> tuple[Weight, Weight]:
    """The embedding and the LM head of a tied `info` (`token_embd.weight`): one weight where the
    ops repack (its rows dequantise to the embedding's values), built a slice of rows at a time
    (`release` drops the file's pages after each slice); else the loaded weight and its `pack`."""
    rows = info.shape[0]
    if len(info.shape) == 2 and rows > SLICE_ROWS and rows % GROUP_ROWS == 0:
        first = ops.pack(_rows(info, 0, SLICE_ROWS))
        if first.kernel_type & Q8_PACKED and isinstance(first.raw, np.ndarray):
            head = _packed_slices(ops, info, first, release)
            return head, head
    weight = Weight.from_info(info)
    head = ops.pack(weight)
    return (head if head.kernel_type & Q8_PACKED else weight), head


def lm_head(
    ops: Ops, need: Callable[[str], TensorInfo], has_output: bool, release: Callable[[], None]
) -> tuple[Weight, Weight]:
    """The embedding and the LM head: the file's own `output.weight` packed for the ops' matmul
    (`has_output`), or the tied embedding (`tied_head`); `need` fetches a tensor or refuses."""
    if has_output:
        return Weight.from_info(need("token_embd.weight")), ops.pack(Weight.from_info(need("output.weight")))
    return tied_head(ops, need("token_embd.weight"), release)


def _packed_slices(ops: Ops, info: TensorInfo, first: Weight, release: Callable[[], None]) -> Weight:
    rows = info.shape[0]
    per_row = first.raw.size // SLICE_ROWS
    raw = np.empty(per_row * rows, dtype=np.uint8)
    raw[: first.raw.size] = first.raw
    for start in range(SLICE_ROWS, rows, SLICE_ROWS):
        n = min(SLICE_ROWS, rows - start)
        part = ops.pack(_rows(info, start, n)).raw
        assert part.size == n * per_row, "a slice packed to another size a row"
        raw[start * per_row : (start + n) * per_row] = part
        release()
    return Weight(info.name, rows, info.shape[1], first.kernel_type, raw, info)
