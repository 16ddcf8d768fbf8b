"""Loading runs, seed groups, mean ± SE curves, rollouts to a target and the summary, against hand-computed cases."""

import dataclasses
import logging
import math

import numpy as np
import pytest

from tests.report._fake import eval_run, write_run
from v05.grid.tuning import tuning_score
from v05.report.runs import (
    EVAL_KEY,
    ROLLOUTS_KEY,
    default_reference,
    find_run_dirs,
    group_runs,
    load_run,
    load_runs,
    mean_curve,
    moving_average,
    paired_difference,
    rollouts_to_reach,
    summary_table,
)
from v05.stats import mean_se


def test_resumed_run_last_line_of_a_step_wins(tmp_path):
    """A resumed run appends: steps 2 and 3 logged twice keep their last lines, and metrics come out sorted."""
    lines = [{"step": s, "rollouts_total": 10 * s, "train_pass_rate": 0.1} for s in (1, 2, 3)]
    lines += [{"step": s, "rollouts_total": 10 * s, "train_pass_rate": 0.9} for s in (3, 2)]
    run = load_run(write_run(tmp_path, "r", name="grpo4", seed=3, lines=lines))
    assert [m["step"] for m in run.metrics] == [1, 2, 3]
    steps, rate = run.series("train_pass_rate")
    assert steps.tolist() == [1, 2, 3] and rate.tolist() == [0.1, 0.9, 0.9]
    assert run.name == "grpo4" and run.seed == 3 and run.config_value("estimator.name") == "grpo"
    assert run.config_value("prior.name") is None and run.config_value("no.such") is None


