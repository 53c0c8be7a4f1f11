"""Benchmark statistics: percentiles as numpy's default (linear) computes them."""

from __future__ import annotations

import math

import pytest

from strata_decide.bench import BenchResult, percentile


def test_percentiles_interpolate_between_ranks():
    values = [0.4, 0.1, 0.3, 0.2]  # sorted: .1 .2 .3 .4
    assert percentile(values, 50) == pytest.approx(0.25)
    assert percentile(values, 95) == pytest.approx(0.3 + 0.85 * 0.1)
    assert percentile([7.0], 95) == 7.0
    assert math.isnan(percentile([], 50))


def test_summary_reports_rate_and_latencies_in_ms():
    summary = BenchResult(decisions=4, wall_s=2.0, latencies_s=[0.4, 0.1, 0.3, 0.2]).summary()
    assert summary["decisions_per_s"] == 2.0
    assert summary["p50_ms"] == pytest.approx(250.0)
