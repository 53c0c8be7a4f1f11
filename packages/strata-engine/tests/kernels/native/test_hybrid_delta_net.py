"""A DeltaNet layer's host steps in one C call (recurrence.c strata_delta_net) against
hybrid_model.delta_net_steps (numpy, exactmath and one `Ops` call a step), bit for bit: the
outputs, the convolution windows and the states, snapshots included, at extreme values (NaN and
inf rows, zero norms, gates at and past softplus's +-20 switch, huge and tiny logits), for both
key-head layouts, head sizes on and off the recurrence's register path, every target the host
runs and 1 or 3 threads."""

from __future__ import annotations

import numpy as np
import pytest

from strata_engine.hybrid_model import delta_net_steps, sigmoid
from strata_engine.kernels.base import DeltaNetStep
from strata_engine.kernels.native import targets_to_test
from strata_engine.kernels.native.backend import NativeOps

COUNTS = (5, 1, 9)  # three sequences' tokens in one step
SLOTS = (4, 0, 2)
CAPTURES = ((0, 2, 6), (2, 9, 7), (2, 1, 5))  # (row, tokens done, snapshot slot)


def _step(case: str, d: int, qwen3next: bool, seed: int = 0) -> DeltaNetStep:
    rng = np.random.default_rng(seed)
    n_k, hv, d_conv, n = 2, 4, 4, sum(COUNTS)
    c = (2 * n_k + hv) * d
    qkv = rng.standard_normal((n, c)).astype(np.float32)
    b = rng.standard_normal((n, hv)).astype(np.float32) * 3
    alpha = rng.standard_normal((n, hv)).astype(np.float32) * 3
    z = rng.standard_normal((n, hv * d)).astype(np.float32)
    windows = rng.standard_normal((8, d_conv - 1, c)).astype(np.float32)
    windows[0] = 0.0  # a fresh sequence
    if case == "extreme":  # finite, every branch of the gates and the norms
        b[0] = [1e30, -1e30, 750.0, -750.0]
        b[1] = [0.0, -0.0, 1e-40, -40.0]
        alpha[0] = [20.0, np.nextafter(np.float32(20), np.float32(30)), -20.0, -20.5]
        alpha[1] = [1e30, -1e30, 700.0, -700.0]
        qkv[2, :d] = 0.0  # a zero q head: the norm's eps
        qkv[3, d : 2 * d] = 1e-30  # squares below fp32's range, not float64's
        qkv[4, 2 * d : 3 * d] = 3e19  # squares past fp32's range
        qkv[6] *= 1e4  # large rows through SiLU
        z[5] = -1e4
    elif case == "nonfinite":  # NaN and inf rows; the sequences they reach carry them on
        b[1, 0], alpha[1, 1] = np.nan, np.nan
        b[6, 2], alpha[6, 3] = np.inf, -np.inf
        alpha[7, 0], b[7, 1] = np.inf, -np.inf
        qkv[7, d + 3] = np.inf  # a k head with an inf: its norm inf
        qkv[8, 5] = np.nan
        qkv[12, 2 * d * n_k + 1] = -np.inf  # a v value
        z[13, 3] = np.nan
        z[14, :4] = [np.inf, -np.inf, 1e30, -1e30]
    key_heads = np.arange(hv) // (hv // n_k) if qwen3next else np.arange(hv) % n_k
    return DeltaNetStep(
        qkv=qkv,
        z=z,
        b=b,
        alpha=alpha,
        taps=rng.standard_normal((d_conv, c)).astype(np.float32),
        windows=windows,
        states=rng.standard_normal((8, hv, d, d)).astype(np.float32),
        state_slots=np.array(SLOTS, dtype=np.int32),
        starts=np.concatenate(([0], np.cumsum(COUNTS)[:-1])),
        counts=np.array(COUNTS),
        captures=CAPTURES,
        dt_bias=rng.standard_normal(hv).astype(np.float32),
        ssm_a=-np.exp(rng.standard_normal(hv)).astype(np.float32),
        norm=rng.standard_normal(d).astype(np.float32),
        key_heads=key_heads.astype(np.int32),
        eps=1e-6,  # not an fp32 value: the norms' float64 eps must arrive whole
        scale=float(np.float32(1 / np.sqrt(d))),
    )


