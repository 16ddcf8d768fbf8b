"""Statistics over seeds: mean ± SE, Student-t intervals, paired curve differences, crossings, a paired bootstrap.

The one module behind every interval and ratio that a comparison quotes: the results grid (:mod:`v05.grid`),
``v05 report`` (:mod:`v05.report.runs`) and the TRL parity bench (:mod:`v05.adapters.trl_parity`). numpy only; pure
functions of numbers and arrays (the run-level forms, which read a run's eval curve, live in
:mod:`v05.report.runs`).

- :func:`mean_se`: x̄ and SE = s/√n, s = std(ddof=1);
- :func:`t_interval`: x̄ ± t₀.₉₇₅(n − 1)·SE, the 95 % Student-t interval of the mean;
- :func:`curve_difference` and :func:`paired_summary`: one seed's eval − reference eval averaged over the rollouts
  both curves cover, then mean, SE and t-interval over seeds;
- :func:`first_crossing` and :func:`crossing_ratio`: where a piecewise-linear curve first reaches a target, and the
  ratio of two such crossings (None when either is undefined);
- :func:`bootstrap_ci`: a percentile bootstrap over resampled seeds whose statistic may be undefined (+∞).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from v05._types import FloatArray, IntArray

T975 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)
"""Two-sided 95 % Student-t quantiles t₀.₉₇₅(df), df = 1..30 (beyond: the normal's 1.96)."""

BOOTSTRAP_QUANTILES = (0.025, 0.975)
"""The percentile bootstrap's 95 % interval ends."""


def mean_se(values: Sequence[float]) -> tuple[float | None, float | None]:
    """Mean and standard error, SE = std(ddof=1)/√n (0 for one value; None, None for none).

    >>> mean_se([1.0, 3.0])  # std(ddof=1) = √2, / √2 = 1
    (2.0, 1.0)
    """
    if not values:
        return None, None
    v = np.asarray(values, dtype=np.float64)
    se = float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else 0.0
    return float(v.mean()), se


def t_interval(values: Sequence[float]) -> tuple[float, float] | None:
    """95 % Student-t interval of the mean: x̄ ± t₀.₉₇₅(n − 1)·s/√n (None for fewer than 2 values).

    >>> [round(v, 3) for v in t_interval([1.0, 3.0])]  # SE 1, t(1) = 12.706
    [-10.706, 14.706]
    """
    if len(values) < 2:
        return None
    v = np.asarray(values, np.float64)
    se = float(v.std(ddof=1) / math.sqrt(v.size))
    t = T975[v.size - 2] if v.size - 1 <= len(T975) else 1.96
    return float(v.mean()) - t * se, float(v.mean()) + t * se


def curve_difference(x: FloatArray, y: FloatArray, x_ref: FloatArray, y_ref: FloatArray) -> float | None:
    """One seed's paired difference: y − y_ref averaged over the x grid both curves cover.

        d = mean_{x ∈ grid} (y(x) − y_ref(x)),   grid = {x} ∪ {x_ref} inside [max(x₀, x_ref,₀), min(x_end, x_ref,end)]

    Both curves are linear between their points. None when either curve is empty or they share no range.

    >>> curve_difference(np.array([0.0, 100.0]), np.array([0.3, 0.6]), np.array([0.0, 100.0]), np.array([0.3, 0.3]))
    0.15
    """
    if x.size == 0 or x_ref.size == 0:
        return None
    lo, hi = max(x[0], x_ref[0]), min(x[-1], x_ref[-1])
    grid = np.unique(np.concatenate([x, x_ref]))  # (M,) sorted union
    grid = grid[(grid >= lo) & (grid <= hi)]
    if not grid.size:
        return None
    return float(np.mean(np.interp(grid, x, y) - np.interp(grid, x_ref, y_ref)))


def paired_summary(diffs: Sequence[float]) -> dict[str, Any]:
    """Per-seed paired differences d_s summarised: ``{"mean", "se", "n", "ci95"}``.

        mean = (1/n) Σ d_s,   se = std(d, ddof=1)/√n,   ci95 = :func:`t_interval` (as a list)

    ``ci95`` is None with one seed (se 0); everything is None (n 0) without seeds.
    """
    if not diffs:
        return {"mean": None, "se": None, "n": 0, "ci95": None}
    mean, se = mean_se(diffs)
    ci = t_interval(diffs)
    return {"mean": mean, "se": se, "n": len(diffs), "ci95": None if ci is None else list(ci)}


def first_crossing(x: FloatArray, y: FloatArray, target: float) -> float | None:
    """The x at which the curve y(x), linear between its points, first reaches ``target`` (None: never).

    With y = 0.2 at x = 100 and 0.4 at 200, a target of 0.3 is reached at 150; a target met at the first point
    gives that point's x.
    """
    hit = np.flatnonzero(y >= target)
    if hit.size == 0:
        return None
    i = int(hit[0])
    if i == 0:  # reached at the first evaluation: nothing earlier to interpolate from
        return float(x[0])
    # y[i-1] < target <= y[i]: linear interpolation between the two evaluations
    frac = (target - y[i - 1]) / (y[i] - y[i - 1])
    return float(x[i - 1] + frac * (x[i] - x[i - 1]))


def crossing_ratio(value: float | None, reference: float | None) -> float | None:
    """``value / reference``: the rollouts (or compute) one curve needs for a target over the reference curve's.

    None when ``value`` never reaches the target (None), or when the reference reaches it at no cost (0 or None:
    already at the warm start).
    """
    return None if value is None or not reference else value / reference


def bootstrap_ci(
    n: int, statistic: Callable[[IntArray], float | None], rng: np.random.Generator, *, resamples: int
) -> dict[str, Any]:
    """Percentile bootstrap over ``n`` paired units (seeds) of a statistic that may be undefined.

    Each resample draws n indices with replacement (``rng.integers(0, n, n)``; a pair is drawn whole, so the
    method's and the reference's runs of one seed stay together) and evaluates ``statistic(indices)``; an undefined
    value (None: the curve never reaches its target) counts as +∞. The interval is the 2.5 % and 97.5 % quantiles
    without interpolation (``inverted_cdf``), so +∞ stays +∞ and its end is reported as None.

    Returns:
        ``{"ci95": [lo, hi | None] | None, "never_frac": share of +∞ resamples}``; ``ci95`` and ``never_frac`` are
        None with fewer than 2 units (nothing to resample).
    """
    if n < 2:
        return {"ci95": None, "never_frac": None}
    values = []
    for _ in range(resamples):
        value = statistic(rng.integers(0, n, size=n))
        values.append(math.inf if value is None else value)
    arr = np.asarray(values)
    lo, hi = np.quantile(arr, BOOTSTRAP_QUANTILES, method="inverted_cdf")  # no interpolation: +∞ stays +∞
    return {
        "ci95": [float(lo), None if not math.isfinite(hi) else float(hi)],
        "never_frac": float(np.mean(~np.isfinite(arr))),
    }


__all__ = [
    "BOOTSTRAP_QUANTILES",
    "T975",
    "bootstrap_ci",
    "crossing_ratio",
    "curve_difference",
    "first_crossing",
    "mean_se",
    "paired_summary",
    "t_interval",
]
