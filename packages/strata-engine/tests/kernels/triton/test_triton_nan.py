"""NaN on both devices: every row a Triton kernel hands back (log-probabilities, matmul outputs)
carries one NaN, 0x7FC00000 (C's NAN), whatever NaN its arithmetic made (ieee.canonical_nan).

x86 (the C kernels, and numpy under Triton's interpreter) propagates a NaN operand's payload and
makes 0xFFC00000 from finite operands (inf - inf, 0 * inf); NVIDIA's arithmetic returns 0x7FFFFFFF
for both. Each kernel here meets NaNs with payloads, negative NaNs and NaNs made from infinities,
and runs twice under the interpreter: as it is (x86's rule), and with the NaN of every float
operation replaced by NVIDIA's (a GPU's rule, simulated). Both runs give the same bits, every NaN
is 0x7FC00000, and every other value is the C kernels' own bits.

The C kernels end with the same replacement (test_native_nan.py), so a CPU row and a GPU row
agree on NaN bits too; their finite bits are pinned elsewhere."""

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
from strata_engine.kernels.triton import fmatmul, intmatmul, logprobs, matmul, packed
from strata_engine.kernels.triton.stored import from_weight
from strata_engine.kernels.weights import Weight
from strata_engine.testing.tiny_models import encode_tensor
from strata_engine.testing.triton_setup import DEVICE, INTERPRETED, on

pytestmark = [
    pytest.mark.filterwarnings("ignore:(overflow|invalid value) encountered:RuntimeWarning"),
    pytest.mark.skipif(not INTERPRETED, reason="the two NaN rules are simulated under the interpreter"),
]

CANONICAL = np.uint32(0x7FC00000)
NVIDIA = {np.dtype(np.float32): np.uint32(0x7FFFFFFF), np.dtype(np.float64): np.uint64(0x7FFFFFFFFFFFFFFF)}
# NaNs with payloads: signalling (quieted by arithmetic), negative, and one of every payload bit
PAYLOADS = np.array([0x7FA00001, 0xFFC12345, 0x7FFFFFFF], dtype=np.uint32).view(np.float32)


