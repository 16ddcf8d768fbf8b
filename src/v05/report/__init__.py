"""``v05 report``: compare training runs written by ``v05 train`` at equal rollouts consumed.

- :mod:`v05.report.runs`: load run directories, group seeds by method, mean ± SE curves, rollouts to a target,
  the summary table.
- :mod:`v05.report.plots`: the PNG figures (matplotlib, Agg).
- :mod:`v05.report.html`: the self-contained ``report.html``, ``summary.json`` and the terminal table.
"""

from __future__ import annotations

from v05.report.html import render_table, write_report
from v05.report.runs import (
    Curve,
    Reach,
    Run,
    default_reference,
    find_run_dirs,
    group_runs,
    load_run,
    load_runs,
    mean_curve,
    moving_average,
    rollouts_to_reach,
    summary_table,
)

__all__ = [
    "Curve",
    "Reach",
    "Run",
    "default_reference",
    "find_run_dirs",
    "group_runs",
    "load_run",
    "load_runs",
    "mean_curve",
    "moving_average",
    "render_table",
    "rollouts_to_reach",
    "summary_table",
    "write_report",
]
