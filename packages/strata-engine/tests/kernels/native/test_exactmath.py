"""exactmath against 50-digit decimal arithmetic: exp and log within 2 ulp, and the sampler's
integer weights equal to floor(e^x * 2^32) computed exactly (off by one only where e^x lies
within exp's own error of a multiple of 2^-32)."""

from __future__ import annotations

import math
from decimal import Decimal, localcontext

import numpy as np
import pytest

from strata_engine import exactmath


def _exact_exp(x: float) -> Decimal:
    with localcontext() as ctx:
        ctx.prec = 50
        return Decimal(x).exp()


def _ulps(got: float, want: Decimal) -> float:
    return float(abs(Decimal(got) - want)) / math.ulp(float(want))


def _xs() -> np.ndarray:
    rng = np.random.default_rng(0)
    return np.concatenate(
        [rng.uniform(-700, 700, 400), rng.uniform(-30, 0, 600), [0.0, -1e-300, 1e-17, -24.0]]
    )


def test_exp_is_within_two_ulp() -> None:
    xs = _xs()
    got = exactmath.exp(xs)
    worst = max(_ulps(float(g), _exact_exp(float(x))) for x, g in zip(xs, got, strict=True))
    assert worst <= 2.0, f"exp is off by {worst:.2f} ulp"
    assert exactmath.exp([-np.inf, 1000.0, -1000.0]).tolist() == [0.0, np.inf, 0.0]


def test_log_is_within_two_ulp() -> None:
    xs = np.exp(np.random.default_rng(1).uniform(-700, 700, 500))
    got = exactmath.log(xs)
    with localcontext() as ctx:
        ctx.prec = 50
        worst = max(_ulps(float(g), Decimal(float(x)).ln()) for x, g in zip(xs, got, strict=True))
    assert worst <= 2.0, f"log is off by {worst:.2f} ulp"
    assert exactmath.log([0.0, 1.0]).tolist() == [-np.inf, 0.0]


def test_draw_weights_are_floor_of_e_to_the_x_times_2_to_the_32() -> None:
    xs = np.concatenate([-_xs()[_xs() > 0] / 20, np.random.default_rng(2).uniform(-25, 0, 2000)])
    got = exactmath.draw_weights(xs)
    scale = Decimal(2) ** exactmath.WEIGHT_BITS
    exact = [int(_exact_exp(float(x)) * scale) for x in xs]  # int() of a positive Decimal: floor
    off = [abs(g - w) for g, w in zip(got.tolist(), exact, strict=True)]
    assert max(off) <= 1
    assert sum(off) <= len(xs) // 100, "off by one only at a rounding edge"
    assert exactmath.draw_weights([0.0])[0] == 2**exactmath.WEIGHT_BITS  # the maximum weighs 2^32


@pytest.mark.parametrize("x", [-np.inf, np.nan, -24.5, -1000.0])
def test_what_weighs_nothing(x) -> None:
    assert exactmath.draw_weights([x])[0] == 0
