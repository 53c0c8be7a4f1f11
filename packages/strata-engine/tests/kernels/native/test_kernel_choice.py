"""Which kernels run, and what happens without a C compiler (issue 9): never a silent fallback."""

from __future__ import annotations

import logging

import pytest

from strata_engine.kernels import native
from strata_engine.kernels.choice import describe, make_ops
from strata_engine.kernels.native.backend import NativeOps
from strata_engine.kernels.torch_backend import TorchOps
from strata_engine.provenance import arithmetic


@pytest.fixture
def no_compiler(build_with, tmp_path):
    """A machine without a C compiler and without previously built kernels."""
    build_with(str(tmp_path / "no-such-cc"))


def test_auto_falls_back_to_torch_with_one_warning_saying_why(no_compiler, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="strata_engine"):
        ops = make_ops("auto")
    assert isinstance(ops, TorchOps) and ops.invariant is False and ops.name == "torch"
    (record,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "no-such-cc" in record.getMessage() and "NOT batch-invariant" in record.getMessage()
    assert "gcc" in record.getMessage()  # says what to install


def test_native_without_a_compiler_is_an_error_not_a_fallback(no_compiler) -> None:
    with pytest.raises(native.NativeUnavailable, match="no-such-cc"):
        make_ops("native")


def test_the_best_target_runs_and_says_so() -> None:
    ops = make_ops("native")
    assert isinstance(ops, NativeOps)
    assert ops.name == f"native-{native.runnable_targets()[0]}"
    assert (ops.q8, ops.limbs) == (True, 3)  # the default arithmetic: three-limb integer matmuls
    assert (
        describe(ops.name, ops.invariant)
        == f"kernels: {ops.name} (batch-invariant, the same bits on every CPU)"
    )


def test_a_target_the_compiler_cannot_build_gives_way_to_the_next(monkeypatch, caplog) -> None:
    """A compiler too old for the best target's flags (e.g. -mavx512vnni): the next target runs,
    with a WARNING that says why; it is not the torch fallback."""
    runnable = native.runnable_targets()
    if len(runnable) < 2:
        pytest.skip("one target only on this CPU")
    best, bit_flags = runnable[0], native.TARGETS[runnable[0]]
    monkeypatch.setitem(native.TARGETS, best, (bit_flags[0], [*bit_flags[1], "-mno-such-flag"]))
    native._load_target.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="strata_engine"):
            ops = NativeOps(1)
    finally:
        native._load_target.cache_clear()
    assert ops.name == f"native-{runnable[1]}-fp32"
    assert any(f"the {best} kernels do not build" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("kernels", "q8", "limbs", "suffix"),
    [("auto", True, 3, ""), ("native-limb3", True, 3, ""), ("native-fp32", False, 0, "-fp32"),
     ("native-q8", True, 0, "-q8"), ("native-limb2", True, 2, "-limb2")],
)  # fmt: skip
def test_each_mode_is_named_by_its_arithmetic(kernels: str, q8: bool, limbs: int, suffix: str) -> None:
    """auto and native-limb3 are the default, native; the others keep their own names, which
    provenance maps back to one arithmetic per mode."""
    ops = make_ops(kernels, num_threads=1)
    assert isinstance(ops, NativeOps) and (ops.q8, ops.limbs) == (q8, limbs)
    assert ops.name == f"native-{native.runnable_targets()[0]}{suffix}"
    assert arithmetic(ops.name) == "native" + suffix


def test_forcing_a_target_the_cpu_cannot_run_is_refused(monkeypatch) -> None:
    foreign = "neon" if "neon" not in native.runnable_targets() else "avx512"
    monkeypatch.setenv(native.TARGET_ENV, foreign)
    with pytest.raises(native.NativeUnavailable, match=f"cannot run the {foreign} kernels"):
        NativeOps(1)


def test_unknown_choices_are_refused() -> None:
    with pytest.raises(ValueError, match="kernels must be one of"):
        make_ops("fast")
    with pytest.raises(ValueError, match="device must be one of"):
        make_ops("auto", device="tpu")
