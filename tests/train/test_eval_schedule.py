"""``eval.every_rollouts``: evaluations at the same rollout counts whatever the group size (``v05 bench matrix``)."""

from __future__ import annotations

import json

import pytest

from v05.train.config import load_config
from v05.train.loop import train


def _eval_rollouts(tmp_path, tiny_overrides, k: int) -> list[int]:
    cfg = load_config(
        None,
        [*tiny_overrides, "allocator.name=fixed", f"allocator.options.k={k}", "train.steps=100",
         "train.max_rollouts=96", "eval.every=1", "eval.every_rollouts=32"],
    )  # fmt: skip
    train(cfg, tmp_path / f"k{k}")
    rows = [json.loads(line) for line in (tmp_path / f"k{k}" / "metrics.jsonl").read_text().splitlines()]
    return [r["rollouts_total"] for r in rows if "eval_pass_rate" in r]


def test_evaluations_fall_at_the_same_rollout_counts_for_every_k(tmp_path, tiny_overrides):
    # k = 2 takes 16 rollouts a step (6 steps), k = 4 takes 32 (3 steps): both evaluate at 0, 32, 64, 96 rollouts,
    # not every step (eval.every=1 is overridden by every_rollouts)
    """With eval.every_rollouts, k = 2 and k = 4 evaluate at the same rollout counts (0, 32, 64, 96), not every step."""
    assert _eval_rollouts(tmp_path, tiny_overrides, 2) == [0, 32, 64, 96]
    assert _eval_rollouts(tmp_path, tiny_overrides, 4) == [0, 32, 64, 96]


def test_every_rollouts_must_be_positive(tiny_overrides):
    """eval.every_rollouts=0 is a ValueError naming the setting."""
    with pytest.raises(ValueError, match="eval.every_rollouts"):
        load_config(None, [*tiny_overrides, "eval.every_rollouts=0"])
