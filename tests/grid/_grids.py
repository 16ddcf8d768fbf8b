"""Helpers of the grid tests: runs with a given eval curve, grid files, the JSON contract's keys, a hand-made store."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import yaml

from v05.grid.cells import grid_cells
from v05.grid.results import task_results
from v05.grid.spec import GridTask, load_grid
from v05.grid.store import STORED_NAME, WARM_STORE, warm_start_digest
from v05.report.runs import Run
from v05.train.config import to_yaml
from v05.train.warmstart import warm_start_dir

REPO = Path(__file__).resolve().parents[2]
CONTRACT = {
    "family",
    "config",
    "seeds",
    "final_mean",
    "final_ci95",
    "paired_diff_mean",
    "paired_diff_se",
    "rollout_ratio",
    "rollout_ratio_gain90",
    "compute_ratio",
    "compute_ratio_user",
    "init_rollouts",
    "grad_norm_mean",
    "entropy_final",
}


def fake_run(
    name: str,
    seed: int,
    evals: list[tuple[int, float]],
    *,
    estimator: str = "grpo",
    allocator: str = "fixed",
    compute_per_rollout: float = 10.0,
    grad: float = 1.0,
    entropy: float = 0.5,
) -> Run:
    """A run whose eval curve is the given (rollouts, eval) points, one step per point."""
    rows = [
        {
            "step": i,
            "rollouts_total": x,
            "compute_total": compute_per_rollout * x,
            "eval_pass_rate": y,
            "grad_norm": grad * (1 + 0.1 * (i % 2)),
            "entropy": entropy,
        }
        for i, (x, y) in enumerate(evals)
    ]
    config = {
        "name": name,
        "seed": seed,
        "estimator": {"name": estimator},
        "allocator": {"name": allocator},
        "train": {"max_rollouts": evals[-1][0]},
    }
    return Run(path=Path(f"/nonexistent/{name}-s{seed}"), name=name, seed=seed, config=config, metrics=rows)


def task_of(groups: dict[str, list[Run]], control: str | None = None) -> dict:
    return task_results(GridTask(name="t", regime="hard"), groups, "grpo4", [], control=control)


def write_grid(path: Path, body: dict) -> Path:
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


def tuning_grid(tmp_path, tiny_grid) -> Path:
    body = yaml.safe_load(tiny_grid.read_text())
    body["seeds"], body["tasks"] = [0], {"tiny-easy": {"regime": "easy"}}
    body["methods"] = {"grpo4": "demo-grpo4", "rloo": "demo-rloo"}
    body["tuning"] = {
        "seed": 7,
        "methods": ["grpo4"],
        "settings": {"lr-high": {"overrides": ["optim.lr=2.0e-3"]}, "half": {"batch_scale": 0.5}},
        "recommend": ["grpo4"],
    }
    return write_grid(tiny_grid, body)


WEIGHTS = b"the warm start's weights"
DIGEST = hashlib.sha256(WEIGHTS).hexdigest()[:16]


def fake_store(tmp_path, tiny_grid, *, methods: dict) -> tuple:
    """A grid of one task setting and seed, and a store holding its finished cells and their warm start (fake weights,
    an ``sft.json`` that measured 0.35 against the target 0.3), written by hand: nothing trains. This machine's
    warm-start cache is an empty folder of the test's own."""
    body = yaml.safe_load(tiny_grid.read_text())
    body["overrides"].append(f"warmup.cache_dir={tmp_path / 'cache'}")
    body["seeds"], body["tasks"], body["methods"] = [0], {"tiny-easy": {"regime": "easy"}}, methods
    grid_file = write_grid(tiny_grid, body)
    store = tmp_path / "store"
    cells = grid_cells(load_grid(grid_file), tmp_path / "unused")
    for cell in cells:
        entry = store / "tiny-easy" / cell.run_dir.name
        entry.mkdir(parents=True)
        (entry / "config.yaml").write_text(to_yaml(cell.cfg))
        rows = [{"step": i, "rollouts_total": 48 * i, "compute_total": 480.0 * i, "eval_pass_rate": 0.2 + 0.1 * i,
                 "rollouts_step": 48, "rollouts_per_prompt": 4.0, "grad_norm": 1.0, "entropy": 0.5}
                for i in range(3)]  # fmt: skip (the last row at 96 rollouts: the budget)
        with gzip.open(entry / "metrics.jsonl.gz", "wt") as f:
            f.write("".join(json.dumps(r) + "\n" for r in rows))
        (entry / STORED_NAME).write_text(json.dumps({"warm_start": DIGEST, "hardware": "elsewhere"}))
        warm = store / WARM_STORE / warm_start_dir(cell.cfg).name
        warm.mkdir(parents=True, exist_ok=True)
        (warm / "model.safetensors").write_bytes(WEIGHTS)
        (warm / "sft.json").write_text(json.dumps({"pass_rate": 0.35, "split": "validation", "steps": 100}))
    return grid_file, store, cells


def finish(cell, evals: list[float]) -> None:
    """A finished cell as restored from a store, written by hand: its config, ``stored.json`` with the cached warm
    start's digest, and an eval curve spread evenly up to the cell's rollout budget (its last row at the budget)."""
    cell.run_dir.mkdir(parents=True, exist_ok=True)
    (cell.run_dir / "config.yaml").write_text(to_yaml(cell.cfg))
    budget = cell.cfg.train.max_rollouts
    rows = [{"step": i, "rollouts_total": budget * i // (len(evals) - 1), "compute_total": 10.0 * budget * i,
             "eval_pass_rate": e, "grad_norm": 1.0, "entropy": 0.5} for i, e in enumerate(evals)]  # fmt: skip
    (cell.run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    info = {"warm_start": warm_start_digest(cell.cfg), "hardware": "test"}
    (cell.run_dir / STORED_NAME).write_text(json.dumps(info))
