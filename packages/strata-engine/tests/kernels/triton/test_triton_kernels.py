"""The fp32 mode's quantised matmul and the dequantiser on Triton (kernels/triton/matmul.py,
dequant.py) against the C kernels, bit for bit: y = x W^T (+ bias) equals strata_matmul's
(NativeOps.linear on the weight as the engine loads it) for every type the fp32 mode reads in
blocks, 1 to 70 rows (both of C's paths: fused up to 8 rows, panels beyond), odd N, several
block counts, a bias, zeros, signed zeros and huge activations, and with the GPU's tile sizes;
gathered rows equal gguf-py's dequantiser and strata_gather_rows.

Without a GPU these run under Triton's interpreter (one IEEE operation at a time, a
single-rounding FMA): equality says the kernel performs C's operations in C's order."""

from __future__ import annotations

import numpy as np
import pytest

from strata_engine.testing import triton_setup  # noqa: F401  (before triton: TRITON_INTERPRET=1 without a GPU)

pytest.importorskip(
    "triton", reason="the Triton kernels need `pip install triton` (the engine's [gpu] extra)"
)

from gguf import GGMLQuantizationType as QT
from gguf import quants

from strata_engine.gguf_loader import TensorInfo
from strata_engine.kernels.native.backend import NativeOps
from strata_engine.kernels.triton import matmul
from strata_engine.kernels.triton.stored import from_weight
from strata_engine.kernels.weights import NATIVE_TYPES, Weight
from strata_engine.testing.tiny_models import HALF_OFFSETS, encode_tensor, random_native_blocks
from strata_engine.testing.triton_checks import activations, assert_c_bits, device_matmul
from strata_engine.testing.triton_setup import DEVICE, on

QUANTISED = (
    QT.F16, QT.BF16, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0, QT.Q2_K, QT.Q4_K, QT.Q5_K, QT.Q6_K, QT.IQ2_XS,
    QT.IQ2_S,
)  # fmt: skip
SUPER = (QT.Q2_K, QT.Q4_K, QT.Q5_K, QT.Q6_K, QT.IQ2_XS, QT.IQ2_S)  # blocks of 256
N = 37  # odd: a partial program of outputs


@pytest.fixture(scope="module")
def native() -> NativeOps:
    return NativeOps(1)


def _weight(qtype: QT, n: int, k: int, seed: int = 0) -> tuple[Weight, np.ndarray]:
    """(the weight as the engine loads it, gguf-py's fp32 values [n, k]) for random weights;
    Q8_0 also gets quants of -128 (valid, never written by the quantiser)."""
    rng = np.random.default_rng(seed)
    values = rng.normal(0.0, 0.05, size=(n, k)).astype(np.float32)
    data = np.ascontiguousarray(values if qtype == QT.F32 else encode_tensor(values, qtype, rng))
    if qtype == QT.Q8_0:
        data.reshape(-1, 34)[::3, 2 + rng.integers(0, 32)] = 0x80
    dense = np.asarray(quants.dequantize(data, qtype), dtype=np.float32).reshape(n, k)
    return Weight.from_info(TensorInfo("w", (n, k), qtype, data.reshape(-1))), dense


@pytest.mark.parametrize("qtype", QUANTISED, ids=lambda q: q.name)
@pytest.mark.parametrize("m", [1, 2, 5, 19, 70])
def test_quantised_matmul_is_c(native, qtype, m):
    """Up to 8 rows C runs its fused path, beyond its panels: both are dot_1's order."""
    k = 512 if qtype in SUPER else (288 if m % 2 else 96)  # 2 super-blocks; 9 or 3 blocks
    w, _ = _weight(qtype, N, k, seed=m)
    x = activations(m, k, seed=m)
    bias = np.random.default_rng(m).standard_normal(N).astype(np.float32) if m in (2, 19) else None
    assert_c_bits(device_matmul(x, from_weight(w, DEVICE), bias), native.linear(x, w, bias))


