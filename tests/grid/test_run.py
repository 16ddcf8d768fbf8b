"""Running a grid: resumed cells, worker processes, warm starts on the cell's thread count."""

from __future__ import annotations

import shutil

import yaml

from tests.grid._grids import write_grid
from v05.grid.cells import grid_cells
from v05.grid.run import bench_matrix
from v05.grid.spec import load_grid
from v05.grid.store import cell_state
from v05.train.config import load_config


def test_an_interrupted_cell_resumes_exactly(tmp_path, tiny_grid):
    """A cell with a checkpoint and no final/ is resumed, not restarted, and ends with the rows of the run that was
    never interrupted (the grid resumes through the trainer's exact resume); a cell stopped before its first
    checkpoint (its config and an empty metrics file written) is trained from the start, not failed as "already
    holds a run"."""
    from tests.train._rows import comparable, rows_of  # noqa: PLC0415
    from v05.train.loop import train  # noqa: PLC0415
    from v05.train.rundir import latest_checkpoint  # noqa: PLC0415

    body = yaml.safe_load(tiny_grid.read_text())
    body["overrides"].append("run.checkpoint_every=1")
    body["methods"] = {"grpo4": "demo-grpo4"}
    body["seeds"], body["tasks"] = [0], {"tiny-easy": {"regime": "easy"}}
    grid_file = write_grid(tiny_grid, body)
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

    shutil.rmtree(cell.run_dir / "final")
    shutil.rmtree(cell.run_dir / "checkpoints")
    (cell.run_dir / "metrics.jsonl").write_text("")  # as if killed during the first eval
    assert cell_state(cell) == "new"
    res = bench_matrix(grid_file, out, progress=False)
    assert res["failures"] == {} and cell_state(cell) == "done"
    assert [comparable(r) for r in load_run(cell.run_dir).metrics] == full


def test_parallel_workers_train_the_same_cells(tmp_path, tiny_grid):
    """`--workers 2` (each cell in a spawned process) gives the rows `--workers 1` gives, cell by cell."""
    from tests.train._rows import comparable, rows_of  # noqa: PLC0415

    body = yaml.safe_load(tiny_grid.read_text())
    body["seeds"], body["tasks"] = [0], {"tiny-easy": {"regime": "easy"}}
    body["methods"] = {"grpo4": "demo-grpo4", "rloo": "demo-rloo"}
    grid_file = write_grid(tiny_grid, body)
    one = bench_matrix(grid_file, tmp_path / "one", progress=False)
    two = bench_matrix(grid_file, tmp_path / "two", workers=2, progress=False)
    assert one["failures"] == two["failures"] == {}
    for method in ("grpo4", "rloo"):
        a, b = (rows_of(tmp_path / d / "tiny-easy" / f"{method}-s0") for d in ("one", "two"))
        assert [comparable(r) for r in a] == [comparable(r) for r in b] and len(a) > 1
    assert two["results"]["tasks"]["tiny-easy"]["methods"]["rloo"]["final_mean"] == (
        one["results"]["tasks"]["tiny-easy"]["methods"]["rloo"]["final_mean"]
    )


def test_a_grid_warm_start_trains_on_the_cells_thread_count(monkeypatch):
    """A warm start in a grid worker runs beside another worker: it uses run.threads (1), not torch's default of
    every core (oversubscribed, the SFT ran ~8x slower)."""
    import torch  # noqa: PLC0415

    import v05.grid.run as run  # noqa: PLC0415

    seen = []
    monkeypatch.setattr(run, "ensure_warm_start", lambda cfg, progress: seen.append(torch.get_num_threads()) or "w")
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        run._warm(load_config("demo-grpo4", ["run.threads=1"]))
    finally:
        torch.set_num_threads(before)
    assert seen == [1]
