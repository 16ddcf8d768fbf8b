"""The store: finished cells and warm starts kept, restored on a fresh --out, refused from another warm start."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

import v05.grid.run as run
from tests.grid._grids import write_grid
from v05.grid.cells import grid_cells
from v05.grid.run import bench_matrix
from v05.grid.spec import load_grid
from v05.grid.store import warm_start_digest
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
