"""The grid file: every malformed entry is a one-line error naming it; the committed grids resolve."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from tests.grid._grids import REPO, tuning_grid, write_grid
from v05.grid.cells import grid_cells, tuning_cells
from v05.grid.spec import load_grid
from v05.train.config import load_config


def test_grid_file_errors_name_the_entry(tmp_path):
    """Each malformed grid entry is a ValueError whose message names the entry; the good grid loads."""
    good = {"name": "g", "tasks": {"t": {"regime": "easy"}}, "methods": {"grpo4": "demo-grpo4"}}
    load_grid(write_grid(tmp_path / "ok.yaml", good))
    bad = [
        ({**good, "reference": "nope"}, "reference 'nope'"),
        ({**good, "tasks": {"t": {"regime": "medium"}}}, "regime must be one of"),
        ({**good, "methods": {"grpo4": {"overrides": []}}}, "needs config"),
        ({**good, "overrides": ["train.steps"]}, "key=value"),
        ({**good, "seeds": [0, 0]}, "repeats a seed"),
        ({**good, "quick": {"methods": ["x"]}}, "quick.methods"),
        ({**good, "extra": 1}, "unknown key"),
        ({**good, "methods": {"a b": "demo-grpo4", "grpo4": "demo-grpo4"}}, "not a usable name"),
    ]
    for body, message in bad:
        with pytest.raises(ValueError, match=message):
            load_grid(write_grid(tmp_path / "bad.yaml", body))
    with pytest.raises(ValueError, match="does not exist"):
        load_grid(tmp_path / "missing.yaml")


def test_tuning_grid_file_errors_name_the_entry(tmp_path, tiny_grid):
    """Each malformed tuning entry is a ValueError naming it; a good tuning section loads its settings and quick
    drops it."""
    good = yaml.safe_load(tuning_grid(tmp_path, tiny_grid).read_text())
    grid = load_grid(tiny_grid)
    assert [s.name for s in grid.tuning.settings] == ["default", "lr-high", "half"]
    assert grid.for_quick().tuning is None
    bad = [
        ({"seed": 0}, "tuning.seed must be an integer not among"),
        ({"methods": ["nope"]}, "tuning.methods must list distinct methods"),
        ({"rule": "best"}, "tuning.rule must be one of"),
        ({"settings": {"default": {}}}, "'default' is implicit"),
        ({"settings": {"x": {"batch_scale": 0}}}, "batch_scale must lie in"),
        ({"extra": 1}, "tuning takes seed, methods, settings, rule, recommend, picks and split"),
        ({"recommend": ["rloo"]}, "tuning.recommend must list tuned methods"),
        ({"split": "test"}, "tuning.split must be one of eval, validation"),
    ]
    for change, message in bad:
        body = {**good, "tuning": {**good["tuning"], **change}}
        with pytest.raises(ValueError, match=message):
            load_grid(write_grid(tmp_path / "bad.yaml", body))
    bad_attribution = [
        ({"control": "nope"}, "attribution.control 'nope' is not a method"),
        ({"learned": ["nope"]}, "attribution.learned must list methods"),
        ({"rows": [{"factor": "x", "method": "grpo4"}]}, r"attribution.rows\[0\] must be"),
        ({"rows": [{"factor": "x", "method": "grpo4", "versus": "nope"}]}, "names a method the grid lacks"),
        ({"colour": 1}, "attribution takes control, oracle, learned and rows"),
    ]
    for change, message in bad_attribution:
        with pytest.raises(ValueError, match=message):
            load_grid(write_grid(tmp_path / "bad.yaml", {**good, "attribution": change}))
    with pytest.raises(ValueError, match="pool must be one of revisited, fresh, mixed"):
        first = next(iter(good["tasks"]))
        load_grid(write_grid(tmp_path / "bad.yaml", {**good, "tasks": {first: {"pool": "stale"}}}))


def test_the_evidence_grid_resolves_with_the_contract_names_and_tunes_on_validation(tmp_path):
    """benchmarks/grids/evidence.yaml: the contract's method names, every task setting's regime and pool, 5 seeds no
    earlier grid used, one budget; tuning cells evaluate the validation split and comparison cells the eval split."""

    grid = load_grid(REPO / "benchmarks/grids/evidence.yaml")
    names = {m.name for m in grid.methods}
    assert {"grpo4", "grpo4_b64", "grpo2_b64", "rloo2_b64", "reinforce_pp_k1", "eb1_running_mean", "eb1_history",
            "eb1_combined", "eb1_v0", "eb1_probe", "eb1_oracle", "reinforce_prior_k1", "eb1_combined_loo",
            "v05_paper", "ppo", "poise", "eb1_domain_mean"} <= names  # fmt: skip
    pools = {(t.regime, t.pool) for t in grid.tasks}
    assert {("hard", "revisited"), ("hard", "fresh"), ("hard", "mixed"), ("easy", "revisited")} <= pools
    assert len(grid.seeds) >= 5
    for other in ("standard", "prior-pay"):
        old = load_grid(REPO / f"benchmarks/grids/{other}.yaml")
        assert not set(grid.seeds) & {*old.seeds, old.tuning.seed if old.tuning else -1}
    assert grid.tuning.split == "validation" and grid.attribution.control == "eb1_running_mean"
    grid = dataclasses.replace(grid, tasks=grid.tasks[1:2], seeds=grid.seeds[:1])
    tune = tuning_cells(grid, tmp_path)
    assert {c.cfg.eval.split for c in tune} == {"validation"}
    cells = grid_cells(grid, tmp_path, choices={(grid.tasks[0].name, m): "default" for m in grid.tuning.methods})
    assert {c.cfg.eval.split for c in cells} == {"eval"}
    assert {c.cfg.train.max_rollouts for c in [*cells, *tune]} == {38400}
    k1 = {c.method.name: c.cfg for c in cells if c.cfg.allocator.options.get("k") == 1 and c.cfg.critic is not None}
    assert {k1[n].train.batch_size for n in k1 if n.startswith("eb1_")} == {64}
    assert k1["eb1_oracle"].prior.name == "oracle" and k1["eb1_running_mean"].prior.name == "running_mean"


def test_the_domain_mean_control_runs_on_the_mixed_pools_as_the_running_mean_does(tmp_path):
    """eb1_domain_mean: on the mixed task settings only, with eb1_running_mean's config and overrides but the prior
    (so its attribution rows isolate the domain split), and placed right after it."""
    grid = load_grid(REPO / "benchmarks/grids/evidence.yaml")
    methods = {m.name: m for m in grid.methods}
    names = list(methods)
    dm, rm = methods["eb1_domain_mean"], methods["eb1_running_mean"]
    assert set(dm.tasks) == {t.name for t in grid.tasks if t.pool == "mixed"} and len(dm.tasks) == 2
    assert dm.config == rm.config and dm.overrides == (*rm.overrides[:-1], "prior.name=domain_mean")
    assert names.index("eb1_domain_mean") == names.index("eb1_running_mean") + 1
    rows = {(r.method, r.versus) for r in grid.attribution.rows}
    assert {("eb1_domain_mean", "eb1_running_mean"), ("eb1_v0", "eb1_domain_mean")} <= rows
    mixed = dataclasses.replace(grid, tasks=tuple(t for t in grid.tasks if t.pool == "mixed"), seeds=grid.seeds[:1])
    choices = {(t.name, m): "default" for t in mixed.tasks for m in grid.tuning.methods}
    cells = grid_cells(mixed, tmp_path, choices=choices)
    cfg = {(c.task.name, c.method.name): c.cfg for c in cells}
    for task in mixed.tasks:
        a, b = cfg[(task.name, "eb1_domain_mean")], cfg[(task.name, "eb1_running_mean")]
        assert a.prior.name == "domain_mean" and b.prior.name == "running_mean" and a.task == b.task
        assert a.task.name == "mixture" and a.allocator.options["k"] == 1 and a.train.batch_size == 64
    assert not any(c.method.name == "eb1_domain_mean" for c in grid_cells(
        dataclasses.replace(grid, tasks=grid.tasks[:1], seeds=grid.seeds[:1]), tmp_path,
        choices={(grid.tasks[0].name, m): "default" for m in grid.tuning.methods}))  # fmt: skip


def test_the_pool_regimes_share_their_eval_split_within_a_task_setting():
    """revisited and fresh pools of one task setting are judged on the same eval prompts; fresh outnumbers the draws."""
    from v05.tasks import make_task  # noqa: PLC0415

    grid = load_grid(REPO / "benchmarks/grids/evidence.yaml")
    by = {t.name: load_config("demo-grpo4", (*t.overrides,)).task for t in grid.tasks if t.name.startswith("arith")}
    revisited = make_task(by["arithmetic-hard-revisited"].name, **by["arithmetic-hard-revisited"].options)
    fresh = make_task(by["arithmetic-hard-fresh"].name, **by["arithmetic-hard-fresh"].options)
    assert revisited.eval_prompts() == fresh.eval_prompts()
    assert len(fresh.train_prompts()) >= 38400 > 10 * len(revisited.train_prompts())


def test_method_tasks_name_task_settings_of_the_grid(tmp_path):
    """A method's `tasks:` lists distinct task settings of the grid (not empty); the reference and a recommendation
    candidate run everywhere (the tables compare to the reference on every task setting; the pick averages over
    them all)."""
    good = {"name": "g", "tasks": {"a": {"regime": "easy"}, "b": {"regime": "hard"}},
            "methods": {"grpo4": "demo-grpo4", "rloo": {"config": "demo-rloo", "tasks": ["b"]}}}  # fmt: skip
    assert load_grid(write_grid(tmp_path / "ok.yaml", good)).methods[1].tasks == ("b",)
    only = {"config": "demo-rloo", "tasks": ["b"]}
    bad = [
        ({"rloo": {"config": "demo-rloo", "tasks": ["c"]}}, "method 'rloo' tasks must list distinct task settings"),
        ({"rloo": {"config": "demo-rloo", "tasks": []}}, "method 'rloo' tasks must list"),
        ({"rloo": {"config": "demo-rloo", "tasks": ["b", "b"]}}, "method 'rloo' tasks must list"),
        ({"rloo": {"config": "demo-rloo", "tasks": "b"}}, "method 'rloo' tasks must list"),
        ({"grpo4": {"config": "demo-grpo4", "tasks": ["a"]}}, "the reference 'grpo4' must run on every task setting"),
    ]
    for methods, message in bad:
        with pytest.raises(ValueError, match=message):
            load_grid(write_grid(tmp_path / "bad.yaml", {**good, "methods": {**good["methods"], **methods}}))
    tuned = {**good, "methods": {"grpo4": "demo-grpo4", "rloo": only},
             "tuning": {"seed": 7, "methods": ["rloo"], "settings": {"x": {"batch_scale": 0.5}}, "recommend": ["rloo"]}}
    with pytest.raises(ValueError, match="recommend/picks candidate.*rloo must run on every task setting"):
        load_grid(write_grid(tmp_path / "bad.yaml", tuned))
    picked = {**tuned, "tuning": {**tuned["tuning"], "recommend": [], "picks": {"p": ["rloo"]}}}  # a pick alike
    with pytest.raises(ValueError, match="recommend/picks candidate.*rloo must run on every task setting"):
        load_grid(write_grid(tmp_path / "bad.yaml", picked))