def nvidia_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """The interpreter's float arithmetic from here on returns NVIDIA's NaN (every payload
    0x7FFFFFFF); selects, loads, stores and bitcasts move bits unchanged, as on a GPU."""
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder

    def nvidia(method):  # type: ignore[no-untyped-def]
        def run(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            out = method(self, *args, **kwargs)
            data = out.data
            if data.dtype in NVIDIA:
                bits = data.view(NVIDIA[data.dtype].dtype)
                out.data = np.where(np.isnan(data), NVIDIA[data.dtype], bits).view(data.dtype)
            return out

        return run

    for name in ("binary_op", "unary_op", "create_fma", "cast_impl", "create_fp_to_fp"):
        monkeypatch.setattr(builder, name, nvidia(getattr(builder, name)))


def canonical(c: np.ndarray) -> np.ndarray:
    """The C kernels' output with each NaN as 0x7FC00000."""
    c = np.ascontiguousarray(c, dtype=np.float32)
    return np.where(np.isnan(c), CANONICAL, c.view(np.uint32))


def assert_rows(run, want: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> None:
    """`run()` (a Triton kernel call) gives C's bits with canonical NaNs under both NaN rules (the
    NVIDIA one makes every NaN 0x7FFFFFFF first, so a NaN in the row proves the replacement)."""
    assert np.isnan(want).any(), "no NaN in the row: this would prove nothing"
    x86 = run().cpu().numpy().view(np.uint32)
    nvidia_rule(monkeypatch)
    gpu = run().cpu().numpy().view(np.uint32)
    monkeypatch.undo()
    expected = canonical(want)
    for rule, got in (("x86", x86), ("NVIDIA", gpu)):
        bad = np.argwhere(got != expected)
        assert not len(bad), (
            f"{rule}'s NaN rule: {len(bad)} of {got.size} values differ, first at {tuple(bad[0])}: "
            f"{got[tuple(bad[0])]:#010x} vs {expected[tuple(bad[0])]:#010x}"
        )


@pytest.fixture(scope="module")
def native() -> NativeOps:
    return NativeOps(1)


def _nan_rows(m: int, k: int, seed: int) -> np.ndarray:
    """Activations with NaN payloads in row 0, an infinity in row 1 (inf * 0 and inf - inf make
    new NaNs), the rest finite."""
    x = np.random.default_rng(seed).standard_normal((m, k)).astype(np.float32)
    x[0, [1, 5, 9]] = PAYLOADS
    x[1, 3] = np.inf
    return x


def test_log_softmax_rows(native, monkeypatch) -> None:
    """NaN logits (their payloads), an infinite logit (inf - inf at its place), a row of -inf
    (NaN everywhere), and a finite row."""
    x = (np.random.default_rng(1).standard_normal((4, 37)) * 4).astype(np.float32)
    x[0, [3, 10, 36]] = PAYLOADS
    x[1, 5] = np.inf
    x[2] = -np.inf
    assert_rows(lambda: logprobs.log_softmax(on(x)), native.log_softmax(x), monkeypatch)


def test_fp32_matmul_outputs(native, monkeypatch) -> None:
    """fmatmul: NaN activations, inf times a zero weight, a NaN bias."""
    rng = np.random.default_rng(2)
    w = rng.standard_normal((5, 40)).astype(np.float32)
    w[2, 3] = 0.0  # meets row 1's infinity: 0 * inf
    x = _nan_rows(3, 40, 2)
    bias = rng.standard_normal(5).astype(np.float32)
    bias[4] = PAYLOADS[1]
    weight = Weight("w", 5, 40, 0, w.view(np.uint8).reshape(-1))
    assert_rows(lambda: fmatmul.matmul(on(x), on(w), on(bias)), native.linear(x, weight, bias), monkeypatch)


def _q8_weight(n: int, k: int, seed: int) -> Weight:
    rng = np.random.default_rng(seed)
    data = encode_tensor(rng.normal(0, 0.05, size=(n, k)).astype(np.float32), QT.Q8_0, rng)
    data = np.ascontiguousarray(data)
    data.reshape(-1, 34)[0, 2:] = 0  # a block of zero weights: 0 * inf
    assert np.isfinite(quants.dequantize(data, QT.Q8_0)).all()
    return Weight.from_info(TensorInfo("w", (n, k), QT.Q8_0, data.reshape(-1)))


def test_quantised_fp32_mode_matmul_outputs(native, monkeypatch) -> None:
    """matmul.py (the fp32 mode's dequantised weights): NaN activations, inf times zero weights."""
    w = _q8_weight(5, 64, 3)
    x = _nan_rows(3, 64, 3)
    sw = from_weight(w, DEVICE)
    assert_rows(
        lambda: matmul.matmul(on(x), sw.wq, sw.wf, sw.kt, 5, 64, sw.row_bytes),
        native.linear(x, w),
        monkeypatch,
    )


@pytest.mark.parametrize("limbs", (1, 3))
@pytest.mark.parametrize("path", ("mma", "tile"))
def test_integer_matmul_outputs(monkeypatch, limbs, path) -> None:
    """intmatmul: blocks with NaN or infinity (q8's rule: inf / 127 as the scale, times a zero
    sum; limb.c's: a NaN scale) and a NaN bias, on both paths."""
    c = NativeOps(1, q8=True, limbs=0 if limbs == 1 else limbs)
    pw = c.pack(_q8_weight(17, 64, 4))
    x = _nan_rows(3, 64, 4)
    bias = np.random.default_rng(4).standard_normal(17).astype(np.float32)
    bias[16] = PAYLOADS[0]
    want = c.linear(x, pw, bias)
    device_weight = packed.from_packed(pw, DEVICE)
    assert_rows(lambda: intmatmul.matmul(on(x), device_weight, on(bias), path), want, monkeypatch)


def test_the_simulated_gpu_rule_changes_nan_bits(monkeypatch) -> None:
    """The simulated rule is live: the interpreter's NaN + NaN keeps x86's payload, then NVIDIA's."""
    import triton.language as tl
    from triton.runtime import interpreter

    a = interpreter.TensorHandle(PAYLOADS[1:2].copy(), tl.float32)

    def add() -> int:
        out = interpreter.interpreter_builder.create_fadd(a, a)
        return int(out.data.view(np.uint32)[0])

    assert add() == 0xFFC12345
    nvidia_rule(monkeypatch)
    assert add() == 0x7FFFFFFF
