"""`v05 bench train` and `v05 bench efficiency` on the tiny task: the contract keys, numbers that make sense."""

from __future__ import annotations

import json

from v05.cli import main

SMALL = ["train.batch_size=8", "eval.size=16", "eval.every=2", "run.progress=false", "run.tensorboard=false"]


def test_bench_efficiency_contract(tmp_path, tiny_overrides, capsys):
    """`v05 bench efficiency --json` (2 seeds, tiny budget) writes reference ∈ {grpo4, grpo16}, the target pass rate
    (that GRPO's final seed-mean eval), a rollout and a compute ratio for v05 and v05_eb, the paired difference to
    the reference (0 ± 0 for itself), plus the per-seed curves."""
    out = tmp_path / "eff.json"
    argv = ["bench", "efficiency", "--out", str(tmp_path / "runs"), "--seeds", "0,1", "--json", str(out),
            *tiny_overrides, *SMALL, "train.max_rollouts=96", "train.steps=50"]  # fmt: skip
    assert main(argv) == 0
    res = json.loads(out.read_text())
    assert res["reference"] in ("grpo4", "grpo16")
    assert res["target_pass_rate"] == res["final_eval_pass_rate"][res["reference"]]
    assert {"v05", "v05_eb"} <= set(res["rollout_ratio"]) and set(res["compute_ratio"]) == set(res["rollout_ratio"])
    assert all(r is None or r > 0 for r in (*res["rollout_ratio"].values(), *res["compute_ratio"].values()))
    assert all((res["compute_ratio"][n] is None) == (r is None) for n, r in res["rollout_ratio"].items())
    assert res["reference_compute_to_target"] >= res["reference_rollouts_to_target"] >= 0  # ≥ 1 token-pass a rollout
    assert res["paired_diff"][res["reference"]] == {"mean": 0.0, "se": 0.0, "n": 2}
    assert res["paired_diff"]["v05"]["n"] == 2 and res["compute_per_rollout"]["v05"] > 0
    assert set(res["per_seed_curves"]["v05"]) == {"0", "1"}
    assert all(pt[0] < 96 + 8 * 16 for pt in res["per_seed_curves"]["v05"]["0"])  # < one step past the budget


def test_bench_train_contract(tmp_path, tiny_overrides):
    """`v05 bench train --json` writes v05's and TRL's rollouts/s on the same model, task, batch and k, and v05's
    overhead fraction (prior + allocator + estimator of step time), in [0, 1)."""
    out = tmp_path / "train.json"
    argv = ["bench", "train", "--out", str(tmp_path / "runs"), "--steps", "4", "--trl-steps", "2", "--configs",
            "demo-grpo4,demo-v05", "--json", str(out), *tiny_overrides, *SMALL]  # fmt: skip
    assert main(argv) == 0
    res = json.loads(out.read_text())
    assert res["v05_rollouts_per_s"] > 0 and res["trl_rollouts_per_s"] > 0
    assert 0 <= res["overhead_frac"] < 1 and set(res["configs"]) == {"demo-grpo4", "demo-v05"}
