"""``v05 report``: compare training runs (seeds grouped by method) in a self-contained HTML page.

Thin: argv → run directories (:func:`~v05.report.runs.find_run_dirs`) → :func:`~v05.report.runs.load_runs` →
:func:`~v05.report.html.write_report`; prints the path of ``report.html`` and the summary table. Bad input raises
``ValueError``, which ``v05.cli.main`` turns into a one-line error and exit 2.
"""

from __future__ import annotations

import argparse
import math

from v05.report.html import REPORT_NAME, SUMMARY_NAME, render_table, write_report
from v05.report.runs import find_run_dirs, group_runs, load_runs, summary_table


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``report`` subcommand."""
    p = subparsers.add_parser(
        "report",
        help="compare training runs: eval pass rate vs rollouts consumed, mean ± SE over seeds, as HTML",
        description=(
            "Compare `v05 train` run directories. Runs with the same config name are seeds of one method. "
            f"Writes {REPORT_NAME} (figures embedded), {SUMMARY_NAME} and the PNGs to --out, and prints the "
            "summary table. Equal rollouts consumed is the x-axis."
        ),
    )
    p.add_argument(
        "runs",
        nargs="+",
        metavar="RUN_DIR",
        help="a run directory (holding metrics.jsonl), or a directory whose subdirectories are run directories",
    )
    p.add_argument("--out", metavar="DIR", required=True, help="output directory")
    p.add_argument(
        "--target",
        type=float,
        default=None,
        metavar="P",
        help="eval pass rate to reach, in [0, 1] (default: the reference's final eval pass rate)",
    )
    p.add_argument(
        "--reference",
        metavar="NAME",
        default=None,
        help="method to compare against (default: the GRPO method with the higher final eval, else the first)",
    )
    p.add_argument("--title", metavar="STR", default=None, help="page title (default: names the methods)")
    p.set_defaults(func=run_report)


def run_report(args: argparse.Namespace) -> int:
    """Run ``v05 report``; returns the exit code."""
    if args.target is not None and not (math.isfinite(args.target) and 0.0 <= args.target <= 1.0):
        raise ValueError(f"--target must be an eval pass rate in [0, 1], got {args.target}")
    runs = load_runs(find_run_dirs(args.runs))
    path = write_report(runs, args.out, target=args.target, reference=args.reference, title=args.title)
    summary = summary_table(group_runs(runs), target=args.target, reference=args.reference)
    print(render_table(summary), end="")
    print(f"wrote {path}")
    return 0


__all__ = ["register", "run_report"]
