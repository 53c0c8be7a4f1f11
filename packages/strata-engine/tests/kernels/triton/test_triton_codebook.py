"""The 4-bit codebook types (IQ4_NL, MXFP4, IQ4_XS) in the device's integer modes
(kernels/triton/codebook.py): packed by the C packer as the CPU holds them (on the device at the
file's 4.25-4.5 bits a weight, not as Q8_0's 8.5), their rows gguf-py's values, their matmuls the C
kernels' bits, and a tiny model all of one such type the CPU engine's bits. The fp32 mode keeps
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

TYPES = (QT.IQ4_NL, QT.MXFP4, QT.IQ4_XS)
BITS = {QT.IQ4_NL: 4.5, QT.MXFP4: 4.25, QT.IQ4_XS: 4.25}  # a weight on the device, as in the file


@pytest.mark.parametrize("limbs", (1, 3))
@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_packed_as_held_at_the_files_size(qtype: QT, limbs: int) -> None:
    """TritonOps.pack gives the C packer's bytes of the weight as held (not a Q8_0 rewrite); on
    the device they take the file's bits a weight; rows are gguf-py's values (an independent
    dequantisation), matmuls the C kernels' bits, on extreme blocks (every index, extreme scales)."""
    n, k = 48, 512
    held = held_as_the_c_packer(qtype, n, k, limbs, ids=[47, 0, 17, 17, 5])
    assert held.dev.wtype == WTYPES[qtype].code | 128 and held.dev.wtype in packed.CODEBOOK
    assert held.dev.wq.numel() * 8 / (n * k) == BITS[qtype]
    x = activations(5, k, seed=2)
    assert_c_bits(held.ops.linear(x, held.pw).cpu(), held.c.linear(x, held.cw))


@pytest.mark.parametrize(
    "types", [(QT.MXFP4, QT.IQ4_XS), (QT.IQ4_NL, QT.MXFP4)], ids=lambda t: f"{t[0].name}+{t[1].name}"
)
@pytest.mark.parametrize("rows", (1, 5))
def test_the_gate_up_launch_gives_the_c_kernels_bits(monkeypatch, rows: int, types: tuple[QT, QT]) -> None:
    """gateup.py's one launch (gate/up, SwiGLU and its quantisation) on codebook weights: the C
    kernels' product and quantize's digits of it, one program a tile and split along K."""
    n, k = 160, 768
    c = NativeOps(1, q8=True, limbs=3)
    weights = [
        c.pack(Weight.from_info(TensorInfo("w", (n, k), t, extreme_blocks(t, n, k, seed=rows + i))))
        for i, t in enumerate(types)
    ]
    x = activations(rows, k, seed=rows)
    g, u = (c.linear(x, w) for w in weights)
    want = c.silu_mul(g, u)
    pws = [packed.from_packed(w, DEVICE) for w in weights]
    xq = quantize(on(x), 3)
    monkeypatch.setattr(intmatmul, "MMA_N", 64)
    for programs in (1, 3 * 2 * (-(-rows // mmadecode.TOKENS.value))):
        monkeypatch.setattr(mmadecode, "PROGRAMS", programs)
        assert gateup.fits(xq, pws[0], pws[1])
        y, yq = gateup.gated(xq, pws[0], pws[1], False)
        assert_c_bits(y.cpu(), want)
        assert np.array_equal(yq.q.cpu().numpy(), quantize(on(want), 3).q.cpu().numpy())


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_the_fp32_mode_keeps_its_q8_0_rewrite(qtype: QT) -> None:
    """ "native-fp32" on the device reads a codebook weight as the Q8_0 blocks of its values."""
    n, k = 16, 256
    w = Weight.from_info(TensorInfo("w", (n, k), qtype, extreme_blocks(qtype, n, k, seed=4)))
    assert from_weight(w, DEVICE).kt == WTYPES[QT.Q8_0].code
    assert TritonOps(DEVICE, limbs=None).pack(w) is w


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_tiny_model_of_a_codebook_type_equals_the_cpu_engine(tmp_path, qtype: QT) -> None:
    """A tiny model (tied head: its packed copy is the embedding) with every weight of one
    codebook type, in "native" on the GPU backend: the CPU engine's bits (prompt logprobs with the
    top 20, greedy decode steps)."""
    from strata_engine.testing.tiny_models import TINY_SPECS, write_tiny_model

    assert_tiny_model_on_both(write_tiny_model(tmp_path / "m.gguf", TINY_SPECS[0], weight_type=qtype))
