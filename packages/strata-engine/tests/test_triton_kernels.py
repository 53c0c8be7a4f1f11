"""The Triton matmul and dequantiser against an independent float64 torch reference (and
gguf-py's dequantiser), and bitwise batch invariance: row i of an M-row call equals the one-row
call. The float kernels (norm, RoPE, activations, attention, log-softmax) are proven equal to
the C kernels bit for bit in test_triton_float_ops.py.

Without a GPU these run under Triton's interpreter, on tiny shapes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import triton_setup  # noqa: F401  (before triton: TRITON_INTERPRET=1 without a GPU)

pytest.importorskip(
    "triton", reason="the Triton kernels need `pip install triton` (the engine's [gpu] extra)"
)

from gguf import GGMLQuantizationType as QT
from gguf import quants
from tiny_models import encode_tensor
from triton_setup import DEVICE, on, same_bits

from strata_engine.kernels.triton import matmul
from strata_engine.kernels.triton.stored import from_gguf
from strata_engine.kernels.weights import NATIVE_TYPES

QTYPES = (QT.F32, QT.Q4_0, QT.Q4_1, QT.Q8_0, QT.Q4_K, QT.Q5_K, QT.Q6_K)


def _stored(qtype: QT, n: int, k: int, seed: int = 0):
    """(stored weight on the device, gguf-py's fp32 values [n, k]) for random weights."""
    rng = np.random.default_rng(seed)
    values = rng.normal(0.0, 0.05, size=(n, k)).astype(np.float32)
    blocks = values if qtype == QT.F32 else encode_tensor(values, qtype, rng)
    dense = np.asarray(quants.dequantize(blocks, qtype), dtype=np.float32).reshape(n, k)
    return from_gguf(blocks, qtype, (n, k), DEVICE), torch.from_numpy(dense)


def _matmul(x: torch.Tensor, sw, bias=None) -> torch.Tensor:
    b = on(bias) if bias is not None else None
    return matmul.matmul(on(x), sw.wq, sw.wf, sw.kt, sw.out_features, sw.in_features, sw.row_bytes, b).cpu()


@pytest.mark.parametrize("qtype", QTYPES, ids=lambda q: q.name)
def test_dequantise_is_gguf_py_bit_for_bit(qtype):
    sw, dense = _stored(qtype, 7, 512)
    ids = torch.tensor([6, 0, 3, 3, 1])
    got = matmul.gather_rows(on(ids), sw.wq, sw.wf, sw.kt, 512, sw.row_bytes)
    assert same_bits(got, dense[ids])


@pytest.mark.parametrize("qtype", QTYPES, ids=lambda q: q.name)
@pytest.mark.parametrize("m", [1, 5, 19])
def test_matmul_matches_float64_and_is_batch_invariant(qtype, m):
    n, k = 37, (75 if qtype == QT.F32 else 512)  # odd sizes; quantised K is whole blocks
    sw, dense = _stored(qtype, n, k, seed=m)
    gen = torch.Generator().manual_seed(m)
    x = torch.randn(m, k, generator=gen)
    bias = torch.randn(n, generator=gen) if m == 5 else None
    y = _matmul(x, sw, bias)
    ref = matmul.matmul_reference(x, dense, bias)
    scale = (x.double().abs() @ dense.double().abs().T).max()
    assert (y.double() - ref).abs().max() <= 1e-6 * scale
    for i in sorted({0, m // 2, m - 1}):
        assert same_bits(_matmul(x[i : i + 1], sw, bias), y[i : i + 1]), f"row {i} of {m} differs"


def test_matmul_invariant_across_tiles_and_empty_batch():
    """A row gives the same bits at every offset inside an M tile and in a later tile."""
    sw, _ = _stored(QT.Q4_K, 33, 256)
    gen = torch.Generator().manual_seed(1)
    row = torch.randn(1, 256, generator=gen)
    alone = _matmul(row, sw)
    for offset in (3, 16, 21):
        x = torch.randn(24, 256, generator=gen)
        x[offset] = row[0]
        assert same_bits(_matmul(x, sw)[offset : offset + 1], alone)
    assert _matmul(torch.zeros(0, 256), sw).shape == (0, 33)


def test_the_gpu_kernels_use_the_c_headers_type_codes() -> None:
    """The Triton kernels write GGML type codes as literals: they must be the C header's."""
    from strata_engine.kernels.triton import dequant

    assert tuple(NATIVE_TYPES.values()) == (
        dequant.F32,
        dequant.Q4_0,
        dequant.Q4_1,
        dequant.Q8_0,
        dequant.Q4_K,
        dequant.Q5_K,
        dequant.Q6_K,
    )
