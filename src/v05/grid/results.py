"""The results of a grid: per task setting, every method against the reference on the same seeds; attribution.

Per task the results compare every method to the reference (GRPO k = 4 by default) on the same seeds (a seed fixes
the warm start and the prompt order, so runs of one seed are paired):

- ``final_mean`` and ``final_ci95``: each seed's last eval, mean ± t₀.₉₇₅(n−1)·SE (:func:`v05.stats.t_interval`);
- ``paired_diff_mean`` ± ``paired_diff_se``: eval − reference eval, seed by seed, averaged over the common rollout
  grid (:func:`v05.report.runs.paired_difference`), then mean ± SE over seeds;
- ``rollout_ratio``: rollouts the seed-mean curve needs to reach the reference's final ÷ the reference's own;
  ``rollout_ratio_gain90`` the same for warm start + 90 % of the reference's gain (a threshold off the plateau),
  with a paired bootstrap CI over seeds (``rollout_ratio_gain90_ci95``; the upper end is None when a resample never
  reaches it); ``compute_ratio`` the same crossing in token-passes (this trainer's: a group's prompt once in the
  update) and ``compute_ratio_user`` in the token-passes a TRL/verl user pays (every rollout's prompt through the
  update, prefill shared within a group; :mod:`v05.train.compute`), logged by cells run since it was, recounted for
  older ones (:func:`user_compute_series`; ``compute_user_recount`` says which). None: never reached;
- ``init_rollouts``: rollouts a method spent before step 1 (SPO's offline init; the seeds' mean; 0 for none), already
  on every ratio's axes; ``rollouts_to_reference_final`` the crossing itself, ``prior_compute_frac`` the prior's cost;
- ``grad_norm_mean`` (each seed's mean over steps), ``grad_norm_sd`` (its std over steps), ``entropy_final``.

A method restricted to some task settings (``tasks:``) is simply absent from the others' results, and an
attribution row naming it is left out there.
"""

from __future__ import annotations

import datetime
import json
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from v05.grid import compute as gc
from v05.grid.cells import Cell
from v05.grid.ran import ran, warm_start_record
from v05.grid.selection import add_selection_fields
from v05.grid.spec import Attribution, Grid, GridMethod, GridTask
from v05.grid.store import STORED_NAME, is_finished
from v05.grid.targets import gain90_bootstrap, gain_targets, tail_target
from v05.grid.tuning import picks, tuning_results
from v05.hardware import hardware_label
from v05.report.runs import (
    EVAL_KEY,
    ROLLOUTS_KEY,
    Run,
    load_run,
    mean_curve,
    mean_curve_crossing,
    paired_difference,
    seed_mean,
)
from v05.stats import crossing_ratio, mean_se, t_interval

logger = logging.getLogger(__name__)

V05_ESTIMATORS = ("v05", "v05_eb")
"""Estimators of v05's V0.5 line: a method using one is of family ``"v05"``."""
def method_family(run: Run, declared: str | None = None) -> str:
    """``"v05"`` for v05's V0.5 line (estimator v05 or v05_eb), ``"grpo"`` for GRPO at a fixed k, else ``"other"``."""
    if declared is not None:
        return declared
    estimator, allocator = run.config_value("estimator.name"), run.config_value("allocator.name")
    if estimator in V05_ESTIMATORS:
        return "v05"
    return "grpo" if estimator == "grpo" and allocator == "fixed" else "other"


