"""The results JSON by hand: ratios, thresholds, the paired bootstrap, families, attribution."""

from __future__ import annotations

import numpy as np
import pytest

from tests.grid._grids import CONTRACT, fake_run, task_of
from v05.grid.compute import prior_compute_frac
from v05.grid.render import ran_text
from v05.grid.results import attribution_results, method_family, task_results
from v05.grid.spec import Attribution, AttributionRow, GridTask
from v05.grid.targets import gain90_bootstrap, gain_targets, tail_target
from v05.report.runs import paired_difference


def test_ratios_thresholds_and_never_by_hand():
    """Reference 0.2 -> 0.6 linearly over 1000 rollouts (both seeds): the 90 % threshold is 0.56, reached at 900.
    A method twice as fast (0.2 -> 0.6 by 500, then flat) reaches the final at 500 and 0.56 at 450: ratios 0.5,
    compute ratio 0.5 × its 3× token-passes per rollout = 1.5; a method that stays at 0.4 never reaches either."""
    ref = [fake_run("grpo4", s, [(0, 0.2), (500, 0.4), (1000, 0.6)]) for s in (0, 1)]
    fast = [fake_run("fast", s, [(0, 0.2), (500, 0.6), (1000, 0.6)], compute_per_rollout=30.0) for s in (0, 1)]
    flat = [fake_run("flat", s, [(0, 0.2), (500, 0.4), (1000, 0.4)]) for s in (0, 1)]
    res = task_of({"grpo4": ref, "fast": fast, "flat": flat})
    assert res["warm_start_eval"] == pytest.approx(0.2) and res["gain90_threshold"] == pytest.approx(0.56)
    assert res["budget_rollouts"] == 1000 and res["reference_last_quarter_gain"] == pytest.approx(0.1)
    f, n, r = res["methods"]["fast"], res["methods"]["flat"], res["methods"]["grpo4"]
    assert f["rollout_ratio"] == pytest.approx(0.5) and f["rollout_ratio_gain90"] == pytest.approx(0.5)
    assert f["compute_ratio"] == pytest.approx(1.5)
    assert f["paired_diff_mean"] == pytest.approx(np.mean([0, 0.2, 0])) and f["paired_diff_se"] == 0.0
    assert n["rollout_ratio"] is None and n["rollout_ratio_gain90"] is None and n["compute_ratio"] is None
    assert n["rollout_ratio_gain90_ci95"][1] is None and n["rollout_ratio_gain90_never_frac"] == 1.0
    assert r["rollout_ratio"] == 1.0 and r["paired_diff_mean"] == 0.0
    assert CONTRACT <= set(f)


def test_gain90_bootstrap_resamples_seeds_in_pairs():
    """Seed 0 of the method is 2× faster than its reference seed, seed 1 as fast: every resample's ratio lies in
    [0.5, 1], both ends are hit, and a resample's threshold comes from its own reference seeds."""
    ref = [fake_run("grpo4", 0, [(0, 0.2), (1000, 0.6)]), fake_run("grpo4", 1, [(0, 0.4), (1000, 0.8)])]
    m = [fake_run("m", 0, [(0, 0.2), (500, 0.6), (1000, 0.6)]), fake_run("m", 1, [(0, 0.4), (1000, 0.8)])]
    boot = gain90_bootstrap(m, ref, np.random.default_rng(0), resamples=400)
    lo, hi = boot["ci95"]
    assert lo == pytest.approx(0.5) and hi == pytest.approx(1.0) and boot["never_frac"] == 0.0
    assert gain_targets(ref) == pytest.approx((0.3, 0.7, 0.66))


def test_family_from_the_config():
    """v05 / v05_eb -> v05; grpo at a fixed k -> grpo; DAPO (grpo + dynamic sampling), RLOO, PPO -> other."""
    assert method_family(fake_run("a", 0, [(0, 0.1)], estimator="v05_eb", allocator="osla")) == "v05"
    assert method_family(fake_run("a", 0, [(0, 0.1)], estimator="v05")) == "v05"
    assert method_family(fake_run("a", 0, [(0, 0.1)])) == "grpo"
    assert method_family(fake_run("a", 0, [(0, 0.1)], allocator="dynamic_sampling")) == "other"
    assert method_family(fake_run("a", 0, [(0, 0.1)], estimator="gae")) == "other"
    assert method_family(fake_run("a", 0, [(0, 0.1)]), "other") == "other"


