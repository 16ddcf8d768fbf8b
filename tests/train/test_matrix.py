"""`v05 bench matrix`: the grid file, the statistics by hand, resumable cells, the JSON contract, the smoke grid."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from v05.report.runs import Run
from v05.train.config import load_config
from v05.train.matrix import (
    GridTask,
    cpu_label,
    gain90_bootstrap,
    gain_targets,
    grid_cells,
    load_grid,
    matrix_results,
    method_family,
    methods_markdown,
    paired_difference,
    protocol_markdown,
    recommended_config,
    recommended_yaml,
    results_markdown,
    t_interval,
    task_results,
)
from v05.train.warmstart import warm_start_dir

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


def _run(
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


def test_t_interval_and_paired_difference_by_hand():
    """t(2) = 4.303 for three values; the paired difference averages over the union grid of both runs."""
    lo, hi = t_interval([0.5, 0.6, 0.7])
    assert (lo, hi) == pytest.approx((0.6 - 4.303 * 0.1 / math.sqrt(3), 0.6 + 4.303 * 0.1 / math.sqrt(3)))
    assert t_interval([0.5]) is None
    ref = [_run("ref", 0, [(0, 0.2), (100, 0.4)]), _run("ref", 1, [(0, 0.3), (100, 0.3)])]
    # seed 0: method is ref + 0.1 on the grid {0, 50, 100}; seed 1: + 0.3 at the end only (0, 0.15, 0.3 -> 0.15)
    m = [
        _run("m", 0, [(0, 0.3), (50, 0.4), (100, 0.5)]),
        _run("m", 1, [(0, 0.3), (100, 0.6)]),
        _run("m", 2, [(0, 0.9), (100, 0.9)]),
    ]  # seed 2 has no reference: left out
    d = paired_difference(m, ref)
    assert d["n"] == 2 and d["mean"] == pytest.approx((0.1 + 0.15) / 2)
    assert d["se"] == pytest.approx(np.std([0.1, 0.15], ddof=1) / math.sqrt(2))


def _task(groups: dict[str, list[Run]]) -> dict:
    return task_results(GridTask(name="t", regime="hard"), groups, "grpo4", [])


def test_ratios_thresholds_and_never_by_hand():
    """Reference 0.2 -> 0.6 linearly over 1000 rollouts (both seeds): the 90 % threshold is 0.56, reached at 900.
    A method twice as fast (0.2 -> 0.6 by 500, then flat) reaches the final at 500 and 0.56 at 450: ratios 0.5,
    compute ratio 0.5 × its 3× token-passes per rollout = 1.5; a method that stays at 0.4 never reaches either."""
    ref = [_run("grpo4", s, [(0, 0.2), (500, 0.4), (1000, 0.6)]) for s in (0, 1)]
    fast = [_run("fast", s, [(0, 0.2), (500, 0.6), (1000, 0.6)], compute_per_rollout=30.0) for s in (0, 1)]
    flat = [_run("flat", s, [(0, 0.2), (500, 0.4), (1000, 0.4)]) for s in (0, 1)]
    res = _task({"grpo4": ref, "fast": fast, "flat": flat})
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
    ref = [_run("grpo4", 0, [(0, 0.2), (1000, 0.6)]), _run("grpo4", 1, [(0, 0.4), (1000, 0.8)])]
    m = [_run("m", 0, [(0, 0.2), (500, 0.6), (1000, 0.6)]), _run("m", 1, [(0, 0.4), (1000, 0.8)])]
    boot = gain90_bootstrap(m, ref, np.random.default_rng(0), resamples=400)
    lo, hi = boot["ci95"]
    assert lo == pytest.approx(0.5) and hi == pytest.approx(1.0) and boot["never_frac"] == 0.0
    assert gain_targets(ref) == pytest.approx((0.3, 0.7, 0.66))


def test_family_from_the_config():
    """v05 / v05_eb -> v05; grpo at a fixed k -> grpo; DAPO (grpo + dynamic sampling), RLOO, PPO -> other."""
    assert method_family(_run("a", 0, [(0, 0.1)], estimator="v05_eb", allocator="osla")) == "v05"
    assert method_family(_run("a", 0, [(0, 0.1)], estimator="v05")) == "v05"
    assert method_family(_run("a", 0, [(0, 0.1)])) == "grpo"
    assert method_family(_run("a", 0, [(0, 0.1)], allocator="dynamic_sampling")) == "other"
    assert method_family(_run("a", 0, [(0, 0.1)], estimator="gae")) == "other"
    assert method_family(_run("a", 0, [(0, 0.1)]), "other") == "other"


def _write_grid(path: Path, body: dict) -> Path:
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


def test_grid_file_errors_name_the_entry(tmp_path):
    good = {"name": "g", "tasks": {"t": {"regime": "easy"}}, "methods": {"grpo4": "demo-grpo4"}}
    load_grid(_write_grid(tmp_path / "ok.yaml", good))
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
            load_grid(_write_grid(tmp_path / "bad.yaml", body))
    with pytest.raises(ValueError, match="does not exist"):
        load_grid(tmp_path / "missing.yaml")


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


@pytest.fixture
def tiny_grid(tmp_path, tiny_overrides):
    body = {
        "name": "tiny",
        "seeds": [0, 1],
        "overrides": [*tiny_overrides, "train.max_rollouts=96", "train.steps=50"],
        "tasks": {"tiny-easy": {"regime": "easy"}, "tiny-hard": {"regime": "hard", "overrides": ["optim.lr=2.0e-4"]}},
        "methods": {
            "grpo4": "demo-grpo4",
            "rloo": "demo-rloo",
            "v05_k2": {"config": "demo-v05-k4", "overrides": ["allocator.options.k=2"]},
        },
    }
    return _write_grid(tmp_path / "tiny.yaml", body)


def test_bench_matrix_cli_contract_resume_and_docs(tmp_path, tiny_grid, capsys):
    """`v05 bench matrix GRID --out DIR --json FILE --doc MD` trains every cell, writes the contract JSON, the report
    and the markdown; a second call reuses every finished cell (metrics untouched); a cell whose config changed is
    refused."""
    from v05.cli import main  # noqa: PLC0415 (the CLI parser, as users call it)

    out, js, doc = tmp_path / "mx", tmp_path / "mx.json", tmp_path / "results.md"
    argv = ["bench", "matrix", str(tiny_grid), "--out", str(out), "--json", str(js), "--doc", str(doc)]
    assert main(argv) == 0
    res = json.loads(js.read_text())
    assert set(res["tasks"]) == {"tiny-easy", "tiny-hard"}
    for task in res["tasks"].values():
        assert task["reference"] == "grpo4" and task["budget_rollouts"] == 96
        assert set(task["methods"]) == {"grpo4", "rloo", "v05_k2"}
        assert 0 <= task["warm_start_eval"] <= 1
        for m in task["methods"].values():
            assert CONTRACT <= set(m) and m["seeds"] == [0, 1]
            assert m["final_ci95"][0] <= m["final_mean"] <= m["final_ci95"][1]
        assert task["methods"]["v05_k2"]["family"] == "v05" and task["methods"]["rloo"]["family"] == "other"
        assert task["methods"]["grpo4"]["paired_diff_mean"] == 0.0
    assert (out / "index.html").is_file() and (out / "tiny-easy/report/eval_vs_compute.png").is_file()
    text = doc.read_text()
    assert "v05 bench matrix" in text and "tiny-hard (hard regime, revisited pool)" in text
    assert "Sparsity ablation" in text
    stamp = (out / "tiny-easy/rloo-s1/metrics.jsonl").stat().st_mtime_ns
    saved = out / "tiny-easy/rloo-s1/config.yaml"  # as an older v05 wrote it: without fields added since
    saved.write_text(saved.read_text().replace("  lora: null\n", "").replace("  gguf_file: null\n", ""))
    assert "lora" not in saved.read_text()
    assert main(argv) == 0  # the same config: fields added since read as their defaults, nothing retrained
    assert (out / "tiny-easy/rloo-s1/metrics.jsonl").stat().st_mtime_ns == stamp
    assert json.loads(js.read_text())["tasks"] == res["tasks"]
    body = yaml.safe_load(tiny_grid.read_text())
    body["methods"]["rloo"] = {"config": "demo-rloo", "overrides": ["optim.lr=3.0e-4"]}
    _write_grid(tiny_grid, body)
    capsys.readouterr()
    assert main(argv) == 2
    assert "holds a run of another config" in capsys.readouterr().err


def test_an_interrupted_cell_resumes_exactly(tmp_path, tiny_grid):
    """A cell with a checkpoint and no final/ is resumed, not restarted, and ends with the rows of the run that was
    never interrupted (the grid resumes through the trainer's exact resume)."""
    from tests.train._rows import comparable, rows_of  # noqa: PLC0415
    from v05.train.loop import train  # noqa: PLC0415
    from v05.train.matrix import bench_matrix, cell_state  # noqa: PLC0415
    from v05.train.rundir import latest_checkpoint  # noqa: PLC0415

    body = yaml.safe_load(tiny_grid.read_text())
    body["overrides"].append("run.checkpoint_every=1")
    body["methods"] = {"grpo4": "demo-grpo4"}
    body["seeds"], body["tasks"] = [0], {"tiny-easy": {"regime": "easy"}}
    grid_file = _write_grid(tiny_grid, body)
    out = tmp_path / "mx"
    (cell,) = grid_cells(load_grid(grid_file), out)
    train(cell.cfg, cell.run_dir)
    full = [comparable(r) for r in rows_of(cell.run_dir)]

    shutil.rmtree(cell.run_dir / "final")
    shutil.rmtree(latest_checkpoint(cell.run_dir))  # as if killed after step 2's checkpoint
    (earlier,) = (cell.run_dir / "checkpoints").glob("step_*")
    (cell.run_dir / "checkpoints/latest").write_text(earlier.name)
    assert cell_state(cell) == "resume"
    bench_matrix(grid_file, out, progress=False)
    assert cell_state(cell) == "done"
    from v05.report.runs import load_run  # noqa: PLC0415 (a resumed run's last line of a step wins)

    assert [comparable(r) for r in load_run(cell.run_dir).metrics] == full


def test_results_markdown_states_every_claim():
    """The generated page names the command, the hardware, each task's table and one paragraph per claim."""
    ref = [_run("grpo4", s, [(0, 0.2), (1000, 0.6)], grad=1.0, entropy=0.4) for s in (0, 1)]
    g16 = [_run("grpo16", s, [(0, 0.2), (1000, 0.5)], grad=0.8, entropy=0.3) for s in (0, 1)]
    v05 = [
        _run("v05", s, [(0, 0.2), (1000, 0.65)], estimator="v05", allocator="osla", grad=0.5, entropy=0.6)
        for s in (0, 1)
    ]
    k4 = [_run("v05_k4", s, [(0, 0.2), (1000, 0.55)], estimator="v05") for s in (0, 1)]
    task = _task({"grpo4": ref, "grpo16": g16, "v05": v05, "v05_k4": k4})
    meta = {
        "command": "v05 bench matrix g.yaml",
        "hardware": "2 CPU cores",
        "cells_wall_time_s": 3600.0,
        "cells_finished": 8,
        "cells_total": 8,
        "generated": "today",
    }
    from v05.train.matrix import Grid  # noqa: PLC0415

    grid = Grid(name="g", path=Path("g.yaml"), seeds=(0, 1), reference="grpo4", tasks=(), methods=())
    text = results_markdown(grid, {"tasks": {"t": task}}, meta)
    assert "v05 bench matrix g.yaml" in text and "2 CPU cores" in text and "1.00 h" in text
    assert "0.525 (sd 0.025) vs grpo4 1.050 (sd 0.050)" in text and "lower, smoother" in text
    assert "0.600 vs grpo4 0.400 (higher)" in text
    assert "k = 4 beats GRPO@16" in text or "k = 4 ties GRPO@16" in text
    assert "| v05 | v05 | 2 |" in text


def test_standard_grid_quick_smoke(tmp_path, monkeypatch):
    """CI's smoke grid: `v05 bench matrix benchmarks/grids/standard.yaml --quick` trains every task setting of the
    standard grid (its quick methods, seed 0, quick-mode runs, fresh warm starts) and writes the contract JSON."""
    from v05.cli import main  # noqa: PLC0415

    monkeypatch.setenv("V05_WARM_START_DIR", str(tmp_path / "warm"))
    js = tmp_path / "quick.json"
    argv = ["bench", "matrix", str(REPO / "benchmarks/grids/standard.yaml"), "--quick", "--out", str(tmp_path / "q"),
            "--json", str(js)]  # fmt: skip
    assert main(argv) == 0
    res = json.loads(js.read_text())
    grid = load_grid(REPO / "benchmarks/grids/standard.yaml")
    assert set(res["tasks"]) == {t.name for t in grid.tasks}
    for task in res["tasks"].values():
        assert set(task["methods"]) == {grid.reference, *grid.quick_methods}
        assert all(CONTRACT <= set(m) and m["seeds"] == [0] for m in task["methods"].values())
    assert res["failures"] == {}


def test_parallel_workers_train_the_same_cells(tmp_path, tiny_grid):
    """`--workers 2` (each cell in a spawned process) gives the rows `--workers 1` gives, cell by cell."""
    from tests.train._rows import comparable, rows_of  # noqa: PLC0415
    from v05.train.matrix import bench_matrix  # noqa: PLC0415

    body = yaml.safe_load(tiny_grid.read_text())
    body["seeds"], body["tasks"] = [0], {"tiny-easy": {"regime": "easy"}}
    body["methods"] = {"grpo4": "demo-grpo4", "rloo": "demo-rloo"}
    grid_file = _write_grid(tiny_grid, body)
    one = bench_matrix(grid_file, tmp_path / "one", progress=False)
    two = bench_matrix(grid_file, tmp_path / "two", workers=2, progress=False)
    assert one["failures"] == two["failures"] == {}
    for method in ("grpo4", "rloo"):
        a, b = (rows_of(tmp_path / d / "tiny-easy" / f"{method}-s0") for d in ("one", "two"))
        assert [comparable(r) for r in a] == [comparable(r) for r in b] and len(a) > 1
    assert two["results"]["tasks"]["tiny-easy"]["methods"]["rloo"]["final_mean"] == (
        one["results"]["tasks"]["tiny-easy"]["methods"]["rloo"]["final_mean"]
    )


def test_a_method_with_fewer_seeds_is_compared_on_its_own_seeds():
    """A partial grid: a method that has finished seed 0 only, identical to the reference's seed 0, has ratio 1 even
    though the reference's other seed starts much higher (its seed-mean curve would make the ratio < 1)."""
    ref = [_run("grpo4", 0, [(0, 0.2), (1000, 0.6)]), _run("grpo4", 1, [(0, 0.5), (1000, 0.9)])]
    same = [_run("same", 0, [(0, 0.2), (1000, 0.6)])]
    m = _task({"grpo4": ref, "same": same})["methods"]["same"]
    assert m["rollout_ratio"] == pytest.approx(1.0) and m["rollout_ratio_gain90"] == pytest.approx(1.0)
    assert m["compute_ratio"] == pytest.approx(1.0)
    # and the other way round: a method with more seeds than the reference is compared on the reference's seeds
    # (the prior-pay grid's untuned methods come from the store with 3 seeds while a tuned reference has 1)
    more = [_run("more", 0, [(0, 0.2), (1000, 0.6)]), _run("more", 1, [(0, 0.5), (1000, 0.9)])]
    m = _task({"grpo4": ref[:1], "more": more})["methods"]["more"]
    assert m["rollout_ratio"] == pytest.approx(1.0) and m["compute_ratio"] == pytest.approx(1.0)


def test_a_store_resumes_the_grid_on_a_fresh_out_and_refuses_another_warm_start(tmp_path, tiny_grid, monkeypatch):
    """Every finished cell and its warm start are kept in the store; a fresh ``--out`` on a machine without the warm
    start restores them without training (the same weights, metrics and results), also when a field has been added
    to the config since; a stored cell from
    another warm start is refused, one of another config is trained again."""
    import v05.train.matrix as matrix  # noqa: PLC0415

    body = yaml.safe_load(tiny_grid.read_text())
    body["seeds"], body["tasks"] = [0], {"tiny-easy": {"regime": "easy"}}
    body["methods"] = {"grpo4": "demo-grpo4", "rloo": "demo-rloo"}
    grid_file = _write_grid(tiny_grid, body)
    store = tmp_path / "store"
    first = matrix.bench_matrix(grid_file, tmp_path / "a", progress=False, store=store)
    for method in ("grpo4", "rloo"):
        assert (store / "tiny-easy" / f"{method}-s0" / "metrics.jsonl.gz").is_file()

    def refuse(*args):
        raise AssertionError("a stored cell was trained again")

    cells = matrix.grid_cells(matrix.load_grid(grid_file), tmp_path / "b")
    warm = matrix.warm_start_dir(cells[0].cfg)
    assert (store / "warm_start" / warm.name / "model.safetensors").is_file()
    digest = matrix.warm_start_digest(cells[0].cfg)
    shutil.rmtree(warm)  # a fresh machine: no cached warm start (the stored one is used, not a new SFT)
    monkeypatch.setattr(matrix, "_warm", refuse)
    saved = store / "tiny-easy" / "grpo4-s0" / "config.yaml"  # as if written before eval.at_start existed
    assert "  at_start: true\n" in saved.read_text()
    saved.write_text(saved.read_text().replace("  at_start: true\n", ""))
    monkeypatch.setattr(matrix, "_run_cell", refuse)
    second = matrix.bench_matrix(grid_file, tmp_path / "b", progress=False, store=store)
    assert second["failures"] == {} and second["results"]["tasks"] == first["results"]["tasks"]
    for method in ("grpo4", "rloo"):
        a, b = (tmp_path / d / "tiny-easy" / f"{method}-s0" / "metrics.jsonl" for d in ("a", "b"))
        assert a.read_bytes() == b.read_bytes()
    assert second["meta"]["cells_finished"] == 2 and matrix.warm_start_digest(cells[0].cfg) == digest

    info = store / "tiny-easy" / "rloo-s0" / "stored.json"
    info.write_text(json.dumps(json.loads(info.read_text()) | {"warm_start": "0123456789abcdef"}))
    with pytest.raises(ValueError, match="would not pair"):
        matrix.bench_matrix(grid_file, tmp_path / "c", progress=False, store=store)

    monkeypatch.undo()
    body["methods"]["rloo"] = {"config": "demo-rloo", "overrides": ["optim.lr=3.0e-4"]}
    _write_grid(grid_file, body)
    third = matrix.bench_matrix(grid_file, tmp_path / "d", progress=False, store=store)
    assert third["failures"] == {} and json.loads(info.read_text())["warm_start"] != "0123456789abcdef"
    assert "lr: 0.0003" in (store / "tiny-easy" / "rloo-s0" / "config.yaml").read_text()


@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--workers", "0"], "--workers must be >= 1"), (["--tasks", "nope"], "unknown task setting(s) nope")],
)
def test_bad_cli_options_are_one_line_errors(tmp_path, tiny_grid, capsys, extra, message):
    from v05.cli import main  # noqa: PLC0415

    assert main(["bench", "matrix", str(tiny_grid), "--out", str(tmp_path / "mx"), *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "mx").exists()  # refused before anything was trained


def _tuning_grid(tmp_path, tiny_grid) -> Path:
    body = yaml.safe_load(tiny_grid.read_text())
    body["seeds"], body["tasks"] = [0], {"tiny-easy": {"regime": "easy"}}
    body["methods"] = {"grpo4": "demo-grpo4", "rloo": "demo-rloo"}
    body["tuning"] = {
        "seed": 7,
        "methods": ["grpo4"],
        "settings": {"lr-high": {"overrides": ["optim.lr=2.0e-3"]}, "half": {"batch_scale": 0.5}},
        "recommend": ["grpo4"],
    }
    return _write_grid(tiny_grid, body)


def test_tuning_grid_file_errors_name_the_entry(tmp_path, tiny_grid):
    good = yaml.safe_load(_tuning_grid(tmp_path, tiny_grid).read_text())
    grid = load_grid(tiny_grid)
    assert [s.name for s in grid.tuning.settings] == ["default", "lr-high", "half"]
    assert grid.for_quick().tuning is None
    bad = [
        ({"seed": 0}, "tuning.seed must be an integer not among"),
        ({"methods": ["nope"]}, "tuning.methods must list distinct methods"),
        ({"rule": "best"}, "tuning.rule must be one of"),
        ({"settings": {"default": {}}}, "'default' is implicit"),
        ({"settings": {"x": {"batch_scale": 0}}}, "batch_scale must lie in"),
        ({"extra": 1}, "tuning takes seed, methods, settings, rule, recommend and split"),
        ({"recommend": ["rloo"]}, "tuning.recommend must list tuned methods"),
        ({"split": "test"}, "tuning.split must be one of eval, validation"),
    ]
    for change, message in bad:
        body = {**good, "tuning": {**good["tuning"], **change}}
        with pytest.raises(ValueError, match=message):
            load_grid(_write_grid(tmp_path / "bad.yaml", body))
    bad_attribution = [
        ({"control": "nope"}, "attribution.control 'nope' is not a method"),
        ({"learned": ["nope"]}, "attribution.learned must list methods"),
        ({"rows": [{"factor": "x", "method": "grpo4"}]}, r"attribution.rows\[0\] must be"),
        ({"rows": [{"factor": "x", "method": "grpo4", "versus": "nope"}]}, "names a method the grid lacks"),
        ({"colour": 1}, "attribution takes control, oracle, learned and rows"),
    ]
    for change, message in bad_attribution:
        with pytest.raises(ValueError, match=message):
            load_grid(_write_grid(tmp_path / "bad.yaml", {**good, "attribution": change}))
    with pytest.raises(ValueError, match="pool must be one of revisited, fresh, mixed"):
        first = next(iter(good["tasks"]))
        load_grid(_write_grid(tmp_path / "bad.yaml", {**good, "tasks": {first: {"pool": "stale"}}}))


def test_choose_settings_by_hand(tmp_path, tiny_grid):
    """The best mean eval after the start wins; a tie goes to the earlier setting; an unfinished setting: None."""
    from v05.train.matrix import STORED_NAME, choose_settings, recommendation, tuning_cells  # noqa: PLC0415

    grid = load_grid(_tuning_grid(tmp_path, tiny_grid))
    cells = tuning_cells(grid, tmp_path / "mx")
    assert [c.run_dir.name for c in cells] == ["grpo4@default-s7", "grpo4@lr-high-s7", "grpo4@half-s7"]
    assert [c.cfg.train.batch_size for c in cells] == [8, 8, 4]  # half: 8 prompts → 4
    assert cells[1].cfg.optim.lr == 2.0e-3 and all(c.cfg.seed == 7 for c in cells)

    def fake(cell, evals):
        cell.run_dir.mkdir(parents=True, exist_ok=True)
        rows = [{"step": i, "rollouts_total": 10 * i, "eval_pass_rate": e} for i, e in enumerate(evals)]
        (cell.run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (cell.run_dir / STORED_NAME).write_text("{}")

    fake(cells[0], [0.9, 0.3, 0.5])  # the start (0.9) does not count: mean 0.4
    fake(cells[1], [0.0, 0.4, 0.6])  # 0.5: the best
    assert choose_settings(grid, cells) == {("tiny-easy", "grpo4"): None}  # "half" has not finished
    assert recommendation(grid, cells) is None
    fake(cells[2], [0.0, 0.5, 0.5])  # ties lr-high: the earlier setting wins
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
    fake(rloo[0], [0.0, 0.2])
    partial = matrix_results(grid, rloo, cells)
    assert partial["tasks"] == {} and partial["pending"]["tiny-easy"]["tuning"]["grpo4"]["chosen"] == "lr-high"
    text = recommended_yaml(grid, rec, "v05 bench matrix g.yaml --recommended r.yaml")
    assert text.startswith("# v05-recommended: `grpo4` at tuning setting `lr-high`")
    (tmp_path / "r.yaml").write_text(text)
    assert load_config(str(tmp_path / "r.yaml")) == cfg


def test_bench_matrix_tunes_then_compares_at_the_chosen_setting(tmp_path, tiny_grid):
    """The sweep runs first on the tuning seed; the tuned method's comparison cells take the chosen setting's
    overrides, the untuned method keeps its config; the JSON and the page report the sweep."""
    from v05.report.runs import load_run  # noqa: PLC0415
    from v05.train.matrix import bench_matrix, tuning_score  # noqa: PLC0415

    grid_file = _tuning_grid(tmp_path, tiny_grid)
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


def _fmt_score(value: float) -> str:
    return format(value, ".3f")


def test_grids_sharing_a_store_define_shared_cells_alike(tmp_path):
    """benchmarks/grids/*.yaml that share a store: a cell name both define (task/METHOD-sSEED) has one config in
    both (else each grid would retrain and overwrite the other's stored cell). Names only one grid has cannot
    collide (a tuned method at a non-default setting is METHOD@SETTING), so only the shared names are loaded."""
    from v05.train.config import to_yaml  # noqa: PLC0415

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
    from v05.train.matrix import tuning_cells  # noqa: PLC0415

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


def test_results_page_lists_each_method_with_its_config_and_overrides():
    """The standard grid's page says what each method ran: its config and overrides (dps hands its rejects back,
    the grid-wide overrides come first), so a reader can tell the standard grid's DPS from prior-pay's dps_fresh."""
    grid = load_grid(REPO / "benchmarks/grids/standard.yaml")
    text = "\n".join(methods_markdown(grid))
    assert "- `dps`: `demo-dps` + `allocator.rejects=return`" in text
    assert "- `grpo4`: `demo-grpo4`\n" in text and "`run.progress=false`" in text
    assert text.count("\n- `") == len(grid.methods)
    assert "no method was tuned" in protocol_markdown(grid)
    tuned = protocol_markdown(load_grid(REPO / "benchmarks/grids/prior-pay.yaml"))
    assert "no method was tuned" not in tuned and "on seed 100, which is not compared" in tuned and "`ppo`" in tuned


def test_cpu_label_names_the_widest_unit():
    """Cells trained on CPUs of one name but other units (AVX2, AVX-512, AMX: other kernels, other trajectories) are
    told apart in the results' hardware line."""
    amx = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor\nflags\t\t: fpu avx2 avx512f amx_bf16\n"
    assert cpu_label(amx, "x86_64") == "Intel(R) Xeon(R) Processor, AMX"
    assert cpu_label(amx.replace(" amx_bf16", ""), "x86_64") == "Intel(R) Xeon(R) Processor, AVX-512"
    assert cpu_label("model name : EPYC\nflags : sse avx2\n", "x86_64") == "EPYC, AVX2"
    assert cpu_label("", "arm64") == "arm64"


def test_packaged_recommended_config_is_the_prior_pay_pick():
    """`v05-recommended` (an interface contract) is the config the prior-pay grid's tuning sweep picked by its stated
    rule (benchmarks/results/matrix/prior-pay.json, `recommended`), written by `v05 bench matrix ... --recommended`:
    editing the file by hand, or a pick that moved, turns this red."""
    results = json.loads((REPO / "benchmarks/results/matrix/prior-pay.json").read_text())
    rec = results["recommended"]
    assert rec is not None and rec["method"] in ("v05_eb_k1_b128", "v05_eb_select", "v05_eb_budget", "v05_budget")
    grid = load_grid(REPO / "benchmarks/grids/prior-pay.yaml")
    assert load_config("v05-recommended") == recommended_config(grid, rec)
    assert rec["score_mean"] == pytest.approx(max(
        np.mean([t["tuning"][m]["settings"][s]["score"] for t in [*results["tasks"].values(),
                                                                   *results.get("pending", {}).values()]])
        for m in grid.tuning.recommend for s in [x.name for x in grid.tuning.settings]
    ))  # fmt: skip
    # the demo shows it beside its peers: one warm start and one rollout budget with the demo configs
    cfg, grpo4 = load_config("v05-recommended"), load_config("demo-grpo4")
    assert warm_start_dir(cfg) == warm_start_dir(grpo4) and cfg.train.max_rollouts == grpo4.train.max_rollouts


def test_the_evidence_grid_resolves_with_the_contract_names_and_tunes_on_validation(tmp_path):
    """benchmarks/grids/evidence.yaml: the contract's method names, every task setting's regime and pool, 5 seeds no
    earlier grid used, one budget; tuning cells evaluate the validation split and comparison cells the eval split."""
    from v05.train.matrix import tuning_cells  # noqa: PLC0415

    grid = load_grid(REPO / "benchmarks/grids/evidence.yaml")
    names = {m.name for m in grid.methods}
    assert {"grpo4", "grpo4_b64", "grpo2_b64", "rloo2_b64", "reinforce_pp_k1", "eb1_running_mean", "eb1_history",
            "eb1_combined", "eb1_v0", "eb1_probe", "eb1_oracle", "reinforce_prior_k1", "eb1_combined_loo",
            "v05_paper", "ppo", "poise"} <= names  # fmt: skip
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


def test_the_pool_regimes_share_their_eval_split_within_a_task_setting():
    """revisited and fresh pools of one task setting are judged on the same eval prompts; fresh outnumbers the draws."""
    from v05.tasks import make_task  # noqa: PLC0415

    grid = load_grid(REPO / "benchmarks/grids/evidence.yaml")
    by = {t.name: load_config("demo-grpo4", (*t.overrides,)).task for t in grid.tasks if t.name.startswith("arith")}
    revisited = make_task(by["arithmetic-hard-revisited"].name, **by["arithmetic-hard-revisited"].options)
    fresh = make_task(by["arithmetic-hard-fresh"].name, **by["arithmetic-hard-fresh"].options)
    assert revisited.eval_prompts() == fresh.eval_prompts()
    assert len(fresh.train_prompts()) >= 38400 > 10 * len(revisited.train_prompts())


def test_paired_ci_tail_target_and_the_attribution_table_by_hand():
    """The paired difference's 95 % t-interval; the tail-10 % target of a plateaued reference is reached before the
    budget; an attribution row is method − versus over their common seeds, and the headroom's captured share."""
    from v05.train.matrix import Attribution, AttributionRow, attribution_results, tail_target  # noqa: PLC0415

    ref = [_run("grpo4", s, [(0, 0.2), (500, 0.4), (900, 0.5), (1000, 0.5)]) for s in (0, 1)]
    assert tail_target(ref) == pytest.approx(0.5)  # the points at >= 900 rollouts
    rm = [_run("rm", s, [(0, 0.2), (1000, 0.4 + 0.1 * s)]) for s in (0, 1, 2)]
    orc = [_run("orc", s, [(0, 0.2 + 0.2), (1000, 0.6 + 0.1 * s)]) for s in (0, 1)]  # +0.2 on every eval
    good = [_run("good", s, [(0, 0.2 + 0.1), (1000, 0.5 + 0.1 * s)]) for s in (0, 1)]  # +0.1
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
    res = task_results(GridTask(name="t", regime="hard"), {"grpo4": ref, "rm": rm, "orc": orc}, "grpo4", [],
                       control="rm")  # fmt: skip
    assert res["methods"]["orc"]["vs_running_mean_diff"] == pytest.approx(0.2)
    assert res["methods"]["rm"]["vs_running_mean_diff"] == 0.0
    for key in ("paired_diff_ci95", "rollout_ratio_ci95", "rollout_ratio_tail10", "rollout_ratio_tail10_ci95",
                "vs_running_mean_ci95"):  # fmt: skip
        assert key in res["methods"]["orc"]
    assert res["pool"] == "revisited"


def test_a_grid_warm_start_trains_on_the_cells_thread_count(monkeypatch):
    """A warm start in a grid worker runs beside another worker: it uses run.threads (1), not torch's default of
    every core (oversubscribed, the SFT ran ~8x slower)."""
    import torch  # noqa: PLC0415

    import v05.train.matrix as matrix  # noqa: PLC0415

    seen = []
    monkeypatch.setattr(matrix, "ensure_warm_start", lambda cfg, progress: seen.append(torch.get_num_threads()) or "w")
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        matrix._warm(load_config("demo-grpo4", ["run.threads=1"]))
    finally:
        torch.set_num_threads(before)
    assert seen == [1]
