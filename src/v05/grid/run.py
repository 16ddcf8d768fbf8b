"""Running a grid: train the unfinished cells (in worker processes), then write the JSON, the report and the pages.

:func:`bench_matrix` is ``v05 bench matrix``: it loads the grid, runs the tuning sweep first (it picks each tuned
method's setting), then the comparison's cells, and writes ``OUT/matrix.json``, ``OUT/index.html`` and, if asked,
``--json``, ``--doc``, ``--readme`` and ``--recommended``. :func:`run_grid` trains the cells that are not finished
(warm starts first, one per distinct warm start; the store's cells restored rather than trained), one at a time or
in ``workers`` spawned processes (one torch thread each); an interrupt (Ctrl-C, SIGTERM) stops the grid with every
started cell checkpointed, so re-running it resumes.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import os
import signal
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from v05.grid.cells import Cell, grid_cells, tuning_cells
from v05.grid.render import readme_section, replace_readme_section, results_markdown, write_matrix_report
from v05.grid.results import matrix_results, run_meta
from v05.grid.selection import headroom_rows, plot_headroom
from v05.grid.spec import load_grid
from v05.grid.store import (
    cell_state,
    keep_warm_starts,
    restore_cells,
    restore_warm_starts,
    store_cell,
    verify_stored,
)
from v05.grid.tuning import choose_settings, picks, recommendation, recommended_yaml
from v05.train.config import TrainConfig
from v05.train.loop import train
from v05.train.policy import set_cpu_threads
from v05.train.warmstart import ensure_warm_start, warm_start_dir

logger = logging.getLogger(__name__)

RESULTS_NAME = "matrix.json"
"""The results JSON in the grid's ``--out`` folder."""


def _run_cell(cfg: TrainConfig, run_dir: str, resume: bool) -> tuple[str, bool]:
    """Train one cell (in this process or a worker); returns (run_dir, interrupted)."""
    result = train(cfg, Path(run_dir), resume=resume)
    return run_dir, result.interrupted


def _warm(cfg: TrainConfig) -> str:
    # the cell's thread count (1): torch's default, every core, beside another worker made the SFT ~8x slower
    set_cpu_threads(cfg.run.threads)
    return str(ensure_warm_start(cfg, progress=False))


def run_grid(
    cells: Sequence[Cell], *, workers: int = 1, progress: bool = True, store: Path | None = None
) -> dict[str, str]:
    """Train every cell that is not finished; returns {run_dir: error} for the cells that failed.

    Warm starts are taken from ``store`` where this machine lacks them, else trained (one per distinct warm start,
    so parallel cells never train the same one) and kept there; then the cells found in ``store`` are restored
    (:func:`v05.grid.store.restore_cells`), then the rest are trained, each kept in ``store`` as it finishes; with
    ``workers`` > 1 each cell runs in a fresh spawned process. A failing cell is logged and skipped (its error
    returned); an interrupt stops the grid with every started cell checkpointed.
    """
    states = {c.run_dir: cell_state(c) for c in cells}
    todo = [c for c in cells if states[c.run_dir] != "done"]
    logger.info("grid: %d cells, %d finished, %d to run", len(cells), len(cells) - len(todo), len(todo))
    warm = {warm_start_dir(c.cfg): c.cfg for c in todo if c.cfg.warmup.enabled}
    if store is not None:
        restore_warm_starts(warm, store)
    missing = [cfg for d, cfg in warm.items() if not (d / "sft.json").is_file()]
    failures: dict[str, str] = {}
    bar = tqdm(total=len(missing) + len(todo), desc="grid", unit="run", disable=not progress, dynamic_ncols=True)
    jobs = [(_warm, (cfg,), f"warm start {warm_start_dir(cfg).name}") for cfg in missing]
    try:
        _execute(jobs, workers, bar, failures)
        if store is not None:
            keep_warm_starts(warm, store)
            n = restore_cells(todo, store)
            logger.info("grid: %d cells restored from %s", n, store)
            bar.update(n)
            todo = [c for c in todo if cell_state(c) != "done"]
        by_dir = {str(c.run_dir): c for c in todo}
        # a started cell resumes: from its checkpoint, or (stopped before its first one) the trainer starts it over
        cell_jobs = [(_run_cell, (c.cfg, str(c.run_dir), _started(c)), str(c.run_dir)) for c in todo]
        _execute(cell_jobs, workers, bar, failures, on_done=None if store is None else (
            lambda label: store_cell(by_dir[label], store)))  # fmt: skip
    finally:
        bar.close()
    return failures


def _started(cell: Cell) -> bool:
    """Whether an unfinished cell's run directory holds a run of its config (cell_state refused any other)."""
    return (cell.run_dir / "config.yaml").is_file()


