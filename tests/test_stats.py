"""v05.stats by hand: t-intervals, paired differences, crossings and their ratios, the paired bootstrap."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.grid._grids import fake_run
from v05.report.runs import paired_difference
from v05.stats import (
    bootstrap_ci,
    crossing_ratio,
    curve_difference,
    first_crossing,
    mean_se,
    paired_summary,
    t_interval,
)


def test_t_interval_and_paired_difference_by_hand():
    """t(2) = 4.303 for three values; the paired difference averages over the union grid of both runs."""
    lo, hi = t_interval([0.5, 0.6, 0.7])
    assert (lo, hi) == pytest.approx((0.6 - 4.303 * 0.1 / math.sqrt(3), 0.6 + 4.303 * 0.1 / math.sqrt(3)))
    assert t_interval([0.5]) is None
    ref = [fake_run("ref", 0, [(0, 0.2), (100, 0.4)]), fake_run("ref", 1, [(0, 0.3), (100, 0.3)])]
    # seed 0: method is ref + 0.1 on the grid {0, 50, 100}; seed 1: + 0.3 at the end only (0, 0.15, 0.3 -> 0.15)
    m = [
        fake_run("m", 0, [(0, 0.3), (50, 0.4), (100, 0.5)]),
        fake_run("m", 1, [(0, 0.3), (100, 0.6)]),
        fake_run("m", 2, [(0, 0.9), (100, 0.9)]),
    ]  # seed 2 has no reference: left out
    d = paired_difference(m, ref)
    assert d["n"] == 2 and d["mean"] == pytest.approx((0.1 + 0.15) / 2)
    assert d["se"] == pytest.approx(np.std([0.1, 0.15], ddof=1) / math.sqrt(2))


def test_curve_difference_averages_over_the_common_range_only():
    """A curve over [0, 200] against a reference over [0, 100]: the grid is {0, 50, 100} (the union inside the
    common range), so the points beyond 100 do not count; no common range or an empty curve: None."""
    x, y = np.array([0.0, 50.0, 200.0]), np.array([0.2, 0.4, 0.9])
    xr, yr = np.array([0.0, 100.0]), np.array([0.2, 0.2])
    # y on {0, 50, 100}: 0.2, 0.4, 0.4 + 0.5 * 50/150; minus 0.2 each
    assert curve_difference(x, y, xr, yr) == pytest.approx(np.mean([0.0, 0.2, 0.2 + 0.5 / 3]))
    assert curve_difference(x, y, np.array([300.0, 400.0]), yr) is None
    assert curve_difference(np.zeros(0), np.zeros(0), xr, yr) is None


def test_paired_summary_and_mean_se():
    """Mean, SE = std(ddof=1)/√n and the t-interval of the per-seed differences; one seed: SE 0 and no interval;
    none: every field None and n 0."""
    s = paired_summary([0.1, 0.3])
    assert s["mean"] == pytest.approx(0.2) and s["n"] == 2 and s["se"] == pytest.approx(0.1)
    assert s["ci95"] == pytest.approx([0.2 - 12.706 * 0.1, 0.2 + 12.706 * 0.1])
    assert paired_summary([0.4]) == {"mean": 0.4, "se": 0.0, "n": 1, "ci95": None}
    assert paired_summary([]) == {"mean": None, "se": None, "n": 0, "ci95": None}
    assert mean_se([1.0, 3.0]) == (2.0, 1.0)


def test_crossings_and_their_ratio():
    """0.2 at 100 and 0.4 at 200 reach 0.3 at 150; a target met at the first point gives it; never: None. A ratio
    is undefined where the curve never crosses or the reference crosses at no cost (0 rollouts)."""
    x, y = np.array([100.0, 200.0]), np.array([0.2, 0.4])
    assert first_crossing(x, y, 0.3) == pytest.approx(150.0)
    assert first_crossing(x, y, 0.1) == 100.0 and first_crossing(x, y, 0.5) is None
    assert crossing_ratio(150.0, 300.0) == 0.5
    assert crossing_ratio(None, 300.0) is None and crossing_ratio(150.0, 0.0) is None
    assert crossing_ratio(150.0, None) is None


def test_bootstrap_counts_an_undefined_statistic_as_infinite():
    """Two units whose statistic is 1 and undefined: about a quarter of the resamples draw the first twice (defined),
    so the 97.5 % end is +∞ (None) and never_frac ≈ 3/4; one unit: nothing to resample."""
    res = bootstrap_ci(2, lambda pick: 1.0 if (pick == 0).all() else None, np.random.default_rng(0), resamples=4000)
    assert res["ci95"][0] == 1.0 and res["ci95"][1] is None
    assert res["never_frac"] == pytest.approx(0.75, abs=0.03)
    assert bootstrap_ci(1, lambda pick: 1.0, np.random.default_rng(0), resamples=10) == {
        "ci95": None,
        "never_frac": None,
    }
    same = bootstrap_ci(3, lambda pick: float(pick.mean()), np.random.default_rng(1), resamples=500)
    assert 0.0 <= same["ci95"][0] <= 1.0 <= same["ci95"][1] <= 2.0 and same["never_frac"] == 0.0
