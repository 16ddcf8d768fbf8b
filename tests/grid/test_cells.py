"""The cells a grid plans: every committed grid resolves, shared store cells are defined alike."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml

from tests.grid._grids import REPO, write_grid
from v05.grid.cells import grid_cells, tuning_cells
from v05.grid.spec import load_grid
from v05.priors import make_provider, provider_spec
from v05.train.config import load_config, to_yaml


def test_the_standard_grid_resolves_every_cell(tmp_path):
    """Every cell of benchmarks/grids/standard.yaml loads (3 task settings × 22 methods × 3 seeds), its name is the
    method's and each method has the budget of its task; the quick grid keeps every task setting."""
    grid = load_grid(REPO / "benchmarks/grids/standard.yaml")
    cells = grid_cells(grid, tmp_path)
    assert len(cells) == len(grid.tasks) * len(grid.methods) * 3 and len(grid.tasks) == 3
    assert {c.task.regime for c in cells} == {"easy", "hard"}
    assert all(c.cfg.name == c.method.name and c.cfg.seed == c.seed for c in cells)
    budgets = {(c.task.name, c.cfg.train.max_rollouts) for c in cells}
    assert len(budgets) == len(grid.tasks)  # one budget per task setting, the same for every method
    lrs = {c.cfg.optim.lr for c in cells}
    assert lrs == {1.0e-4}  # one learning rate for every method
    quick = grid.for_quick()
    assert quick.methods[0].name == grid.reference and len(quick.tasks) == 3 and quick.seeds == (0,)


def test_grids_sharing_a_store_define_shared_cells_alike(tmp_path):
    """benchmarks/grids/*.yaml that share a store: a cell name both define (task/METHOD-sSEED) has one config in
    both (else each grid would retrain and overwrite the other's stored cell). Names only one grid has cannot
    collide (a tuned method at a non-default setting is METHOD@SETTING), so only the shared names are loaded."""

    grids = [load_grid(p) for p in sorted((REPO / "benchmarks/grids").glob("*.yaml"))]
    by_store: dict[Path, list] = {}
    for grid in grids:
        if grid.store is not None:
            by_store.setdefault(grid.store.resolve(), []).append(grid)
    assert any(len(g) > 1 for g in by_store.values())  # the standard and prior-pay grids share one
    for sharing in by_store.values():
        names = [{m.name for m in g.methods} for g in sharing]
        shared = {n for i, a in enumerate(names) for b in names[i + 1 :] for n in a & b}
        seen: dict[str, tuple[str, str]] = {}
        for grid in sharing:
            grid = dataclasses.replace(grid, seeds=grid.seeds[:1], methods=tuple(m for m in grid.methods
                                                                                 if m.name in shared))  # fmt: skip
            default = {(t.name, m.name): "default" for t in grid.tasks for m in grid.methods}
            for cell in grid_cells(grid, tmp_path, choices=default):
                key, text = f"{cell.task.name}/{cell.run_dir.name}", to_yaml(cell.cfg)
                if key in seen:
                    assert seen[key][1] == text, f"{grid.name} and {seen[key][0]} define {key} differently"
                seen[key] = (grid.name, text)


def test_the_prior_pay_grid_resolves(tmp_path):
    """Every method and tuning setting of benchmarks/grids/prior-pay.yaml loads (first task setting, seed 0; the
    task overrides are the standard grid's), the recommendation candidates are tuned, and every method spends
    the same budget."""

    grid = load_grid(REPO / "benchmarks/grids/prior-pay.yaml")
    grid = dataclasses.replace(grid, tasks=grid.tasks[:1], seeds=(0,))
    tune = tuning_cells(grid, tmp_path)
    assert len(tune) == len(grid.tuning.methods) * len(grid.tuning.settings)
    cells = grid_cells(grid, tmp_path, choices={(grid.tasks[0].name, m): "default" for m in grid.tuning.methods})
    assert len(cells) == len(grid.methods)
    assert {c.cfg.train.max_rollouts for c in [*cells, *tune]} == {38400}
    assert set(grid.tuning.recommend) <= set(grid.tuning.methods)
    per_step = {c.method.name: c.cfg.train.batch_size * (c.cfg.allocator.options.get("k") or 1) for c in cells
                if c.cfg.allocator.name in ("fixed", "prior_select")}  # fmt: skip
    assert set(per_step.values()) == {128}, per_step  # 128 rollouts a step, whatever k