def _copy(s: DeltaNetStep) -> DeltaNetStep:
    """The step with its own windows and states (both advance in place)."""
    return DeltaNetStep(**{**s.__dict__, "windows": s.windows.copy(), "states": s.states.copy()})


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint32)


@pytest.mark.parametrize("case", ["random", "extreme", "nonfinite"])
@pytest.mark.parametrize(("d", "qwen3next"), [(16, False), (7, True), (32, True)])
def test_the_c_layer_is_the_numpy_steps(case: str, d: int, qwen3next: bool) -> None:
    step = _step(case, d, qwen3next)
    want_step = _copy(step)
    with np.errstate(all="ignore"):  # the extreme cases overflow and meet NaNs on purpose
        want = delta_net_steps(NativeOps(1), want_step, step.qkv)
    # the layer's NaNs leave it as C's NAN: where a NaN gate meets a NaN row the reference's
    # product keeps whichever NaN its compiled operand order takes (x86 differs by target)
    want = np.where(np.isnan(want), np.float32(np.nan), want)
    assert not np.array_equal(want_step.windows[5], step.windows[5])  # the snapshots were written
    assert not np.array_equal(want_step.states[7], step.states[7])
    assert np.isnan(want).any() == (case == "nonfinite")
    for target in targets_to_test():
        for threads in (1, 3):
            got_step = _copy(step)
            got = NativeOps(threads, target).delta_net(got_step)
            assert np.array_equal(_bits(got), _bits(want)), (target, threads)
            assert np.array_equal(_bits(got_step.windows), _bits(want_step.windows)), (target, threads)
            assert np.array_equal(_bits(got_step.states), _bits(want_step.states)), (target, threads)


def test_a_chunk_split_is_the_whole_step() -> None:
    """One sequence's 9 tokens as calls of 4 and 5 leave the outputs, window and state of one call."""
    one, first = _step("random", 16, False), slice(0, 9)
    s = DeltaNetStep(
        **{
            **one.__dict__,
            **{name: getattr(one, name)[first] for name in ("qkv", "z", "b", "alpha")},
            "state_slots": np.array([2], dtype=np.int32),
            "starts": np.array([0]),
            "counts": np.array([9]),
            "captures": (),
        }
    )
    ops, whole_step = NativeOps(2), _copy(s)
    whole = ops.delta_net(whole_step)
    parts = []
    for a, b in ((0, 4), (4, 9)):
        part = {name: getattr(s, name)[a:b] for name in ("qkv", "z", "b", "alpha")}
        parts.append(ops.delta_net(DeltaNetStep(**{**s.__dict__, **part, "counts": np.array([b - a])})))
    assert np.array_equal(_bits(np.concatenate(parts)), _bits(whole))
    assert np.array_equal(_bits(s.windows), _bits(whole_step.windows))
    assert np.array_equal(_bits(s.states), _bits(whole_step.states))


def test_the_attention_gate_is_the_numpy_sigmoid() -> None:
    """x * sigmoid(gate) in one C pass (strata_sigmoid_gate) against hybrid_model.sigmoid's float64
    steps: NaN, infinities, zeros, subnormals, the exp's clamps at -745 and 709.7 and beyond."""
    rng = np.random.default_rng(3)
    edges = [
        np.nan,
        -np.nan,
        np.inf,
        -np.inf,
        0.0,
        -0.0,
        1e-45,
        -1e-45,
        1e30,
        -1e30,
        745.0,
        -745.0,
        709.7,
        -709.7,
    ]
    edges += [710.0, -746.0, 88.7, -103.9, 20.0, -20.0, 1.0, -1.0]
    gate = np.concatenate(
        (np.array(edges, dtype=np.float32), rng.standard_normal(70_000).astype(np.float32) * 30)
    )
    x = rng.standard_normal(gate.shape[0]).astype(np.float32)
    x[:4] = [1e38, -0.0, np.inf, np.nan]
    with np.errstate(all="ignore"):
        want = x * sigmoid(gate)
    for target in targets_to_test():
        for threads in (1, 3):  # 70,000 values: the threaded loop
            got = NativeOps(threads, target).sigmoid_gate(x, gate)
            assert np.array_equal(_bits(got), _bits(want)), (target, threads)