def test_series_are_computed_once_read_only_and_fresh_after_replace(tmp_path):
    """A grid report's bootstrap asks for the same curve ~10⁵ times: series_vs keeps it, read-only (a caller that
    wrote into it would change every later answer), and a run rebuilt with other metrics does not inherit it."""
    lines = [{"step": s, "rollouts_total": 10 * s, "eval_pass_rate": 0.1 * s} for s in (1, 2, 3)]
    run = load_run(write_run(tmp_path, "r", name="grpo4", seed=3, lines=lines))
    x, y = run.series_vs("rollouts_total", "eval_pass_rate")
    again = run.series_vs("rollouts_total", "eval_pass_rate")
    assert again[0] is x and again[1] is y and y.tolist() == pytest.approx([0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="read-only"):
        y[0] = 1.0
    other = dataclasses.replace(run, metrics=[{"step": 1, "rollouts_total": 5, "eval_pass_rate": 0.7}])
    assert other.series_vs("rollouts_total", "eval_pass_rate")[1].tolist() == [0.7]
    assert run.series_vs("rollouts_total", "eval_pass_rate")[1].tolist() == pytest.approx([0.1, 0.2, 0.3])


def test_nan_lines_parse_and_series_skip_them(tmp_path):
    """Python's json writes NaN: the line parses, and series() leaves the non-finite value out."""
    raw = (
        '{"step": 1, "rollouts_total": 8, "grad_norm": NaN, "wall_time": 1.0}\n'
        '{"step": 2, "rollouts_total": 16, "grad_norm": 0.5, "wall_time": 2.0}\n'
    )
    run = load_run(write_run(tmp_path, "r", name="v05", raw=raw))
    assert math.isnan(run.metrics[0]["grad_norm"])
    steps, g = run.series("grad_norm")
    assert steps.tolist() == [2] and g.tolist() == [0.5]
    assert run.last("grad_norm") == 0.5 and run.last("entropy") is None and not run.has("entropy")


def test_partial_last_line_is_dropped_but_a_bad_middle_line_raises(tmp_path, caplog):
    """A run killed mid-write leaves half a line at the end: dropped with a warning; elsewhere it is an error."""
    good = '{"step": 1, "rollouts_total": 8}\n'
    with caplog.at_level(logging.WARNING):
        run = load_run(write_run(tmp_path, "a", name="x", raw=good + '{"step": 2, "rollo'))
    assert len(run.metrics) == 1 and "unreadable last line" in caplog.text
    path = write_run(tmp_path, "b", name="x", raw='{"step": 1,\n' + good)
    with pytest.raises(ValueError, match=r"metrics\.jsonl:1"):
        load_run(path)
    path = write_run(tmp_path, "c", name="x", raw='{"rollouts_total": 8}\n')
    with pytest.raises(ValueError, match="integer 'step'"):
        load_run(path)


def test_bad_paths_raise_value_error_naming_the_path(tmp_path):
    """Missing directory, no metrics.jsonl, an empty or blank file: ValueError that names the path."""
    with pytest.raises(ValueError, match="nowhere"):
        load_run(tmp_path / "nowhere")
    (tmp_path / "no_metrics").mkdir()
    with pytest.raises(ValueError, match=r"no_metrics.*no metrics\.jsonl"):
        load_run(tmp_path / "no_metrics")
    for dirname, raw in (("empty", ""), ("blank", "\n \n")):
        path = write_run(tmp_path, dirname, name="x", raw=raw)
        with pytest.raises(ValueError, match=rf"{dirname}.*empty"):
            load_run(path)
    with pytest.raises(ValueError, match="no run directories"):
        load_runs([])


def test_name_falls_back_to_the_directory_and_parents_expand(tmp_path):
    """Without config.yaml the directory name is the method; a parent directory expands to its runs, once each."""
    write_run(tmp_path / "demo", "b_run", name=None, lines=[{"step": 1}])
    write_run(tmp_path / "demo", "a_run", name="grpo4", lines=[{"step": 1}])
    (tmp_path / "demo" / "report").mkdir()  # an output directory beside the runs is not a run
    dirs = find_run_dirs([tmp_path / "demo", tmp_path / "demo" / "a_run"])
    assert [d.name for d in dirs] == ["a_run", "b_run"]
    assert [r.name for r in load_runs(dirs)] == ["grpo4", "b_run"]
    with pytest.raises(ValueError, match="report"):
        find_run_dirs([tmp_path / "demo" / "report"])
    with pytest.raises(ValueError, match="missing"):
        find_run_dirs([tmp_path / "missing"])


def test_group_runs_by_name_seeds_sorted(tmp_path):
    """Seeds of one method share a name; groups keep first-appearance order, seeds are sorted."""
    runs = [
        load_run(eval_run(tmp_path, d, n, s, [(100, 0.1)]))
        for d, n, s in (("a", "v05", 2), ("b", "grpo4", 0), ("c", "v05", 1))
    ]
    groups = group_runs(runs)
    assert list(groups) == ["v05", "grpo4"] and [r.seed for r in groups["v05"]] == [1, 2]


def test_mean_se_and_moving_average_by_hand():
    """SE = std(ddof=1)/√n, 0 for one value; trailing moving average averages what exists at the start."""
    assert mean_se([0.2, 0.6]) == pytest.approx((0.4, 0.2))  # std(ddof=1) = 0.2828, / √2 = 0.2
    assert mean_se([0.7]) == (0.7, 0.0) and mean_se([]) == (None, None)
    y = np.array([3.0, 1.0, 2.0, 6.0])
    np.testing.assert_allclose(moving_average(y, 3), [3.0, 2.0, 2.0, 3.0])  # (3), (3+1)/2, (3+1+2)/3, (1+2+6)/3
    np.testing.assert_allclose(moving_average(y, 1), y)


def test_mean_curve_two_seeds_on_different_grids(tmp_path):
    """Seeds interpolated onto the union grid inside the common range, then mean ± SE by hand.

    A: (100, .2) (200, .4) (300, .6);  B: (150, .1) (250, .5) (350, .5).  Common range [150, 300], grid 150 200 250 300.
    A on grid: .3 .4 .5 .6;  B on grid: .1 .3 .5 .5.  Mean .2 .35 .5 .55;  SE for n = 2 is |a − b|/2: .1 .05 0 .05.
    """
    a = load_run(eval_run(tmp_path, "a", "v05", 0, [(100, 0.2), (200, 0.4), (300, 0.6)]))
    b = load_run(eval_run(tmp_path, "b", "v05", 1, [(150, 0.1), (250, 0.5), (350, 0.5)]))
    curve = mean_curve([a, b], "rollouts_total")
    np.testing.assert_allclose(curve.x, [150, 200, 250, 300])
    np.testing.assert_allclose(curve.mean, [0.2, 0.35, 0.5, 0.55])
    np.testing.assert_allclose(curve.se, [0.1, 0.05, 0.0, 0.05], atol=1e-12)
    assert curve.n_seeds == 2
    one = mean_curve([a], "step")
    np.testing.assert_allclose(one.x, [1, 2, 3])
    np.testing.assert_allclose(one.se, 0.0)


def test_mean_curve_refuses_decreasing_x_and_disjoint_seeds(tmp_path):
    """A wall clock that restarts cannot be an x-axis; seeds that share no x range have no mean."""
    lines = [{"step": s, "wall_time": w, "eval_pass_rate": 0.1} for s, w in ((1, 5.0), (2, 9.0), (3, 2.0))]
    run = load_run(write_run(tmp_path, "r", name="x", lines=lines))
    with pytest.raises(ValueError, match="wall_time decreases"):
        mean_curve([run], "wall_time")
    a = load_run(eval_run(tmp_path, "a", "x", 0, [(100, 0.1), (200, 0.2)]))
    b = load_run(eval_run(tmp_path, "b", "x", 1, [(300, 0.1), (400, 0.2)]))
    with pytest.raises(ValueError, match="no common range"):
        mean_curve([a, b], "rollouts_total")
    assert mean_curve([a], "rollouts_total", "entropy").n_seeds == 0


def test_rollouts_to_reach_interpolates_linearly(tmp_path):
    """0.2 at 100 rollouts and 0.4 at 200: 0.3 is reached at 100 + (0.1/0.2)·100 = 150; 0.5 never; 0.1 at once."""
    run = load_run(eval_run(tmp_path, "r", "v05", 0, [(100, 0.2), (200, 0.4), (300, 0.35)]))
    assert rollouts_to_reach(run, 0.3) == pytest.approx(150.0)
    assert rollouts_to_reach(run, 0.4) == pytest.approx(200.0)
    assert rollouts_to_reach(run, 0.5) is None
    assert rollouts_to_reach(run, 0.1) == pytest.approx(100.0)
    with pytest.raises(ValueError, match="target"):
        rollouts_to_reach(run, 1.5)


def test_rollouts_to_reach_skips_steps_without_eval(tmp_path):
    """Only eval lines form the curve: a training-only step in between does not break the interpolation."""
    lines = [
        {"step": 1, "rollouts_total": 100, "eval_pass_rate": 0.2},
        {"step": 2, "rollouts_total": 150},
        {"step": 3, "rollouts_total": 300, "eval_pass_rate": 0.6},
    ]
    run = load_run(write_run(tmp_path, "r", name="x", lines=lines))
    assert rollouts_to_reach(run, 0.3) == pytest.approx(150.0)  # 100 + (0.1/0.4)·200


def test_rollouts_to_reach_group_mean_over_seeds_that_reach(tmp_path):
    """Seeds reach 0.3 at 150 and 250, a third never: mean 200, SE |150 − 250|/2 = 50, 2 of 3 reached."""
    a = load_run(eval_run(tmp_path, "a", "x", 0, [(100, 0.2), (200, 0.4)]))
    b = load_run(eval_run(tmp_path, "b", "x", 1, [(200, 0.2), (300, 0.4)]))
    c = load_run(eval_run(tmp_path, "c", "x", 2, [(100, 0.1), (200, 0.2)]))
    reach = rollouts_to_reach([a, b, c], 0.3)
    assert reach.mean == pytest.approx(200.0) and reach.se == pytest.approx(50.0)
    assert (reach.n_reached, reach.n_seeds) == (2, 3)
    assert reach.per_seed[2] is None


def _three_methods(tmp_path):
    runs = []
    for name, finals in (("v05", (0.6, 0.6)), ("grpo16", (0.4, 0.4)), ("grpo4", (0.5, 0.5))):
        for seed, final in enumerate(finals):
            pts = [(100, 0.1), (200, final)]
            extra = {"rollouts_per_prompt": 4.0, "zero_adv_frac": 0.25, "grad_norm": 1.0 + seed}
            runs.append(load_run(eval_run(tmp_path, f"{name}_{seed}", name, seed, pts, extra=extra)))
    return group_runs(runs)


def test_default_reference_and_target(tmp_path):
    """Default reference: the GRPO group with the higher final eval (grpo4, 0.5); the target is its final eval."""
    groups = _three_methods(tmp_path)
    assert default_reference(groups) == "grpo4"
    rows = {r["method"]: r for r in summary_table(groups)}
    assert rows["v05"]["reference"] == "grpo4" and rows["grpo4"]["is_reference"]
    assert rows["v05"]["target"] == pytest.approx(0.5)
    # grpo4 reaches 0.5 at 200; v05: 100 + (0.4/0.5)·100 = 180 → ratio 0.9; grpo16 never
    assert rows["grpo4"]["reach_rollouts"] == pytest.approx(200.0)
    assert rows["v05"]["reach_rollouts"] == pytest.approx(180.0) and rows["v05"]["reach_ratio"] == pytest.approx(0.9)
    assert rows["grpo16"]["reach_rollouts"] is None and rows["grpo16"]["reach_n"] == 0
    assert rows["v05"]["final_eval"] == pytest.approx(0.6) and rows["v05"]["final_eval_se"] == pytest.approx(0.0)
    assert rows["v05"]["final_grad_norm"] == pytest.approx(1.5)  # seeds end at 1.0 and 2.0
    assert rows["v05"]["rollouts_per_prompt"] == 4.0 and rows["v05"]["all_equal_frac"] is None


def test_explicit_reference_and_target_and_no_grpo(tmp_path):
    """An explicit reference/target is used as given; unknown names and bad targets raise; no GRPO → first group."""
    groups = _three_methods(tmp_path)
    rows = summary_table(groups, target=0.3, reference="grpo16")
    assert all(r["target"] == 0.3 and r["reference"] == "grpo16" for r in rows)
    with pytest.raises(ValueError, match="unknown reference method 'nope'.*v05, grpo16, grpo4"):
        summary_table(groups, reference="nope")
    with pytest.raises(ValueError, match="target"):
        summary_table(groups, target=2.0)
    assert default_reference({"v05": groups["v05"], "other": groups["grpo4"]}) == "v05"


def test_summary_gives_the_compute_ratio_beside_the_rollout_ratio(tmp_path):
    """Equal rollouts is not equal compute: two methods with the same eval curve in rollouts reach the target after
    the same rollouts (ratio 1), but the one that spends 3× the token-passes per rollout (a critic, a probe pass)
    needs 3× the compute (compute ratio 3)."""
    runs = [
        load_run(eval_run(tmp_path, f"{name}{seed}", name, seed, [(100, 0.1), (200, 0.3), (300, 0.4)],
                          compute_per_rollout=cpr))
        for name, cpr in (("grpo4", 10), ("ppo", 30))
        for seed in (0, 1)
    ]  # fmt: skip
    rows = {r["method"]: r for r in summary_table(group_runs(runs))}
    assert rows["ppo"]["reach_ratio"] == pytest.approx(1.0)
    assert rows["ppo"]["reach_compute_ratio"] == pytest.approx(3.0)
    assert rows["grpo4"]["compute_total"] == 3000 and rows["ppo"]["compute_total"] == 9000


def test_summary_gives_the_user_compute_ratio_beside_this_trainers(tmp_path):
    """Both compute ratios: GRPO k = 4 shares its groups' prompts in this trainer's update (10 token-passes per
    rollout here, 16 as a TRL/verl user pays them), a k = 1 method shares nothing (15 both ways). Same eval curve in
    rollouts: compute ratio 15/10 = 1.5 in this trainer's compute, 15/16 = 0.9375 in the user's. Runs that log no
    compute_user (written before it existed) get None, not a ratio."""
    runs = [
        load_run(eval_run(tmp_path, f"{name}{seed}", name, seed, [(100, 0.1), (200, 0.3), (300, 0.4)],
                          compute_per_rollout=cpr, compute_user_per_rollout=upr))
        for name, cpr, upr in (("grpo4", 10, 16), ("k1", 15, 15), ("old", 15, None))
        for seed in (0, 1)
    ]  # fmt: skip
    rows = {r["method"]: r for r in summary_table(group_runs(runs), reference="grpo4")}
    assert rows["k1"]["reach_compute_ratio"] == pytest.approx(1.5)
    assert rows["k1"]["reach_compute_user_ratio"] == pytest.approx(15 / 16)
    assert rows["grpo4"]["compute_user"] == 4800 and rows["k1"]["compute_user"] == 4500
    assert rows["old"]["reach_compute_ratio"] == pytest.approx(1.5)
    assert rows["old"]["reach_compute_user_ratio"] is None and rows["old"]["compute_user"] is None


def test_an_offline_init_counts_on_the_rollout_axis(tmp_path):
    """spo-offline's step-0 row sits at x = init (the warm start, untrained): the loaded run starts at x = 0 with the
    same eval, so a paired difference covers [0, init] at the warm start's value (flat) instead of starting where
    the init ends, and the tuning score fills the evaluations a run without the init would have had. A mutation
    that drops the synthetic row, or gives it another eval, changes both numbers."""
    points = ((0, 400, 50, 0.2), (1, 600, 80, 0.6), (2, 800, 110, 0.6))
    lines = [{"step": s, "rollouts_total": x, "init_rollouts": 400, "compute_total": c, "eval_pass_rate": e}
             for s, x, c, e in points]  # fmt: skip
    path = write_run(tmp_path, "init", name="spo_offline", seed=0, lines=lines)
    cfg = path / "config.yaml"
    cfg.write_text(cfg.read_text() + "eval: {every_rollouts: 200}\n")
    run = load_run(path)
    x, y = run.series_vs(ROLLOUTS_KEY, EVAL_KEY)
    assert x.tolist() == [0, 400, 600, 800] and y.tolist() == [0.2, 0.2, 0.6, 0.6]
    assert run.series_vs(ROLLOUTS_KEY, "compute_total")[1].tolist() == [0, 50, 80, 110]
    flat = eval_run(tmp_path, "flat", "ref", 0, [(0, 0.2), (200, 0.4), (400, 0.4), (600, 0.4), (800, 0.4)])
    d = paired_difference([run], [load_run(flat)])["mean"]
    # grid {0, 200, 400, 600, 800}: run 0.2, 0.2, 0.2, 0.6, 0.6 against 0.2, 0.4, 0.4, 0.4, 0.4
    assert d == pytest.approx((0 - 0.2 - 0.2 + 0.2 + 0.2) / 5)
    assert tuning_score(run) == pytest.approx((0.2 + 0.2 + 0.6 + 0.6) / 4)  # x = 200 filled, 400 the warm start
    assert run.last("eval_pass_rate") == 0.6 and run.last("rollouts_total") == 800
