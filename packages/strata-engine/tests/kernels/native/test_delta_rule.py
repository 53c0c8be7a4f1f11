"""The DeltaNet recurrence in C (recurrence.c) against hybrid_model's numpy sequence, bit for bit:
rows of different lengths and states, odd head sizes (the halving tree's appended zero), the
register path's sizes (16 times a power of two), state snapshots copied mid-chunk, every target
the host runs and 1 or 3 threads."""

from __future__ import annotations

import numpy as np
import pytest

from strata_engine.hybrid_model import delta_rule
from strata_engine.kernels.native import targets_to_test
from strata_engine.kernels.native.backend import NativeOps


def _inputs(d: int, hv: int = 3, counts: tuple[int, ...] = (5, 1, 9)):
    rng = np.random.default_rng(d)
    n, slots = sum(counts), np.array([4, 0, 2], dtype=np.int32)[: len(counts)]
    states = rng.standard_normal((8, hv, d, d)).astype(np.float32)
    states[0] = 0.0  # a fresh sequence
    states[0, 0, 0, 1] = -0.0
    q, k, v = (rng.standard_normal((n, hv, d)).astype(np.float32) for _ in range(3))
    k /= np.sqrt((k * k).sum(-1, keepdims=True))  # L2-normalised, as the layer feeds it
    decay = rng.uniform(0.2, 1.0, (n, hv)).astype(np.float32)
    beta = rng.uniform(0.0, 1.0, (n, hv)).astype(np.float32)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    captures = ((0, 2, 6), (2, 9, 7), (2, 4, 5))  # (row, after tokens, snapshot slot)
    return (
        states,
        slots,
        starts,
        np.array(counts),
        (q, k, v),
        decay,
        beta,
        np.float32(1 / np.sqrt(d)),
        captures,
    )


@pytest.mark.parametrize("d", [16, 7, 12, 64, 128])
def test_the_c_recurrence_is_the_numpy_sequence(d: int) -> None:
    states, slots, starts, counts, qkv, decay, beta, scale, captures = _inputs(d)
    want_states = states.copy()
    want = delta_rule(want_states, slots, starts, counts, qkv, decay, beta, scale, captures)
    assert not np.array_equal(want_states[6], states[6])  # the snapshots were written
    for target in targets_to_test():
        for threads in (1, 3):
            got_states = states.copy()
            got = NativeOps(threads, target).delta_rule(
                got_states, slots, starts, counts, qkv, decay, beta, float(scale), captures
            )
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (target, threads)
            assert np.array_equal(got_states.view(np.uint32), want_states.view(np.uint32)), (target, threads)


def test_a_chunk_split_is_the_whole_run() -> None:
    """Two calls of 4 and 5 tokens leave the state and outputs of one call of 9."""
    states, slots, _, _, (q, k, v), decay, beta, scale, _ = _inputs(16, counts=(9,))
    ops = NativeOps(2)
    whole_states = states.copy()
    whole = ops.delta_rule(
        whole_states, slots, np.array([0]), np.array([9]), (q, k, v), decay, beta, float(scale)
    )
    split = []
    for a, b in ((0, 4), (4, 9)):
        split.append(
            ops.delta_rule(
                states,
                slots,
                np.array([0]),
                np.array([b - a]),
                (q[a:b], k[a:b], v[a:b]),
                decay[a:b],
                beta[a:b],
                float(scale),
            )
        )
    assert np.array_equal(np.concatenate(split), whole) and np.array_equal(states, whole_states)