def task_results(
    task: GridTask,
    groups: dict[str, list[Run]],
    reference: str,
    methods: Sequence[GridMethod],
    *,
    seed: int = 0,
    control: str | None = None,
) -> dict[str, Any]:
    """The matrix JSON of one task setting (the contract's ``tasks.TASK`` object).

    ``control``: the method every other is also paired with (``vs_running_mean_*``: the running mean at k = 1 in
    the evidence grid), when it has finished runs.
    """
    ref_runs = groups[reference]
    warm, ref_final, threshold = gain_targets(ref_runs)
    rng = np.random.default_rng(seed)
    rng_final, rng_tail = np.random.default_rng([seed, 1]), np.random.default_rng([seed, 2])  # gain90's rng unchanged
    declared = {m.name: m for m in methods}
    family = {n: method_family(g[0], declared[n].family if n in declared else None) for n, g in groups.items()}
    grpos = [n for n in groups if family[n] == "grpo" and n != reference]
    out = {}
    for name, runs in groups.items():
        finals = [v for v in (r.last(EVAL_KEY) for r in runs) if v is not None]
        # ratios on the seeds both have (a partial grid: the pairs that exist), never one side's extra seeds
        seeds = {r.seed for r in runs} & {r.seed for r in ref_runs}
        pair_ref = [r for r in ref_runs if r.seed in seeds] or ref_runs
        pair_runs = [r for r in runs if r.seed in seeds] or runs
        _, m_final, m_threshold = gain_targets(pair_ref)
        m_tail = tail_target(pair_ref)
        m_reach, m_reach90 = mean_curve_crossing(pair_ref, m_final), mean_curve_crossing(pair_ref, m_threshold)
        m_compute = None if m_reach is None else gc.compute_at(pair_ref, m_reach)
        m_compute90 = None if m_reach90 is None else gc.compute_at(pair_ref, m_reach90)
        reach, reach90 = mean_curve_crossing(pair_runs, m_final), mean_curve_crossing(pair_runs, m_threshold)
        paired = paired_difference(runs, ref_runs)
        grad_sd = [float(np.std(v)) for v in (r.series("grad_norm")[1] for r in runs) if v.size > 1]
        same = {"ci95": [1.0, 1.0], "never_frac": 0.0}
        boot = gain90_bootstrap(runs, ref_runs, rng) if name != reference else same
        boot_final = same if name == reference else gain90_bootstrap(
            runs, ref_runs, rng_final, target=lambda rf: gain_targets(rf)[1])  # fmt: skip
        boot_tail = same if name == reference else gain90_bootstrap(runs, ref_runs, rng_tail, target=tail_target)
        vs_control = paired_difference(runs, groups[control]) if control in groups and name != control else None
        vs = {g: paired_difference(runs, groups[g]) for g in grpos if g != name}
        out[name] = {
            "family": family[name],
            "config": declared[name].config if name in declared else runs[0].config_value("name"),
            "overrides": list(declared[name].overrides) if name in declared else [],
            "seeds": [r.seed for r in runs],
            "final_mean": mean_se(finals)[0],
            "final_se": mean_se(finals)[1],
            "final_ci95": None if (ci := t_interval(finals)) is None else list(ci),
            "paired_diff_mean": paired["mean"],
            "paired_diff_se": paired["se"],
            "paired_diff_n": paired["n"],
            "paired_diff_ci95": paired["ci95"],
            "paired_diff_vs": {g: {"mean": d["mean"], "se": d["se"], "n": d["n"]} for g, d in vs.items()},
            "rollout_ratio": crossing_ratio(reach, m_reach),
            "rollout_ratio_ci95": boot_final["ci95"],
            "rollout_ratio_tail10": crossing_ratio(
                mean_curve_crossing(pair_runs, m_tail), mean_curve_crossing(pair_ref, m_tail)
            ),
            "rollout_ratio_tail10_ci95": boot_tail["ci95"],
            "rollout_ratio_gain90": crossing_ratio(reach90, m_reach90),
            "rollout_ratio_gain90_ci95": boot["ci95"],
            "rollout_ratio_gain90_never_frac": boot["never_frac"],
            "compute_ratio": crossing_ratio(None if reach is None else gc.compute_at(pair_runs, reach), m_compute),
            "compute_ratio_user": crossing_ratio(
                None if reach is None else gc.user_compute_at(pair_runs, reach),
                None if m_reach is None else gc.user_compute_at(pair_ref, m_reach),
            ),
            "compute_user_recount": gc.recount_kind(runs),
            "compute_ratio_gain90": crossing_ratio(
                None if reach90 is None else gc.compute_at(pair_runs, reach90), m_compute90
            ),
            "compute_per_rollout": gc.compute_per_rollout(runs),
            "init_rollouts": gc.init_rollouts(runs),
            "rollouts_to_reference_final": reach,  # absolute, init included; None: never reached
            "prior_compute_frac": gc.prior_compute_frac(runs),
            "grad_norm_mean": seed_mean(runs, "grad_norm"),
            "grad_norm_sd": mean_se(grad_sd)[0],
            "entropy_final": mean_se([v for v in (r.last("entropy") for r in runs) if v is not None])[0],
            "rollouts_per_prompt": seed_mean(runs, "rollouts_per_prompt"),
            "all_equal_frac": seed_mean(runs, "all_equal_frac"),
            "zero_adv_frac": seed_mean(runs, "zero_adv_frac"),
            "prior_auc": seed_mean(runs, "prior/auc"),
            "prior_tau2": seed_mean(runs, "prior/tau2"),
            "prior_n0": seed_mean(runs, "prior/n0"),
            "wall_time_s": mean_se([v for v in (r.last("wall_time") for r in runs) if v is not None])[0],
            "ran": ran(runs),
        }
        if control in groups:
            out[name] |= {
                "vs_running_mean_diff": 0.0 if vs_control is None else vs_control["mean"],
                "vs_running_mean_ci95": None if vs_control is None else vs_control["ci95"],
                "vs_running_mean_n": len(runs) if vs_control is None else vs_control["n"],
            }
    budget = ref_runs[0].config_value("train.max_rollouts")
    return {
        "reference": reference,
        "regime": task.regime,
        "pool": task.pool,
        "description": task.description,
        "overrides": list(task.overrides),
        "warm_start_eval": warm,
        "reference_final": ref_final,
        "gain90_threshold": threshold,
        "reference_tail10": tail_target(ref_runs),
        "reference_last_quarter_gain": _last_quarter_gain(ref_runs),
        "budget_rollouts": int(budget) if budget is not None else int(max(r.last(ROLLOUTS_KEY) or 0 for r in ref_runs)),
        "methods": out,
    }


