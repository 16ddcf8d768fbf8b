"""The equal tuning budget: scores, chosen settings, the recommended configuration."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from tests.grid._grids import REPO, finish, tuning_grid, write_grid
from v05.grid.cells import grid_cells, tuning_cells
from v05.grid.results import matrix_results
from v05.grid.run import bench_matrix
from v05.grid.spec import load_grid
from v05.grid.tuning import (
    choose_settings,
    picks,
    recommendation,
    recommended_config,
    recommended_yaml,
    tuning_score,
)
from v05.train.config import load_config
from v05.train.warmstart import warm_start_dir


def test_choose_settings_by_hand(tmp_path, tiny_grid):
    """The best mean eval after the start wins; a tie goes to the earlier setting; an unfinished setting: None."""

    grid = load_grid(tuning_grid(tmp_path, tiny_grid))
    cells = tuning_cells(grid, tmp_path / "mx")
    assert [c.run_dir.name for c in cells] == ["grpo4@default-s7", "grpo4@lr-high-s7", "grpo4@half-s7"]
    assert [c.cfg.train.batch_size for c in cells] == [8, 8, 4]  # half: 8 prompts → 4
    assert cells[1].cfg.optim.lr == 2.0e-3 and all(c.cfg.seed == 7 for c in cells)

    finish(cells[0], [0.9, 0.3, 0.5])  # the start (0.9) does not count: mean 0.4
    finish(cells[1], [0.0, 0.4, 0.6])  # 0.5: the best
    assert choose_settings(grid, cells) == {("tiny-easy", "grpo4"): None}  # "half" has not finished
    assert recommendation(grid, cells) is None
    finish(cells[2], [0.0, 0.5, 0.5])  # ties lr-high: the earlier setting wins
    assert choose_settings(grid, cells) == {("tiny-easy", "grpo4"): "lr-high"}
    rec = recommendation(grid, cells)
    assert (rec["method"], rec["setting"], rec["scores"]) == ("grpo4", "lr-high", {"tiny-easy": 0.5})
    # the pick as a config of its own: the method's config and the setting, not the grid's run overrides
    cfg = recommended_config(grid, rec)
    assert (cfg.name, cfg.optim.lr, cfg.train.batch_size, cfg.train.steps) == ("v05_recommended", 2.0e-3, 32, 2000)
    assert recommended_config(grid, {**rec, "setting": "half"}).train.batch_size == 16
    with pytest.raises(ValueError, match="not a method and tuning setting"):
        recommended_config(grid, {**rec, "setting": "lr-low"})
    # the comparison has not run yet (only an untuned method's cell has finished): the report leaves the task out
    # instead of failing, and the pick is there
    rloo = [c for c in grid_cells(grid, tmp_path / "mx", choices={}) if c.method.name == "rloo"]
    assert [c.run_dir.name for c in rloo] == ["rloo-s0"]
    finish(rloo[0], [0.0, 0.2])
    partial = matrix_results(grid, rloo, cells)
    assert partial["tasks"] == {} and partial["pending"]["tiny-easy"]["tuning"]["grpo4"]["chosen"] == "lr-high"
    text = recommended_yaml(grid, rec, "v05 bench matrix g.yaml --recommended r.yaml")
    assert text.startswith("# v05-recommended: `grpo4` at tuning setting `lr-high`")
    (tmp_path / "r.yaml").write_text(text)
    assert load_config(str(tmp_path / "r.yaml")) == cfg


def test_a_named_pick_is_the_rule_among_its_own_candidates(tmp_path, tiny_grid):
    """tuning.picks: each named pick applies the recommendation's rule to its own candidates only (the selection
    grid's ``selector`` among the learned selectors): grpo4 scores best overall and is the recommendation, the pick
    ``other`` among [rloo] is rloo at its best setting; None until its candidates' sweep is done; a pick naming an
    untuned method, or none, is refused when the grid loads."""
    path = tuning_grid(tmp_path, tiny_grid)
    body = yaml.safe_load(path.read_text())
    body["tuning"] |= {"methods": ["grpo4", "rloo"], "picks": {"other": ["rloo"]}}
    grid = load_grid(write_grid(path, body))
    assert grid.tuning.picks == (("other", ("rloo",)),)
    cells = tuning_cells(grid, tmp_path / "mx")
    by = {(c.method.name, c.setting): c for c in cells}
    for (method, setting), mean in {("grpo4", "default"): 0.8, ("grpo4", "lr-high"): 0.7, ("grpo4", "half"): 0.6,
                                    ("rloo", "default"): 0.3, ("rloo", "lr-high"): 0.5}.items():  # fmt: skip
        finish(by[(method, setting)], [0.0, mean, mean])
    assert picks(grid, cells) == {"other": None}  # rloo@half has not finished
    finish(by[("rloo", "half")], [0.0, 0.4, 0.4])
    got = picks(grid, cells)["other"]
    assert (got["method"], got["setting"], got["score_mean"]) == ("rloo", "lr-high", pytest.approx(0.5))
    assert recommendation(grid, cells)["method"] == "grpo4"
    for bad in ({"other": ["nope"]}, {"other": []}, ["rloo"]):
        body["tuning"]["picks"] = bad
        with pytest.raises(ValueError, match="tuning.picks"):
            load_grid(write_grid(path, body))


def test_a_method_derived_from_a_pick_runs_the_picked_method_at_its_setting(tmp_path, tiny_grid):
    """``{pick: NAME, overrides}``: no cell until the pick is decided; then the picked method's config and overrides
    at the setting chosen for it on that task setting (not the pick's overall one; its batch scale included), the
    method's own overrides last (they win over the setting's), on the comparison seeds only; a pick not among
    tuning.picks, a method with both config and pick, or one that is itself tuned is refused when the grid loads."""
    path = tuning_grid(tmp_path, tiny_grid)
    body = yaml.safe_load(path.read_text())
    body["tuning"] |= {"methods": ["grpo4", "rloo"], "picks": {"other": ["rloo"]}}
    body["methods"]["rloo"] = {"config": "demo-rloo", "overrides": ["optim.weight_decay=0.5"]}
    body["methods"]["derived"] = {"pick": "other", "overrides": ["optim.lr=3.0e-3", "train.max_rollouts=64"]}
    grid = load_grid(write_grid(path, body))
    assert grid.methods[-1].pick == "other"
    assert not any(c.method.name == "derived" for c in tuning_cells(grid, tmp_path))
    choices = {("tiny-easy", "grpo4"): "default", ("tiny-easy", "rloo"): "default"}
    assert not [c for c in grid_cells(grid, tmp_path / "mx", choices=choices) if c.method.name == "derived"]
    for setting, batch, lr in (("lr-high", 8, 3.0e-3), ("half", 4, 3.0e-3), ("default", 8, 3.0e-3)):
        picked = {"other": {"method": "rloo", "setting": "lr-high" if setting == "half" else "half"}}
        chosen = {**choices, ("tiny-easy", "rloo"): setting}
        cells = [c for c in grid_cells(grid, tmp_path / "mx", choices=chosen, picked=picked)
                 if c.method.name == "derived"]  # fmt: skip
        assert [c.seed for c in cells] == [0] and cells[0].setting == setting
        label = "derived" if setting == "default" else f"derived@{setting}"
        cfg = cells[0].cfg
        assert cells[0].run_dir.name == f"{label}-s0" and cfg.name == "derived"
        assert (cfg.estimator.name, cfg.optim.weight_decay) == ("rloo", 0.5)  # rloo's config and its overrides
        assert (cfg.train.batch_size, cfg.optim.lr, cfg.train.max_rollouts) == (batch, lr, 64)
    assert cells[0].method.overrides == ("optim.weight_decay=0.5", "optim.lr=3.0e-3", "train.max_rollouts=64")
    for bad, match in (({"pick": "nope"}, "derives from pick 'nope'"), ({"pick": "other", "config": "demo-rloo"},
                       "needs config or pick")):  # fmt: skip
        with pytest.raises(ValueError, match=match):
            load_grid(write_grid(path, {**body, "methods": {**body["methods"], "derived": bad}}))
    tuned = {**body, "tuning": {**body["tuning"], "methods": ["grpo4", "rloo", "derived"]}}
    with pytest.raises(ValueError, match="not be tuned itself"):
        load_grid(write_grid(path, tuned))
    clash = {**body, "tuning": {**body["tuning"], "picks": {"rloo": ["rloo"]}}}
    with pytest.raises(ValueError, match="not a method's"):
        load_grid(write_grid(path, clash))


def _fmt_score(value: float) -> str:
    return format(value, ".3f")


def test_bench_matrix_tunes_then_compares_at_the_chosen_setting(tmp_path, tiny_grid):
    """The sweep runs first on the tuning seed; the tuned method's comparison cells take the chosen setting's
    overrides, the untuned method keeps its config; the JSON and the page report the sweep."""
    from v05.report.runs import load_run  # noqa: PLC0415

    grid_file = tuning_grid(tmp_path, tiny_grid)
    body = yaml.safe_load(grid_file.read_text())
    body["tuning"]["picks"] = {"mine": ["grpo4"]}
    body["methods"]["derived"] = {"pick": "mine", "overrides": ["optim.weight_decay=0.25"]}  # planned once picked
    grid_file = write_grid(grid_file, body)
    out, doc = tmp_path / "mx", tmp_path / "results.md"
    res = bench_matrix(grid_file, out, progress=False, doc=doc, recommended=tmp_path / "rec.yaml")
    assert res["failures"] == {}
    assert "name: v05_recommended" in (tmp_path / "rec.yaml").read_text()
    scores = {s: tuning_score(load_run(out / "tiny-easy" / f"grpo4@{s}-s7")) for s in ("default", "lr-high", "half")}
    best = max(scores, key=lambda s: (scores[s], -["default", "lr-high", "half"].index(s)))
    task = res["results"]["tasks"]["tiny-easy"]
    assert task["tuning"]["grpo4"]["chosen"] == best and task["methods"]["grpo4"]["setting"] == best
    assert task["tuning"]["grpo4"]["settings"]["lr-high"]["score"] == pytest.approx(scores["lr-high"])
    assert task["methods"]["rloo"]["setting"] is None
    label = "grpo4" if best == "default" else f"grpo4@{best}"
    cfg = yaml.safe_load((out / "tiny-easy" / f"{label}-s0" / "config.yaml").read_text())
    expected = {"default": (1.0e-4, 8), "lr-high": (2.0e-3, 8), "half": (1.0e-4, 4)}[best]
    assert (cfg["optim"]["lr"], cfg["train"]["batch_size"]) == expected and cfg["seed"] == 0
    assert task["methods"]["grpo4"]["seeds"] == [0]  # the tuning seed is not compared
    assert "Equal tuning budget (seed 7" in doc.read_text() and f"**{_fmt_score(scores[best])}" in doc.read_text()
    assert res["results"]["recommended"]["method"] == "grpo4" and res["results"]["recommended"]["setting"] == best
    assert f"Pick: `grpo4` at `{best}`" in doc.read_text()
    assert res["results"]["picks"]["mine"] == res["results"]["recommended"]  # the same rule, the same candidates
    derived = task["methods"]["derived"]  # the pick's config at its setting, its own override on top
    assert (derived["config"], derived["setting"], derived["seeds"]) == ("demo-grpo4", best, [0])
    d_label = "derived" if best == "default" else f"derived@{best}"
    d_cfg = yaml.safe_load((out / "tiny-easy" / f"{d_label}-s0" / "config.yaml").read_text())
    assert (d_cfg["optim"]["lr"], d_cfg["train"]["batch_size"], d_cfg["optim"]["weight_decay"]) == (*expected, 0.25)
    assert "the tuning's `mine` pick" in doc.read_text()
    assert "## The pick `mine`" in doc.read_text() and doc.read_text().count(f"Pick: `grpo4` at `{best}`") == 2


def test_packaged_recommended_config_is_the_selection_grids_pick():
    """`v05-recommended` (an interface contract) is the config the latest grid to re-pick it, the selection grid
    (issue 42; the evidence grid before 2026-12-06), picked from its validation sweep by its stated rule over all
    seven task settings (benchmarks/results/matrix/selection.json, `recommended`), written by `v05 bench matrix ...
    --recommended`: editing the file by hand, or a pick that moved, turns this red. The rule reads the tuning sweep
    alone, so the pick stands while the comparison seeds are pending."""
    results = json.loads((REPO / "benchmarks/results/matrix/selection.json").read_text())
    rec = results["recommended"]
    grid = load_grid(REPO / "benchmarks/grids/selection.yaml")
    tasks = {**results["tasks"], **results.get("pending", {})}
    assert rec is not None and rec["method"] in grid.tuning.recommend
    assert len(rec["scores"]) == len(tasks) == 7
    assert all(t["tuning"][rec["method"]]["split"] == "validation" for t in tasks.values())
    assert load_config("v05-recommended") == recommended_config(grid, rec)
    assert rec["score_mean"] == pytest.approx(max(
        np.mean([t["tuning"][m]["settings"][s]["score"] for t in tasks.values()])
        for m in grid.tuning.recommend for s in [x.name for x in grid.tuning.settings]
    ))  # fmt: skip
    # the demo shows it beside its peers: one warm start and one rollout budget with the demo configs
    cfg, grpo4 = load_config("v05-recommended"), load_config("demo-grpo4")
    assert warm_start_dir(cfg) == warm_start_dir(grpo4) and cfg.train.max_rollouts == grpo4.train.max_rollouts
