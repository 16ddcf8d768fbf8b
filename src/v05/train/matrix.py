"""``v05 bench matrix GRID.yaml``: every method of a declared grid, on every task setting, at one budget per task.

A grid (YAML, ``benchmarks/grids/``) names task settings (each a list of config overrides and its regime), methods
(a packaged config or file plus overrides) and seeds. Each cell (task, method, seed) is a normal run directory
``OUT/TASK/METHOD-sSEED``: a finished cell is reused, an interrupted one resumed, so the grid can run in parts.
Cells run one at a time, or in ``workers`` separate processes (one torch thread each).

Per task the results compare every method to the reference (GRPO k = 4 by default) on the same seeds (a seed fixes
the warm start and the prompt order, so runs of one seed are paired):

- ``final_mean`` and ``final_ci95``: each seed's last eval, mean ± t₀.₉₇₅(n−1)·SE;
- ``paired_diff_mean`` ± ``paired_diff_se``: eval − reference eval, seed by seed, averaged over the common rollout
  grid (:func:`paired_difference`), then mean ± SE over seeds;
- ``rollout_ratio``: rollouts the seed-mean curve needs to reach the reference's final ÷ the reference's own;
  ``rollout_ratio_gain90`` the same for warm start + 90 % of the reference's gain (a threshold off the plateau),
  with a paired bootstrap CI over seeds (``rollout_ratio_gain90_ci95``; the upper end is None when a resample never
  reaches it); ``compute_ratio`` the same crossing in token-passes. None: never reached;
- ``grad_norm_mean`` (each seed's mean over steps), ``grad_norm_sd`` (its std over steps), ``entropy_final``.

The report (``OUT/index.html``, one ``OUT/TASK/report/report.html`` with the PNGs per task) and ``docs/results.md``
(:func:`results_markdown`) are written from the same numbers.
"""

from __future__ import annotations

import dataclasses
import datetime
import gzip
import hashlib
import html
import itertools
import json
import logging
import math
import os
import platform
import shutil
import signal
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from tqdm.auto import tqdm

from v05._checks import error_line
from v05.report.html import write_report
from v05.report.runs import (
    COMPUTE_KEY,
    EVAL_KEY,
    METRICS_NAME,
    ROLLOUTS_KEY,
    Run,
    first_crossing,
    load_run,
    mean_curve,
    mean_se,
    seed_mean,
)
from v05.train.config import EVAL_SPLITS, TrainConfig, load_config, to_yaml
from v05.train.loop import train
from v05.train.policy import set_cpu_threads
from v05.train.rundir import latest_checkpoint
from v05.train.warmstart import ensure_warm_start, warm_start_dir

logger = logging.getLogger(__name__)

REGIMES = ("easy", "hard")
POOLS = ("revisited", "fresh", "mixed")
FAMILIES = ("grpo", "v05", "other")
V05_ESTIMATORS = ("v05", "v05_eb")
"""Estimators of v05's V0.5 line: a method using one is of family ``"v05"``."""
GAIN_FRACTION = 0.9
"""``rollout_ratio_gain90``'s threshold: warm start + this fraction of the reference's gain."""
TAIL_FRACTION = 0.1
"""``rollout_ratio_tail10``'s target: the reference's seed-mean eval over the last 10 % of its rollouts."""
BOOTSTRAP_RESAMPLES = 2000
"""Paired bootstrap resamples of the seeds for ``rollout_ratio_gain90_ci95``."""
RESULTS_NAME = "matrix.json"

