"""The store: finished cells and warm starts kept, restored on a fresh --out, refused from another warm start."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest
import yaml

import v05.grid.run as run
from tests.grid._grids import DIGEST, WEIGHTS, fake_store, write_grid
from v05.grid.cells import grid_cells
from v05.grid.run import bench_matrix
from v05.grid.spec import load_grid
from v05.grid.store import (
    STORED_NAME,
    cell_state,
    is_finished,
    restore_cells,
    stored_problem,
    warm_start_digest,
)
from v05.train.config import load_config
from v05.train.warmstart import warm_start_dir


def test_a_store_resumes_the_grid_on_a_fresh_out_and_refuses_another_warm_start(tmp_path, tiny_grid, monkeypatch):
    """Every finished cell and its warm start are kept in the store; a fresh ``--out`` on a machine without the warm
    start restores them without training (the same weights, metrics and results), also when a field has been added
    to the config since; a stored cell from
    another warm start is refused, one of another config is trained again."""
    body = yaml.safe_load(tiny_grid.read_text())
    body["seeds"], body["tasks"] = [0], {"tiny-easy": {"regime": "easy"}}
    body["methods"] = {"grpo4": "demo-grpo4", "rloo": "demo-rloo"}
    grid_file = write_grid(tiny_grid, body)
    store = tmp_path / "store"
    first = bench_matrix(grid_file, tmp_path / "a", progress=False, store=store)
    for method in ("grpo4", "rloo"):
        assert (store / "tiny-easy" / f"{method}-s0" / "metrics.jsonl.gz").is_file()

    def refuse(*args):
        raise AssertionError("a stored cell was trained again")

    cells = grid_cells(load_grid(grid_file), tmp_path / "b")
    warm = warm_start_dir(cells[0].cfg)
    assert (store / "warm_start" / warm.name / "model.safetensors").is_file()
    digest = warm_start_digest(cells[0].cfg)
    shutil.rmtree(warm)  # a fresh machine: no cached warm start (the stored one is used, not a new SFT)
    monkeypatch.setattr(run, "_warm", refuse)
    saved = store / "tiny-easy" / "grpo4-s0" / "config.yaml"  # as if written before eval.at_start existed
    assert "  at_start: true\n" in saved.read_text()
    saved.write_text(saved.read_text().replace("  at_start: true\n", ""))
    monkeypatch.setattr(run, "_run_cell", refuse)
    second = bench_matrix(grid_file, tmp_path / "b", progress=False, store=store)
    assert second["failures"] == {} and second["results"]["tasks"] == first["results"]["tasks"]
    for method in ("grpo4", "rloo"):
        a, b = (tmp_path / d / "tiny-easy" / f"{method}-s0" / "metrics.jsonl" for d in ("a", "b"))
        assert a.read_bytes() == b.read_bytes()
    assert second["meta"]["cells_finished"] == 2 and warm_start_digest(cells[0].cfg) == digest

    info = store / "tiny-easy" / "rloo-s0" / "stored.json"
    info.write_text(json.dumps(json.loads(info.read_text()) | {"warm_start": "0123456789abcdef"}))
    with pytest.raises(ValueError, match="would not pair"):
        bench_matrix(grid_file, tmp_path / "c", progress=False, store=store)

    monkeypatch.undo()
    body["methods"]["rloo"] = {"config": "demo-rloo", "overrides": ["optim.lr=3.0e-4"]}
    write_grid(grid_file, body)
    third = bench_matrix(grid_file, tmp_path / "d", progress=False, store=store)
    assert third["failures"] == {} and json.loads(info.read_text())["warm_start"] != "0123456789abcdef"
    assert "lr: 0.0003" in (store / "tiny-easy" / "rloo-s0" / "config.yaml").read_text()


def test_report_only_checks_every_restored_cell_against_the_stores_warm_start(tmp_path, tiny_grid):
    """``--report-only`` on a machine without the warm start compares each stored cell's digest with the store's copy
    of its warm start: a consistent store reports (its SFT record's measured pass rate in the JSON), a cell recorded
    from other weights is refused, whether it is still to restore (a fresh --out) or already restored in --out."""
    grid_file, store, _ = fake_store(tmp_path, tiny_grid, methods={"grpo4": "demo-grpo4", "rloo": "demo-rloo"})
    res = bench_matrix(grid_file, tmp_path / "a", train_cells=False, progress=False, store=store)
    task = res["results"]["tasks"]["tiny-easy"]
    assert set(task["methods"]) == {"grpo4", "rloo"} and res["meta"]["cells_finished"] == 2
    assert task["warm_start_sft"] == {"target": 0.3, "split": "validation", "pass_rate_mean": 0.35,
                                     "pass_rate_min": 0.35, "pass_rate_max": 0.35, "n": 1, "n_missing": 0}

    restored = tmp_path / "a" / "tiny-easy" / "rloo-s0" / STORED_NAME  # already in --out: checked again
    restored.write_text(json.dumps(json.loads(restored.read_text()) | {"warm_start": "0123456789abcdef"}))
    with pytest.raises(ValueError, match="rloo-s0: it was trained from warm start 0123456789abcdef"):
        bench_matrix(grid_file, tmp_path / "a", train_cells=False, progress=False, store=store)
    info = store / "tiny-easy" / "rloo-s0" / STORED_NAME  # still in the store: refused at restore
    info.write_text(json.dumps(json.loads(info.read_text()) | {"warm_start": "0123456789abcdef"}))
    with pytest.raises(ValueError, match="would not pair"):
        bench_matrix(grid_file, tmp_path / "b", train_cells=False, progress=False, store=store)


def test_is_finished_checks_a_restored_cell_not_only_its_marker(tmp_path, tiny_grid):
    """A run directory holding ``stored.json`` is a finished cell only when it is one: its metrics present and
    reaching the budget, its config the cell's, its digest that of the warm start cached here; ``cell_state``
    refuses the ones that fail (it does not silently train over them)."""
    grid_file, store, _ = fake_store(tmp_path, tiny_grid, methods={"grpo4": "demo-grpo4"})
    cell = grid_cells(load_grid(grid_file), tmp_path / "out")[0]
    cell.run_dir.mkdir(parents=True)
    (cell.run_dir / STORED_NAME).write_text(json.dumps({"warm_start": DIGEST}))
    assert not is_finished(cell)  # the marker alone: no metrics, no config
    with pytest.raises(ValueError, match="holds a restored cell that does not check"):  # refused by name
        cell_state(cell)
    with pytest.raises(ValueError, match="does not check"):  # not restored over either
        restore_cells([cell], store)
    shutil.rmtree(cell.run_dir)
    assert restore_cells([cell], store) == 1 and is_finished(cell) and cell_state(cell) == "done"

    metrics = cell.run_dir / "metrics.jsonl"
    full = metrics.read_text()
    metrics.write_text("".join(full.splitlines(keepends=True)[:2]))  # a copy cut before the budget (96 rollouts)
    assert not is_finished(cell) and "before the run's end" in stored_problem(cell)
    metrics.write_text(full)
    assert is_finished(cell)

    local = warm_start_dir(cell.cfg)  # this machine's cached warm start, other weights: the cell does not pair
    local.mkdir(parents=True)
    (local / "model.safetensors").write_bytes(b"other weights")
    assert not is_finished(cell) and "the warm start it pairs on" in stored_problem(cell)
    (local / "model.safetensors").write_bytes(WEIGHTS)
    assert is_finished(cell)

    other = dataclasses.replace(cell, cfg=load_config("demo-rloo", [f"warmup.cache_dir={tmp_path / 'cache'}"]))
    assert stored_problem(other) is not None and not is_finished(other)
