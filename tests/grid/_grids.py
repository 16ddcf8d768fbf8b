"""Helpers of the grid tests: runs with a given eval curve, grid files, the JSON contract's keys."""

from __future__ import annotations

from pathlib import Path

import yaml

from v05.grid.results import task_results
from v05.grid.spec import GridTask
from v05.report.runs import Run

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


def task_of(groups: dict[str, list[Run]]) -> dict:
    return task_results(GridTask(name="t", regime="hard"), groups, "grpo4", [])


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
