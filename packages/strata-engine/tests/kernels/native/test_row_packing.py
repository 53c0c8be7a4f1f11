"""The tied LM head packed a slice of rows at a time (row_packing.py) reads as the whole
matrix's packing (every row's values, and a matmul's bits), for every arithmetic that repacks,
and the file's pages are released after each slice; where the ops do not repack, the loaded
weight is kept as it was. (Bytes are not compared: a K-quant group's unused header bytes are
left as allocated, in either packing.)"""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from strata_engine import row_packing
from strata_engine.gguf_loader import TensorInfo
from strata_engine.kernels.base import Q8_PACKED
from strata_engine.kernels.native.backend import NativeOps
from strata_engine.kernels.weights import Weight
from strata_engine.testing.tiny_models import encode_tensor

ROWS, COLS = 16 * 7, 256  # with 32-row slices: three whole slices and one of 16 rows


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def _info(qtype: QT) -> TensorInfo:
    rng = np.random.default_rng(int(qtype))
    stored = encode_tensor(rng.normal(0, 0.05, size=(ROWS, COLS)), qtype, rng)
    return TensorInfo("token_embd.weight", (ROWS, COLS), qtype, np.frombuffer(stored.tobytes(), np.uint8))


@pytest.mark.parametrize("qtype", [QT.Q8_0, QT.Q4_K, QT.Q6_K], ids=lambda q: q.name)
@pytest.mark.parametrize("limbs", [0, 3], ids=["q8", "limbs"])
def test_slices_read_as_the_whole_matrix(qtype: QT, limbs: int, monkeypatch) -> None:
    monkeypatch.setattr(row_packing, "SLICE_ROWS", 32)
    ops = NativeOps(2, q8=True, limbs=limbs) if limbs else NativeOps(2, q8=True)
    info = _info(qtype)
    released = []
    embedding, head = row_packing.tied_head(ops, info, lambda: released.append(1))
    whole = ops.pack(Weight.from_info(info))
    assert head.kernel_type == whole.kernel_type and head.kernel_type & Q8_PACKED
    assert head.raw.size == whole.raw.size and embedding is head and len(released) == 3
    ids = np.arange(ROWS)
    np.testing.assert_array_equal(bits(ops.embed(embedding, ids)), bits(ops.embed(whole, ids)))
    x = np.random.default_rng(0).normal(0, 1, size=(5, COLS)).astype(np.float32)
    np.testing.assert_array_equal(bits(ops.linear(x, head)), bits(ops.linear(x, whole)))


def test_ops_that_keep_the_weight_get_it_once() -> None:
    ops = NativeOps(2)  # fp32 arithmetic: no repacking
    embedding, head = row_packing.tied_head(ops, _info(QT.Q8_0), lambda: None)
    assert embedding is head and not head.kernel_type & Q8_PACKED
