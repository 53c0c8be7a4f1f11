"""The grid types the device decodes (IQ2_XXS, IQ3_XXS, IQ3_S, IQ1_S: kernels/triton/grid.py) in
its integer modes: packed by the C packer as the CPU holds them (on the device at the file's bits
a weight, not as Q8_0's 9), their rows gguf-py's values, their matmuls (the tile path, the decode
MMA one program a tile and split along K, the pair and gate/up launches) the C kernels' bits on
extreme blocks, and a tiny model all of one such type the CPU engine's bits. The fp32 mode keeps
its Q8_0 rewrite. Without a GPU these run under Triton's interpreter."""

from __future__ import annotations

import numpy as np
import pytest

from strata_engine.testing import triton_setup  # noqa: F401  (before triton: TRITON_INTERPRET=1 without a GPU)

pytest.importorskip(
    "triton", reason="the Triton kernels need `pip install triton` (the engine's [gpu] extra)"
)

from gguf import GGMLQuantizationType as QT

from strata_engine.gguf_loader import TensorInfo
from strata_engine.kernels.native.backend import NativeOps
from strata_engine.kernels.triton import gateup, intmatmul, mmadecode, packed
from strata_engine.kernels.triton.backend import TritonOps
from strata_engine.kernels.triton.quantize import quantize
from strata_engine.kernels.triton.stored import from_weight
from strata_engine.kernels.weight_types import TYPES as WTYPES
from strata_engine.kernels.weights import Weight
from strata_engine.testing.extreme_blocks import extreme_blocks
from strata_engine.testing.triton_checks import (
    activations,
    assert_c_bits,
    assert_tiny_model_on_both,
    held_as_the_c_packer,
)
from strata_engine.testing.triton_setup import DEVICE, on

pytestmark = pytest.mark.filterwarnings("ignore:(overflow|invalid value) encountered:RuntimeWarning")

TYPES = (QT.IQ3_S, QT.IQ2_XXS, QT.IQ3_XXS, QT.IQ1_S)
BITS = {
    QT.IQ3_S: 3.4375,
    QT.IQ2_XXS: 2.0625,
    QT.IQ3_XXS: 3.0625,
    QT.IQ1_S: 1.5625,
}  # on the device, the file's


def _weight(qtype: QT, n: int, k: int, seed: int) -> Weight:
    return Weight.from_info(TensorInfo("w", (n, k), qtype, extreme_blocks(qtype, n, k, seed=seed)))


@pytest.mark.parametrize("limbs", (1, 3))
@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_packed_as_held_at_the_files_size(monkeypatch, qtype: QT, limbs: int) -> None:
    """TritonOps.pack gives the C packer's bytes of the weight as held (not a Q8_0 rewrite); on
    the device they take the file's bits a weight; rows are gguf-py's values (an independent
    dequantisation); matmuls are the C kernels' bits on extreme blocks (every grid index and sign,
    extreme and zero scales, a partial group) by the tile path, and by the decode MMA one program
    a tile and split along K."""
    n, k = 40, 512
    held = held_as_the_c_packer(qtype, n, k, limbs, ids=[39, 0, 17, 17, 5])
    dev = held.dev
    assert dev.wtype == WTYPES[qtype].code and dev.wtype in packed.GRID
    rows_bytes = packed.packed_bytes(dev.wtype, n, k)
    assert rows_bytes * 8 / (48 * k) == BITS[qtype]  # whole groups of 16 rows, as the C packer's
    x = activations(5, k, seed=2)
    want = held.c.linear(x, held.cw)
    xq = quantize(on(x), limbs)
    assert_c_bits(intmatmul.matmul_quantised(xq, dev, path="tile").cpu(), want)
    monkeypatch.setattr(intmatmul, "MMA_N", 32)
    for programs in (1, 6):
        monkeypatch.setattr(mmadecode, "PROGRAMS", programs)
        assert_c_bits(intmatmul.matmul_quantised(xq, dev, path="mma").cpu(), want)
        assert_c_bits(intmatmul.matmul_quantised(quantize(on(x[:1]), limbs), dev).cpu(), want[:1])


@pytest.mark.parametrize("qtype", (QT.IQ3_S,), ids=lambda t: t.name)
def test_pair_and_gate_up_launches_give_the_c_kernels_bits(monkeypatch, qtype: QT) -> None:
    """(One type: the launches run the decode program the first test checks for every type.)
    mmapair.py's one launch of a grid weight and an IQ4_XS one, and gateup.py's launch (gate/up,
    SwiGLU and its quantisation) on two grid weights: the C kernels' bits, one program a tile and
    split along K."""
    n, k, rows = 32, 512, 2
    c = NativeOps(1, q8=True, limbs=3)
    gate, up = (c.pack(_weight(qtype, n, k, seed)) for seed in (5, 6))
    other = c.pack(_weight(QT.IQ4_XS, 24, k, 7))
    x = activations(rows, k, seed=rows)
    g, u, o = (c.linear(x, w) for w in (gate, up, other))
    want = c.silu_mul(g, u)
    pg, pu, po = (packed.from_packed(w, DEVICE) for w in (gate, up, other))
    xq = quantize(on(x), 3)
    monkeypatch.setattr(intmatmul, "MMA_N", 32)
    for programs in (1, 12):
        monkeypatch.setattr(mmadecode, "PROGRAMS", programs)
        y1, y2 = intmatmul.matmul_pair(xq, pg, po)
        assert_c_bits(y1.cpu(), g)
        assert_c_bits(y2.cpu(), o)
        assert gateup.fits(xq, pg, pu)
        y, yq = gateup.gated(xq, pg, pu, False)
        assert_c_bits(y.cpu(), want)
        assert np.array_equal(yq.q.cpu().numpy(), quantize(on(want), 3).q.cpu().numpy())


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_the_fp32_mode_keeps_its_q8_0_rewrite(qtype: QT) -> None:
    """ "native-fp32" on the device reads a grid weight as the Q8_0 blocks of its values."""
    w = _weight(qtype, 16, 256, 4)
    assert from_weight(w, DEVICE).kt == WTYPES[QT.Q8_0].code
    assert TritonOps(DEVICE, limbs=None).pack(w) is w


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_tiny_model_of_a_grid_type_equals_the_cpu_engine(tmp_path, qtype: QT) -> None:
    """A tiny model (tied head: its packed copy is the embedding) with every weight of one grid
    type, in "native" on the GPU backend: the CPU engine's bits (prompt logprobs with the top 20,
    greedy decode steps)."""
    from strata_engine.testing.tiny_models import TINY_SPECS, write_tiny_model

    assert_tiny_model_on_both(write_tiny_model(tmp_path / "m.gguf", TINY_SPECS[0], weight_type=qtype))