# two-sided 95 % Student-t quantiles t_{0.975}(df), df = 1..30 (beyond: 1.96)
_T975 = (
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


# -- the grid ------------------------------------------------------------------------------------------------------


_frozen = dataclasses.dataclass(frozen=True, kw_only=True, slots=True)


@_frozen
class GridTask:
    """One task setting: config overrides applied to every method (task, warm start, budget) and its regime."""

    name: str
    regime: str
    overrides: tuple[str, ...] = ()
    description: str = ""
    pool: str = "revisited"
    """the pool regime (:data:`POOLS`): ``revisited`` (a pool the budget visits many times per prompt), ``fresh`` (a
    pool at least as large as the prompts the budget draws) or ``mixed`` (domains and difficulties mixed)."""


@_frozen
class GridMethod:
    """One method: a packaged config name or a YAML file, plus overrides; ``family`` None: from the config."""

    name: str
    config: str
    overrides: tuple[str, ...] = ()
    family: str | None = None


@_frozen
class GridSetting:
    """One setting of the tuning sweep: config overrides and a batch scale.

    ``batch_scale`` multiplies ``train.batch_size`` and the allocator's batch-like options (``batch_size``,
    ``extra_budget``, ``gen_batch_size``) of each tuned method, so the rollouts per step scale alike whatever the
    method's k (a k = 1 method at 128 prompts and GRPO k = 4 at 32 both halve to 64 rollouts a step).
    """

    name: str
    overrides: tuple[str, ...] = ()
    batch_scale: float = 1.0


@_frozen
class Tuning:
    """An equal tuning budget: every tuned method runs every setting on one tuning seed (not among the grid's seeds).

    Each tuned method is then run on the grid's seeds at the setting with the best tuning score (``rule``;
    ``mean_eval``: the mean eval pass rate over the tuning run's evaluations after the start, an area under its
    curve), so no method is judged on the seed that picked its setting. ``settings`` starts with ``default`` (no
    override).
    """

    seed: int
    methods: tuple[str, ...]
    settings: tuple[GridSetting, ...]
    rule: str = "mean_eval"
    recommend: tuple[str, ...] = ()
    """candidates for the recommended configuration (tuned methods): :func:`recommendation` picks one."""
    split: str = "validation"
    """the split the tuning runs evaluate and are scored on (``eval.split``): ``validation`` (model selection, so
    the eval split judges only the comparison seeds); ``eval`` only reproduces the grids tuned before it existed."""


TUNING_RULES = ("mean_eval", "final")


@_frozen
class AttributionRow:
    """One line of the attribution table: what ``method`` adds over ``versus`` (paired, same seeds)."""

    factor: str
    method: str
    versus: str


@_frozen
class Attribution:
    """The attribution table of a grid (``attribution:``): named paired differences, and the oracle's headroom.

    ``control`` is the method every other is also paired with (``vs_running_mean_*``); ``oracle`` the bound and
    ``learned`` the learned priors whose best gain over ``control`` is set against the oracle's (``captured``).
    """

    rows: tuple[AttributionRow, ...]
    control: str | None = None
    oracle: str | None = None
    learned: tuple[str, ...] = ()


@_frozen
class Grid:
    """A declared grid: tasks × methods × seeds; ``quick`` holds the smoke grid's seeds, methods and overrides."""

    name: str
    path: Path
    seeds: tuple[int, ...]
    reference: str
    tasks: tuple[GridTask, ...]
    methods: tuple[GridMethod, ...]
    overrides: tuple[str, ...] = ()
    quick_seeds: tuple[int, ...] = (0,)
    quick_methods: tuple[str, ...] = ()
    quick_overrides: tuple[str, ...] = ()
    store: Path | None = None
    """where finished cells are kept for another machine or session to resume from (:func:`store_cell`)."""
    tuning: Tuning | None = None
    """the equal tuning budget (None: every method at its config's setting)."""
    attribution: Attribution | None = None
    """the attribution table (None: none)."""

    def for_quick(self) -> Grid:
        """The smoke grid: every task setting, the ``quick`` methods (the reference first) and seeds."""
        names = [self.reference, *(m for m in self.quick_methods if m != self.reference)]
        methods = tuple(m for name in names for m in self.methods if m.name == name)
        return dataclasses.replace(
            self, seeds=self.quick_seeds, methods=methods, overrides=(*self.overrides, *self.quick_overrides),
            store=None, tuning=None, attribution=None,
        )  # fmt: skip


@_frozen
class Cell:
    """One run of the grid: a task setting, a method and a seed, its config and run directory."""

    task: GridTask
    method: GridMethod
    seed: int
    run_dir: Path
    cfg: TrainConfig
    setting: str | None = None
    """the tuning setting this cell runs (a tuning cell), or the one chosen for the method (None: untuned)."""
    tuning: bool = False
    """a cell of the tuning sweep (on the tuning seed), not of the comparison."""


def _names_list(value: object) -> bool:
    """Whether ``value`` is a YAML list of names (strings), so it can be compared as a set."""
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def load_grid(path: str | Path) -> Grid:
    """Read and check a grid file.

    Format (every key but ``name``, ``tasks``, ``methods`` optional)::

        name: standard
        seeds: [0, 1, 2]
        reference: grpo4                      # a method name; default grpo4
        overrides: [eval.every=25]            # applied to every cell, first
        tasks:
          arithmetic-easy: {regime: easy, overrides: []}
          arithmetic-hard: {regime: hard, overrides: [warmup.sft.target_pass_rate=0.15]}

    Methods:
          grpo4: demo-grpo4                   # a packaged config or a YAML file
          grpo8: {config: demo-grpo4, overrides: [allocator.options.k=8]}
        quick: {seeds: [0], methods: [grpo4, grpo8], overrides: [train.max_rollouts=768]}
        store: ../results/matrix/standard       # finished cells kept here (relative to the grid file)
        tuning:                                 # an equal tuning budget (see Tuning)
          seed: 100
          methods: [grpo4, ppo]
          settings: {lr-half: {overrides: [optim.lr=5.0e-5]}, batch-half: {batch_scale: 0.5}}

    Raises:
        ValueError: a missing or malformed entry; the message names it.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"grid file {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise ValueError(f"{path}: not valid YAML ({error_line(err)})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping with name, tasks and methods")
    unknown = sorted(
        set(data)
        - {"name", "description", "seeds", "reference", "overrides", "tasks", "methods", "quick", "store", "tuning",
           "attribution"}
    )
    if unknown:
        raise ValueError(f"{path}: unknown key(s) {', '.join(unknown)}")

    def strings(value: object, where: str) -> tuple[str, ...]:
        if value is None:
            return ()
        if not isinstance(value, list) or not all(isinstance(v, str) and "=" in v for v in value):
            raise ValueError(f"{path}: {where} must be a list of key=value strings, got {value!r}")
        return tuple(value)

    def seeds(value: object, where: str) -> tuple[int, ...]:
        if not isinstance(value, list) or not value or not all(type(v) is int for v in value):
            raise ValueError(f"{path}: {where} must be a non-empty list of integers, got {value!r}")
        if len(set(value)) != len(value):
            raise ValueError(f"{path}: {where} repeats a seed: {value}")
        return tuple(value)

    tasks_raw, methods_raw = data.get("tasks"), data.get("methods")
    if not isinstance(tasks_raw, dict) or not tasks_raw:
        raise ValueError(f"{path}: tasks must be a non-empty mapping of task setting names")
    if not isinstance(methods_raw, dict) or not methods_raw:
        raise ValueError(f"{path}: methods must be a non-empty mapping of method names")
    tasks = []
    for name, spec in tasks_raw.items():
        spec = spec or {}
        if not isinstance(spec, dict) or set(spec) - {"regime", "pool", "overrides", "description"}:
            raise ValueError(f"{path}: task {name!r} takes regime, pool, overrides and description, got {spec!r}")
        regime = spec.get("regime", "easy")
        if regime not in REGIMES:
            raise ValueError(f"{path}: task {name!r} regime must be one of {', '.join(REGIMES)}, got {regime!r}")
        pool = spec.get("pool", "revisited")
        if pool not in POOLS:
            raise ValueError(f"{path}: task {name!r} pool must be one of {', '.join(POOLS)}, got {pool!r}")
        tasks.append(
            GridTask(
                name=_name(name, path),
                regime=regime,
                pool=pool,
                description=str(spec.get("description", "")),
                overrides=strings(spec.get("overrides"), f"tasks.{name}.overrides"),
            )
        )
    methods = []
    for name, spec in methods_raw.items():
        if isinstance(spec, str):
            spec = {"config": spec}
        if not isinstance(spec, dict) or "config" not in spec or set(spec) - {"config", "overrides", "family"}:
            raise ValueError(f"{path}: method {name!r} needs config (and may have overrides, family), got {spec!r}")
        family = spec.get("family")
        if family is not None and family not in FAMILIES:
            raise ValueError(f"{path}: method {name!r} family must be one of {', '.join(FAMILIES)}, got {family!r}")
        config = str(spec["config"])
        if config.endswith((".yaml", ".yml")) and not Path(config).is_absolute():
            config = str((path.parent / config).resolve()) if (path.parent / config).is_file() else config
        methods.append(
            GridMethod(
                name=_name(name, path),
                config=config,
                family=family,
                overrides=strings(spec.get("overrides"), f"methods.{name}.overrides"),
            )
        )
    names = [m.name for m in methods]
    reference = data.get("reference", "grpo4")
    if reference not in names:
        raise ValueError(f"{path}: reference {reference!r} is not one of the methods ({', '.join(names)})")
    quick = data.get("quick") or {}
    if not isinstance(quick, dict) or set(quick) - {"seeds", "methods", "overrides"}:
        raise ValueError(f"{path}: quick takes seeds, methods and overrides, got {quick!r}")
    quick_methods = quick.get("methods", [reference])
    if not _names_list(quick_methods) or set(quick_methods) - set(names):
        raise ValueError(f"{path}: quick.methods must list methods of the grid, got {quick_methods!r}")
    seeds_main = seeds(data.get("seeds", [0, 1, 2]), "seeds")
    tuning = _load_tuning(data.get("tuning"), path, names, seeds_main, strings)
    return Grid(
        name=str(data.get("name") or path.stem),
        path=path,
        seeds=seeds_main,
        reference=reference,
        tasks=tuple(tasks),
        methods=tuple(methods),
        overrides=strings(data.get("overrides"), "overrides"),
        quick_seeds=seeds(quick.get("seeds", [0]), "quick.seeds"),
        quick_methods=tuple(quick_methods),
        quick_overrides=strings(quick.get("overrides"), "quick.overrides"),
        store=None if data.get("store") is None else path.parent / str(data["store"]),
        tuning=tuning,
        attribution=_load_attribution(data.get("attribution"), path, names),
    )


def _load_attribution(raw: object, path: Path, methods: list[str]) -> Attribution | None:
    """The grid's ``attribution:`` entry: ``{control, oracle, learned: [...], rows: [{factor, method, versus}]}``."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) - {"control", "oracle", "learned", "rows"}:
        raise ValueError(f"{path}: attribution takes control, oracle, learned and rows, got {raw!r}")
    known = set(methods)
    for key in ("control", "oracle"):
        if raw.get(key) is not None and raw[key] not in known:
            raise ValueError(f"{path}: attribution.{key} {raw[key]!r} is not a method of the grid")
    learned = raw.get("learned", [])
    if not _names_list(learned) or set(learned) - known:
        raise ValueError(f"{path}: attribution.learned must list methods of the grid, got {learned!r}")
    rows = []
    for i, row in enumerate(raw.get("rows") or []):
        if not isinstance(row, dict) or set(row) != {"factor", "method", "versus"}:
            raise ValueError(f"{path}: attribution.rows[{i}] must be {{factor, method, versus}}, got {row!r}")
        if row["method"] not in known or row["versus"] not in known:
            raise ValueError(f"{path}: attribution.rows[{i}] names a method the grid lacks: {row!r}")
        rows.append(AttributionRow(factor=str(row["factor"]), method=row["method"], versus=row["versus"]))
    return Attribution(rows=tuple(rows), control=raw.get("control"), oracle=raw.get("oracle"), learned=tuple(learned))


def _load_tuning(raw: object, path: Path, methods: list[str], seeds: tuple[int, ...], strings: Any) -> Tuning | None:
    """The grid's ``tuning:`` entry (see :class:`Tuning`); None when absent."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) - {"seed", "methods", "settings", "rule", "recommend", "split"}:
        raise ValueError(f"{path}: tuning takes seed, methods, settings, rule, recommend and split, got {raw!r}")
    split = raw.get("split", "validation")
    if split not in EVAL_SPLITS:
        raise ValueError(f"{path}: tuning.split must be one of {', '.join(EVAL_SPLITS)}, got {split!r}")
    seed = raw.get("seed", 100)
    if type(seed) is not int or seed in seeds:
        raise ValueError(f"{path}: tuning.seed must be an integer not among the grid's seeds {list(seeds)}, got {seed}")
    tuned = raw.get("methods")
    if not _names_list(tuned) or not tuned or set(tuned) - set(methods) or len(set(tuned)) != len(tuned):
        raise ValueError(f"{path}: tuning.methods must list distinct methods of the grid, got {tuned!r}")
    rule = raw.get("rule", "mean_eval")
    if rule not in TUNING_RULES:
        raise ValueError(f"{path}: tuning.rule must be one of {', '.join(TUNING_RULES)}, got {rule!r}")
    settings_raw = raw.get("settings")
    if not isinstance(settings_raw, dict) or not settings_raw:
        raise ValueError(f"{path}: tuning.settings must map setting names to {{overrides, batch_scale}}")
    settings = [GridSetting(name="default")]
    for name, spec in settings_raw.items():
        if name == "default" or not isinstance(spec, dict) or set(spec) - {"overrides", "batch_scale"}:
            raise ValueError(
                f"{path}: tuning setting {name!r} takes overrides and batch_scale (and 'default' is implicit), "
                f"got {spec!r}"
            )
        scale = spec.get("batch_scale", 1.0)
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < scale <= 16:
            raise ValueError(f"{path}: tuning setting {name!r} batch_scale must lie in (0, 16], got {scale!r}")
        settings.append(GridSetting(name=_name(name, path), overrides=strings(spec.get("overrides"),
                                    f"tuning.settings.{name}.overrides"), batch_scale=float(scale)))  # fmt: skip
    recommend = raw.get("recommend", [])
    if not isinstance(recommend, list) or set(recommend) - set(tuned):
        raise ValueError(f"{path}: tuning.recommend must list tuned methods, got {recommend!r}")
    return Tuning(
        seed=seed, methods=tuple(tuned), settings=tuple(settings), rule=rule, recommend=tuple(recommend), split=split
    )


def _name(name: object, path: Path) -> str:
    text = str(name)
    if not text or any(c in text for c in "/\\ ") or text.startswith("."):
        raise ValueError(f"{path}: {text!r} is not a usable name (no spaces, slashes or leading dot)")
    return text


def _scale_overrides(cfg: TrainConfig, scale: float) -> list[str]:
    """Overrides multiplying the batch size and the allocator's batch-like options by ``scale`` (each ≥ 1)."""
    if scale == 1.0:
        return []
    out = [f"train.batch_size={max(1, round(cfg.train.batch_size * scale))}"]
    for key in ("batch_size", "extra_budget", "gen_batch_size"):
        value = cfg.allocator.options.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            out.append(f"allocator.options.{key}={max(1, round(value * scale))}")
    return out


def _load_at(config: str, overrides: Sequence[str], setting: GridSetting | None, *, quick: bool = False) -> TrainConfig:
    """``config`` with ``overrides`` (which hold the setting's own), its batch scaled by the setting's scale."""
    cfg = load_config(config, overrides, quick=quick)
    if setting is not None and setting.batch_scale != 1.0:
        cfg = load_config(config, (*overrides, *_scale_overrides(cfg, setting.batch_scale)), quick=quick)
    return cfg


def _cell(
    grid: Grid, task: GridTask, method: GridMethod, seed: int, run_dir: Path, *, quick: bool,
    setting: GridSetting | None = None, tuning: bool = False,
) -> Cell:  # fmt: skip
    """One cell: overrides in the order grid, task, method, setting, then ``name=`` and ``seed=``."""
    name = f"{method.name}@{setting.name}" if tuning and setting is not None else method.name
    extra = () if setting is None else setting.overrides
    if tuning and grid.tuning is not None and grid.tuning.split != "eval":
        extra = (*extra, f"eval.split={grid.tuning.split}")  # scored on the validation split, never on eval
    overrides = (*grid.overrides, *task.overrides, *method.overrides, *extra, f"name={name}", f"seed={seed}")
    try:
        cfg = _load_at(method.config, overrides, setting, quick=quick)
    except ValueError as err:
        raise ValueError(f"grid cell {task.name}/{name}: {err}") from None
    return Cell(task=task, method=method, seed=seed, run_dir=run_dir, cfg=cfg,
                setting=None if setting is None else setting.name, tuning=tuning)  # fmt: skip


def grid_cells(
    grid: Grid, out: Path, *, quick: bool = False, choices: dict[tuple[str, str], str | None] | None = None
) -> list[Cell]:
    """Every (task, seed, method) cell with its checked config, seed-major so that early cells pair up.

    The overrides apply in the order grid, task, method, the tuned setting, then ``name=METHOD`` and ``seed=SEED``.
    A tuned method's cells take the setting ``choices[(task, method)]`` (:func:`choose_settings`), in run
    directories ``METHOD@SETTING-sSEED`` unless it is ``default``; while its tuning sweep is unfinished (no choice)
    they are left out.

    Raises:
        ValueError: a cell's config does not load (the message names the cell).
    """
    tuned = set(grid.tuning.methods) if grid.tuning is not None else set()
    by_name = {s.name: s for s in grid.tuning.settings} if grid.tuning is not None else {}
    cells = []
    for task in grid.tasks:
        for seed in grid.seeds:
            for method in grid.methods:
                setting = None
                if method.name in tuned:
                    chosen = (choices or {}).get((task.name, method.name))
                    if chosen is None:
                        continue
                    setting = by_name[chosen]
                # a tuned method at a non-default setting gets its own cells (METHOD@SETTING-sSEED): a store shared
                # with another grid keeps both; at the default it is the untuned cell
                label = method.name if setting is None or setting.name == "default" else f"{method.name}@{setting.name}"
                run_dir = out / task.name / f"{label}-s{seed}"
                cells.append(_cell(grid, task, method, seed, run_dir, quick=quick, setting=setting))
    return cells


def tuning_cells(grid: Grid, out: Path, *, quick: bool = False) -> list[Cell]:
    """The tuning sweep's cells: every tuned method × setting on the tuning seed (``OUT/TASK/METHOD@SETTING-sSEED``)."""
    if grid.tuning is None:
        return []
    t = grid.tuning
    methods = {m.name: m for m in grid.methods}
    return [
        _cell(
            grid,
            task,
            methods[name],
            t.seed,
            out / task.name / f"{name}@{setting.name}-s{t.seed}",
            quick=quick,
            setting=setting,
            tuning=True,
        )  # fmt: skip
        for task in grid.tasks
        for name in t.methods
        for setting in t.settings
    ]


def tuning_score(run: Run, rule: str = "mean_eval") -> float | None:
    """A tuning run's score: ``mean_eval``, the mean eval over its evaluations after the start; ``final``, the last."""
    x, y = run.series_vs(ROLLOUTS_KEY, EVAL_KEY)
    y = y[x > 0]
    if not y.size:
        return None
    return float(y[-1]) if rule == "final" else float(y.mean())


RECOMMEND_RULE = (
    "the candidate and setting with the highest tuning score (the tuning seed's mean eval after the start) averaged "
    "over every task setting of the grid, decided from the tuning sweep alone, before the comparison's seeds run"
)


def recommendation(grid: Grid, cells: Sequence[Cell]) -> dict[str, Any] | None:
    """The recommended (method, setting) among ``tuning.recommend``, by :data:`RECOMMEND_RULE`.

    None until every candidate's sweep has finished on every task setting (or without candidates).
    """
    if grid.tuning is None or not grid.tuning.recommend:
        return None
    scores: dict[tuple[str, str], dict[str, float]] = {}
    for cell in cells:
        if cell.method.name not in grid.tuning.recommend:
            continue
        if not is_finished(cell):
            return None
        score = tuning_score(load_run(cell.run_dir), grid.tuning.rule)
        if score is None:
            return None
        scores.setdefault((cell.method.name, cell.setting or "default"), {})[cell.task.name] = score
    order = {(m, s.name): i for i, (m, s) in enumerate(
        (m, s) for m in grid.tuning.recommend for s in grid.tuning.settings)}  # fmt: skip
    full = {k: v for k, v in scores.items() if len(v) == len(grid.tasks)}
    if len(full) < len(order):
        return None
    best = max(full, key=lambda k: (float(np.mean(list(full[k].values()))), -order[k]))
    return {"method": best[0], "setting": best[1], "score_mean": float(np.mean(list(full[best].values()))),
            "scores": full[best], "rule": RECOMMEND_RULE}  # fmt: skip


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
    return _load_at(method.config, overrides, setting)


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


def is_finished(cell: Cell) -> bool:
    """Whether the cell's run directory holds a finished run (trained here, or restored from a store)."""
    return (cell.run_dir / "final").is_dir() or (cell.run_dir / STORED_NAME).is_file()


def cell_state(cell: Cell) -> str:
    """``"done"`` (a finished run of this config), ``"resume"`` (a checkpoint), or ``"new"``.

    Raises:
        ValueError: the run directory holds a run of another config (the grid changed: delete it or use another
            ``--out``).
    """
    saved = cell.run_dir / "config.yaml"
    if saved.is_file() and not _same_config(saved, cell.cfg):  # loaded: a field added since reads as its default
        raise ValueError(
            f"{cell.run_dir} holds a run of another config than the grid's cell {cell.task.name}/{cell.method.name}: "
            "delete it or pass another --out"
        )
    if is_finished(cell):
        return "done"
    return "resume" if latest_checkpoint(cell.run_dir) is not None else "new"


# -- the store: finished cells kept (committed) so that a grid runs in parts on fresh machines ----------------------

STORED_NAME = "stored.json"
"""Marks a run directory restored from the store (its metrics and config, not its weights)."""


def warm_start_digest(cfg: TrainConfig) -> str | None:
    """SHA-256 (16 hex digits) of the cached warm start's weights, None without a warm-up or before it is trained.

    Cells pair only when they start from the same weights: SFT stops at another step on another CPU, so a stored cell
    is reused only where this machine's warm start has the same digest.
    """
    if not cfg.warmup.enabled:
        return None
    folder = warm_start_dir(cfg)
    files = sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin"))
    if not files:
        return None
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.read_bytes())
    return digest.hexdigest()[:16]


