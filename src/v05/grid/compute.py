"""A grid's compute axes: the token-passes a run spent by a number of rollouts, as this trainer and as a user counts.

``compute_total`` is this trainer's (a group's prompt once in the update); ``compute_user`` what a TRL or verl user
pays (every rollout's prompt through the update, each group's prompt prefilled once): :mod:`v05.train.compute`.
Cells run before ``compute_user`` was logged are recounted from the parts they logged (:func:`user_compute_series`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from v05.report.runs import COMPUTE_KEY, COMPUTE_USER_KEY, INIT_KEY, ROLLOUTS_KEY, Run
from v05.train.compute import user_step_recount


def compute_at(runs: Sequence[Run], rollouts: float) -> float:
    """Token-passes after ``rollouts`` rollouts: each seed's (rollouts_total, compute_total) interpolated, averaged.

    (The seeds' compute curves end at different x, so a seed-mean curve over compute would be cut at the shortest.)
    """
    return float(np.mean([np.interp(rollouts, *r.series_vs(ROLLOUTS_KEY, COMPUTE_KEY)) for r in runs]))


def user_compute_series(run: Run) -> tuple[np.ndarray, np.ndarray, str] | None:
    """(rollouts_total, compute_user) of a run, and how it was had: ``logged``, ``exact`` or ``approx``.

    Cells run before ``compute_user`` was logged are recounted row by row from the parts they logged
    (:func:`v05.train.compute.user_step_recount`) and summed: ``exact`` for a fixed group size k (``allocator``
    ``fixed``: every group k rollouts, the update over exactly the generated ones; checked against the logged
    value in ``tests/train/test_compute.py``), ``approx`` for groups of varying size (OSLA, dynamic sampling: k is
    the step's mean ``rollouts_per_prompt`` and prompts are taken to be of equal length). None where the rows lack
    the parts.
    """
    if run.has(COMPUTE_USER_KEY):
        x, y = run.series_vs(ROLLOUTS_KEY, COMPUTE_USER_KEY)
        return x, y, "logged"
    fixed = run.config_value("allocator.name") == "fixed"
    k = run.config_value("allocator.options.k") if fixed else None
    shared = bool(run.config_value("train.share_prompt_prefix"))
    xs, ys, total = [], [], 0.0
    for row in run.metrics:
        if row.get("before_init") or row.get(ROLLOUTS_KEY) is None:
            continue
        if row.get("step") == 0:
            xs.append(float(row[ROLLOUTS_KEY]))
            ys.append(0.0)
            continue
        size = k if fixed else row.get("rollouts_per_prompt")
        step = None if size is None else user_step_recount(row, float(size), shared_prefix=shared)
        if step is None:
            return None
        total += step
        xs.append(float(row[ROLLOUTS_KEY]))
        ys.append(total)
    if not xs:
        return None
    return np.array(xs), np.array(ys), "exact" if fixed else "approx"


def user_compute_at(runs: Sequence[Run], rollouts: float) -> float | None:
    """:func:`compute_at` in the user's token-passes (:func:`user_compute_series`); None if a seed has none."""
    series = [user_compute_series(r) for r in runs]
    if any(s is None for s in series):
        return None
    return float(np.mean([np.interp(rollouts, s[0], s[1]) for s in series if s is not None]))


def compute_per_rollout(runs: Sequence[Run]) -> float:
    """This trainer's token-passes per rollout over the whole run, the seeds' mean (NaN without compute logged)."""
    per = [r.last(COMPUTE_KEY) / r.last(ROLLOUTS_KEY) for r in runs if r.last(COMPUTE_KEY) and r.last(ROLLOUTS_KEY)]
    return float(np.mean(per)) if per else math.nan


def init_rollouts(runs: Sequence[Run]) -> float:
    """Rollouts spent before step 1 (``init_rollouts``: SPO's offline init), the seeds' mean; 0 for runs with none.

    They sit on the rollout axis already (the run's rows start at them), so every ratio of a grid counts them.
    """
    return float(np.mean([r.last(INIT_KEY) or 0.0 for r in runs])) if runs else 0.0


def prior_compute_frac(runs: Sequence[Run]) -> float | None:
    """The prior's share of this trainer's compute over the whole run, the seeds' mean (None without compute logged).

    A text prior's encoder over the pool before step 1 (``encoder_compute``) and during the steps
    (``compute/encoder``), and the probe's features and fits (``compute/probe``), ÷ the run's ``compute_total``:
    what reading the prior cost (0 for a tracker or a running mean; the oracle's extra rollouts are not counted).
    """
    fracs = []
    for r in runs:
        total = r.last(COMPUTE_KEY)
        if not total:
            continue
        spent = (r.last("encoder_compute") or 0.0) + sum(
            float(np.sum(r.series(key)[1])) for key in ("compute/encoder", "compute/probe") if r.has(key)
        )
        fracs.append(spent / total)
    return float(np.mean(fracs)) if fracs else None


def recount_kind(runs: Sequence[Run]) -> str | None:
    """How the runs' user compute was had: the least exact of their :func:`user_compute_series` kinds."""
    kinds = {s[2] for s in (user_compute_series(r) for r in runs) if s is not None}
    return next((k for k in ("approx", "exact", "logged") if k in kinds), None)


__all__ = [
    "compute_at",
    "compute_per_rollout",
    "init_rollouts",
    "prior_compute_frac",
    "recount_kind",
    "user_compute_at",
    "user_compute_series",
]