def _execute(
    jobs: list[tuple[Any, tuple[Any, ...], str]], workers: int, bar: Any, failures: dict[str, str],
    on_done: Any = None,
) -> None:  # fmt: skip
    def done(label: str, result: Any) -> None:
        if isinstance(result, tuple) and result[1]:
            raise KeyboardInterrupt(f"{label} interrupted (checkpoint saved; re-run the grid to resume)")
        if on_done is not None:
            on_done(label)
        bar.update(1)
        bar.set_postfix_str(Path(label).name if "/" in label else label)

    if workers <= 1:
        for fn, args, label in jobs:
            try:
                done(label, fn(*args))
            except (ValueError, RuntimeError, OSError) as err:
                logger.error("%s failed: %s", label, err)
                failures[label] = f"{type(err).__name__}: {err}"
                bar.update(1)
        return
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"), max_tasks_per_child=1)
    futures: dict[Any, str] = {}
    previous = signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM stops the grid as Ctrl-C does
    try:
        # submitted lazily, at most `workers` in flight: an interrupt then has no queued job that would still start
        pending = iter(jobs)
        for fn, args, label in itertools.islice(pending, workers):
            futures[pool.submit(fn, *args)] = label
        while futures:
            finished, _ = wait(futures, return_when=FIRST_COMPLETED)
            for future in finished:
                label = futures.pop(future)
                try:
                    done(label, future.result())
                except (ValueError, RuntimeError, OSError) as err:
                    logger.error("%s failed: %s", label, err)
                    failures[label] = f"{type(err).__name__}: {err}"
                    bar.update(1)
                for fn, args, label in itertools.islice(pending, 1):
                    futures[pool.submit(fn, *args)] = label
    except BaseException:
        # interrupted: start nothing new, let the running cells checkpoint (SIGINT: the trainer saves and stops)
        for future in futures:
            future.cancel()
        for proc in list(getattr(pool, "_processes", {}).values()):
            if proc.is_alive():
                os.kill(proc.pid, signal.SIGINT)
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    pool.shutdown(wait=True)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def bench_matrix(
    grid_path: str | Path,
    out: str | Path,
    *,
    quick: bool = False,
    workers: int = 1,
    json_path: str | Path | None = None,
    doc: str | Path | None = None,
    readme: str | Path | None = None,
    command: str = "",
    train_cells: bool = True,
    progress: bool = True,
    tasks: Sequence[str] | None = None,
    store: str | Path | None = None,
    recommended: str | Path | None = None,
) -> dict[str, Any]:
    """Run a grid (finished cells reused) and write the report, the JSON and, if asked, ``doc`` and the README section.

    ``tasks`` restricts the run (and the results) to some task settings: the grid can run in parts. ``store``
    (default: the grid's ``store:``; ``"none"``: no store) keeps every finished cell and restores the ones this
    ``out`` lacks, so that parts can run on fresh machines (:func:`v05.grid.store.restore_cells`). Without
    ``train_cells`` (``--report-only``) every restored cell is checked first (:func:`v05.grid.store.verify_stored`:
    complete, of its config, from the warm start it pairs on). ``recommended``:
    where to write the recommended configuration (:func:`v05.grid.tuning.recommended_yaml`) once the tuning sweep
    has picked it.

    Returns:
        ``{"results": the contract JSON, "failures": {run_dir: error}, "meta": ..., "report": index.html}``.
    """
    start = time.monotonic()
    grid = load_grid(grid_path)
    if quick:
        grid = grid.for_quick()
    if tasks:
        unknown = sorted(set(tasks) - {t.name for t in grid.tasks})
        if unknown:
            raise ValueError(
                f"--tasks: unknown task setting(s) {', '.join(unknown)}; the grid has "
                f"{', '.join(t.name for t in grid.tasks)}"
            )
        left_out = [t.name for t in grid.tasks if t.name not in tasks]
        grid = dataclasses.replace(grid, tasks=tuple(t for t in grid.tasks if t.name in tasks))
    else:
        left_out = []
    out = Path(out)
    kept = grid.store if store is None else None if str(store) == "none" else Path(store)
    failures: dict[str, str] = {}

    def run(batch: list[Cell]) -> None:
        if train_cells:
            failures.update(run_grid(batch, workers=workers, progress=progress, store=kept))
            return
        if kept is not None:
            restore_cells(batch, kept)
        verify_stored(batch, kept)  # a report only: every restored cell complete, and from the warm start it pairs on

    tune = tuning_cells(grid, out, quick=quick)  # the equal tuning budget first: it picks the tuned settings
    run(tune)
    choices, picked = choose_settings(grid, tune), picks(grid, tune)  # the selection grid's picks, by the same rule
    cells = grid_cells(grid, out, quick=quick, choices=choices, picked=picked)
    run(cells)
    results = matrix_results(grid, cells, tune, store=kept)
    results["recommended"] = recommendation(grid, tune)
    results["picks"] = picked
    meta = run_meta(command or f"v05 bench matrix {grid_path}", [*tune, *cells], time.monotonic() - start)
    meta["tuning_pending"] = sorted(f"{t}/{m}" for (t, m), v in choices.items() if v is None)
    meta["tasks_left_out"] = left_out  # the grid's task settings that --tasks left out of this report
    results["meta"] = meta
    results["failures"] = failures
    out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(results, indent=2, allow_nan=False) + "\n"
    (out / RESULTS_NAME).write_text(text, encoding="utf-8")
    if json_path is not None:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(text, encoding="utf-8")
    report = write_matrix_report(grid, cells, results, out, meta=meta) if results["tasks"] else None
    if doc is not None:
        figure = plot_headroom(headroom_rows(results), Path(doc).with_name(f"{Path(doc).stem}-headroom.png"))
        text = results_markdown(grid, results, meta, figure=None if figure is None else figure.name)
        Path(doc).write_text(text, encoding="utf-8")
    if recommended is not None and results["recommended"] is not None:
        Path(recommended).write_text(recommended_yaml(grid, results["recommended"], meta["command"]), encoding="utf-8")
    if readme is not None:
        target = Path(doc) if doc else Path("docs/results.md")  # the link is relative to the file it goes into
        link = Path(os.path.relpath(target.resolve(), Path(readme).resolve().parent)).as_posix()
        replace_readme_section(Path(readme), readme_section(results, meta, link))
    return {"results": results, "failures": failures, "meta": meta, "report": report}


__all__ = ["RESULTS_NAME", "bench_matrix", "run_grid"]