def _last_quarter_gain(runs: Sequence[Run]) -> float:
    """The reference's seed-mean eval gain over the last quarter of its rollouts (> 0: still improving at the end)."""
    curve = mean_curve(runs, ROLLOUTS_KEY)
    x = curve.x[0] + 0.75 * (curve.x[-1] - curve.x[0])
    return float(curve.mean[-1] - np.interp(x, curve.x, curve.mean))


def _nan_to_none(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _nan_to_none(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_nan_to_none(v) for v in value]
    return value


def matrix_results(
    grid: Grid, cells: Sequence[Cell], tune: Sequence[Cell] = (), *, store: Path | None = None
) -> dict[str, Any]:
    """The matrix JSON over the finished cells (a method with no finished seed on a task is left out of it).

    With a tuning sweep, each task gets ``tuning`` (:func:`tuning_results`) and each tuned method its ``setting``.
    Each task's ``warm_start_sft`` is :func:`warm_start_record` of its comparison cells (read from ``store`` where this
    machine has not cached them).
    A task whose reference has no finished cell yet (say, a tuned reference whose sweep is still running) is left
    out, with a warning: a grid run in parts reports the tasks it can; its tuning sweep so far goes to ``pending``.
    """
    tasks, pending, attribution = {}, {}, {}
    for task in grid.tasks:
        groups: dict[str, list[Run]] = {}
        settings: dict[str, str | None] = {}
        for cell in cells:
            if cell.task.name == task.name and is_finished(cell):
                groups.setdefault(cell.method.name, []).append(load_run(cell.run_dir))
                settings[cell.method.name] = cell.setting
        if grid.reference not in groups:
            if groups:
                logger.warning("task %s: the reference %s has no finished run yet: the task is left out of the "
                               "report", task.name, grid.reference)  # fmt: skip
            if grid.tuning is not None:
                pending[task.name] = {"tuning": tuning_results(grid, [c for c in tune if c.task.name == task.name])}
            continue
        control = grid.attribution.control if grid.attribution is not None else None
        resolved = {c.method.name: c.method for c in cells}  # a method derived from a pick, with the picked config
        methods = tuple(resolved.get(m.name, m) for m in grid.methods)
        tasks[task.name] = task_results(task, groups, grid.reference, methods, control=control)
        if grid.attribution is not None:
            picked = {n: r["method"] if r else n for n, r in picks(grid, tune).items()}  # a pick's name until decided
            planned = {m.name for m in grid.methods if m.runs_on(task.name)} | set(picked)
            attribution[task.name] = attribution_results(grid.attribution, groups, planned=planned, picked=picked)
        tasks[task.name]["warm_start_sft"] = warm_start_record([c for c in cells if c.task.name == task.name], store)
        for name, entry in tasks[task.name]["methods"].items():
            entry["setting"] = settings.get(name)
        if grid.attribution is not None and grid.attribution.oracle is not None:
            headroom = attribution[task.name]["headroom"]
            add_selection_fields(tasks[task.name], headroom, groups, grid.attribution.oracle)
        if grid.tuning is not None:
            tasks[task.name]["tuning"] = tuning_results(grid, [c for c in tune if c.task.name == task.name])
    return _nan_to_none({"grid": grid.name, "tasks": tasks, **({"attribution": attribution} if attribution else {}),
                         **({"pending": pending} if pending else {})})  # fmt: skip


def attribution_results(
    spec: Attribution, groups: dict[str, list[Run]], *, planned: set[str] | None = None,
    picked: dict[str, str] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """One task setting's attribution table (the contract's ``attribution.TASK``).

    Each row: the paired difference ``method − versus`` (:func:`v05.report.runs.paired_difference`: points as a
    fraction, its 95 % t-interval over seeds) and the rollouts ``method`` needs to reach ``versus``'s final ÷
    ``versus``'s own (on the seeds both have; None: never reached). A row whose methods have not both finished is
    None; a row naming a method that is not ``planned`` on this task setting (``tasks:`` leaves it out; None: every
    method) is left out of the table. A row may name a tuning pick (``tuning.picks``): ``picked`` maps it to the
    picked method (until it is decided the row is None). ``headroom``: the oracle's and the best learned prior's
    difference to ``control``, and ``captured`` = best ÷ oracle (the best is picked after the fact: an optimistic
    reading, said so on the page), None unless the oracle's 95 % interval lies above 0.
    """
    rows, picked = [], picked or {}
    for row in spec.rows:
        if planned is not None and not {row.method, row.versus} <= planned:
            continue
        method, versus = picked.get(row.method, row.method), picked.get(row.versus, row.versus)
        entry = _difference(groups, method, versus)
        rows.append({"factor": row.factor, "method": method, "versus": versus, **(entry or {"diff": None})})
    headroom = None
    if spec.control is not None and spec.oracle is not None:
        oracle = _difference(groups, spec.oracle, spec.control)
        learned = {n: d for n in spec.learned if (d := _difference(groups, n, spec.control)) is not None}
        best = max(learned, key=lambda n: learned[n]["diff"], default=None)
        captured = None  # a share of a gain that is not there (the oracle's interval reaches 0) is not quoted
        if oracle is not None and best is not None and oracle["ci95"] is not None and oracle["ci95"][0] > 0:
            captured = learned[best]["diff"] / oracle["diff"]
        headroom = {
            "control": spec.control,
            "oracle": spec.oracle,
            "oracle_diff": None if oracle is None else oracle["diff"],
            "oracle_ci95": None if oracle is None else oracle["ci95"],
            "best_learned": best,
            "best_learned_diff": None if best is None else learned[best]["diff"],
            "best_learned_ci95": None if best is None else learned[best]["ci95"],
            "captured": captured,
            "learned": list(spec.learned),
        }
    return {"rows": rows, "headroom": headroom}


def _difference(groups: dict[str, list[Run]], method: str, versus: str) -> dict[str, Any] | None:
    """``method − versus`` paired over their common seeds, and the rollout ratio to ``versus``'s final."""
    if method not in groups or versus not in groups:
        return None
    d = paired_difference(groups[method], groups[versus])
    seeds = {r.seed for r in groups[method]} & {r.seed for r in groups[versus]}
    runs = [r for r in groups[method] if r.seed in seeds]
    base = [r for r in groups[versus] if r.seed in seeds]
    if d["mean"] is None or not runs:
        return None
    target = gain_targets(base)[1]
    ratio = crossing_ratio(mean_curve_crossing(runs, target), mean_curve_crossing(base, target))
    return {"diff": d["mean"], "ci95": d["ci95"], "n": d["n"], "rollout_ratio": ratio}


def run_meta(command: str, cells: Sequence[Cell], elapsed_s: float) -> dict[str, Any]:
    """Hardware, the command, this invocation's wall time and the summed wall time of every finished cell.

    ``cells_hardware`` counts the finished cells per machine (a cell restored from a store keeps the hardware it was
    trained on).
    """
    walls = []
    machines: dict[str, int] = {}
    for c in cells:
        if is_finished(c):
            wall = load_run(c.run_dir).last("wall_time")
            walls.append(wall or 0.0)
            stored = c.run_dir / STORED_NAME
            where = json.loads(stored.read_text(encoding="utf-8")).get("hardware") if stored.is_file() else None
            machines[where or hardware_label()] = machines.get(where or hardware_label(), 0) + 1
    return {
        "command": command,
        "hardware": hardware_label(),
        "cells_hardware": machines,
        "generated": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "cells_finished": len(walls),
        "cells_total": len(cells),
        "cells_wall_time_s": float(sum(walls)),
        "invocation_wall_time_s": float(elapsed_s),
    }


__all__ = [
    "V05_ESTIMATORS",
    "attribution_results",
    "matrix_results",
    "method_family",
    "run_meta",
    "task_results",
]
