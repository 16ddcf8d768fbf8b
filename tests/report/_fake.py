"""Fake `v05 train` run directories for the report tests: config.yaml via pyyaml, metrics.jsonl by hand."""

import json
from pathlib import Path

import yaml


def write_run(root: Path, dirname: str, *, name: str | None, seed: int = 0, lines=(), raw: str | None = None) -> Path:
    """A run directory with a config (omitted if name is None) and one metrics line per dict (or raw text)."""
    path = root / dirname
    path.mkdir(parents=True)
    if name is not None:
        config = {"name": name, "seed": seed, "estimator": {"name": "grpo"}, "allocator": {"name": "fixed"}}
        config["prior"] = {"name": None}
        (path / "config.yaml").write_text(yaml.safe_dump(config))
    text = raw if raw is not None else "".join(json.dumps(line) + "\n" for line in lines)
    (path / "metrics.jsonl").write_text(text)
    return path


def eval_run(
    root: Path, dirname: str, name: str, seed: int, points, *, extra=None, compute_per_rollout=None,
    compute_user_per_rollout=None,
) -> Path:  # fmt: skip
    """A run with one eval per step: points = [(rollouts_total, eval_pass_rate), ...]; steps 1, 2, ...; with
    ``compute_per_rollout`` the rows carry compute_total = rollouts_total × it, with ``compute_user_per_rollout``
    compute_user = rollouts_total × it."""
    lines = []
    for step, (rollouts, rate) in enumerate(points, start=1):
        line = {
            "step": step,
            "rollouts_total": rollouts,
            "train_pass_rate": rate,
            "wall_time": 10.0 * step,
            "eval_pass_rate": rate,
        }
        line.update(extra or {})
        if compute_per_rollout is not None:
            line["compute_total"] = rollouts * compute_per_rollout
        if compute_user_per_rollout is not None:
            line["compute_user"] = rollouts * compute_user_per_rollout
        lines.append(line)
    return write_run(root, dirname, name=name, seed=seed, lines=lines)
