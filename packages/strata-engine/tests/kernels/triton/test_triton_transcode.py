"""Types rewritten at load as Q8_0 or Q6_K blocks (kernels/transcode.py) on Triton: a Q8_0
rewrite goes to the device as the engine holds it, a Q6_K rewrite (Q3_K, IQ1_M) as GGUF Q6_K
blocks made again from the file's bytes; either way the device's rows are gguf-py's values and
its matmul is C's, bit for bit (under the interpreter without a GPU). Q5_0, once rewritten so, is
now held as stored (its d widened) and read by the device's own Q5_0 branch; the codebook and grid
types (IQ4_XS, IQ3_S, IQ2_XXS), which the CPU holds in their own form, go to the device as the
Q8_0 blocks of their values: the same check."""

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
from strata_engine.kernels.weights import Weight
from strata_engine.testing.extreme_blocks import extreme_blocks
from strata_engine.testing.triton_checks import activations, assert_c_bits, device_matmul
from strata_engine.testing.triton_setup import DEVICE, on


@pytest.mark.parametrize(
    "qtype", [QT.IQ4_XS, QT.IQ3_S, QT.IQ2_XXS, QT.Q5_0, QT.Q3_K, QT.IQ1_M], ids=lambda q: q.name
)
def test_rewritten_types_on_the_device_are_gguf_py_and_c(qtype: QT) -> None:
    n, k = 9, 512
    stored = extreme_blocks(qtype, n, k, seed=7)
    dense = np.asarray(quants.dequantize(stored, qtype), dtype=np.float32).reshape(n, k)
    w = Weight.from_info(TensorInfo("w", (n, k), qtype, stored))
    assert w.kernel_type != 0
    sw = from_weight(w, DEVICE)
    ids = np.array([8, 0, 3, 3, 1])
    assert_c_bits(matmul.gather_rows(on(ids), sw.wq, sw.wf, sw.kt, k, sw.row_bytes).cpu(), dense[ids])
    x = activations(3, k, seed=1)
    assert_c_bits(device_matmul(x, sw), NativeOps(1).linear(x, w))


@pytest.mark.parametrize("qtype", [QT.IQ2_XS, QT.IQ2_S, QT.Q3_K, QT.IQ1_M], ids=lambda q: q.name)
def test_held_k_grid_types_in_the_devices_integer_mode_are_c(qtype: QT) -> None:
    """The CPU holds IQ2_XS, IQ2_S, Q3_K and IQ1_M as stored. In the device's integer mode
    (limbs 3) Q3_K and IQ1_M are packed as their Q6_K rewrite and multiply with the C limb
    kernels' bits on that rewrite (the bits the CPU's held type gives); IQ2_XS and IQ2_S are
    packed by the C packer (as stored), which the device expands at load (kgrid.py): the C limb
    kernels' bits."""
    from strata_engine.kernels.triton.backend import TritonOps

    n, k = 37, 512
    stored = extreme_blocks(qtype, n, k, seed=5)
    w = Weight.from_info(TensorInfo("w", (n, k), qtype, stored))
    assert w.kernel_type == int(qtype)
    ops = TritonOps(DEVICE, limbs=3)
    packed = ops.pack(w)
    x = activations(3, k, seed=2)
    got = ops.linear(x, packed).cpu().numpy()
    assert packed is not w
    c = NativeOps(1, q8=True, limbs=3)
    assert_c_bits(got, c.linear(x, c.pack(w)))