def test_the_selection_grid_resolves(tmp_path):
    """benchmarks/grids/selection.yaml (issue 42): every method and tuning setting loads on every task setting, every
    compared method is tuned (the oracle and the learned selectors included), every k = 1 method spends 64 rollouts
    a step from 4 x 64 candidates, the oracle ranks candidates by 8 rollouts, the seeds are new, and the
    recommendation candidates leave out the oracle (a bound)."""
    grid = load_grid(REPO / "benchmarks/grids/selection.yaml")
    evidence = load_grid(REPO / "benchmarks/grids/evidence.yaml")
    assert [t.name for t in grid.tasks] == [t.name for t in evidence.tasks]
    used = {*evidence.seeds, evidence.tuning.seed, 20, 21, 22}  # the evidence grid's and the pilot's
    assert not set(grid.seeds) & used and grid.tuning.seed not in {*grid.seeds, *used}
    derived = {m.name: m.pick for m in grid.methods if m.pick is not None}  # the pick's variants: run, not tuned
    assert derived == {"sel_pick_pool16": "selector", "sel_pick_spo_draw": "selector"}
    assert set(grid.tuning.methods) == {m.name for m in grid.methods} - set(derived)
    assert "sel_oracle" not in grid.tuning.recommend and set(grid.tuning.recommend) <= set(grid.tuning.methods)
    # the picked learned selector among the learned ones; both picks only among what TRL and verl can run: not the
    # probe's (the live policy) nor SPO's tracker with rho = KL (the policy's drift; both adapters refuse them)
    picks = dict(grid.tuning.picks)
    assert set(picks["selector"]) == set(grid.attribution.learned) - {"sel_probe", "sel_tracker"}
    assert set(picks["selector_v05_train"]) == {*picks["selector"], "sel_tracker"}
    assert set(picks["recommended_v05_train"]) > set(grid.tuning.recommend)
    by_name = {m.name: m for m in grid.methods}
    for name in {*grid.tuning.recommend, *picks["selector"]}:
        prior = load_config(by_name[name].config, list(by_name[name].overrides)).prior
        spec = provider_spec(prior.name, prior.options) if prior.name else None
        assert spec is None or not (spec.needs_policy or spec.needs_sampler), name
        assert spec is None or not spec.needs_drift or make_provider(prior.name, **prior.options).rho != "kl", name
    assert grid.tuning.split == "validation"
    tune = tuning_cells(grid, tmp_path)
    choices = {(t.name, m.name): "default" for t in grid.tasks for m in grid.methods}
    picked = {"selector": {"method": "sel_combined", "setting": "default"}}
    cells = grid_cells(dataclasses.replace(grid, seeds=grid.seeds[:1]), tmp_path, choices=choices, picked=picked)
    assert {c.cfg.train.max_rollouts for c in [*cells, *tune]} == {38400}
    for c in cells:
        if c.method.name.startswith(("sel_", "uniform_", "spo")):
            assert (c.cfg.train.batch_size, c.cfg.allocator.options.get("k")) == (64, 1), c.method.name
        if c.method.name.startswith("sel_") and c.method.name not in derived:
            assert (c.cfg.allocator.name, c.cfg.allocator.pool_factor) == ("prior_select", None), c.method.name
    variant = {c.method.name: c.cfg for c in cells if c.method.name in derived and c.task.name == grid.tasks[0].name}
    combined = next(c.cfg for c in cells if c.method.name == "sel_combined")  # the pick's own cell, same setting
    assert variant["sel_pick_pool16"].prior == variant["sel_pick_spo_draw"].prior == combined.prior
    assert (variant["sel_pick_pool16"].allocator.name, variant["sel_pick_pool16"].allocator.pool_factor) == (
        "prior_select", 16)  # fmt: skip
    assert (variant["sel_pick_spo_draw"].allocator.name, variant["sel_pick_spo_draw"].allocator.pool_factor) == (
        "spo", None)  # SpoSample's own pool: 4 batches, like prior_select's  # fmt: skip
    started = next(c for c in cells if c.method.name == "spo_from_probe")
    assert (started.cfg.prior.name, started.cfg.prior.options["start_from"]) == ("spo", "probe")
    oracle = next(c for c in cells if c.method.name == "sel_oracle")
    assert (oracle.cfg.prior.name, oracle.cfg.prior.options) == ("oracle", {"rollouts": 8})


def test_a_method_with_tasks_is_planned_on_those_task_settings_only(tmp_path, tiny_grid):
    """`tasks: [tiny-hard]` on a method: its comparison and tuning cells exist on tiny-hard only, every other method
    keeps its cells on both task settings."""
    body = yaml.safe_load(tiny_grid.read_text())
    body["methods"]["v05_k2"]["tasks"] = ["tiny-hard"]
    body["tuning"] = {"seed": 7, "methods": ["rloo", "v05_k2"], "settings": {"half": {"batch_scale": 0.5}}}
    grid = load_grid(write_grid(tiny_grid, body))
    assert grid.methods[2].tasks == ("tiny-hard",) and grid.methods[0].tasks == ()
    default = {(t.name, m): "default" for t in grid.tasks for m in grid.tuning.methods}
    planned = {(c.task.name, c.method.name) for c in grid_cells(grid, tmp_path, choices=default)}
    assert planned == {("tiny-easy", "grpo4"), ("tiny-easy", "rloo"), ("tiny-hard", "grpo4"), ("tiny-hard", "rloo"),
                       ("tiny-hard", "v05_k2")}  # fmt: skip
    assert len(grid_cells(grid, tmp_path, choices=default)) == len(planned) * 2  # two seeds each
    tune = {(c.task.name, c.method.name) for c in tuning_cells(grid, tmp_path)}
    assert tune == {("tiny-easy", "rloo"), ("tiny-hard", "rloo"), ("tiny-hard", "v05_k2")}