def test_the_gpus_tile_sizes_give_c_bits(native, monkeypatch):
    """Under the interpreter a program takes up to 64 x 1024 outputs; a GPU takes 1 x 64 (one
    row) or 16 x 32. Which outputs share a program never changes an output's operations."""
    monkeypatch.setattr(matmul, "tile_for", matmul.gpu_tile)
    monkeypatch.setattr(matmul, "GATHER_TILE", (16, 8))
    for qtype in (QT.Q4_1, QT.Q6_K):
        w, dense = _weight(qtype, 70, 512, seed=3)
        sw = from_weight(w, DEVICE)
        for m in (1, 19):
            x = activations(m, 512, seed=m)
            assert_c_bits(device_matmul(x, sw), native.linear(x, w))
        ids = np.arange(69, -1, -3)
        assert_c_bits(matmul.gather_rows(on(ids), sw.wq, sw.wf, sw.kt, 512, sw.row_bytes).cpu(), dense[ids])


@pytest.mark.parametrize("qtype", (QT.F32, *QUANTISED), ids=lambda q: q.name)
def test_gathered_rows_are_gguf_py_and_c(native, qtype):
    k = 75 if qtype == QT.F32 else 512  # fp32 rows of any length
    w, dense = _weight(qtype, 7, k)
    sw = from_weight(w, DEVICE)
    ids = np.array([6, 0, 3, 3, 1])
    got = matmul.gather_rows(on(ids), sw.wq, sw.wf, sw.kt, k, sw.row_bytes).cpu()
    assert_c_bits(got, dense[ids])
    assert_c_bits(got, native.embed(w, ids))


@pytest.mark.parametrize(
    "qtype", (QT.F16, QT.BF16, QT.Q5_1, QT.Q2_K, QT.IQ2_XS, QT.IQ2_S), ids=lambda q: q.name
)
def test_arbitrary_blocks_are_gguf_py(native, qtype):
    """Any bytes (F16, BF16: infinities, NaNs, subnormals, signed zeros; the others: the largest
    and smallest quants and grid entries under any finite fp16 scales) dequantise to gguf-py's bits."""
    assert qtype in HALF_OFFSETS
    stored = random_native_blocks(qtype, 24, 512, np.random.default_rng(int(qtype)))
    w = Weight.from_info(TensorInfo("w", (24, 512), qtype, stored.reshape(-1)))
    dense = np.asarray(quants.dequantize(stored, qtype), dtype=np.float32).reshape(24, 512)
    sw = from_weight(w, DEVICE)
    ids = np.arange(24)
    assert_c_bits(matmul.gather_rows(on(ids), sw.wq, sw.wf, sw.kt, 512, sw.row_bytes).cpu(), dense)
    x = activations(3, 512, seed=2)
    with np.errstate(over="ignore", invalid="ignore"):  # infinite weights: the interpreter's numpy
        assert_c_bits(device_matmul(x, sw), native.linear(x, w))


def test_empty_calls_and_unread_layouts():
    w, _ = _weight(QT.Q4_K, 33, 256)
    sw = from_weight(w, DEVICE)
    assert device_matmul(np.zeros((0, 256), np.float32), sw).shape == (0, 33)
    assert matmul.gather_rows(on(np.zeros(0, np.int64)), sw.wq, sw.wf, sw.kt, 256, sw.row_bytes).shape == (
        0,
        256,
    )
    f32 = from_weight(_weight(QT.F32, 4, 75)[0], DEVICE)
    with pytest.raises(ValueError, match="quantised blocks"):
        device_matmul(np.zeros((1, 75), np.float32), f32)


def test_the_gpu_kernels_use_the_c_headers_type_codes() -> None:
    """The Triton kernels name type codes by constexprs (wtypes.py): they must be the C header's."""
    from strata_engine.kernels.triton import wtypes

    assert {qt: getattr(wtypes, qt.name).value for qt in NATIVE_TYPES} == NATIVE_TYPES