def _stored(cell: Cell, store: Path) -> Path:
    return store / cell.task.name / cell.run_dir.name


def store_cell(cell: Cell, store: Path) -> Path:
    """Keep a finished cell in ``store``: ``config.yaml``, ``metrics.jsonl.gz`` and ``stored.json``.

    ``stored.json`` gives the warm start's digest and the hardware. The entry is written to a temporary folder and
    renamed, so a crash leaves the old entry or none.
    """
    dest = _stored(cell, store)
    tmp = dest.with_name(f".tmp_{dest.name}_{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    shutil.copyfile(cell.run_dir / "config.yaml", tmp / "config.yaml")
    with gzip.GzipFile(tmp / (METRICS_NAME + ".gz"), "wb", mtime=0) as f:  # mtime 0: the same bytes on every machine
        f.write((cell.run_dir / METRICS_NAME).read_bytes())
    info = {"warm_start": warm_start_digest(cell.cfg), "hardware": hardware_label()}
    (tmp / STORED_NAME).write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
    if dest.exists():
        if (dest / "config.yaml").is_file() and not _same_config(dest / "config.yaml", cell.cfg):
            logger.warning("store: %s held another config (the grid changed); replaced by this cell's", dest)
        shutil.rmtree(dest)
    os.replace(tmp, dest)
    return dest


WARM_STORE = "warm_start"
"""The store's folder of warm starts (the cache's layout: one folder per warm-start key)."""


def _copy_warm_start(src: Path, dest: Path) -> bool:
    """Copy the warm-start folder ``src`` to ``dest`` unless ``dest`` has one or ``src`` has none; whether it did.

    Via a temporary folder and a rename: a crash leaves no half-copied warm start.
    """
    if (dest / "sft.json").is_file() or not (src / "sft.json").is_file():
        return False
    tmp = dest.with_name(f".tmp_{dest.name}_{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp)
    os.replace(tmp, dest)
    return True


def restore_warm_starts(warm: Iterable[Path], store: Path) -> int:
    """Copy the store's warm starts that this machine's cache lacks into it; returns how many.

    SFT stops at another step on another CPU, so a grid resumed elsewhere starts from the stored weights, not from
    a fresh warm-up: its new cells then pair with the stored ones.
    """
    return sum(_copy_warm_start(store / WARM_STORE / folder.name, folder) for folder in warm)


def keep_warm_starts(warm: Iterable[Path], store: Path) -> None:
    """Copy each trained warm start into the store once (the store's copy, once written, is never replaced)."""
    for folder in warm:
        _copy_warm_start(folder, store / WARM_STORE / folder.name)


def _same_config(saved: Path, cfg: TrainConfig) -> bool:
    """Whether a stored ``config.yaml`` loads (with this version's defaults for fields added since) to ``cfg``."""
    try:
        return load_config(str(saved)) == cfg
    except ValueError:  # a field removed or renamed since: another config
        return False


def restore_cells(cells: Sequence[Cell], store: Path) -> int:
    """Copy the stored cells that this ``--out`` lacks (state ``new``) into their run directories; returns how many.

    A stored cell of another config (the grid changed since) is left out and will be trained again; configs compare
    as loaded, so a field added to the trainer since (at its default) does not make a stored cell stale.

    Raises:
        ValueError: a stored cell started from another warm start than the one cached on this machine (they would
            not pair: train the grid into another store). Without a cached warm start (a report only) nothing is
            compared.
    """
    restored = 0
    for cell in cells:
        src = _stored(cell, store)
        if not (src / STORED_NAME).is_file() or cell_state(cell) != "new":
            continue
        if not _same_config(src / "config.yaml", cell.cfg):
            logger.warning("store: %s holds another config than the grid's cell: it will be trained again", src)
            continue
        info = json.loads((src / STORED_NAME).read_text(encoding="utf-8"))
        local = warm_start_digest(cell.cfg)
        if local is not None and info.get("warm_start") != local:
            raise ValueError(
                f"store: {src} was trained from warm start {info.get('warm_start')} but this machine's is {local} "
                f"({warm_start_dir(cell.cfg)}): the cells would not pair; delete that cached warm start (the "
                "store's is then used) or pass another --store"
            )
        cell.run_dir.mkdir(parents=True, exist_ok=True)
        (cell.run_dir / "config.yaml").write_text(to_yaml(cell.cfg), encoding="utf-8")  # this version's layout
        with gzip.open(src / (METRICS_NAME + ".gz"), "rb") as f:
            (cell.run_dir / METRICS_NAME).write_bytes(f.read())
        (cell.run_dir / STORED_NAME).write_text(json.dumps(info | {"from": str(src)}) + "\n", encoding="utf-8")
        restored += 1
    return restored


def _run_cell(cfg: TrainConfig, run_dir: str, resume: bool) -> tuple[str, bool]:
    """Train one cell (in this process or a worker); returns (run_dir, interrupted)."""
    result = train(cfg, Path(run_dir), resume=resume)
    return run_dir, result.interrupted


def _warm(cfg: TrainConfig) -> str:
    # the cell's thread count (1): torch's default, every core, beside another worker made the SFT ~8x slower
    set_cpu_threads(cfg.run.threads)
    return str(ensure_warm_start(cfg, progress=False))


def run_grid(
    cells: Sequence[Cell], *, workers: int = 1, progress: bool = True, store: Path | None = None
) -> dict[str, str]:
    """Train every cell that is not finished; returns {run_dir: error} for the cells that failed.

    Warm starts are taken from ``store`` where this machine lacks them, else trained (one per distinct warm start,
    so parallel cells never train the same one) and kept there; then the cells found in ``store`` are restored
    (:func:`restore_cells`), then the rest are trained, each kept in ``store`` as it finishes; with ``workers`` > 1
    each cell runs in a fresh spawned process. A failing cell is logged and skipped (its error returned); an
    interrupt stops the grid with every started cell checkpointed.
    """
    states = {c.run_dir: cell_state(c) for c in cells}
    todo = [c for c in cells if states[c.run_dir] != "done"]
    logger.info("grid: %d cells, %d finished, %d to run", len(cells), len(cells) - len(todo), len(todo))
    warm = {warm_start_dir(c.cfg): c.cfg for c in todo if c.cfg.warmup.enabled}
    if store is not None:
        restore_warm_starts(warm, store)
    missing = [cfg for d, cfg in warm.items() if not (d / "sft.json").is_file()]
    failures: dict[str, str] = {}
    bar = tqdm(total=len(missing) + len(todo), desc="grid", unit="run", disable=not progress, dynamic_ncols=True)
    jobs = [(_warm, (cfg,), f"warm start {warm_start_dir(cfg).name}") for cfg in missing]
    try:
        _execute(jobs, workers, bar, failures)
        if store is not None:
            keep_warm_starts(warm, store)
            n = restore_cells(todo, store)
            logger.info("grid: %d cells restored from %s", n, store)
            bar.update(n)
            todo = [c for c in todo if cell_state(c) != "done"]
        by_dir = {str(c.run_dir): c for c in todo}
        cell_jobs = [(_run_cell, (c.cfg, str(c.run_dir), states[c.run_dir] == "resume"), str(c.run_dir)) for c in todo]
        _execute(cell_jobs, workers, bar, failures, on_done=None if store is None else (
            lambda label: store_cell(by_dir[label], store)))  # fmt: skip
    finally:
        bar.close()
    return failures


def _execute(
    jobs: list[tuple[Any, tuple[Any, ...], str]], workers: int, bar: Any, failures: dict[str, str],
    on_done: Any = None,
) -> None:  # fmt: skip
    def done(label: str, result: Any) -> None:
        if isinstance(result, tuple) and result[1]:
            raise KeyboardInterrupt(f"{label} interrupted (checkpoint saved; re-run the grid to resume)")
        if on_done is not None:
            on_done(label)
        bar.update(1)
        bar.set_postfix_str(Path(label).name if "/" in label else label)

    if workers <= 1:
        for fn, args, label in jobs:
            try:
                done(label, fn(*args))
            except (ValueError, RuntimeError, OSError) as err:
                logger.error("%s failed: %s", label, err)
                failures[label] = f"{type(err).__name__}: {err}"
                bar.update(1)
        return
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"), max_tasks_per_child=1)
    futures: dict[Any, str] = {}
    previous = signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM stops the grid as Ctrl-C does
    try:
        # submitted lazily, at most `workers` in flight: an interrupt then has no queued job that would still start
        pending = iter(jobs)
        for fn, args, label in itertools.islice(pending, workers):
            futures[pool.submit(fn, *args)] = label
        while futures:
            finished, _ = wait(futures, return_when=FIRST_COMPLETED)
            for future in finished:
                label = futures.pop(future)
                try:
                    done(label, future.result())
                except (ValueError, RuntimeError, OSError) as err:
                    logger.error("%s failed: %s", label, err)
                    failures[label] = f"{type(err).__name__}: {err}"
                    bar.update(1)
                for fn, args, label in itertools.islice(pending, 1):
                    futures[pool.submit(fn, *args)] = label
    except BaseException:
        # interrupted: start nothing new, let the running cells checkpoint (SIGINT: the trainer saves and stops)
        for future in futures:
            future.cancel()
        for proc in list(getattr(pool, "_processes", {}).values()):
            if proc.is_alive():
                os.kill(proc.pid, signal.SIGINT)
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    pool.shutdown(wait=True)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


# -- the statistics ------------------------------------------------------------------------------------------------


def t_interval(values: Sequence[float]) -> tuple[float, float] | None:
    """95 % Student-t interval of the mean: x̄ ± t₀.₉₇₅(n − 1)·s/√n (None for fewer than 2 values).

    >>> [round(v, 3) for v in t_interval([1.0, 3.0])]  # SE 1, t(1) = 12.706
    [-10.706, 14.706]
    """
    if len(values) < 2:
        return None
    v = np.asarray(values, np.float64)
    se = float(v.std(ddof=1) / math.sqrt(v.size))
    t = _T975[v.size - 2] if v.size - 1 <= len(_T975) else 1.96
    return float(v.mean()) - t * se, float(v.mean()) + t * se


def paired_difference(runs: Sequence[Run], reference: Sequence[Run]) -> dict[str, float | int | None]:
    """Eval − reference eval, seed by seed, averaged over the rollout grid both cover; mean ± SE over seeds.

        d_s = mean_{x ∈ grid_s} (y_s(x) − y^ref_s(x)),   grid_s = eval points of either run in the common range,
        mean = (1/n) Σ d_s,   se = std(d, ddof=1)/√n

    Runs of one seed share the warm start and the prompt order, so d_s cancels most of the seed-to-seed spread.
    Seeds missing from either group are left out.

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
        x, y = run.series_vs(ROLLOUTS_KEY, EVAL_KEY)
        xr, yr = other.series_vs(ROLLOUTS_KEY, EVAL_KEY)
        if x.size == 0 or xr.size == 0:
            continue
        lo, hi = max(x[0], xr[0]), min(x[-1], xr[-1])
        grid = np.unique(np.concatenate([x, xr]))
        grid = grid[(grid >= lo) & (grid <= hi)]
        if grid.size:
            diffs.append(float(np.mean(np.interp(grid, x, y) - np.interp(grid, xr, yr))))
    if not diffs:
        return {"mean": None, "se": None, "n": 0, "ci95": None}
    mean, se = mean_se(diffs)
    ci = t_interval(diffs)
    return {"mean": mean, "se": se, "n": len(diffs), "ci95": None if ci is None else list(ci)}


def compute_at(runs: Sequence[Run], rollouts: float) -> float:
    """Token-passes after ``rollouts`` rollouts: each seed's (rollouts_total, compute_total) interpolated, averaged.

    (The seeds' compute curves end at different x, so a seed-mean curve over compute would be cut at the shortest.)
    """
    return float(np.mean([np.interp(rollouts, *r.series_vs(ROLLOUTS_KEY, COMPUTE_KEY)) for r in runs]))


def _reach(runs: Sequence[Run], target: float) -> float | None:
    curve = mean_curve(runs, ROLLOUTS_KEY)
    return first_crossing(curve.x, curve.mean, target) if curve.n_seeds else None


def _ratio(value: float | None, ref: float | None) -> float | None:
    # undefined when the method never reaches the target, or the reference reaches it at no cost (warm start)
    return None if value is None or not ref else value / ref


def _start_eval(run: Run) -> float | None:
    x, y = run.series_vs(ROLLOUTS_KEY, EVAL_KEY)
    return float(y[0]) if x.size and x[0] == 0 else None


def gain_targets(reference: Sequence[Run]) -> tuple[float, float, float]:
    """(warm-start eval, the reference's final, warm + GAIN_FRACTION · gain) from the reference's seed-mean curve."""
    curve = mean_curve(reference, ROLLOUTS_KEY)
    starts = [v for v in (_start_eval(r) for r in reference) if v is not None]
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
    target: Any = None,
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
    target = target if target is not None else (lambda rf: gain_targets(rf)[2])
    ref = {r.seed: r for r in reference}
    pairs = [(r, ref[r.seed]) for r in runs if r.seed in ref]
    if len(pairs) < 2:
        return {"ci95": None, "never_frac": None}
    ratios = []
    for _ in range(resamples):
        pick = rng.integers(0, len(pairs), size=len(pairs))
        m, rf = [pairs[i][0] for i in pick], [pairs[i][1] for i in pick]
        threshold = target(rf)
        ratio = _ratio(_reach(m, threshold), _reach(rf, threshold))
        ratios.append(math.inf if ratio is None else ratio)
    arr = np.asarray(ratios)
    lo, hi = np.quantile(arr, [0.025, 0.975], method="inverted_cdf")  # no interpolation: +∞ stays +∞
    return {
        "ci95": [float(lo), None if not math.isfinite(hi) else float(hi)],
        "never_frac": float(np.mean(~np.isfinite(arr))),
    }


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
        m_reach, m_reach90 = _reach(pair_ref, m_final), _reach(pair_ref, m_threshold)
        m_compute = None if m_reach is None else compute_at(pair_ref, m_reach)
        m_compute90 = None if m_reach90 is None else compute_at(pair_ref, m_reach90)
        reach, reach90 = _reach(pair_runs, m_final), _reach(pair_runs, m_threshold)
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
            "rollout_ratio": _ratio(reach, m_reach),
            "rollout_ratio_ci95": boot_final["ci95"],
            "rollout_ratio_tail10": _ratio(_reach(pair_runs, m_tail), _reach(pair_ref, m_tail)),
            "rollout_ratio_tail10_ci95": boot_tail["ci95"],
            "rollout_ratio_gain90": _ratio(reach90, m_reach90),
            "rollout_ratio_gain90_ci95": boot["ci95"],
            "rollout_ratio_gain90_never_frac": boot["never_frac"],
            "compute_ratio": _ratio(None if reach is None else compute_at(pair_runs, reach), m_compute),
            "compute_ratio_gain90": _ratio(None if reach90 is None else compute_at(pair_runs, reach90), m_compute90),
            "compute_per_rollout": float(
                np.mean(
                    [
                        r.last(COMPUTE_KEY) / r.last(ROLLOUTS_KEY)
                        for r in runs
                        if r.last(COMPUTE_KEY) and r.last(ROLLOUTS_KEY)
                    ]
                    or [math.nan]
                )
            ),
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


def matrix_results(grid: Grid, cells: Sequence[Cell], tune: Sequence[Cell] = ()) -> dict[str, Any]:
    """The matrix JSON over the finished cells (a method with no finished seed on a task is left out of it).

    With a tuning sweep, each task gets ``tuning`` (:func:`tuning_results`) and each tuned method its ``setting``.
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
        tasks[task.name] = task_results(task, groups, grid.reference, grid.methods, control=control)
        if grid.attribution is not None:
            attribution[task.name] = attribution_results(grid.attribution, groups)
        for name, entry in tasks[task.name]["methods"].items():
            entry["setting"] = settings.get(name)
        if grid.tuning is not None:
            tasks[task.name]["tuning"] = tuning_results(grid, [c for c in tune if c.task.name == task.name])
    return _nan_to_none({"grid": grid.name, "tasks": tasks, **({"attribution": attribution} if attribution else {}),
                         **({"pending": pending} if pending else {})})  # fmt: skip


def attribution_results(spec: Attribution, groups: dict[str, list[Run]]) -> dict[str, Any]:
    """One task setting's attribution table (the contract's ``attribution.TASK``).

    Each row: the paired difference ``method − versus`` (:func:`paired_difference`: points as a fraction, its 95 %
    t-interval over seeds) and the rollouts ``method`` needs to reach ``versus``'s final ÷ ``versus``'s own (on the
    seeds both have; None: never reached). A row whose methods have not both finished is None. ``headroom``: the
    oracle's and the best learned prior's difference to ``control``, and ``captured`` = best ÷ oracle (the best is
    picked after the fact: an optimistic reading, said so on the page).
    """
    rows = []
    for row in spec.rows:
        entry = _difference(groups, row.method, row.versus)
        rows.append({"factor": row.factor, "method": row.method, "versus": row.versus, **(entry or {"diff": None})})
    headroom = None
    if spec.control is not None and spec.oracle is not None:
        oracle = _difference(groups, spec.oracle, spec.control)
        learned = {n: d for n in spec.learned if (d := _difference(groups, n, spec.control)) is not None}
        best = max(learned, key=lambda n: learned[n]["diff"], default=None)
        captured = None
        if oracle is not None and best is not None and oracle["diff"] > 0:
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
    return {"diff": d["mean"], "ci95": d["ci95"], "n": d["n"],
            "rollout_ratio": _ratio(_reach(runs, target), _reach(base, target))}  # fmt: skip


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
        start = _start_eval(run)
        final = run.last(EVAL_KEY)
        entry["settings"][cell.setting] = {
            "score": tuning_score(run, t.rule),
            "final": final,
            "final_minus_start": None if final is None or start is None else final - start,
            "grad_norm_spike": float(grads.max() / np.median(grads)) if grads.size and np.median(grads) > 0 else None,
            "rollouts_per_step": seed_mean([run], "rollouts_step"),
        }
    return out


# -- the report ----------------------------------------------------------------------------------------------------


def _fmt(value: float | None, spec: str = ".3f", *, never: str = "never") -> str:
    return never if value is None else format(value, spec)


def _ratio_text(value: float | None) -> str:
    return "never" if value is None else f"{value:.2f}×"


def _points_ci(mean: float | None, ci: list[float] | None, se: float | None = None) -> str:
    """A paired difference in points with its 95 % interval (``± SE``, labelled, where a JSON predates the CI)."""
    if mean is None:
        return "—"
    if ci is not None:
        return f"{100 * mean:+.1f} [{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}]"
    return f"{100 * mean:+.1f}" + ("" if se is None else f" (± {100 * se:.1f} SE)")


def _ci_text(ci: list[float | None] | None) -> str:
    if ci is None:
        return "—"
    lo, hi = ci
    return f"[{_fmt(lo, '.2f')}, {'never' if hi is None else format(hi, '.2f')}]"


def headline_rows(task: dict[str, Any]) -> list[list[str]]:
    """One row per method: final ± CI, paired difference, the three ratios, grad norm, entropy, k."""
    rows = []
    for name, m in task["methods"].items():
        ci = m["final_ci95"]
        final = f"{_fmt(m['final_mean'])} [{_fmt(ci[0])}, {_fmt(ci[1])}]" if ci else _fmt(m["final_mean"])
        rows.append(
            [
                name + (" (ref)" if name == task["reference"] else ""),
                m["family"],
                str(len(m["seeds"])),
                final,
                _points_ci(m["paired_diff_mean"], m.get("paired_diff_ci95"), m["paired_diff_se"]),
                f"{_ratio_text(m['rollout_ratio'])} {_ci_text(m['rollout_ratio_ci95'])}"
                if "rollout_ratio_ci95" in m
                else _ratio_text(m["rollout_ratio"]),
                f"{_ratio_text(m['rollout_ratio_gain90'])} {_ci_text(m['rollout_ratio_gain90_ci95'])}",
                f"{_ratio_text(m.get('rollout_ratio_tail10'))} {_ci_text(m.get('rollout_ratio_tail10_ci95'))}",
                _ratio_text(m["compute_ratio"]),
                _fmt(m["grad_norm_mean"]),
                _fmt(m["entropy_final"]),
                _fmt(m["rollouts_per_prompt"], ".2f"),
            ]
        )
    return rows


HEADLINE_COLUMNS = (
    "method",
    "family",
    "seeds",
    "final [95% CI]",
    "paired Δ, points [95% CI]",
    "rollouts ÷ ref to its final [95% CI]",
    "… to 90% of its gain [95% CI]",
    "… to its last-10% mean [95% CI]",
    "compute ÷ ref",
    "grad norm",
    "entropy (final)",
    "k/prompt",
)


def markdown_table(task: dict[str, Any]) -> str:
    """The headline table of one task as GitHub markdown."""
    lines = ["| " + " | ".join(HEADLINE_COLUMNS) + " |", "|" + "---|" * len(HEADLINE_COLUMNS)]
    lines += ["| " + " | ".join(r) + " |" for r in headline_rows(task)]
    return "\n".join(lines)


def write_matrix_report(
    grid: Grid, cells: Sequence[Cell], results: dict[str, Any], out: Path, *, meta: dict[str, Any]
) -> Path:
    """Per task ``OUT/TASK/report/`` (report.html, summary.json, PNGs) and ``OUT/index.html`` with every table."""
    parts = []
    for name, task in results["tasks"].items():
        runs = [load_run(c.run_dir) for c in cells if c.task.name == name and is_finished(c)]
        report = write_report(
            runs,
            out / name / "report",
            reference=task["reference"],
            title=f"v05 bench matrix {grid.name}: {name} ({task['regime']})",
        )
        head = "".join(f"<th>{html.escape(h)}</th>" for h in HEADLINE_COLUMNS)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in headline_rows(task)
        )
        parts.append(
            f"<h2>{html.escape(name)} ({task['regime']})</h2><p>warm start {task['warm_start_eval']:.3f}, reference "
            f"{html.escape(task['reference'])} final {task['reference_final']:.3f}, 90 % threshold "
            f"{task['gain90_threshold']:.3f}, budget {task['budget_rollouts']:,} rollouts. "
            f'<a href="{html.escape(str(report.relative_to(out)))}">curves and figures</a></p>'
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
        )
    page = (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>v05 bench matrix {html.escape(grid.name)}'
        "</title><style>body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1400px}table{border-collapse:"
        "collapse;font-size:.85em}th,td{border:1px solid #ccc;padding:.3em .5em}th{background:#f0f0f0}</style></head>"
        f"<body><h1>v05 bench matrix: {html.escape(grid.name)}</h1><p><code>{html.escape(meta['command'])}</code>; "
        f"{html.escape(meta['hardware'])}; generated {html.escape(meta['generated'])}.</p>"
        f"{''.join(parts)}</body></html>\n"
    )
    path = out / "index.html"
    path.write_text(page, encoding="utf-8")
    return path


CPU_FEATURES = (("amx_bf16", "AMX"), ("avx512f", "AVX-512"), ("avx2", "AVX2"))
"""/proc/cpuinfo flag → label: the widest matrix unit names the machine (kernels, hence trajectories, differ)."""


def cpu_label(cpuinfo: str, fallback: str) -> str:
    """``model name`` and the widest vector/matrix unit from /proc/cpuinfo text (``fallback`` where it says none).

    A run's float results depend on the kernels its CPU selects (AVX2, AVX-512, AMX), so cells trained on two
    machines with one name but different units are told apart in the results.
    """
    fields = dict(line.split(":", 1) for line in cpuinfo.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    flags = set(fields.get("flags", "").split())
    unit = next((label for flag, label in CPU_FEATURES if flag in flags), None)
    name = fields.get("model name") or fallback
    return f"{name}, {unit}" if unit else name


def hardware_label() -> str:
    """The machine a result came from: cores, CPU (with its widest vector unit), OS and Python."""
    fallback = platform.processor() or platform.machine()
    try:
        cpu = cpu_label(Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace"), fallback)
    except OSError:  # not Linux
        cpu = fallback
    return (
        f"{os.cpu_count()} CPU cores ({cpu}), {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}"
    )


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


# -- docs/results.md -----------------------------------------------------------------------------------------------

README_BEGIN = "<!-- v05 bench matrix: begin (generated; do not edit) -->"
README_END = "<!-- v05 bench matrix: end -->"

PROTOCOL_MD = (
    "Every method of a task setting starts from the same warm start per seed (the seed also fixes the prompt order), "
    "uses the same learning rate (1e-4, cosine over the rollout budget) and stops at the same rollout budget; {tuned}. "
    "*final* is each seed's last eval pass rate (sampled, T = 1, the task's held-out split), mean "
    "and 95 % t-interval over seeds. *paired Δ* is eval − reference eval on the same seed, averaged over the common "
    "rollout grid (every eval), mean and 95 % t-interval over seeds, in points. *rollouts ÷ ref* is the rollouts the "
    "seed-mean curve needs to reach the reference's final, divided by the reference's own; the *90 % of its gain* "
    "column uses the threshold warm start + 0.9 × the reference's gain instead (off the plateau), and the *last-10 %* "
    "column the reference's mean over the last 10 % of its budget (a target a plateaued reference reaches before the "
    "end); each ratio has a paired bootstrap 95 % interval over seeds of the seed-mean crossing (*never* where "
    "resamples never reach it). *compute ÷ ref* is the same crossing in token-passes (a forward of one "
    "token by one model counts 1, a backward 2): equal rollouts is not equal compute. grad norm is the mean over "
    "steps, entropy the last step's."
)


def protocol_markdown(grid: Grid) -> str:
    """The results page's protocol paragraph; it says which methods were tuned, and how, when the grid tunes."""
    t = grid.tuning
    if t is None:
        return PROTOCOL_MD.format(tuned="no method was tuned")
    tuned = (
        f"except that {', '.join(f'`{m}`' for m in t.methods)} were tuned alike: each ran every setting of the sweep "
        f"({', '.join(f'`{s.name}`' for s in t.settings)}) on seed {t.seed}, which is not compared, and is compared "
        f"at the setting with the best tuning score (rule `{t.rule}`, scored on the {t.split} split, per task "
        "setting); the other methods ran their configs as they are"
    )
    return PROTOCOL_MD.format(tuned=tuned)


def _m(task: dict[str, Any], name: str) -> dict[str, Any] | None:
    return task["methods"].get(name)


def _pts(d: float | None, se: float | None) -> str:
    return "—" if d is None else f"{100 * d:+.1f} ± {100 * (se or 0.0):.1f} points"


def _vs(task: dict[str, Any], name: str, other: str) -> tuple[float | None, float | None, int]:
    """Paired difference of ``name`` against ``other`` (the reference or a GRPO method): mean, SE, seeds."""
    m = _m(task, name)
    if m is None or other not in task["methods"]:
        return None, None, 0
    if other == task["reference"]:
        return m["paired_diff_mean"], m["paired_diff_se"], m["paired_diff_n"]
    d = m["paired_diff_vs"].get(other)
    return (d["mean"], d["se"], d["n"]) if d else (None, None, 0)


def _significant(d: float | None, se: float | None, n: int) -> int | None:
    """+1 / −1 when the paired difference is more than 2 SE from 0, 0 within; None with fewer than 2 seeds."""
    if d is None or se is None or n < 2:
        return None
    return 0 if abs(d) <= 2 * se else (1 if d > 0 else -1)


def claims(results: dict[str, Any]) -> list[str]:
    """The paper's claims, one paragraph each: what the paper says, what each task setting of the matrix shows."""
    tasks = results["tasks"]
    out = []

    def per_task(fn: Any) -> str:
        return " ".join(f"**{name}**: {fn(t)}" for name, t in tasks.items())

    def grad(t: dict[str, Any]) -> str:
        v, rows = _m(t, "v05"), []
        if v is None:
            return "no `v05` run."
        for g in ("grpo4", "grpo16"):
            if (m := _m(t, g)) is not None and v["grad_norm_mean"] is not None and m["grad_norm_mean"] is not None:
                lower = "lower" if v["grad_norm_mean"] < m["grad_norm_mean"] else "not lower"
                smoother = "smoother" if (v["grad_norm_sd"] or 0) < (m["grad_norm_sd"] or 0) else "not smoother"
                rows.append(
                    f"{v['grad_norm_mean']:.3f} (sd {v['grad_norm_sd']:.3f}) vs {g} {m['grad_norm_mean']:.3f} "
                    f"(sd {m['grad_norm_sd']:.3f}): {lower}, {smoother}"
                )
        return "; ".join(rows) + "."

    out.append(
        "**Gradient norm** (paper, Fig. 3: V0.5's gradient norm is lower and smoother than GRPO's). Mean over "
        "steps and seeds, sd = its spread over steps, V0.5 with OSLA (`v05`) against GRPO. " + per_task(grad)
    )

    def ent(t: dict[str, Any]) -> str:
        v, rows = _m(t, "v05"), []
        if v is None or v["entropy_final"] is None:
            return "no `v05` run."
        for g in ("grpo4", "grpo16"):
            if (m := _m(t, g)) is not None and m["entropy_final"] is not None:
                word = "higher" if v["entropy_final"] > m["entropy_final"] else "not higher"
                rows.append(f"{v['entropy_final']:.3f} vs {g} {m['entropy_final']:.3f} ({word})")
        return "; ".join(rows) + "."

    out.append(
        "**Entropy** (paper, Fig. 4: V0.5 keeps a higher policy entropy than GRPO). Last step, mean over seeds. "
        + per_task(ent)
    )

    def sparse(t: dict[str, Any]) -> str:
        rows = []
        for k in (1, 2, 4, 8):
            d, se, n = _vs(t, f"v05_k{k}", "grpo16")
            if d is None:
                continue
            verdict = {1: "beats", -1: "loses to", 0: "ties", None: "(1 seed, untested) vs"}[_significant(d, se, n)]
            rows.append(f"k = {k} {verdict} GRPO@16 ({_pts(d, se)})")
        return ("; ".join(rows) + ".") if rows else "not in the grid."

    out.append(
        "**Sparsity ablation** (paper: without OSLA, V0.5 at k = 1, 2 fails, while k = 4, 8 beat GRPO at k = 16). "
        "Paired difference of `v05_k*` (fixed k, `combined` prior) to GRPO@16; *beats* / *loses to* = more "
        "than 2 SE from 0. " + per_task(sparse)
    )

    def at4(t: dict[str, Any]) -> str:
        rows = []
        for g in ("grpo16", "grpo4"):
            d, se, n = _vs(t, "v05_k4", g)
            if d is not None:
                verdict = {1: "better than", -1: "worse than", 0: "within 2 SE of", None: "(1 seed, untested) vs"}[
                    _significant(d, se, n)
                ]
                rows.append(f"{verdict} GRPO@{g[4:]} ({_pts(d, se)})")
        return ("; ".join(rows) + ".") if rows else "not in the grid."

    out.append(
        "**V0.5 at k = 4 vs GRPO** (paper: V0.5 at 4 rollouts beats GRPO at 16; the fair comparison at equal "
        "rollouts is GRPO at 4). " + per_task(at4)
    )

    def best(t: dict[str, Any]) -> str:
        v05 = [(n, m) for n, m in t["methods"].items() if m["family"] == "v05"]
        if not v05:
            return "no V0.5-line method."
        n, m = max(v05, key=lambda nm: -math.inf if nm[1]["paired_diff_mean"] is None else nm[1]["paired_diff_mean"])
        return (
            f"best V0.5-line method `{n}`: {_pts(m['paired_diff_mean'], m['paired_diff_se'])}, rollouts ÷ ref "
            f"{_ratio_text(m['rollout_ratio'])}, at 90 % of the gain {_ratio_text(m['rollout_ratio_gain90'])} "
            f"{_ci_text(m['rollout_ratio_gain90_ci95'])}, compute ÷ ref {_ratio_text(m['compute_ratio'])}."
        )

    out.append(
        "**The promise: the same learning for fewer rollouts**, against the better GRPO (the reference). "
        + per_task(best)
    )
    return out


def methods_markdown(grid: Grid) -> list[str]:
    """The results page's list of methods: each name with its config and overrides (after the grid's own)."""
    lines = ["## Methods", "",
             "Each method is a packaged config (or file) with overrides, applied after the grid's "
             f"({', '.join(f'`{o}`' for o in grid.overrides) or 'none'}) and the task setting's:", ""]  # fmt: skip
    for m in grid.methods:
        extra = f" + {', '.join(f'`{o}`' for o in m.overrides)}" if m.overrides else ""
        lines.append(f"- `{m.name}`: `{m.config}`{extra}")
    return [*lines, ""]


def results_markdown(grid: Grid, results: dict[str, Any], meta: dict[str, Any]) -> str:
    """``docs/results.md``: hardware, wall time and command, the protocol, one table per task setting, the claims."""
    hours = meta["cells_wall_time_s"] / 3600
    lines = [
        f"# Results: `v05 bench matrix` on the `{grid.name}` grid",
        "",
        "Generated by the command below (every number on this page is written by it; do not edit by hand).",
        "",
        f"    {meta['command']}",
        "",
        f"- Hardware: {meta['hardware']}. Trained numbers are machine-specific (the warm start stops at a different "
        "step on another CPU): compare methods within one run of the grid. The grid's store keeps the warm starts, "
        "so cells trained on several machines (sessions) start from the same weights"
        + "".join(
            f"{'; ' if i else ': '}{n} cells on {where}"
            for i, (where, n) in enumerate(sorted(meta.get("cells_hardware", {}).items()))
        )
        + ".",
        *(
            ["- **Partial: the grid has not finished; the tables show the finished cells.**"]
            if meta["cells_finished"] < meta["cells_total"]
            else []
        ),
        f"- Cells finished: {meta['cells_finished']} of {meta['cells_total']}; their summed wall time "
        f"{hours:.2f} h (runs, evals included, warm starts excluded); generated {meta['generated']}.",
        f"- Grid file: `{grid.path.as_posix()}`; seeds {', '.join(map(str, grid.seeds))}; "
        f"reference `{grid.reference}`.",
        "",
        "## Protocol",
        "",
        protocol_markdown(grid),
        "",
        *methods_markdown(grid),
    ]
    for name, t in results["tasks"].items():
        lines += [
            f"## {name} ({t['regime']} regime" + (f", {t['pool']} pool)" if "pool" in t else ")"),
            "",
            (t["description"] + " ") if t["description"] else "",
            f"Warm start {t['warm_start_eval']:.3f}; reference `{t['reference']}` final {t['reference_final']:.3f}; "
            f"90 % threshold {t['gain90_threshold']:.3f}; budget {t['budget_rollouts']:,} rollouts per run; the "
            f"reference gained {100 * t['reference_last_quarter_gain']:+.1f} points over the last quarter of it. "
            f"Figures: `{name}/report/` under the grid's `--out` (eval vs rollouts and vs compute, grad norm, "
            "entropy, k histogram, zero-advantage shares, the prior's AUC/τ²/n0).",
            "",
            markdown_table(t),
            "",
            *attribution_markdown(results.get("attribution", {}).get(name)),
            *tuning_markdown(grid, t.get("tuning")),
        ]
    for name, pending in results.get("pending", {}).items():
        lines += [f"## {name}: the comparison has not run yet", "", *tuning_markdown(grid, pending.get("tuning"))]
    if grid.tuning is not None and grid.tuning.recommend:
        rec = results.get("recommended")
        lines += [
            "## The recommended configuration",
            "",
            f"Rule, fixed before the comparison's seeds ran: among {', '.join(f'`{m}`' for m in grid.tuning.recommend)}"
            f", {RECOMMEND_RULE}.",
            "",
            (
                "Pending: the tuning sweep has not finished."
                if rec is None
                else f"Pick: `{rec['method']}` at `{rec['setting']}` (mean tuning score {rec['score_mean']:.3f}; "
                + ", ".join(f"{t} {v:.3f}" for t, v in rec["scores"].items())
                + ")"
                + (
                    f"; provisional: {len(rec['scores'])} of the grid's {len(grid.tasks)} task settings"
                    if len(rec["scores"]) < len(grid.tasks)
                    else ""
                )
                + ". `--recommended FILE` writes it as a config (the packaged `v05-recommended` changes only then)."
            ),
            "",
        ]
    lines += ["## The paper's claims against the matrix", ""]
    for c in claims(results):
        lines += [f"- {c}", ""]
    return "\n".join(line for line in lines if line is not None).rstrip() + "\n"


def attribution_markdown(table: dict[str, Any] | None) -> list[str]:
    """One task setting's attribution table (:func:`attribution_results`) as markdown lines."""
    if not table:
        return []
    lines = [
        "Attribution (each row: the first method − the second, paired over their common seeds; points with the 95 % "
        "t-interval over seeds; rollouts the first needs to reach the second's final ÷ the second's own):",
        "",
        "| factor | method − versus | Δ, points [95% CI] | seeds | rollouts to versus's final |",
        "|---|---|---|---|---|",
    ]
    for row in table["rows"]:
        diff = _points_ci(row["diff"], row.get("ci95")) if row["diff"] is not None else "pending"
        ratio = _ratio_text(row["rollout_ratio"]) if row["diff"] is not None else "—"
        lines.append(f"| {row['factor']} | `{row['method']}` − `{row['versus']}` | {diff} | {row.get('n', '—')} | "
                     f"{ratio} |")  # fmt: skip
    h = table.get("headroom")
    if h is not None and h["oracle_diff"] is not None:
        best = "no learned prior has finished" if h["best_learned"] is None else (
            f"the best learned prior, `{h['best_learned']}` (picked after the fact), "
            f"{_points_ci(h['best_learned_diff'], h['best_learned_ci95'])}")  # fmt: skip
        captured = "" if h["captured"] is None else f"; it captures {h['captured']:.0%} of the oracle's gain"
        lines += ["", f"Headroom over `{h['control']}`: the oracle `{h['oracle']}` "
                      f"{_points_ci(h['oracle_diff'], h['oracle_ci95'])} points; {best}{captured}."]  # fmt: skip
    return [*lines, ""]


def tuning_markdown(grid: Grid, tuning: dict[str, Any] | None) -> list[str]:
    """The tuning sweep of one task as markdown lines: a row per tuned method, a column per setting (score, spike)."""
    if not tuning or grid.tuning is None:
        return []
    names = [s.name for s in grid.tuning.settings]
    described = "; ".join(
        f"`{s.name}`: {', '.join(s.overrides) or 'the config'}" + (f", batch × {s.batch_scale:g}" if s.batch_scale != 1
                                                                   else "")
        for s in grid.tuning.settings
    )  # fmt: skip
    lines = [
        f"Equal tuning budget (seed {grid.tuning.seed}, not one of the comparison's seeds; rule `{grid.tuning.rule}`"
        f"; {described}): each cell is the tuning score (the max/median gradient-norm spike); **bold** is the "
        "setting the comparison above used.",
        "",
        "| method | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for method, entry in tuning.items():
        row = []
        for name in names:
            v = entry["settings"].get(name)
            text = "pending" if v is None else f"{_fmt(v['score'])} ({_fmt(v['grad_norm_spike'], '.1f', never='—')})"
            row.append(f"**{text}**" if name == entry["chosen"] else text)
        lines.append(f"| {method} | " + " | ".join(row) + " |")
    return [*lines, ""]


def readme_section(results: dict[str, Any], meta: dict[str, Any], doc: str) -> str:
    """The README's results section: the headline table per task setting and a pointer to ``doc``."""
    lines = [
        README_BEGIN,
        "",
        f"From `{meta['command']}` ({meta['hardware']}; all numbers and the paper's claims in [{doc}]({doc})).",
        "",
    ]
    for name, t in results["tasks"].items():
        lines += [
            f"**{name}** ({t['regime']}: warm start {t['warm_start_eval']:.3f}, {t['budget_rollouts']:,} "
            f"rollouts; reference `{t['reference']}` final {t['reference_final']:.3f})",
            "",
            markdown_table(t),
            "",
        ]
    return "\n".join([*lines, README_END])


def replace_readme_section(readme: Path, section: str) -> None:
    """Put ``section`` between the README's markers (which must exist once each)."""
    text = readme.read_text(encoding="utf-8")
    if text.count(README_BEGIN) != 1 or text.count(README_END) != 1:
        raise ValueError(f"{readme}: needs the markers {README_BEGIN!r} and {README_END!r} once each")
    head, rest = text.split(README_BEGIN)
    _, tail = rest.split(README_END)
    readme.write_text(head + section + tail, encoding="utf-8")


def bench_matrix(
    grid_path: str | Path,
    out: str | Path,
    *,
    quick: bool = False,
    workers: int = 1,
    json_path: str | Path | None = None,
    doc: str | Path | None = None,
    readme: str | Path | None = None,
    command: str = "",
    train_cells: bool = True,
    progress: bool = True,
    tasks: Sequence[str] | None = None,
    store: str | Path | None = None,
    recommended: str | Path | None = None,
) -> dict[str, Any]:
    """Run a grid (finished cells reused) and write the report, the JSON and, if asked, ``doc`` and the README section.

    ``tasks`` restricts the run (and the results) to some task settings: the grid can run in parts. ``store``
    (default: the grid's ``store:``; ``"none"``: no store) keeps every finished cell and restores the ones this
    ``out`` lacks, so that parts can run on fresh machines (:func:`restore_cells`). ``recommended``: where to write
    the recommended configuration (:func:`recommended_yaml`) once the tuning sweep has picked it.

    Returns:
        ``{"results": the contract JSON, "failures": {run_dir: error}, "meta": ..., "report": index.html}``.
    """
    start = time.monotonic()
    grid = load_grid(grid_path)
    if quick:
        grid = grid.for_quick()
    if tasks:
        unknown = sorted(set(tasks) - {t.name for t in grid.tasks})
        if unknown:
            raise ValueError(
                f"--tasks: unknown task setting(s) {', '.join(unknown)}; the grid has "
                f"{', '.join(t.name for t in grid.tasks)}"
            )
        grid = dataclasses.replace(grid, tasks=tuple(t for t in grid.tasks if t.name in tasks))
    out = Path(out)
    kept = grid.store if store is None else None if str(store) == "none" else Path(store)
    failures: dict[str, str] = {}

    def run(batch: list[Cell]) -> None:
        if train_cells:
            failures.update(run_grid(batch, workers=workers, progress=progress, store=kept))
        elif kept is not None:
            restore_cells(batch, kept)

    tune = tuning_cells(grid, out, quick=quick)  # the equal tuning budget first: it picks the tuned settings
    run(tune)
    choices = choose_settings(grid, tune)
    cells = grid_cells(grid, out, quick=quick, choices=choices)
    run(cells)
    results = matrix_results(grid, cells, tune)
    results["recommended"] = recommendation(grid, tune)
    meta = run_meta(command or f"v05 bench matrix {grid_path}", [*tune, *cells], time.monotonic() - start)
    meta["tuning_pending"] = sorted(f"{t}/{m}" for (t, m), v in choices.items() if v is None)
    results["meta"] = meta
    results["failures"] = failures
    out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(results, indent=2, allow_nan=False) + "\n"
    (out / RESULTS_NAME).write_text(text, encoding="utf-8")
    if json_path is not None:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(text, encoding="utf-8")
    report = write_matrix_report(grid, cells, results, out, meta=meta) if results["tasks"] else None
    if doc is not None:
        Path(doc).write_text(results_markdown(grid, results, meta), encoding="utf-8")
    if recommended is not None and results["recommended"] is not None:
        Path(recommended).write_text(recommended_yaml(grid, results["recommended"], meta["command"]), encoding="utf-8")
    if readme is not None:
        replace_readme_section(
            Path(readme), readme_section(results, meta, Path(doc).as_posix() if doc else "docs/results.md")
        )
    return {"results": results, "failures": failures, "meta": meta, "report": report}


__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "CPU_FEATURES",
    "README_BEGIN",
    "README_END",
    "RECOMMENDED_NAME",
    "RECOMMEND_RULE",
    "FAMILIES",
    "GAIN_FRACTION",
    "POOLS",
    "REGIMES",
    "STORED_NAME",
    "TUNING_RULES",
    "WARM_STORE",
    "Cell",
    "Grid",
    "GridMethod",
    "GridSetting",
    "GridTask",
    "Tuning",
    "bench_matrix",
    "cell_state",
    "choose_settings",
    "cpu_label",
    "claims",
    "compute_at",
    "gain90_bootstrap",
    "gain_targets",
    "grid_cells",
    "headline_rows",
    "is_finished",
    "keep_warm_starts",
    "load_grid",
    "methods_markdown",
    "markdown_table",
    "matrix_results",
    "method_family",
    "paired_difference",
    "protocol_markdown",
    "readme_section",
    "recommendation",
    "recommended_config",
    "recommended_yaml",
    "replace_readme_section",
    "restore_cells",
    "restore_warm_starts",
    "results_markdown",
    "run_grid",
    "run_meta",
    "store_cell",
    "t_interval",
    "task_results",
    "tuning_cells",
    "tuning_markdown",
    "tuning_results",
    "tuning_score",
    "warm_start_digest",
    "write_matrix_report",
]
