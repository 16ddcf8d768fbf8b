"""Training runs written by ``v05 train``: loading, seed groups, mean ± SE curves, rollouts-to-target, the summary.

A run directory holds ``config.yaml`` (the resolved config; only ``name`` matters here, with the directory name as
fallback) and ``metrics.jsonl`` (one JSON object per step; a resumed run appends, and the last line of a step wins).

Statistics over the seeds of one method: every seed's curve is interpolated linearly onto the union of the seeds'
x values inside the range that all seeds cover, then averaged; SE = std(ddof=1)/√n, and 0 with one seed.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

import numpy as np

from v05._checks import error_line
from v05._types import FloatArray, IntArray
from v05.stats import crossing_ratio, curve_difference, first_crossing, mean_se, paired_summary

log = logging.getLogger(__name__)

CONFIG_NAME = "config.yaml"
METRICS_NAME = "metrics.jsonl"
EVAL_KEY = "eval_pass_rate"
ROLLOUTS_KEY = "rollouts_total"
COMPUTE_KEY = "compute_total"
"""Cumulative token-passes (``v05.train.compute``): the compute axis beside the rollout axis."""
COMPUTE_USER_KEY = "compute_user"
"""Cumulative token-passes a TRL/verl user would pay for the same rollouts (every rollout's prompt through the update,
prefill shared within a group): the second compute axis. Runs from before it was logged have none."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Run:
    """One training run: its config and its per-step metrics (sorted by step, one line per step)."""

    path: Path
    """The run directory."""
    name: str
    """The method label (``config.name``, else the directory name); seeds of one method share it."""
    seed: int | None
    """``config.seed``, if any."""
    config: dict[str, Any]
    """The resolved config as plain data (empty without ``config.yaml``)."""
    metrics: list[dict[str, Any]]
    """One dict per step, sorted by ``step``."""
    _series: dict[tuple[str, str], tuple[FloatArray, FloatArray]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """:meth:`series_vs` results, read-only arrays (a grid report's bootstrap asks for the same curves ~10⁵ times)."""

    def series(self, key: str) -> tuple[IntArray, FloatArray]:
        """Steps and values of one metric: (S,) int64 steps and (S,) float64 values.

        Steps whose value is missing, not a number, or not finite (NaN, ±inf) are left out.
        """
        steps, values = self.series_vs("step", key)
        return steps.astype(np.int64), values

    def series_vs(self, x_key: str, y_key: str) -> tuple[FloatArray, FloatArray]:
        """One metric against another: (S,) x and (S,) y over the steps where both are finite numbers.

        Computed once per key pair and kept (``metrics`` is not changed after loading); the arrays are read-only.
        """
        cached = self._series.get((x_key, y_key))
        if cached is not None:
            return cached
        pairs = [(_number(m.get(x_key)), _number(m.get(y_key))) for m in self.metrics]
        kept = [(x, y) for x, y in pairs if x is not None and y is not None]
        x = np.array([p[0] for p in kept], dtype=np.float64)  # (S,)
        y = np.array([p[1] for p in kept], dtype=np.float64)  # (S,)
        x.setflags(write=False)
        y.setflags(write=False)
        self._series[(x_key, y_key)] = (x, y)
        return x, y

    def has(self, key: str) -> bool:
        """Whether any step logs a finite value of ``key``."""
        return any(_number(m.get(key)) is not None for m in self.metrics)

    def last(self, key: str) -> float | None:
        """The last finite value of ``key``, or None if there is none."""
        _, values = self.series(key)
        return float(values[-1]) if values.size else None

    def config_value(self, dotted: str) -> Any:
        """A config entry by dotted path (``"estimator.name"``), or None if any part is missing."""
        node: Any = self.config
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _read_config(path: Path) -> dict[str, Any]:
    file = path / CONFIG_NAME
    if not file.is_file():
        return {}
    import yaml  # noqa: PLC0415 (lazy: pyyaml comes with the [train] extra, and `v05 --help` must not need it)

    try:
        data = yaml.safe_load(file.read_text())
    except yaml.YAMLError as err:  # safe_load refuses !!python/... tags with a ConstructorError
        raise ValueError(f"{file}: not valid YAML ({error_line(err)})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"{file}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def _read_metrics(file: Path) -> list[dict[str, Any]]:
    lines = [(i, line) for i, line in enumerate(file.read_text().splitlines(), start=1) if line.strip()]
    by_step: dict[int, dict[str, Any]] = {}
    for pos, (number, line) in enumerate(lines):
        try:
            row = json.loads(line)  # Python's json reads NaN and Infinity
        except json.JSONDecodeError as err:
            if pos == len(lines) - 1:  # a run killed mid-write leaves a partial last line: drop it, say so
                log.warning("%s:%d: ignoring an unreadable last line (%s)", file, number, err)
                continue
            raise ValueError(f"{file}:{number}: not a JSON object ({err})") from None
        step = row.get("step") if isinstance(row, dict) else None
        if isinstance(step, bool) or not isinstance(step, int):
            raise ValueError(f"{file}:{number}: every line needs an integer 'step', got {line[:80]!r}")
        by_step[step] = row  # a resumed run appends: the last line of a step wins
    if not by_step:
        raise ValueError(f"{file}: no metrics (the file is empty)")
    return [by_step[s] for s in sorted(by_step)]


def load_run(path: str | Path) -> Run:
    """Read one run directory.

    Args:
        path: a directory holding ``metrics.jsonl`` and, usually, ``config.yaml``.

    Returns:
        The run, metrics sorted by step with repeated steps resolved to their last line.

    Raises:
        ValueError: the path is not a directory, ``metrics.jsonl`` is missing, empty or malformed, or
            ``config.yaml`` is not a YAML mapping. The message names the path.
    """
    path = Path(path)
    if not path.is_dir():
        raise ValueError(f"{path}: not a run directory (it does not exist or is a file)")
    file = path / METRICS_NAME
    if not file.is_file():
        raise ValueError(f"{path}: no {METRICS_NAME} (is this a `v05 train` run directory?)")
    config = _read_config(path)
    name = config.get("name")
    seed = config.get("seed")
    metrics = _read_metrics(file)
    return Run(
        path=path,
        name=str(name) if name not in (None, "") else path.resolve().name,
        seed=seed if isinstance(seed, int) and not isinstance(seed, bool) else None,
        config=config,
        metrics=_before_init(metrics),
    )


INIT_KEY = "init_rollouts"
"""Rollouts drawn before step 1 to start the prior (``spo-offline``), counted in the run's totals from step 0 on."""


def _before_init(metrics: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Prepend the warm start before an offline init: 0 rollouts, tokens and compute, the step-0 row's evaluations.

    A run whose step-0 row counts ``init_rollouts`` > 0 logs its first evaluation at x = init (the warm start,
    untrained); the policy is the same at x = 0, so its curve is flat over the init, and a comparison over the run
    (:func:`paired_difference`, a mean curve, a rollout-to-target crossing) covers [0, init] too instead of
    starting where the init ends. The row is marked ``before_init`` and is not in ``metrics.jsonl``.
    """
    first = metrics[0] if metrics else {}
    if first.get("step") != 0 or not (_number(first.get(INIT_KEY)) or 0) > 0:
        return metrics
    zero = {key: 0 for key in (ROLLOUTS_KEY, "tokens_total", COMPUTE_KEY, COMPUTE_USER_KEY) if key in first}
    evals = {key: value for key, value in first.items() if key.startswith("eval")}
    return [{"step": 0, "before_init": True, **zero, **evals}, *metrics]


def load_runs(paths: Iterable[str | Path]) -> list[Run]:
    """Read run directories in order (see :func:`load_run`); raises ValueError if there are none."""
    runs = [load_run(p) for p in paths]
    if not runs:
        raise ValueError("no run directories given")
    return runs


def find_run_dirs(paths: Iterable[str | Path]) -> list[Path]:
    """Expand paths to run directories (duplicates dropped).

    A path that holds ``metrics.jsonl`` is a run; otherwise its subdirectories (one level deep, sorted) that hold
    one are.

    Raises:
        ValueError: a path does not exist, or neither it nor any of its subdirectories is a run.
    """
    found: dict[Path, Path] = {}
    for raw in paths:
        path = Path(raw)
        if not path.is_dir():
            raise ValueError(f"{path}: not a directory")
        if (path / METRICS_NAME).is_file():
            found.setdefault(path.resolve(), path)
            continue
        children = [c for c in sorted(path.iterdir()) if c.is_dir() and (c / METRICS_NAME).is_file()]
        if not children:
            raise ValueError(f"{path}: no {METRICS_NAME} in it or in any of its subdirectories")
        for child in children:
            found.setdefault(child.resolve(), child)
    return list(found.values())


def group_runs(runs: Sequence[Run]) -> dict[str, list[Run]]:
    """Seeds of one method: runs grouped by ``name`` (groups in order of first appearance, seeds sorted)."""
    groups: dict[str, list[Run]] = {}
    for run in runs:
        groups.setdefault(run.name, []).append(run)
    for name, members in groups.items():
        members.sort(key=lambda r: (r.seed is None, r.seed or 0, str(r.path)))
        seeds = [r.seed for r in members if r.seed is not None]
        if len(seeds) != len(set(seeds)):
            log.warning("method %r has repeated seeds %s: each run counts as one seed", name, seeds)
    return groups


def moving_average(y: FloatArray, window: int) -> FloatArray:
    """Trailing moving average: out[i] = mean(y[max(0, i − window + 1) : i + 1]); same length, no look-ahead.

    >>> moving_average(np.array([1.0, 2.0, 3.0, 4.0]), 2).tolist()
    [1.0, 1.5, 2.5, 3.5]
    """
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    c = np.concatenate([[0.0], np.cumsum(y, dtype=np.float64)])  # (S + 1,)
    i = np.arange(1, y.size + 1)
    lo = np.maximum(0, i - window)
    return (c[i] - c[lo]) / (i - lo)


@dataclass(frozen=True, kw_only=True, slots=True)
class Curve:
    """Mean ± SE of one metric over the seeds of a method, on a common x grid."""

    x: FloatArray
    """(M,) the union of the seeds' x values inside the range covered by every seed."""
    mean: FloatArray
    """(M,) mean over seeds of each seed's linearly interpolated curve."""
    se: FloatArray
    """(M,) std(ddof=1)/√n over seeds; 0 with one seed."""
    n_seeds: int
    """Seeds that log the metric (seeds without it are left out)."""


def mean_curve(runs: Sequence[Run], x_key: str, y_key: str = EVAL_KEY, *, smooth: int = 1) -> Curve:
    """Interpolate each seed's ``y_key`` vs ``x_key`` onto a common grid and average.

        grid = {x of any seed} ∩ [max_s min x_s, min_s max x_s],   ȳ(x) = (1/n) Σ_s interp_s(x),   SE = std_s/√n

    Args:
        runs: the seeds of one method.
        x_key: the x metric (``rollouts_total``, ``step``, ``wall_time``); must not decrease within a run.
        y_key: the y metric.
        smooth: trailing moving-average window (in logged points) applied to each seed before interpolating.

    Returns:
        The curve; empty arrays and ``n_seeds = 0`` if no seed logs the metric.

    Raises:
        ValueError: a seed's x decreases (e.g. a wall clock restarted on resume), or the seeds' x ranges do not overlap.
    """
    seeds = []
    for run in runs:
        x, y = run.series_vs(x_key, y_key)
        if x.size == 0:
            continue
        if np.any(np.diff(x) < 0):
            raise ValueError(f"{run.path}: {x_key} decreases between steps; cannot plot {y_key} against it")
        seeds.append((x, moving_average(y, smooth) if smooth > 1 else y))
    if not seeds:
        empty = np.zeros(0)
        return Curve(x=empty, mean=empty, se=empty, n_seeds=0)
    lo, hi = max(x[0] for x, _ in seeds), min(x[-1] for x, _ in seeds)
    if lo > hi:
        raise ValueError(f"the seeds of {runs[0].name!r} cover no common range of {x_key}")
    grid = np.unique(np.concatenate([x for x, _ in seeds]))  # (M,) sorted union
    grid = grid[(grid >= lo) & (grid <= hi)]
    ys = np.stack([np.interp(grid, x, y) for x, y in seeds])  # (n_seeds, M)
    n = len(seeds)
    se = ys.std(axis=0, ddof=1) / math.sqrt(n) if n > 1 else np.zeros(grid.size)
    return Curve(x=grid, mean=ys.mean(axis=0), se=se, n_seeds=n)


@dataclass(frozen=True, kw_only=True, slots=True)
class Reach:
    """Rollouts to reach a target eval pass rate, over the seeds of a method."""

    mean: float | None
    """Mean over the seeds that reach the target (None if none does): optimistic when some seeds never do."""
    se: float | None
    """Its standard error (0 with one seed)."""
    n_reached: int
    """Seeds that reach the target."""
    n_seeds: int
    """Seeds in the group."""
    per_seed: tuple[float | None, ...]
    """Each seed's value (None: never reached), in group order."""


@overload
def rollouts_to_reach(run_or_group: Run, target: float, *, x_key: str = ROLLOUTS_KEY) -> float | None: ...
@overload
def rollouts_to_reach(run_or_group: Sequence[Run], target: float, *, x_key: str = ROLLOUTS_KEY) -> Reach: ...
def rollouts_to_reach(
    run_or_group: Run | Sequence[Run], target: float, *, x_key: str = ROLLOUTS_KEY
) -> float | None | Reach:
    """Rollouts consumed (or ``x_key``, e.g. ``compute_total``) when the eval pass rate first reaches ``target``.

    The eval curve (``eval_pass_rate`` vs ``rollouts_total``) is linear between evaluations: with 0.2 at 100
    rollouts and 0.4 at 200, a target of 0.3 is reached at 100 + (0.3 − 0.2)/(0.4 − 0.2)·100 = 150. A target met at
    the first evaluation gives that evaluation's rollouts.

    Args:
        run_or_group: one run, or the seeds of one method.
        target: eval pass rate in [0, 1].
        x_key: the budget axis: ``rollouts_total`` (default), ``compute_total`` or ``compute_user``.

    Returns:
        For a run: the rollouts, or None if never reached. For a group: a :class:`Reach` (mean ± SE over the seeds
        that reach it, and how many do).

    Raises:
        ValueError: ``target`` is not a number in [0, 1].
    """
    if not (isinstance(target, int | float) and 0.0 <= target <= 1.0):
        raise ValueError(f"target must be an eval pass rate in [0, 1], got {target!r}")
    if isinstance(run_or_group, Run):
        return _reach_one(run_or_group, float(target), x_key)
    per_seed = tuple(_reach_one(r, float(target), x_key) for r in run_or_group)
    reached = [v for v in per_seed if v is not None]
    mean, se = mean_se(reached)
    return Reach(mean=mean, se=se, n_reached=len(reached), n_seeds=len(per_seed), per_seed=per_seed)


def _reach_one(run: Run, target: float, x_key: str = ROLLOUTS_KEY) -> float | None:
    return first_crossing(*run.series_vs(x_key, EVAL_KEY), target)


def mean_curve_crossing(runs: Sequence[Run], target: float, x_key: str = ROLLOUTS_KEY) -> float | None:
    """The ``x_key`` at which the seed-mean eval curve (:func:`mean_curve`) first reaches ``target`` (None: never).

    Unlike :func:`rollouts_to_reach` on a group (the mean of each seed's crossing), a seed whose curve never reaches
    the target still counts: the seed-mean curve is the quantity the grid's ratios compare.
    """
    curve = mean_curve(runs, x_key)
    return first_crossing(curve.x, curve.mean, target) if curve.n_seeds else None


def paired_difference(runs: Sequence[Run], reference: Sequence[Run]) -> dict[str, Any]:
    """Eval − reference eval, seed by seed, averaged over the rollout grid both cover; mean ± SE over seeds.

        d_s = mean_{x ∈ grid_s} (y_s(x) − y^ref_s(x)),   grid_s = eval points of either run in the common range,
        mean = (1/n) Σ d_s,   se = std(d, ddof=1)/√n

    Runs of one seed share the warm start and the prompt order, so d_s cancels most of the seed-to-seed spread
    (:func:`v05.stats.curve_difference`, :func:`v05.stats.paired_summary`). Seeds missing from either group, or
    whose curves share no range, are left out.

    Returns:
        ``{"mean", "se", "n", "ci95"}``: ci95 the 95 % Student-t interval of the per-seed d_s (None where no seed
        pairs up, or with one seed; se 0 with one seed).
    """
    ref = {r.seed: r for r in reference}
    diffs = []
    for run in runs:
        other = ref.get(run.seed)
        if other is None:
            continue
        d = curve_difference(*run.series_vs(ROLLOUTS_KEY, EVAL_KEY), *other.series_vs(ROLLOUTS_KEY, EVAL_KEY))
        if d is not None:
            diffs.append(d)
    return paired_summary(diffs)


def seed_mean(runs: Sequence[Run], key: str) -> float | None:
    """Mean over the seeds of each seed's mean of ``key`` over its steps (seeds that never log it left out)."""
    return mean_se(_per_seed(runs, _run_mean(key)))[0]


def _per_seed(runs: Sequence[Run], fn: Callable[[Run], float | None]) -> list[float]:
    return [v for v in (fn(r) for r in runs) if v is not None]


def _final_eval(runs: Sequence[Run]) -> float | None:
    return mean_se(_per_seed(runs, lambda r: r.last(EVAL_KEY)))[0]


def _run_mean(key: str) -> Callable[[Run], float | None]:
    def fn(run: Run) -> float | None:
        _, v = run.series(key)
        return float(v.mean()) if v.size else None

    return fn


def default_reference(groups: dict[str, list[Run]]) -> str:
    """The GRPO group (name starts with "grpo") with the higher final eval pass rate, else the first group."""
    if not groups:
        raise ValueError("no runs to compare")
    grpo = [name for name in groups if name.lower().startswith("grpo")]
    if not grpo:
        return next(iter(groups))
    score = {name: _final_eval(groups[name]) for name in grpo}
    return max(grpo, key=lambda name: -math.inf if score[name] is None else score[name])  # first wins ties


def _reach_on(
    groups: dict[str, list[Run]], target: float | None, reference: str, x_key: str
) -> tuple[dict[str, Reach | None], float | None]:
    """Each group's :class:`Reach` of ``target`` on the ``x_key`` axis, and the reference's mean (None: not reached)."""
    reach = {name: rollouts_to_reach(runs, target, x_key=x_key) if target is not None else None
             for name, runs in groups.items()}  # fmt: skip
    ref = reach[reference]
    return reach, ref.mean if ref is not None else None


def summary_table(
    groups: dict[str, list[Run]], *, target: float | None = None, reference: str | None = None
) -> list[dict[str, Any]]:
    """One row per method: final/best eval, rollouts, rollouts to the target and its ratio to the reference, and means.

    Per-seed numbers first, then mean ± SE over seeds: the final eval is each seed's last evaluation, the best its
    maximum; rollouts-per-prompt, zero-advantage and all-equal fractions are each seed's mean over its steps; grad
    norm and entropy are each seed's last value. ``reach_ratio`` = this method's mean rollouts to the target ÷ the
    reference's (< 1: fewer rollouts); ``reach_compute_ratio`` the same in this trainer's token-passes
    (``compute_total``): equal rollouts is not equal compute (a critic, a probe's extra pass);
    ``reach_compute_user_ratio`` the same in the token-passes a TRL/verl user would pay (``compute_user``: no prompt
    shared in the update, prefill shared within a group; None for runs that do not log it).

    Args:
        groups: method name -> its seeds (:func:`group_runs`).
        target: the eval pass rate to reach; default: the reference's final eval pass rate (mean over its seeds).
        reference: the method to compare against; default: :func:`default_reference`.

    Returns:
        One dict per method in group order. Every row repeats ``target`` and ``reference``; values a method does
        not log are None.

    Raises:
        ValueError: no groups, an unknown ``reference``, or a target outside [0, 1].
    """
    if not groups:
        raise ValueError("no runs to compare")
    if reference is None:
        reference = default_reference(groups)
    elif reference not in groups:
        raise ValueError(f"unknown reference method {reference!r}; the methods are {', '.join(groups)}")
    if target is None:
        target = _final_eval(groups[reference])
    elif not (math.isfinite(target) and 0.0 <= target <= 1.0):
        raise ValueError(f"target must be an eval pass rate in [0, 1], got {target}")
    reach = {name: rollouts_to_reach(runs, target) if target is not None else None for name, runs in groups.items()}
    ref_reach = reach[reference].mean if reach[reference] is not None else None
    reach_c, ref_reach_c = _reach_on(groups, target, reference, COMPUTE_KEY)
    reach_u, ref_reach_u = _reach_on(groups, target, reference, COMPUTE_USER_KEY)
    rows = []
    for name, runs in groups.items():
        final, final_se = mean_se(_per_seed(runs, lambda r: r.last(EVAL_KEY)))
        best, best_se = mean_se(
            _per_seed(runs, lambda r: float(v.max()) if (v := r.series(EVAL_KEY)[1]).size else None)
        )
        r, rc, ru = reach[name], reach_c[name], reach_u[name]
        ratio = crossing_ratio(r.mean if r is not None else None, ref_reach)
        ratio_c = crossing_ratio(rc.mean if rc is not None else None, ref_reach_c)
        ratio_u = crossing_ratio(ru.mean if ru is not None else None, ref_reach_u)
        rows.append(
            {
                "method": name,
                "seeds": len(runs),
                "seed_list": [run.seed for run in runs],
                "final_eval": final,
                "final_eval_se": final_se,
                "best_eval": best,
                "best_eval_se": best_se,
                "rollouts_total": mean_se(_per_seed(runs, lambda r: r.last(ROLLOUTS_KEY)))[0],
                "reach_rollouts": r.mean if r is not None else None,
                "reach_rollouts_se": r.se if r is not None else None,
                "reach_n": r.n_reached if r is not None else 0,
                "reach_ratio": ratio,
                "compute_total": mean_se(_per_seed(runs, lambda r: r.last(COMPUTE_KEY)))[0],
                "reach_compute": rc.mean if rc is not None else None,
                "reach_compute_ratio": ratio_c,
                "compute_user": mean_se(_per_seed(runs, lambda r: r.last(COMPUTE_USER_KEY)))[0],
                "reach_compute_user": ru.mean if ru is not None else None,
                "reach_compute_user_ratio": ratio_u,
                "rollouts_per_prompt": seed_mean(runs, "rollouts_per_prompt"),
                "zero_adv_frac": seed_mean(runs, "zero_adv_frac"),
                "all_equal_frac": seed_mean(runs, "all_equal_frac"),
                "final_grad_norm": mean_se(_per_seed(runs, lambda r: r.last("grad_norm")))[0],
                "final_entropy": mean_se(_per_seed(runs, lambda r: r.last("entropy")))[0],
                "wall_time": mean_se(_per_seed(runs, lambda r: r.last("wall_time")))[0],
                "target": target,
                "reference": reference,
                "is_reference": name == reference,
            }
        )
    return rows


__all__ = [
    "Curve",
    "Reach",
    "Run",
    "default_reference",
    "find_run_dirs",
    "group_runs",
    "load_run",
    "load_runs",
    "mean_curve",
    "mean_curve_crossing",
    "moving_average",
    "paired_difference",
    "rollouts_to_reach",
    "seed_mean",
    "summary_table",
]
