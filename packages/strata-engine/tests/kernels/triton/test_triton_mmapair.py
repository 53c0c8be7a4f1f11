"""Two weights of different types in one decode launch (kernels/triton/mmapair.py) against the C
kernels, bit for bit, and the backend's use of it (Q4_K_M's q/k Q4_K with v Q6_K: one launch).

The reference is the C code: strata_limb_matmul through NativeOps.linear on the bytes
strata_q8_pack wrote, each weight on its own. Without a GPU these run under Triton's interpreter."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

from strata_engine.testing import triton_setup  # noqa: F401  (before triton: TRITON_INTERPRET=1 without a GPU)

pytest.importorskip(
    "triton", reason="the Triton kernels need `pip install triton` (the engine's [gpu] extra)"
)

from gguf import GGMLQuantizationType as QT

from strata_engine.gguf_loader import TensorInfo
from strata_engine.kernels.native.backend import NativeOps
from strata_engine.kernels.triton import intmatmul, mmadecode, mmapair, packed
from strata_engine.kernels.triton.quantize import quantize
from strata_engine.kernels.weights import Weight
from strata_engine.testing.tiny_models import encode_tensor
from strata_engine.testing.triton_setup import DEVICE, on

pytestmark = pytest.mark.filterwarnings("ignore:(overflow|invalid value) encountered:RuntimeWarning")

K = 768  # 24 blocks, 3 super-blocks


def _weight(qtype: QT, n: int, rng: np.random.Generator) -> Weight:
    values = rng.normal(0, 0.05, size=(n, K)).astype(np.float32)
    data = np.ascontiguousarray(encode_tensor(values, qtype, rng))
    return Weight.from_info(TensorInfo("w", (n, K), qtype, data.reshape(-1)))


def _same_bits(got: torch.Tensor, want: np.ndarray) -> bool:
    g = got.detach().cpu().numpy()
    return g.shape == want.shape and np.array_equal(g.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize(
    "types",
    [
        (QT.Q4_K, QT.Q6_K),
        (QT.Q2_K, QT.Q4_K),
        (QT.IQ2_S, QT.Q6_K),
        (QT.MXFP4, QT.IQ4_XS),
        (QT.IQ4_NL, QT.Q4_K),
    ],
    ids=lambda t: f"{t[0].name}+{t[1].name}",
)
@pytest.mark.parametrize("rows", (1, 2, 5))
@pytest.mark.parametrize("with_bias", (False, True))
def test_a_pair_launch_gives_each_weights_c_bits(
    monkeypatch, rows: int, with_bias: bool, types: tuple[QT, QT]
) -> None:
    """A weight of 37 outputs (a partial group) and one of 20 of another type (Q4_K and Q6_K,
    Q2_K and Q4_K, IQ2_S and Q6_K, MXFP4 and IQ4_XS, IQ4_NL and Q4_K), one launch: each output is the C kernels' bits, one program a
    tile and split along K into 2 and 3 ranges."""
    rng = np.random.default_rng(rows)
    c = NativeOps(1, q8=True, limbs=3)
    weights = [c.pack(_weight(types[0], 37, rng)), c.pack(_weight(types[1], 20, rng))]
    biases = [
        rng.normal(0, 1, size=w.out_features).astype(np.float32) if with_bias else None for w in weights
    ]
    x = rng.normal(0, 1, size=(rows, K)).astype(np.float32)
    x[0, :32] = np.arange(32, dtype=np.float32) - 15.5
    want = [c.linear(x, w, b) for w, b in zip(weights, biases, strict=True)]
    pws = [packed.from_packed(w, DEVICE) for w in weights]
    xq = quantize(on(x), 3)
    groups = -(-rows // mmadecode.TOKENS.value)
    for programs, ranges in ((1, 1), (2 * 2 * groups, 2), (3 * 2 * groups, 3)):
        monkeypatch.setattr(mmadecode, "PROGRAMS", programs)
        assert mmadecode.plan(rows, 2 * 64, K // 32, 64)[0][2] == ranges  # 2 tiles of 64 outputs
        got = intmatmul.matmul_pair(xq, pws[0], pws[1], tuple(None if b is None else on(b) for b in biases))
        for g, w in zip(got, want, strict=True):
            assert _same_bits(g, w), f"{rows} rows, {ranges} K ranges"
    assert not mmadecode.counts(torch.device(DEVICE), 1).any(), "every tile's count is back to zero"


def test_the_pair_kernel_is_one_binary() -> None:
    """Every runtime integer is unspecialised, as the one-weight kernel's (one binary per pair of
    types, whatever the widths, rows and K ranges)."""
    kernel = mmapair._pair_kernel
    ints = [
        name
        for name, p in inspect.signature(kernel.fn).parameters.items()
        if not name.endswith("_ptr") and "constexpr" not in str(p.annotation)
    ]
    # the interpreter's wrapper keeps the decorator's arguments
    unspecialised = (
        kernel.kwargs["do_not_specialize"] if hasattr(kernel, "kwargs") else kernel.do_not_specialize
    )
    assert ints and set(ints) <= set(unspecialised), ints
