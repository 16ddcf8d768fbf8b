"""The comparison report: ``report.html`` (self-contained), ``summary.json``, the PNGs, and the terminal table.

The HTML embeds every figure as a base64 data URI so the file can be moved or mailed alone; every string taken
from a run (names, paths, config values) is escaped with :func:`html.escape`.
"""

from __future__ import annotations

import base64
import datetime
import html
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from v05.report.plots import Plot, write_plots
from v05.report.runs import Run, group_runs, summary_table

REPORT_NAME = "report.html"
SUMMARY_NAME = "summary.json"
MIN_SEEDS = 3
"""Seeds per method the protocol asks for (docs/design.md, "How comparisons are made")."""

PROTOCOL = (
    "Equal rollouts consumed is the budget and the x-axis: every method is compared at the same number of sampled "
    "rollouts, not at the same number of steps. GRPO at the same k as V0.5's k_init is shown beside GRPO at k = 16 "
    "(at equal rollouts the smaller group is the stronger baseline). Every number is the mean ± standard error "
    "(std(ddof=1)/√n) over seeds; curves are interpolated linearly onto a common grid inside the range every seed "
    "covers. \u201cTo target\u201d is the rollouts at which the linearly interpolated eval curve first reaches the "
    "target, averaged over the seeds that reach it (n/N), and \u201c÷ ref\u201d divides it by the reference's "
    "(< 1: fewer rollouts); \u201ccompute ÷ ref\u201d is the same ratio in this trainer's token-passes (policy, "
    "critic, reference and probe forwards count 1 per token, backwards 2): equal rollouts is not equal compute. "
    "\u201cuser compute ÷ ref\u201d is the ratio in the token-passes a TRL or verl user would pay for the same "
    "rollouts: every rollout's prompt through every update pass (this trainer runs a group's prompt once), and "
    "prefill shared within a group, as vLLM's prefix cache does (\u2014 for runs that do not log it)."
)

CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
table { border-collapse: collapse; font-size: 0.9em; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; }
th { background: #f0f0f0; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.reference { font-weight: bold; } figure { margin: 2em 0; } figure img { max-width: 100%; }
p.note, li.skipped { color: #8a5a00; } code { font-size: 0.95em; }
"""

# (row key, header, kind): kind fixes the number format
COLUMNS = (
    ("seeds", "seeds", "int"),
    ("final_eval", "final eval", "rate±"),
    ("best_eval", "best eval", "rate±"),
    ("rollouts_total", "rollouts", "count"),
    ("reach_rollouts", "to target", "count±"),
    ("reach_n", "reached", "reach"),
    ("reach_ratio", "÷ ref", "ratio"),
    ("reach_compute_ratio", "compute ÷ ref", "ratio"),
    ("reach_compute_user_ratio", "user compute ÷ ref", "ratio"),
    ("rollouts_per_prompt", "k / prompt", "float2"),
    ("zero_adv_frac", "zero-A", "rate"),
    ("all_equal_frac", "all-equal", "rate"),
    ("final_grad_norm", "grad norm", "float3"),
    ("final_entropy", "entropy", "float3"),
)


def _fmt(row: dict[str, Any], key: str, kind: str) -> str:
    value = row[key]
    if kind == "reach":
        return f"{row['reach_n']}/{row['seeds']}" if row["target"] is not None else "—"
    if value is None:
        return "—"
    if kind == "int":
        return str(value)
    if kind == "count":
        return f"{value:,.0f}"
    if kind == "count±":
        return f"{value:,.0f} ± {row[key + '_se']:,.0f}"
    if kind == "rate±":
        return f"{value:.3f} ± {row[key + '_se']:.3f}"
    if kind == "rate":
        return f"{value:.3f}"
    if kind == "ratio":
        return f"{value:.2f}×"
    return f"{value:.{int(kind[-1])}f}"


def _heading(summary: Sequence[dict[str, Any]]) -> str:
    row = summary[0]
    target = "none (the reference logs no eval)" if row["target"] is None else f"{row['target']:.3f}"
    return f"reference {row['reference']}, target eval pass rate {target}"


def render_table(summary: Sequence[dict[str, Any]], *, width: int = 190) -> str:
    """The summary as a plain-text table for the terminal (the reference row is marked with *).

    Args:
        summary: rows from :func:`v05.report.runs.summary_table`.
        width: console width in characters.

    Returns:
        The table as a string (no colour codes); the caller prints it.
    """
    if not summary:
        raise ValueError("empty summary: nothing to render")
    table = Table(title=f"v05 report — {_heading(summary)}", header_style="bold", pad_edge=False)
    table.add_column("method", justify="left", no_wrap=True)
    for _, header, _ in COLUMNS:
        table.add_column(header, justify="right", no_wrap=True)
    for row in summary:
        mark = " *" if row["is_reference"] else ""
        table.add_row(row["method"] + mark, *(_fmt(row, key, kind) for key, _, kind in COLUMNS))
    console = Console(file=io.StringIO(), width=width, color_system=None, force_terminal=False)
    console.print(table)
    return console.file.getvalue()  # type: ignore[attr-defined]


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _summary_html(summary: Sequence[dict[str, Any]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in ("method", *(h for _, h, _ in COLUMNS)))
    body = []
    for row in summary:
        cls = ' class="reference"' if row["is_reference"] else ""
        cells = "".join(f'<td class="num">{_e(_fmt(row, key, kind))}</td>' for key, _, kind in COLUMNS)
        ref = " (reference)" if row["is_reference"] else ""
        body.append(f"<tr{cls}><td>{_e(row['method'] + ref)}</td>{cells}</tr>")
    return f'<table class="summary"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _plots_html(plots: Sequence[Plot]) -> str:
    parts, skipped = [], []
    for plot in plots:
        if plot.path is None:
            skipped.append(f'<li class="skipped"><code>{_e(plot.filename)}</code>: {_e("; ".join(plot.notes))}</li>')
            continue
        data = base64.b64encode(plot.path.read_bytes()).decode("ascii")
        notes = "".join(f'<p class="note">{_e(n)}</p>' for n in plot.notes)
        parts.append(
            f'<figure id="{_e(plot.filename)}"><h3>{_e(plot.title)}</h3>'
            f'<img alt="{_e(plot.title)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{_e(plot.caption)} <code>{_e(plot.filename)}</code></figcaption>{notes}</figure>"
        )
    if skipped:
        parts.append(f"<h3>Figures not drawn</h3><ul>{''.join(skipped)}</ul>")
    return "".join(parts)


RUN_FIELDS = ("estimator.name", "allocator.name", "prior.name")


def _runs_html(runs: Sequence[Run]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in ("method", "seed", *RUN_FIELDS, "steps", "rollouts", "path"))
    body = []
    for run in runs:
        rollouts = run.last("rollouts_total")
        cells = [
            run.name,
            "—" if run.seed is None else run.seed,
            *("—" if run.config_value(f) is None else run.config_value(f) for f in RUN_FIELDS),
            f"{len(run.metrics)} (last {run.metrics[-1]['step']})",
            "—" if rollouts is None else f"{rollouts:,.0f}",
        ]
        tds = "".join(f"<td>{_e(c)}</td>" for c in cells)
        body.append(f"<tr>{tds}<td><code>{_e(run.path)}</code></td></tr>")
    return f'<table class="runs"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _protocol_notes(groups: dict[str, list[Run]]) -> list[str]:
    notes = []
    few = [f"{name} ({len(runs)})" for name, runs in groups.items() if len(runs) < MIN_SEEDS]
    if few:
        notes.append(f"Fewer than {MIN_SEEDS} seeds: {', '.join(few)}.")
    grpo = [name for name in groups if name.lower().startswith("grpo")]
    if not grpo:
        notes.append("No GRPO baseline among these runs (no method name starts with 'grpo').")
    elif len(grpo) == 1:
        notes.append(f"Only one GRPO group ({grpo[0]}): the protocol shows GRPO at k_init beside GRPO at k = 16.")
    return notes


def write_report(
    runs: Sequence[Run],
    out_dir: str | Path,
    *,
    target: float | None = None,
    reference: str | None = None,
    title: str | None = None,
) -> Path:
    """Write ``report.html``, ``summary.json`` and the PNGs comparing ``runs`` (seeds grouped by method name).

    Args:
        runs: loaded runs (:func:`v05.report.runs.load_runs`).
        out_dir: output directory (created if needed).
        target: eval pass rate to reach; default: the reference's final eval pass rate.
        reference: method to compare against; default: the best GRPO group, else the first method.
        title: page title; default names the methods.

    Returns:
        The path of ``report.html``.

    Raises:
        ValueError: no runs, an unknown reference, or a target outside [0, 1].
    """
    groups = group_runs(runs)
    summary = summary_table(groups, target=target, reference=reference)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / SUMMARY_NAME).write_text(json.dumps(summary, indent=2, allow_nan=False) + "\n")
    plots = write_plots(groups, out, target=summary[0]["target"])
    title = title or f"v05 report: {', '.join(groups)}"
    stamp = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    notes = "".join(f'<p class="note">{_e(n)}</p>' for n in _protocol_notes(groups))
    page = (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
        f"<style>{CSS}</style></head><body>"
        f"<h1>{_e(title)}</h1><p>{_e(len(runs))} runs of {_e(len(groups))} methods; generated {_e(stamp)} by "
        f"<code>v05 report</code>.</p>"
        f'<h2>Protocol</h2><p class="protocol">{_e(PROTOCOL)}</p>{notes}'
        f"<h2>Summary</h2><p>{_e(_heading(summary))}.</p>{_summary_html(summary)}"
        f"<h2>Figures</h2>{_plots_html(plots)}"
        f"<h2>Runs</h2>{_runs_html(runs)}"
        "</body></html>\n"
    )
    path = out / REPORT_NAME
    path.write_text(page, encoding="utf-8")
    return path


__all__ = ["REPORT_NAME", "SUMMARY_NAME", "render_table", "write_report"]
