"""The C kernels' rows carry one NaN, 0x7FC00000 (C's NAN), whatever NaN the arithmetic made:
x86 keeps a NaN operand's payload (and its sign) and makes 0xFFC00000 from finite operands
(inf - inf, 0 * inf), where NVIDIA's arithmetic gives 0x7FFFFFFF; the Triton kernels end with the
same replacement (test_triton_nan.py), so a row's bits cannot depend on the device even where it
holds a NaN. Every NaN must stand where a float64 computation has one, and every other value keep
its bits (the driver digests pin those)."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from strata_engine.gguf_loader import TensorInfo
from strata_engine.kernels.native.backend import NativeOps
from strata_engine.kernels.weights import Weight
from strata_engine.testing.tiny_models import encode_tensor

pytestmark = pytest.mark.filterwarnings("ignore:(overflow|invalid value) encountered:RuntimeWarning")

CANONICAL = 0x7FC00000
# NaNs with payloads: signalling (quieted by arithmetic), negative, and one of every payload bit
PAYLOADS = np.array([0x7FA00001, 0xFFC12345, 0x7FFFFFFF], dtype=np.uint32).view(np.float32)


def assert_canonical(got: np.ndarray, nan: np.ndarray) -> None:
    """NaN where any arithmetic must make one (`nan`, from a NaN input), finite where the
    inputs are finite, and every NaN 0x7FC00000."""
    got = np.ascontiguousarray(got, dtype=np.float32)
    assert nan.any(), "the inputs made no NaN: this would prove nothing"
    assert np.isnan(got[nan]).all()
    bits = got.view(np.uint32)[np.isnan(got)]
    assert (bits == CANONICAL).all(), f"NaN bits {sorted({f'{b:#010x}' for b in bits})}"


def nan_rows(m: int, k: int, seed: int) -> np.ndarray:
    """Row 0 holds NaN payloads, row 1 an infinity (inf * 0 and inf - inf make new NaNs)."""
    x = np.random.default_rng(seed).standard_normal((m, k)).astype(np.float32)
    x[0, [1, 5, 9]] = PAYLOADS
    x[1, 3] = np.inf
    return x


def test_log_softmax_rows() -> None:
    """NaN logits, an infinite logit (inf - inf at its place), a row of -inf, and a row whose one
    -inf logit (a token ruled out) must stay -inf: only NaNs are replaced, never infinities."""
    x = (np.random.default_rng(1).standard_normal((4, 37)) * 4).astype(np.float32)
    x[0, [3, 10, 36]] = PAYLOADS
    x[1, 5] = np.inf
    x[2] = -np.inf
    x[3, 7] = -np.inf
    got = NativeOps(1).log_softmax(x)
    assert_canonical(got, np.isnan(x))
    assert got[3, 7] == -np.inf
    assert np.isfinite(np.delete(got[3], 7)).all() and np.isfinite(got[0][~np.isnan(x[0])]).all()


def q8_weight(n: int, k: int, seed: int) -> Weight:
    """Q8_0 weights with a block of zeros (meets an infinite activation: 0 * inf)."""
    rng = np.random.default_rng(seed)
    data = np.ascontiguousarray(
        encode_tensor(rng.normal(0, 0.05, size=(n, k)).astype(np.float32), QT.Q8_0, rng)
    )
    data.reshape(-1, 34)[0, 2:] = 0
    return Weight.from_info(TensorInfo("w", (n, k), QT.Q8_0, data.reshape(-1)))


@pytest.mark.parametrize("mode", ("fp32", "q8", "limb3"))
def test_matmul_outputs(mode: str) -> None:
    """NaN activations (row 0), inf times zero weights (row 1) and a NaN bias (column 16), in each
    arithmetic: fp32 on the blocks as stored, 8-bit activations, three integer limbs."""
    ops = {"fp32": NativeOps(1), "q8": NativeOps(1, q8=True), "limb3": NativeOps(1, q8=True, limbs=3)}[mode]
    weight = q8_weight(17, 64, 4)
    x = nan_rows(3, 64, 4)
    bias = np.random.default_rng(4).standard_normal(17).astype(np.float32)
    bias[16] = PAYLOADS[0]
    got = ops.linear(x, weight if mode == "fp32" else ops.pack(weight), bias)
    nan = np.zeros(got.shape, dtype=bool)
    nan[:, 16] = True
    nan[0] = mode != "q8"  # q8's block maximum passes over a NaN, whose quant is then an integer
    assert_canonical(got, nan)
    assert np.isfinite(got[2, :16]).all()
