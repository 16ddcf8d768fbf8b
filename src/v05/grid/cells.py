"""The cells of a grid: one run per (task setting, method, seed), with its resolved config and run directory.

:func:`grid_cells` plans the comparison's cells (a tuned method at the setting its sweep chose), :func:`tuning_cells`
the tuning sweep's (every tuned method × setting on the tuning seed). A method restricted to some task settings
(``tasks:``) has cells on those only. Config overrides apply in the order grid, task setting, method, tuning setting,
then ``name=`` and ``seed=``; a cell's run directory is ``OUT/TASK/METHOD-sSEED`` (``METHOD@SETTING-sSEED`` for a
tuning cell, or a tuned method at a non-default setting).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from v05.grid.spec import Grid, GridMethod, GridTask
from v05.grid.sweep import GridSetting
from v05.train.config import TrainConfig, load_config


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
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


def load_at(config: str, overrides: Sequence[str], setting: GridSetting | None, *, quick: bool = False) -> TrainConfig:
    """``config`` with ``overrides`` (which hold the setting's own), its batch scaled by the setting's scale.

    Raises:
        ValueError: the config or an override does not load.
    """
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
        cfg = load_at(method.config, overrides, setting, quick=quick)
    except ValueError as err:
        raise ValueError(f"grid cell {task.name}/{name}: {err}") from None
    return Cell(task=task, method=method, seed=seed, run_dir=run_dir, cfg=cfg,
                setting=None if setting is None else setting.name, tuning=tuning)  # fmt: skip


def grid_cells(
    grid: Grid,
    out: Path,
    *,
    quick: bool = False,
    choices: dict[tuple[str, str], str | None] | None = None,
    picked: Mapping[str, Mapping[str, Any] | None] | None = None,
) -> list[Cell]:
    """Every (task, seed, method) cell with its checked config, in that order, so that early cells pair up.

    A task setting at a time, and within it every method of one seed before the next seed's: a grid run in parts
    completes task settings one by one.

    The overrides apply in the order grid, task, method, the tuned setting, then ``name=METHOD`` and ``seed=SEED``.
    A tuned method's cells take the setting ``choices[(task, method)]`` (:func:`v05.grid.tuning.choose_settings`),
    in run directories ``METHOD@SETTING-sSEED`` unless it is ``default``; while its tuning sweep is unfinished (no
    choice) they are left out. A method with ``tasks:`` has cells on those task settings only. A method derived from
    a pick (``GridMethod.pick``) runs ``picked[pick]["method"]`` (:func:`v05.grid.tuning.picks`): the picked
    method's config and overrides at the setting chosen for it on the task setting (its own cells' there, so the two
    pair on one setting), then its own overrides (they win over the setting's); left out until picked.

    Raises:
        ValueError: a cell's config does not load (the message names the cell).
    """
    tuned = set(grid.tuning.methods) if grid.tuning is not None else set()
    by_name = {s.name: s for s in grid.tuning.settings} if grid.tuning is not None else {}
    declared = {m.name: m for m in grid.methods}
    cells = []
    for task in grid.tasks:
        for seed in grid.seeds:
            for method in grid.methods:
                if not method.runs_on(task.name):
                    continue
                setting = None
                if method.pick is not None:
                    if (rec := (picked or {}).get(method.pick)) is None:
                        continue
                    base, own = declared[rec["method"]], method.overrides
                    at = by_name[(choices or {})[(task.name, base.name)]]  # the picked method's own cells' setting
                    method = dataclasses.replace(method, config=base.config, overrides=(*base.overrides, *own))
                    setting = dataclasses.replace(at, overrides=(*at.overrides, *own))  # its own win over the setting
                elif method.name in tuned:
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
    """The tuning sweep's cells: every tuned method × setting on the tuning seed (``OUT/TASK/METHOD@SETTING-sSEED``).

    A tuned method with ``tasks:`` is tuned on those task settings only.
    """
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
        if methods[name].runs_on(task.name)
        for setting in t.settings
    ]


__all__ = ["Cell", "grid_cells", "load_at", "tuning_cells"]
