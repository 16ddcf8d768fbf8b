"""``v05 bench trl-parity``'s statistics and checks (the training itself is the bench's, not a test's)."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

from v05.adapters.trl_parity import CONFIGS, bench_trl_parity, parity_config, parity_results  # noqa: E402


def curve(values, every=100):
    return [{"step": i, "rollouts_total": i * every, "eval_pass_rate": v} for i, v in enumerate(values)]


def test_figures_are_measured_against_trls_grpo4_and_the_runner_gap_is_v05_minus_trl():
    """Two seeds: TRL grpo4 climbs 0.2 → 0.3; v05 grpo4 runs 0.02 below it; rec_k1 (TRL) reaches 0.3 at half the
    rollouts; rec_k1 (v05) runs 0.01 above its TRL twin. Paired differences are to TRL's grpo4 of the same seed,
    the ratio is the crossing of the reference seed's final, the gap is v05 − TRL and agrees when its 95 %
    interval holds 0."""
    ref = [0.2, 0.25, 0.3, 0.3, 0.3]
    fast = [0.2, 0.3, 0.31, 0.32, 0.33]
    curves, walls = {}, {}
    for seed in (1, 2):
        jitter = 0.001 * seed
        curves[("trl", "grpo4", seed)] = curve(ref)
        curves[("v05", "grpo4", seed)] = curve([v - 0.02 - jitter for v in ref])
        curves[("trl", "rec_k1", seed)] = curve(fast)
        curves[("v05", "rec_k1", seed)] = curve([v + 0.01 + jitter for v in fast])
        walls |= {key: 1.0 for key in curves}
    res = parity_results(curves, walls)
    rows = {(r["runner"], r["config"], r["seed"]): r for r in res["rows"]}
    assert rows[("trl", "grpo4", 1)]["paired_diff"] == pytest.approx(0.0)
    assert rows[("v05", "grpo4", 1)]["paired_diff"] == pytest.approx(-0.021)
    assert rows[("trl", "rec_k1", 1)]["rollout_ratio"] == pytest.approx(100 / 200)  # 0.3 at 100 vs the ref's 200
    assert rows[("trl", "rec_k1", 1)]["final_eval"] == pytest.approx(0.33)
    gap = res["summary"]["grpo4"]["runner_gap"]
    assert gap["mean"] == pytest.approx(-0.0215) and gap["n"] == 2 and gap["agree"] is False  # v05 − TRL < 0
    gap = res["summary"]["rec_k1"]["runner_gap"]
    assert gap["mean"] == pytest.approx(0.0115) and gap["agree"] is False
    summary = res["summary"]["rec_k1"]["trl"]
    assert summary["rollout_ratio"] == pytest.approx(0.5) and summary["seeds"] == [1, 2]
    assert summary["paired_diff_mean"] > 0 and summary["final_ci95"] is not None


def test_bad_arguments_are_refused_before_anything_trains(tmp_path):
    """An unknown configuration, a set without grpo4 or a budget that is not a multiple of grpo4's rollouts is a
    ValueError before anything is written."""
    with pytest.raises(ValueError, match="unknown parity configuration"):
        bench_trl_parity(tmp_path, configs=("grpo4", "nope"))
    with pytest.raises(ValueError, match="must include 'grpo4'"):
        bench_trl_parity(tmp_path, configs=("rec_k1",))
    with pytest.raises(ValueError, match="budget=1000 must be a positive multiple of grpo4's 128 rollouts"):
        bench_trl_parity(tmp_path, budget=1000)
    assert not any(tmp_path.iterdir())


def test_both_runners_start_from_the_recommended_config_with_the_hard_task():
    """The v05 side of rec_k1/rec_k2 is v05-recommended as the bench measured it (pinned: `v05_eb` + `combined`,
    the pick until 2026-12-04, identical to that packaged config but its name) with only k, the task setting and
    the budget set."""
    for name in ("rec_k1", "rec_k2"):
        cfg = parity_config(name, 30, 12_800, 3_200)
        k = CONFIGS[name].k
        assert (cfg.estimator.name, cfg.prior.name, cfg.allocator.options["k"]) == ("v05_eb", "combined", k)
        assert cfg.prior.options == {"refit_every": 4} and cfg.train.reward_range == "pm1"
        assert cfg.task.options["held_out_first"] and cfg.warmup.sft.target_pass_rate == 0.15
        assert CONFIGS[name].v05["v05_estimator"] == cfg.estimator.name and CONFIGS[name].v05["v05_prior"] == "combined"
    assert parity_config("grpo4", 30, 12_800, 3_200).estimator.name == "grpo"
