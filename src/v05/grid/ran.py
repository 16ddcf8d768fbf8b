"""What a grid's cells ran, read from the cells themselves: the pages print this, never the grid file's comments.

:func:`ran` gives a method's batch (prompts a step, measured rollouts a step), learning rate, schedule and warm-up
from its cells' configs and metrics; :func:`warm_start_record` the SFT warm starts a task setting's cells started
from, with the pass rate their records (``sft.json``, in this machine's cache or the grid's store) measured at the
SFT's stop, beside the target the grid asked for.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from v05.grid.cells import Cell
from v05.grid.store import WARM_STORE, is_finished
from v05.report.runs import Run, seed_mean
from v05.train.warmstart import warm_start_dir

RAN_KEYS = {
    "prompts_per_step": "train.batch_size",
    "lr": "optim.lr",
    "schedule": "optim.schedule",
    "warmup_steps": "optim.warmup_steps",
}
"""The config entries :func:`ran` reads from each cell: what the pages print as run, never the grid's comments."""


def ran(runs: Sequence[Run]) -> dict[str, Any]:
    """What a method's cells ran, read from their own configs and metrics (not from the grid file's comments).

    Each :data:`RAN_KEYS` entry is the value its seeds share (a sorted list where they differ, None where the config
    lacks it); ``rollouts_per_step`` is the seed mean of the measured rollouts a step.
    """
    out: dict[str, Any] = {}
    for name, key in RAN_KEYS.items():
        values = sorted({json.dumps(r.config_value(key)) for r in runs})
        out[name] = json.loads(values[0]) if len(values) == 1 else [json.loads(v) for v in values]
    out["rollouts_per_step"] = seed_mean(runs, "rollouts_step")
    return out


def warm_start_record(cells: Sequence[Cell], store: Path | None = None) -> dict[str, Any] | None:
    """The SFT warm starts the finished ``cells`` started from, as their records (``sft.json``) measured them.

    Each distinct warm start (one per seed with ``warmup.per_seed``) is read from this machine's cache, else from
    ``store``'s copy. Returns the SFT's ``target`` pass rate (``warmup.sft.target_pass_rate``; a sorted list where
    cells differ), the ``split`` it stopped on, and the measured pass rate at its stop: ``pass_rate_mean``, ``_min``,
    ``_max`` over the ``n`` warm starts found (``n_missing``: records found nowhere); None without a warm-up.
    """
    folders: dict[str, Path] = {}
    targets: set[float] = set()
    for cell in cells:
        if cell.cfg.warmup.enabled and is_finished(cell):
            folder = warm_start_dir(cell.cfg)
            local = folder / "sft.json"
            folders[folder.name] = local if local.is_file() or store is None else store / WARM_STORE / folder.name / (
                "sft.json")  # fmt: skip
            targets.add(cell.cfg.warmup.sft.target_pass_rate)
    if not folders:
        return None
    records = [json.loads(f.read_text(encoding="utf-8")) for f in folders.values() if f.is_file()]
    rates = [float(r["pass_rate"]) for r in records if r.get("pass_rate") is not None]
    splits = sorted({str(r.get("split", "validation")) for r in records})
    return {
        "target": next(iter(targets)) if len(targets) == 1 else sorted(targets),
        "split": (splits[0] if len(splits) == 1 else splits) if splits else None,
        "pass_rate_mean": float(np.mean(rates)) if rates else None,
        "pass_rate_min": min(rates, default=None),
        "pass_rate_max": max(rates, default=None),
        "n": len(rates),
        "n_missing": len(folders) - len(records),
    }


__all__ = ["RAN_KEYS", "ran", "warm_start_record"]
