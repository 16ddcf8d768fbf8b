"""The equal tuning budget: score the sweep, choose each tuned method's setting, pick the recommended configuration.

Every tuned method runs every setting of the sweep on one tuning seed (:func:`v05.grid.cells.tuning_cells`); per task
setting it is then compared at the setting with the best score (:func:`choose_settings`; rule ``mean_eval``: the
mean eval after the start, an area under the curve). :func:`recommendation` picks the recommended (method, setting)
among ``tuning.recommend`` by :data:`RECOMMEND_RULE`, and :func:`recommended_yaml` writes it as a config.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from v05.grid.cells import Cell, load_at
from v05.grid.spec import Grid
from v05.grid.store import is_finished
from v05.report.runs import EVAL_KEY, ROLLOUTS_KEY, Run, load_run, seed_mean
from v05.train.config import TrainConfig, to_yaml


def tuning_score(run: Run, rule: str = "mean_eval") -> float | None:
    """A tuning run's score: ``mean_eval``, the mean eval over its evaluations after the start; ``final``, the last.

    A run with an offline init counted (``spo-offline``: its first evaluation at x = init, the warm start) scores
    as if evaluated every ``eval.every_rollouts`` during the init too, at the warm start's value: the same grid of
    evaluations as a run without one, so the init's rollouts cost it what they cost on the rollout axis.
    """
    x, y = run.series_vs(ROLLOUTS_KEY, EVAL_KEY)
    every = run.config_value("eval.every_rollouts")
    init = next((float(m[ROLLOUTS_KEY]) for m in run.metrics[1:2] if run.metrics[0].get("before_init")), 0.0)
    if init > 0 and every:  # an offline init (spo-offline): the evaluations a run without it would have had before
        pre = np.arange(every, init, every, dtype=np.float64)  # x = init are at the start's value (the warm start)
        x, y = np.concatenate([pre, x]), np.concatenate([np.full(pre.size, y[0]), y])
    y = y[x > 0]
    if not y.size:
        return None
    return float(y[-1]) if rule == "final" else float(y.mean())


RECOMMEND_RULE = (
    "the candidate and setting with the highest tuning score (the tuning seed's mean eval after the start) averaged "
    "over every task setting of the grid, decided from the tuning sweep alone, before the comparison's seeds run"
)


def recommendation(
    grid: Grid, cells: Sequence[Cell], candidates: Sequence[str] | None = None
) -> dict[str, Any] | None:
    """The recommended (method, setting) among ``candidates`` (default ``tuning.recommend``), by :data:`RECOMMEND_RULE`.

    None until every candidate's sweep has finished on every task setting (or without candidates).
    """
    if grid.tuning is None:
        return None
    candidates = grid.tuning.recommend if candidates is None else tuple(candidates)
    if not candidates:
        return None
    scores: dict[tuple[str, str], dict[str, float]] = {}
    for cell in cells:
        if cell.method.name not in candidates:
            continue
        if not is_finished(cell):
            return None
        score = tuning_score(load_run(cell.run_dir), grid.tuning.rule)
        if score is None:
            return None
        scores.setdefault((cell.method.name, cell.setting or "default"), {})[cell.task.name] = score
    order = {(m, s.name): i for i, (m, s) in enumerate(
        (m, s) for m in candidates for s in grid.tuning.settings)}  # fmt: skip
    full = {k: v for k, v in scores.items() if len(v) == len(grid.tasks)}
    if len(full) < len(order):
        return None
    best = max(full, key=lambda k: (float(np.mean(list(full[k].values()))), -order[k]))
    return {"method": best[0], "setting": best[1], "score_mean": float(np.mean(list(full[best].values()))),
            "scores": full[best], "rule": RECOMMEND_RULE}  # fmt: skip


def picks(grid: Grid, cells: Sequence[Cell]) -> dict[str, dict[str, Any] | None]:
    """Each of ``tuning.picks`` by :data:`RECOMMEND_RULE` among its own candidates (None until its sweep is done)."""
    return {} if grid.tuning is None else {n: recommendation(grid, cells, c) for n, c in grid.tuning.picks}


RECOMMENDED_NAME = "v05_recommended"
"""The ``name`` of the recommended configuration (the packaged config ``v05-recommended``)."""


def recommended_config(grid: Grid, rec: dict[str, Any]) -> TrainConfig:
    """The recommended (method, setting) of :func:`recommendation` as a config of its own.

    The method's config with its overrides and the setting's (its batch scale included), named
    :data:`RECOMMENDED_NAME`; without the grid's and the task setting's overrides (run options, the warm-start regime),
    which a user chooses (``v05 demo --regime``).

    Raises:
        ValueError: ``rec`` names a method or setting the grid lacks.
    """
    methods = {m.name: m for m in grid.methods}
    settings = {s.name: s for s in grid.tuning.settings} if grid.tuning is not None else {}
    if rec.get("method") not in methods or rec.get("setting") not in settings:
        raise ValueError(f"recommended {rec.get('method')!r} at {rec.get('setting')!r}: not a method and tuning "
                         f"setting of grid {grid.name!r}")  # fmt: skip
    method, setting = methods[rec["method"]], settings[rec["setting"]]
    overrides = (*method.overrides, *setting.overrides, f"name={RECOMMENDED_NAME}")
    return load_at(method.config, overrides, setting)


def recommended_yaml(grid: Grid, rec: dict[str, Any], command: str) -> str:
    """The packaged ``v05-recommended.yaml``: a header naming the pick and the command, then the resolved config."""
    scores = ", ".join(f"{t} {v:.3f}" for t, v in rec["scores"].items())
    header = (
        f"# v05-recommended: `{rec['method']}` at tuning setting `{rec['setting']}` of grid {grid.path.as_posix()}\n"
        f"# (mean tuning score {rec['score_mean']:.3f}: {scores}), picked by the rule: {rec['rule']}.\n"
        f"# Written by: {command}; do not edit by hand.\n"
    )
    return header + to_yaml(recommended_config(grid, rec))


def choose_settings(grid: Grid, cells: Sequence[Cell]) -> dict[tuple[str, str], str | None]:
    """(task, method) → the tuning setting with the best score, once every setting of the pair has finished.

    Ties go to the earlier setting (``default`` first). A pair with an unfinished setting maps to None.
    """
    if grid.tuning is None:
        return {}
    scores: dict[tuple[str, str], list[tuple[float, int, str]]] = {}
    pending: set[tuple[str, str]] = set()
    order = {s.name: i for i, s in enumerate(grid.tuning.settings)}
    for cell in cells:
        key = (cell.task.name, cell.method.name)
        score = tuning_score(load_run(cell.run_dir), grid.tuning.rule) if is_finished(cell) else None
        if score is None:
            pending.add(key)
        else:
            scores.setdefault(key, []).append((score, order[cell.setting], cell.setting))
    return {
        key: None if key in pending else max(v, key=lambda t: (t[0], -t[1]))[2]
        for key, v in {**{k: [] for k in pending}, **scores}.items()
    }


def tuning_results(grid: Grid, cells: Sequence[Cell]) -> dict[str, Any]:
    """Per tuned method: every setting's tuning score, final eval, gradient-norm spike and the chosen setting.

    ``grad_norm_spike`` is the largest gradient norm over the run's median one (a divergence shows as a spike);
    ``final_minus_start`` its final eval minus its start (< 0: the setting lost ground).
    """
    t = grid.tuning
    if t is None:
        return {}
    chosen = choose_settings(grid, cells)
    out: dict[str, Any] = {}
    for cell in cells:
        entry = out.setdefault(cell.method.name, {"chosen": chosen.get((cell.task.name, cell.method.name)),
                                                   "rule": t.rule, "seed": t.seed, "split": t.split,
                                                   "settings": {}})  # fmt: skip
        if not is_finished(cell):
            entry["settings"][cell.setting] = None
            continue
        run = load_run(cell.run_dir)
        grads = run.series("grad_norm")[1]
        start = start_eval(run)
        final = run.last(EVAL_KEY)
        entry["settings"][cell.setting] = {
            "score": tuning_score(run, t.rule),
            "final": final,
            "final_minus_start": None if final is None or start is None else final - start,
            "grad_norm_spike": float(grads.max() / np.median(grads)) if grads.size and np.median(grads) > 0 else None,
            "rollouts_per_step": seed_mean([run], "rollouts_step"),
        }
    return out


def start_eval(run: Run) -> float | None:
    """The run's eval at zero rollouts (the warm start's), None where it was not evaluated at the start."""
    x, y = run.series_vs(ROLLOUTS_KEY, EVAL_KEY)
    return float(y[0]) if x.size and x[0] == 0 else None


__all__ = [
    "RECOMMENDED_NAME",
    "RECOMMEND_RULE",
    "choose_settings",
    "picks",
    "recommendation",
    "recommended_config",
    "recommended_yaml",
    "start_eval",
    "tuning_results",
    "tuning_score",
]
