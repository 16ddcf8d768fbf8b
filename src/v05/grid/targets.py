"""The targets a rollout ratio crosses to, and the paired bootstrap of a ratio over seeds.

A rollout ratio (:mod:`v05.grid.results`) is the rollouts a method's seed-mean curve needs to reach a target of the
reference's, ÷ the reference's own: its final, warm start + :data:`GAIN_FRACTION` of its gain (:func:`gain_targets`),
or its tail (:func:`tail_target`); :func:`gain90_bootstrap` resamples the paired seeds for its interval.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from v05.grid.tuning import start_eval
from v05.report.runs import ROLLOUTS_KEY, Run, mean_curve, mean_curve_crossing
from v05.stats import bootstrap_ci, crossing_ratio

GAIN_FRACTION = 0.9
"""``rollout_ratio_gain90``'s threshold: warm start + this fraction of the reference's gain."""
TAIL_FRACTION = 0.1
"""``rollout_ratio_tail10``'s target: the reference's seed-mean eval over the last 10 % of its rollouts."""
BOOTSTRAP_RESAMPLES = 2000
"""Paired bootstrap resamples of the seeds for ``rollout_ratio_gain90_ci95``."""


def gain_targets(reference: Sequence[Run]) -> tuple[float, float, float]:
    """(warm-start eval, the reference's final, warm + GAIN_FRACTION · gain) from the reference's seed-mean curve."""
    curve = mean_curve(reference, ROLLOUTS_KEY)
    starts = [v for v in (start_eval(r) for r in reference) if v is not None]
    warm = float(np.mean(starts)) if starts else float(curve.mean[0])
    final = float(curve.mean[-1])
    return warm, final, warm + GAIN_FRACTION * (final - warm)


def tail_target(reference: Sequence[Run], fraction: float = TAIL_FRACTION) -> float:
    """The reference's seed-mean eval averaged over the last ``fraction`` of its rollouts (the eval points there).

    A target that a plateaued reference reaches before the budget's end, unlike its final (which it may first reach
    only at the budget, making every ratio against it the first crossing of a flat curve).
    """
    curve = mean_curve(reference, ROLLOUTS_KEY)
    x0 = curve.x[0] + (1.0 - fraction) * (curve.x[-1] - curve.x[0])
    return float(np.mean(curve.mean[curve.x >= x0]))


def gain90_bootstrap(
    runs: Sequence[Run],
    reference: Sequence[Run],
    rng: np.random.Generator,
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    target: Callable[[Sequence[Run]], float] | None = None,
) -> dict[str, Any]:
    """Paired bootstrap over seeds of a rollout ratio: resample seeds (the same for method and reference).

    Each resample recomputes the reference's target (``target(reference_runs)``; default: warm start + 90 % of its
    gain, ``rollout_ratio_gain90``) and both crossings. A resample in which the method never reaches the target
    counts as +∞ (so the CI's upper end is None when ≥ 2.5 % never do). Why a bootstrap of the seed-mean crossing
    and not a t-interval of per-seed ratios: a single seed's curve may never cross the target (no ratio to average),
    while the seed-mean crossing is the quantity reported.

    Returns:
        ``{"ci95": [lo, hi | None] | None, "never_frac": x}`` (ci95 None without paired seeds or with one seed).
    """
    goal: Callable[[Sequence[Run]], float] = target if target is not None else (lambda rf: gain_targets(rf)[2])
    ref = {r.seed: r for r in reference}
    pairs = [(r, ref[r.seed]) for r in runs if r.seed in ref]

    def ratio(pick: Any) -> float | None:
        m, rf = [pairs[i][0] for i in pick], [pairs[i][1] for i in pick]
        threshold = goal(rf)
        return crossing_ratio(mean_curve_crossing(m, threshold), mean_curve_crossing(rf, threshold))

    return bootstrap_ci(len(pairs), ratio, rng, resamples=resamples)


__all__ = ["BOOTSTRAP_RESAMPLES", "GAIN_FRACTION", "TAIL_FRACTION", "gain90_bootstrap", "gain_targets", "tail_target"]