def test_a_method_with_fewer_seeds_is_compared_on_its_own_seeds():
    """A partial grid: a method that has finished seed 0 only, identical to the reference's seed 0, has ratio 1 even
    though the reference's other seed starts much higher (its seed-mean curve would make the ratio < 1)."""
    ref = [fake_run("grpo4", 0, [(0, 0.2), (1000, 0.6)]), fake_run("grpo4", 1, [(0, 0.5), (1000, 0.9)])]
    same = [fake_run("same", 0, [(0, 0.2), (1000, 0.6)])]
    m = task_of({"grpo4": ref, "same": same})["methods"]["same"]
    assert m["rollout_ratio"] == pytest.approx(1.0) and m["rollout_ratio_gain90"] == pytest.approx(1.0)
    assert m["compute_ratio"] == pytest.approx(1.0)
    # and the other way round: a method with more seeds than the reference is compared on the reference's seeds
    # (the prior-pay grid's untuned methods come from the store with 3 seeds while a tuned reference has 1)
    more = [fake_run("more", 0, [(0, 0.2), (1000, 0.6)]), fake_run("more", 1, [(0, 0.5), (1000, 0.9)])]
    m = task_of({"grpo4": ref[:1], "more": more})["methods"]["more"]
    assert m["rollout_ratio"] == pytest.approx(1.0) and m["compute_ratio"] == pytest.approx(1.0)


def test_paired_ci_tail_target_and_the_attribution_table_by_hand():
    """The paired difference's 95 % t-interval; the tail-10 % target of a plateaued reference is reached before the
    budget; an attribution row is method − versus over their common seeds, and the headroom's captured share."""

    ref = [fake_run("grpo4", s, [(0, 0.2), (500, 0.4), (900, 0.5), (1000, 0.5)]) for s in (0, 1)]
    assert tail_target(ref) == pytest.approx(0.5)  # the points at >= 900 rollouts
    rm = [fake_run("rm", s, [(0, 0.2), (1000, 0.4 + 0.1 * s)]) for s in (0, 1, 2)]
    orc = [fake_run("orc", s, [(0, 0.2 + 0.2), (1000, 0.6 + 0.1 * s)]) for s in (0, 1)]  # +0.2 on every eval
    good = [fake_run("good", s, [(0, 0.2 + 0.1), (1000, 0.5 + 0.1 * s)]) for s in (0, 1)]  # +0.1
    d = paired_difference(orc, rm)
    assert d["mean"] == pytest.approx(0.2) and d["ci95"] == pytest.approx([0.2, 0.2])
    spec = Attribution(rows=(AttributionRow(factor="f", method="orc", versus="rm"),
                             AttributionRow(factor="g", method="missing", versus="rm")),
                       control="rm", oracle="orc", learned=("good",))  # fmt: skip
    table = attribution_results(spec, {"grpo4": ref, "rm": rm, "orc": orc, "good": good})
    row = table["rows"][0]
    assert row["diff"] == pytest.approx(0.2) and row["n"] == 2 and row["rollout_ratio"] == pytest.approx(0.2)
    assert table["rows"][1]["diff"] is None
    h = table["headroom"]
    assert h["best_learned"] == "good" and h["captured"] == pytest.approx(0.5)
    # an oracle whose gain is noise (+0.3 and -0.1 on its two seeds: the interval reaches 0) gets no share quoted
    noisy = [fake_run("orc", s, [(0, 0.2 + d), (1000, 0.4 + 0.1 * s + d)]) for s, d in ((0, 0.3), (1, -0.1))]
    h = attribution_results(spec, {"grpo4": ref, "rm": rm, "orc": noisy, "good": good})["headroom"]
    assert h["oracle_diff"] == pytest.approx(0.1) and h["oracle_ci95"][0] < 0 and h["captured"] is None
    # a row naming a tuning pick ("sel") is the picked method's row once decided; None before (kept, not left out)
    spec = Attribution(rows=(AttributionRow(factor="the pick", method="sel", versus="rm"),))
    groups = {"grpo4": ref, "rm": rm, "orc": orc, "good": good}
    picked = attribution_results(spec, groups, planned={"rm", "orc", "good", "sel"}, picked={"sel": "good"})["rows"]
    assert (picked[0]["method"], picked[0]["diff"]) == ("good", pytest.approx(0.1))
    pending = attribution_results(spec, groups, planned={"rm", "good", "sel"}, picked={"sel": "sel"})["rows"]
    assert (pending[0]["method"], pending[0]["diff"]) == ("sel", None)
    res = task_results(GridTask(name="t", regime="hard"), {"grpo4": ref, "rm": rm, "orc": orc}, "grpo4", [],
                       control="rm")  # fmt: skip
    assert res["methods"]["orc"]["vs_running_mean_diff"] == pytest.approx(0.2)
    assert res["methods"]["rm"]["vs_running_mean_diff"] == 0.0
    for key in ("paired_diff_ci95", "rollout_ratio_ci95", "rollout_ratio_tail10", "rollout_ratio_tail10_ci95",
                "vs_running_mean_ci95"):  # fmt: skip
        assert key in res["methods"]["orc"]
    assert res["pool"] == "revisited"


