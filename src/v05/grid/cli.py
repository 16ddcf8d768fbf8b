"""``v05 bench matrix``: the parser and its entry (registration is torch-free; the grid imports torch when it runs)."""

from __future__ import annotations

import argparse
from pathlib import Path

from v05.train.cli import require_trainer


def register_bench(bsub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``v05 bench matrix`` to the ``v05 bench`` subcommands."""
    mx = bsub.add_parser(
        "matrix",
        help="every method of a grid × task settings × seeds at one budget: report + JSON",
        description="Train a declared grid (benchmarks/grids/*.yaml) of task settings × methods × "
        "seeds at one budget per task (finished cells reused, interrupted ones resumed) and write "
        "OUT/index.html, a report per task, OUT/matrix.json and, if asked, --json and --doc.",
    )
    mx.add_argument("grid", help="the grid file, e.g. benchmarks/grids/standard.yaml")
    mx.add_argument("--out", default=None, help="folder of the cells and the report (default runs/matrix-GRIDNAME)")
    mx.add_argument("--json", help="also write the results JSON here")
    mx.add_argument("--doc", help="write the results page (markdown, e.g. docs/results.md)")
    mx.add_argument(
        "--readme", help="replace the generated section between its markers in this file (docs/results-summary.md)"
    )
    mx.add_argument("--quick", action="store_true", help="the grid's smoke version (quick methods/seeds, tiny runs)")
    mx.add_argument("--workers", type=int, default=1, help="cells trained at once, one process each (default 1)")
    mx.add_argument("--tasks", default="", help="only these task settings (comma-separated): run the grid in parts")
    mx.add_argument("--report-only", action="store_true",
                    help="train nothing; report the finished cells, each restored one checked first (its "
                         "metrics complete, its config the grid's, its warm-start digest the cached or stored "
                         "one's)")  # fmt: skip
    mx.add_argument("--store", default=None,
                    help="keep finished cells here and resume from them on another machine (default: the grid's "
                         "store:, none for --quick); 'none' keeps nothing")  # fmt: skip
    mx.add_argument("--recommended", default=None,
                    help="write the tuning sweep's pick (tuning.recommend) here as a config, once the sweep has "
                         "finished (e.g. src/v05/train/configs/v05-recommended.yaml)")  # fmt: skip
    mx.set_defaults(func=_run_matrix)


def _run_matrix(args: argparse.Namespace) -> int:
    require_trainer()
    from v05.grid import render, run  # noqa: PLC0415 (the [train] extra: the grid trains its cells with the trainer)

    if args.workers < 1:
        raise ValueError(f"--workers must be >= 1, got {args.workers}")
    out = args.out or f"runs/matrix-{Path(args.grid).stem}{'-quick' if args.quick else ''}"
    command = " ".join(["v05 bench matrix", args.grid, *(["--quick"] if args.quick else []),
                        *(f"--{k} {v}" for k, v in (("json", args.json), ("doc", args.doc),
                                                    ("recommended", args.recommended)) if v)])  # fmt: skip
    res = run.bench_matrix(args.grid, out, quick=args.quick, workers=args.workers, json_path=args.json, doc=args.doc,
                           readme=args.readme, command=command, train_cells=not args.report_only,
                           tasks=[t for t in args.tasks.split(",") if t], store=args.store,
                           recommended=args.recommended)  # fmt: skip
    for name, task in res["results"]["tasks"].items():  # the CLI's output: one line per method and task
        print(f"{name} ({task['regime']}, warm start {task['warm_start_eval']:.3f}, ref {task['reference']}):")
        for row in render.headline_rows(task):
            print("  " + " | ".join(row))
    if res["report"] is not None:
        print(f"report: {res['report']}")
    for label, err in res["failures"].items():
        print(f"FAILED {label}: {err}")
    return 1 if res["failures"] else 0


__all__ = ["register_bench"]