def test_the_user_compute_ratio_logged_and_recounted_by_hand():
    """compute_ratio_user: the reference (GRPO k = 4, logged before compute_user was) is recounted from its parts;
    each 500-rollout step: 125 prompts of 10 tokens (S = 5,000 prefilled here, G = 1,250 by the user), R = 2,500
    response tokens, one shared-prefix forward + backward 3(G + R) = 11,250; the user pays G + R + 11,250 ×
    (S + R)/(G + R) = 3,750 + 22,500 = 26,250 a step (this trainer 18,750). The k = 1 method logs compute_user =
    10 a rollout and reaches the final at 500 rollouts: 5,000 / 52,500; this trainer's ratio is 5,000 / 37,500.
    A recount with another k, or one that forgets the prefix sharing, gives another number."""
    step = {"compute/generate": 7500, "tokens_step": 2500, "compute/policy": 11250}
    ref = []
    for s in (0, 1):
        run = fake_run("grpo4", s, [(0, 0.2), (500, 0.4), (1000, 0.6)], compute_per_rollout=37.5)
        run.config["allocator"]["options"] = {"k": 4}
        run.config["train"]["share_prompt_prefix"] = True
        for row in run.metrics[1:]:
            row.update(step)
        ref.append(run)
    fast = [fake_run("fast", s, [(0, 0.2), (500, 0.6), (1000, 0.6)]) for s in (0, 1)]
    for run in fast:
        for row in run.metrics:
            row["compute_user"] = 10 * row["rollouts_total"]
    m, r = (task_of({"grpo4": ref, "fast": fast})["methods"][n] for n in ("fast", "grpo4"))
    assert m["compute_ratio"] == pytest.approx(5000 / 37500)
    assert m["compute_ratio_user"] == pytest.approx(5000 / 52500)
    assert (m["compute_user_recount"], r["compute_user_recount"], r["compute_ratio_user"]) == ("logged", "exact", 1.0)


def test_an_offline_init_is_reported_and_on_the_rollout_axis_of_the_ratios():
    """init_rollouts: the seeds' mean of the step-0 row's count (0 for runs with none); a run that spent 400 rollouts
    before step 1 and reaches the reference's final (0.6, at 1,000) 500 rollouts after it has spent 900: ratio 0.9,
    not 0.5 (an init left off the axis) nor 1.3 (counted twice)."""
    ref = [fake_run("grpo4", s, [(0, 0.2), (500, 0.4), (1000, 0.6)]) for s in (0, 1)]
    init = [fake_run("spo_offline", s, [(400, 0.2), (900, 0.6), (1400, 0.6)]) for s in (0, 1)]
    for run in init:
        run.metrics[0]["init_rollouts"] = 400
    res = task_of({"grpo4": ref, "spo_offline": init})["methods"]
    assert (res["spo_offline"]["init_rollouts"], res["grpo4"]["init_rollouts"]) == (400.0, 0.0)
    assert res["spo_offline"]["rollout_ratio"] == pytest.approx(0.9)
    assert res["spo_offline"]["rollouts_to_reference_final"] == pytest.approx(900.0)  # the init included
    assert res["grpo4"]["rollouts_to_reference_final"] == pytest.approx(1000.0)
    ran = {"ran": {"prompts_per_step": 64}, "rollouts_per_prompt": 1.0}
    assert ran_text({**ran, "init_rollouts": 16000.0}, False) == "1 × 64 after an init of 16,000 rollouts (counted)"
    assert ran_text({**ran, "init_rollouts": 0.0}, False) == "1 × 64"


def test_the_priors_share_of_the_compute_by_hand():
    """prior_compute_frac: (the encoder over the pool before step 1 + the encoder and the probe at each step) ÷ the
    run's compute_total: (1,000 + 2 × 50 + 2 × 200) / 10,000 = 0.15 (0.05 without the step-0 encoder, 0.11 without
    the probe); 0 for a run with no prior work, None without compute."""
    ref = [fake_run("grpo4", s, [(0, 0.2), (500, 0.4), (1000, 0.6)]) for s in (0, 1)]
    comb = [fake_run("comb", s, [(0, 0.2), (500, 0.6), (1000, 0.6)]) for s in (0, 1)]
    for run in comb:
        run.metrics[0]["encoder_compute"] = 1000
        for row in run.metrics[1:]:
            row.update({"compute/encoder": 50, "compute/probe": 200})
    res = task_of({"grpo4": ref, "comb": comb})["methods"]
    assert res["comb"]["prior_compute_frac"] == pytest.approx(0.15)
    assert res["grpo4"]["prior_compute_frac"] == 0.0
    assert prior_compute_frac([]) is None
