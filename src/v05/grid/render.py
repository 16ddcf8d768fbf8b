"""The grid's pages: the headline tables, ``OUT/index.html``, the results page (``--doc``) and the README section.

Every page is written from the results JSON (:func:`v05.grid.results.matrix_results`), never from the runs again:
:func:`markdown_table` (one task setting's headline table), :func:`write_matrix_report` (``OUT/index.html`` and a
report with the figures per task setting), :func:`results_markdown` (``docs/results.md``: hardware, wall time and
command, the protocol, the methods, a table per task setting, the attribution and tuning tables, the paper's claims)
and :func:`readme_section` (the headline tables between the README's markers). A method absent from a task setting
(not finished, or not run there: ``tasks:``) is left out of that setting's tables and claims.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from v05.grid import lead
from v05.grid import selection as sel
from v05.grid.cells import Cell
from v05.grid.spec import Grid
from v05.grid.store import is_finished
from v05.grid.text import ci_text, fmt, points, ratio
from v05.grid.tuning import RECOMMEND_RULE
from v05.report.html import write_report
from v05.report.runs import load_run


def _k_text(k: float | None) -> str:
    if k is None:
        return "—"
    return str(round(k)) if abs(k - round(k)) < 0.005 else f"{k:.2f}"


def tuned_any(task: dict[str, Any]) -> bool:
    """Whether some method of the task setting was compared at a tuned setting (then the others ran untuned)."""
    return any(m.get("setting") for m in task["methods"].values())


def ran_text(m: dict[str, Any], tuned: bool) -> str:
    """What a method's cells ran: ``k × prompts a step``, its tuning setting or ``untuned`` where the grid tunes.

    k is the measured rollouts per prompt, the prompts the cells' ``train.batch_size``, an offline init's rollouts
    (``init_rollouts``, on every ratio's axis) named; ``—`` where the JSON predates ``ran``.
    """
    r = m.get("ran")
    if not r:
        return "—"
    b, k = r.get("prompts_per_step"), m.get("rollouts_per_prompt")
    b = "/".join(map(str, b)) if isinstance(b, list) else b
    size = f"{b} prompts" if k is None else f"{_k_text(k)} × {b}"
    if m.get("init_rollouts"):
        size += f" after an init of {m['init_rollouts']:,.0f} rollouts (counted)"
    if m.get("setting"):
        return f"{size}, tuned: {m['setting']}"
    return f"{size}, untuned" if tuned else size


def untuned_note(task: dict[str, Any]) -> list[str]:
    """A line under a table that compares untuned methods with tuned ones (none where nothing was tuned)."""
    if not tuned_any(task):
        return []
    tuned = [n for n, m in task["methods"].items() if m.get("setting")]
    untuned = [n for n, m in task["methods"].items() if not m.get("setting")]
    if not untuned:
        return []
    return [
        f"Tuned: {', '.join(f'`{n}`' for n in tuned)} (each at its best setting of the sweep). Untuned, their configs "
        f"as they are: {', '.join(f'`{n}`' for n in untuned)}; each difference between an untuned and a tuned "
        "method (the reference among them) also holds the tuning's share.",
        "",
    ]


def headline_rows(task: dict[str, Any]) -> list[list[str]]:
    """One row per method: final ± CI, paired difference, the three ratios, grad norm, entropy, k, what ran."""
    rows = []
    tuned = tuned_any(task)
    for name, m in task["methods"].items():
        ci = m["final_ci95"]
        final = f"{fmt(m['final_mean'])} [{fmt(ci[0])}, {fmt(ci[1])}]" if ci else fmt(m["final_mean"])
        rows.append(
            [
                name + (" (ref)" if name == task["reference"] else ""),
                m["family"],
                str(len(m["seeds"])),
                final,
                points(m["paired_diff_mean"], m.get("paired_diff_ci95"), m["paired_diff_se"]),
                f"{ratio(m['rollout_ratio'])} {ci_text(m['rollout_ratio_ci95'])}"
                if "rollout_ratio_ci95" in m
                else ratio(m["rollout_ratio"]),
                f"{ratio(m['rollout_ratio_gain90'])} {ci_text(m['rollout_ratio_gain90_ci95'])}",
                f"{ratio(m.get('rollout_ratio_tail10'))} {ci_text(m.get('rollout_ratio_tail10_ci95'))}",
                ratio(m["compute_ratio"]),
                ratio(m.get("compute_ratio_user")) + _RECOUNT_MARK.get(m.get("compute_user_recount") or "", ""),
                fmt(m["grad_norm_mean"]),
                fmt(m["entropy_final"]),
                fmt(m["rollouts_per_prompt"], ".2f"),
                ran_text(m, tuned),
            ]
        )
    return rows


HEADLINE_COLUMNS = (
    "method",
    "family",
    "seeds",
    "final [95% CI]",
    "paired Δ, points [95% CI]",
    "rollouts ÷ ref to its final [95% CI]",
    "… to 90% of its gain [95% CI]",
    "… to its last-10% mean [95% CI]",
    "compute ÷ ref (this trainer)",
    "compute ÷ ref (TRL/verl user)",
    "grad norm",
    "entropy (final)",
    "k/prompt",
    "ran: k × prompts a step",
)


_RECOUNT_MARK = {"approx": "≈", "exact": ""}
"""Appended to a user compute ratio recounted from older cells' parts: ``≈`` where the groups varied in size."""


def markdown_table(task: dict[str, Any]) -> str:
    """The headline table of one task as GitHub markdown."""
    lines = ["| " + " | ".join(HEADLINE_COLUMNS) + " |", "|" + "---|" * len(HEADLINE_COLUMNS)]
    lines += ["| " + " | ".join(r) + " |" for r in headline_rows(task)]
    return "\n".join(lines)


def write_matrix_report(
    grid: Grid, cells: Sequence[Cell], results: dict[str, Any], out: Path, *, meta: dict[str, Any]
) -> Path:
    """Per task ``OUT/TASK/report/`` (report.html, summary.json, PNGs) and ``OUT/index.html`` with every table."""
    parts = []
    for name, task in results["tasks"].items():
        runs = [load_run(c.run_dir) for c in cells if c.task.name == name and is_finished(c)]
        report = write_report(
            runs,
            out / name / "report",
            reference=task["reference"],
            title=f"v05 bench matrix {grid.name}: {name} ({task['regime']})",
        )
        head = "".join(f"<th>{html.escape(h)}</th>" for h in HEADLINE_COLUMNS)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in headline_rows(task)
        )
        parts.append(
            f"<h2>{html.escape(name)} ({task['regime']})</h2><p>warm start {task['warm_start_eval']:.3f}, reference "
            f"{html.escape(task['reference'])} final {task['reference_final']:.3f}, 90 % threshold "
            f"{task['gain90_threshold']:.3f}, budget {task['budget_rollouts']:,} rollouts. "
            f'<a href="{html.escape(str(report.relative_to(out)))}">curves and figures</a></p>'
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
            + "".join(f"<p>{html.escape(line)}</p>" for line in untuned_note(task) if line)
        )
    page = (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>v05 bench matrix {html.escape(grid.name)}'
        "</title><style>body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1400px}table{border-collapse:"
        "collapse;font-size:.85em}th,td{border:1px solid #ccc;padding:.3em .5em}th{background:#f0f0f0}</style></head>"
        f"<body><h1>v05 bench matrix: {html.escape(grid.name)}</h1><p><code>{html.escape(meta['command'])}</code>; "
        f"{html.escape(meta['hardware'])}; generated {html.escape(meta['generated'])}.</p>"
        f"{''.join(parts)}</body></html>\n"
    )
    path = out / "index.html"
    path.write_text(page, encoding="utf-8")
    return path


README_BEGIN = "<!-- v05 bench matrix: begin (generated; do not edit) -->"
README_END = "<!-- v05 bench matrix: end -->"

PROTOCOL_MD = (
    "Every method of a task setting starts from the same warm start per seed (the seed also fixes the prompt order), "
    "uses {optim} and stops at the same rollout budget; {tuned}. "
    "*final* is each seed's last eval pass rate (sampled, T = 1, the task's held-out split), mean "
    "and 95 % t-interval over seeds. *paired Δ* is eval − reference eval on the same seed, averaged over the common "
    "rollout grid (every eval), mean and 95 % t-interval over seeds, in points. *rollouts ÷ ref* is the rollouts the "
    "seed-mean curve needs to reach the reference's final, divided by the reference's own; the *90 % of its gain* "
    "column uses the threshold warm start + 0.9 × the reference's gain instead (off the plateau), and the *last-10 %* "
    "column the reference's mean over the last 10 % of its budget (a target a plateaued reference reaches before the "
    "end); each ratio has a paired percentile-bootstrap 95 % interval over seeds of the seed-mean crossing (not a "
    "t-interval; *never* where resamples never reach it). *compute ÷ ref* is the same crossing in token-passes (a "
    "forward of one token by one model counts 1, a backward 2): equal rollouts is not equal compute. *This trainer* "
    "counts a group's prompt once in the update (its shared-prefix forward) and every rollout's prompt in generation; "
    "*TRL/verl user* counts what they pay: every rollout's prompt through the update, each group's prompt prefilled "
    "once (vLLM's prefix cache); at k = 1 the two agree. Cells run before the user's count was logged are recounted "
    "from the parts they logged: exactly at a fixed k, and approximately (marked ≈: the step's mean group size, "
    "prompts of equal length) where the group size varied. grad norm is the mean over "
    "steps, entropy the last step's. *ran: k × prompts a step* is what the cells ran, read from them: the measured "
    "rollouts per prompt × their `train.batch_size`, and the tuning setting where the grid tunes."
)


def _lr_text(lr: float) -> str:
    mantissa, exponent = f"{lr:e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def _optim_one(lr: Any, schedule: Any, warmup: Any) -> str:
    lrs = lr if isinstance(lr, list) else [lr]
    decay = {"constant": "held constant", "cosine": "cosine-decayed to 0 over the rollout budget"}.get(
        schedule, f"schedule `{schedule}`"
    )
    return f"{' or '.join(_lr_text(v) for v in lrs)}, {decay} after {warmup} linear warm-up steps"


def optim_text(results: dict[str, Any] | None) -> str:
    """The learning rate and schedule the cells ran (each method's ``ran``), for the protocol paragraph.

    One wording where every cell ran the same; else the most common one first and each other with the cells that ran
    it. Without ``ran`` in the JSON (one written before it): the config's learning rate and schedule, unquoted.
    """
    combos: dict[str, list[tuple[str, str]]] = {}
    for task, t in (results or {}).get("tasks", {}).items():
        for name, m in t["methods"].items():
            if (r := m.get("ran")) and r.get("lr") is not None:
                text = _optim_one(r.get("lr"), r.get("schedule"), r.get("warmup_steps"))
                combos.setdefault(text, []).append((task, name))
    if not combos:
        return "the learning rate and schedule of its config"
    first, *others = sorted(combos, key=lambda c: -len(combos[c]))
    if not others:
        return f"the same learning rate ({first})"
    rest = "; ".join(f"{c} for {', '.join(f'`{n}` on {task}' for task, n in combos[c])}" for c in others)
    return f"the learning rate its cells ran ({first}; {rest})"


def protocol_markdown(grid: Grid, results: dict[str, Any] | None = None) -> str:
    """The results page's protocol paragraph.

    It gives the learning rate and schedule the cells ran (:func:`optim_text`) and, when the grid tunes, which methods
    were tuned, and how.
    """
    t = grid.tuning
    optim = optim_text(results)
    if t is None:
        return PROTOCOL_MD.format(optim=optim, tuned="no method was tuned")
    tuned = (
        f"except that {', '.join(f'`{m}`' for m in t.methods)} were tuned alike: each ran every setting of the sweep "
        f"({', '.join(f'`{s.name}`' for s in t.settings)}) on seed {t.seed}, which is not compared, and is compared "
        f"at the setting with the best tuning score (rule `{t.rule}`, scored on the {t.split} split, per task "
        "setting); the other methods ran their configs as they are, untuned, and are compared with tuned ones (the "
        "reference among them) all the same: each table marks them"
    )
    return PROTOCOL_MD.format(optim=optim, tuned=tuned)


def _m(task: dict[str, Any], name: str) -> dict[str, Any] | None:
    return task["methods"].get(name)


PAPER_METHODS = ("v05", "v05_paper")
"""Grid method names of the paper's V0.5 (test + OSLA) the claims read: the standard grid's, the evidence grid's."""


def _paper(task: dict[str, Any]) -> dict[str, Any] | None:
    """The task's run of the paper's V0.5 (the first of :data:`PAPER_METHODS` it has), None without one."""
    return next((m for n in PAPER_METHODS if (m := _m(task, n)) is not None), None)


def _pts(d: float | None, se: float | None) -> str:
    return "—" if d is None else f"{100 * d:+.1f} ± {100 * (se or 0.0):.1f} points"


def _vs(task: dict[str, Any], name: str, other: str) -> tuple[float | None, float | None, int]:
    """Paired difference of ``name`` against ``other`` (the reference or a GRPO method): mean, SE, seeds."""
    m = _m(task, name)
    if m is None or other not in task["methods"]:
        return None, None, 0
    if other == task["reference"]:
        return m["paired_diff_mean"], m["paired_diff_se"], m["paired_diff_n"]
    d = m["paired_diff_vs"].get(other)
    return (d["mean"], d["se"], d["n"]) if d else (None, None, 0)


def _significant(d: float | None, se: float | None, n: int) -> int | None:
    """+1 / −1 when the paired difference is more than 2 SE from 0, 0 within; None with fewer than 2 seeds."""
    if d is None or se is None or n < 2:
        return None
    return 0 if abs(d) <= 2 * se else (1 if d > 0 else -1)


def claims(results: dict[str, Any]) -> list[str]:
    """The paper's claims, one paragraph each: what the paper says, what each task setting of the matrix shows."""
    tasks = results["tasks"]
    out = []

    def per_task(fn: Any) -> str:
        texts = {name: fn(t) for name, t in tasks.items()}
        if len(tasks) > 1 and set(texts.values()) == {"not in the grid."}:
            return "Not in this grid (no task setting runs these methods)."
        return " ".join(f"**{name}**: {text}" for name, text in texts.items())

    def grad(t: dict[str, Any]) -> str:
        v, rows = _paper(t), []
        if v is None:
            return "no run of the paper's V0.5."
        for g in ("grpo4", "grpo16"):
            if (m := _m(t, g)) is not None and v["grad_norm_mean"] is not None and m["grad_norm_mean"] is not None:
                lower = "lower" if v["grad_norm_mean"] < m["grad_norm_mean"] else "not lower"
                smoother = "smoother" if (v["grad_norm_sd"] or 0) < (m["grad_norm_sd"] or 0) else "not smoother"
                rows.append(
                    f"{v['grad_norm_mean']:.3f} (sd {v['grad_norm_sd']:.3f}) vs {g} {m['grad_norm_mean']:.3f} "
                    f"(sd {m['grad_norm_sd']:.3f}): {lower}, {smoother}"
                )
        return "; ".join(rows) + "."

    out.append(
        "**Gradient norm** (paper, Fig. 3: V0.5's gradient norm is lower and smoother than GRPO's). Mean over "
        "steps and seeds, sd = its spread over steps, V0.5 with OSLA (`v05`) against GRPO. " + per_task(grad)
    )

    def ent(t: dict[str, Any]) -> str:
        v, rows = _paper(t), []
        if v is None or v["entropy_final"] is None:
            return "no run of the paper's V0.5."
        for g in ("grpo4", "grpo16"):
            if (m := _m(t, g)) is not None and m["entropy_final"] is not None:
                word = "higher" if v["entropy_final"] > m["entropy_final"] else "not higher"
                rows.append(f"{v['entropy_final']:.3f} vs {g} {m['entropy_final']:.3f} ({word})")
        return "; ".join(rows) + "."

    out.append(
        "**Entropy** (paper, Fig. 4: V0.5 keeps a higher policy entropy than GRPO). Last step, mean over seeds. "
        + per_task(ent)
    )

    def sparse(t: dict[str, Any]) -> str:
        rows = []
        for k in (1, 2, 4, 8):
            d, se, n = _vs(t, f"v05_k{k}", "grpo16")
            if d is None:
                continue
            verdict = {1: "beats", -1: "loses to", 0: "ties", None: "(1 seed, untested) vs"}[_significant(d, se, n)]
            rows.append(f"k = {k} {verdict} GRPO@16 ({_pts(d, se)})")
        return ("; ".join(rows) + ".") if rows else "not in the grid."

    out.append(
        "**Sparsity ablation** (paper: without OSLA, V0.5 at k = 1, 2 fails, while k = 4, 8 beat GRPO at k = 16). "
        "Paired difference of `v05_k*` (fixed k, `combined` prior) to GRPO@16; *beats* / *loses to* = more "
        "than 2 SE from 0. " + per_task(sparse)
    )

    def at4(t: dict[str, Any]) -> str:
        rows = []
        for g in ("grpo16", "grpo4"):
            d, se, n = _vs(t, "v05_k4", g)
            if d is not None:
                verdict = {1: "better than", -1: "worse than", 0: "within 2 SE of", None: "(1 seed, untested) vs"}[
                    _significant(d, se, n)
                ]
                rows.append(f"{verdict} GRPO@{g[4:]} ({_pts(d, se)})")
        return ("; ".join(rows) + ".") if rows else "not in the grid."

    out.append(
        "**V0.5 at k = 4 vs GRPO** (paper: V0.5 at 4 rollouts beats GRPO at 16; the fair comparison at equal "
        "rollouts is GRPO at 4). " + per_task(at4)
    )

    oracles = {h["oracle"] for a in results.get("attribution", {}).values() if (h := a.get("headroom"))}

    def best(t: dict[str, Any]) -> str:
        v05 = [(n, m) for n, m in t["methods"].items() if m["family"] == "v05" and n not in oracles]
        if not v05:
            return "no V0.5-line method."
        n, m = max(v05, key=lambda nm: -math.inf if nm[1]["paired_diff_mean"] is None else nm[1]["paired_diff_mean"])
        diff = points(m["paired_diff_mean"], m.get("paired_diff_ci95"), m["paired_diff_se"])
        untuned = ", untuned against a tuned reference" if tuned_any(t) and not m.get("setting") else ""
        return (
            f"best V0.5-line method `{n}` (picked after the fact{untuned}): {diff} points, rollouts ÷ ref "
            f"{ratio(m['rollout_ratio'])}, at 90 % of the gain {ratio(m['rollout_ratio_gain90'])} "
            f"{ci_text(m['rollout_ratio_gain90_ci95'])}, compute ÷ ref {ratio(m['compute_ratio'])} "
            "(this trainer), "
            f"{ratio(m.get('compute_ratio_user'))} (TRL/verl user)."
        )

    out.append(
        "**The promise: the same learning for fewer rollouts**, against the better GRPO (the reference); the oracle "
        "prior (a bound: its pass rates come from extra rollouts that no method's budget counts) is left out; points "
        "paired, 95 % t-interval over seeds; the ratio at 90 % of the gain with its paired percentile-bootstrap "
        "95 % interval. " + per_task(best)
    )
    return out


def warm_sft_text(task: dict[str, Any]) -> str:
    """The SFT warm-up's target against what its records measured at its stop (``warm_start_sft``), or nothing."""
    w = task.get("warm_start_sft")
    if not w or w.get("pass_rate_mean") is None:
        return ""
    target = w["target"] if not isinstance(w["target"], list) else None
    spread = "" if w["n"] < 2 else f", {w['pass_rate_min']:.3f}–{w['pass_rate_max']:.3f}"
    missing = f"; {w['n_missing']} record(s) not found" if w.get("n_missing") else ""
    return (
        (f"; the SFT warm-up targeted {target:.2f}" if target is not None else "; the SFT warm-up")
        + f" and stopped at {w['pass_rate_mean']:.3f} on the {w['split']} split (mean of {w['n']} warm start"
        + f"{'s' if w['n'] != 1 else ''}{spread}; their records, `sft.json`{missing})"
    )


def methods_markdown(grid: Grid) -> list[str]:
    """The results page's list of methods: each with its config and overrides (after the grid's own).

    A method that ``tasks:`` restricts says where it runs.
    """
    lines = ["## Methods", "",
             "Each method is a packaged config (or file) with overrides, applied after the grid's "
             f"({', '.join(f'`{o}`' for o in grid.overrides) or 'none'}) and the task setting's:", ""]  # fmt: skip
    for m in grid.methods:
        extra = f" + {', '.join(f'`{o}`' for o in m.overrides)}" if m.overrides else ""
        only = f" (only on {', '.join(f'`{t}`' for t in m.tasks)})" if m.tasks else ""
        source = f"the tuning's `{m.pick}` pick (its config and overrides, at its setting)" if m.pick else ""
        source = source or f"`{m.config}`"
        lines.append(f"- `{m.name}`: {source}{extra}{only}")
    return [*lines, ""]


def _selection_lead(results: dict[str, Any], heading: str, *, every_method: bool = False) -> list[str]:
    """The selection grid's lead table, its plain answer and the targets' verdicts under ``heading``.

    With ``every_method`` (the results page; the README keeps the pick's), every compared method judged by them too.
    Nothing in another grid (one without the selection fields).
    """
    rows = lead.lead_rows(results, pick := lead.picked_selector(results))
    regimes = {n: t.get("regime", "") for n, t in results["tasks"].items()}
    every = lead.method_target_rows(results, regimes) if rows and every_method else []
    return [
        *lead.lead_markdown(rows, pick, heading),
        *lead.verdict_markdown(rows, regimes, pick),
        *lead.targets_markdown(lead.target_rows(rows, regimes), heading),
        *lead.method_targets_markdown(every, heading),
    ]


def results_markdown(grid: Grid, results: dict[str, Any], meta: dict[str, Any], *, figure: str | None = None) -> str:
    """``docs/results.md``: hardware, wall time and command, the protocol, one table per task setting, the claims.

    A grid whose oracle selects also gets the selection headroom against Var(p) (``figure``: its PNG, relative to
    the page; :mod:`v05.grid.selection`).
    """
    hours = meta["cells_wall_time_s"] / 3600
    lines = [
        f"# Results: `v05 bench matrix` on the `{grid.name}` grid",
        "",
        "Generated by the command below (every number on this page is written by it; do not edit by hand).",
        "",
        f"    {meta['command']}",
        "",
        f"- Hardware: {meta['hardware']}. Trained numbers are machine-specific (the warm start stops at a different "
        "step on another CPU): compare methods within one run of the grid. The grid's store keeps the warm starts, "
        "so cells trained on several machines (sessions) start from the same weights"
        + "".join(
            f"{'; ' if i else ': '}{n} cells on {where}"
            for i, (where, n) in enumerate(sorted(meta.get("cells_hardware", {}).items()))
        )
        + ".",
        *(
            ["- **Partial: the grid has not finished; the tables show the finished cells.**"]
            if meta["cells_finished"] < meta["cells_total"]
            else []
        ),
        *(
            [f"- **Partial: this report leaves out the grid's task setting(s) {', '.join(left)} (`--tasks`); the "
             "counts below are of the settings it reports.**"]
            if (left := meta.get("tasks_left_out"))
            else []
        ),  # fmt: skip
        f"- Cells finished: {meta['cells_finished']} of {meta['cells_total']}; their summed wall time "
        f"{hours:.2f} h (runs, evals included, warm starts excluded); generated {meta['generated']}.",
        f"- Grid file: `{grid.path.as_posix()}`; seeds {', '.join(map(str, grid.seeds))}; "
        f"reference `{grid.reference}`.",
        "",
        *_selection_lead(results, "##", every_method=True),
        "## Protocol",
        "",
        protocol_markdown(grid, results),
        "",
        *methods_markdown(grid),
    ]
    for name, t in results["tasks"].items():
        lines += [
            f"## {name} ({t['regime']} regime" + (f", {t['pool']} pool)" if "pool" in t else ")"),
            "",
            (t["description"] + " ") if t["description"] else "",
            f"Warm start {t['warm_start_eval']:.3f} measured (the eval split at step 0, seed mean){warm_sft_text(t)}; "
            f"reference `{t['reference']}` final {t['reference_final']:.3f}; "
            f"90 % threshold {t['gain90_threshold']:.3f}; budget {t['budget_rollouts']:,} rollouts per run; the "
            f"reference gained {100 * t['reference_last_quarter_gain']:+.1f} points over the last quarter of it. "
            f"Figures: `{name}/report/` under the grid's `--out` (eval vs rollouts and vs compute, grad norm, "
            "entropy, k histogram, zero-advantage shares, the prior's AUC/τ²/n0).",
            "",
            markdown_table(t),
            "",
            *untuned_note(t),
            *attribution_markdown(results.get("attribution", {}).get(name), t),
            *tuning_markdown(grid, t.get("tuning")),
        ]
    lines += sel.headroom_markdown(sel.headroom_rows(results), figure)
    lines += sel.cold_start_markdown(sel.cold_start_rows(results))
    for name, pending in results.get("pending", {}).items():
        lines += [f"## {name}: the comparison has not run yet", "", *tuning_markdown(grid, pending.get("tuning"))]
    if grid.tuning is not None and grid.tuning.recommend:
        rec = results.get("recommended")
        lines += [
            "## The recommended configuration",
            "",
            f"Rule, fixed before the comparison's seeds ran: among {', '.join(f'`{m}`' for m in grid.tuning.recommend)}"
            f", {RECOMMEND_RULE}.",
            "",
            (
                "Pending: the tuning sweep has not finished."
                if rec is None
                else f"Pick: `{rec['method']}` at `{rec['setting']}` (mean tuning score {rec['score_mean']:.3f}; "
                + ", ".join(f"{t} {v:.3f}" for t, v in rec["scores"].items())
                + ")"
                + (
                    f"; provisional: {len(rec['scores'])} of the grid's {len(grid.tasks)} task settings"
                    if len(rec["scores"]) < len(grid.tasks)
                    else ""
                )
                + (
                    f"; provisional: {', '.join(left)} not in this report"
                    if (left := meta.get("tasks_left_out"))
                    else ""
                )
                + ". `--recommended FILE` writes it as a config (the packaged `v05-recommended` changes only then)."
            ),
            "",
        ]
    for pick_name, candidates in grid.tuning.picks if grid.tuning is not None else ():
        pick = (results.get("picks") or {}).get(pick_name)
        lines += [f"## The pick `{pick_name}`", "", f"Rule, fixed before the comparison's seeds ran: among "
                  f"{', '.join(f'`{m}`' for m in candidates)}, {RECOMMEND_RULE}.", "",
                  "Pending: the tuning sweep has not finished." if pick is None else
                  f"Pick: `{pick['method']}` at `{pick['setting']}` (mean tuning score {pick['score_mean']:.3f}; "
                  + ", ".join(f"{t} {v:.3f}" for t, v in pick["scores"].items()) + ").", ""]  # fmt: skip
    lines += ["## The paper's claims against the matrix", ""]
    for c in claims(results):
        lines += [f"- {c}", ""]
    return "\n".join(line for line in lines if line is not None).rstrip() + "\n"


def attribution_markdown(table: dict[str, Any] | None, task: dict[str, Any] | None = None) -> list[str]:
    """One task setting's attribution table (:func:`attribution_results`) as markdown lines.

    With the task setting's results (``task``), each row also says what each side ran (:func:`ran_text`: its real
    batch and tuning, which the factor's wording, from the grid file, may not match) and the rows that set an
    untuned method against a tuned one are marked.
    """
    if not table:
        return []
    methods = (task or {}).get("methods", {})
    tuned = task is not None and tuned_any(task)

    def side(name: str) -> str:
        return f"`{name}`" + (f" ({ran_text(methods[name], tuned)})" if name in methods else "")

    lines = [
        "Attribution (each row: the first method − the second, paired over their common seeds; points with the 95 % "
        "t-interval over seeds; rollouts the first needs to reach the second's final ÷ the second's own, a point "
        "estimate; the factor is the grid file's wording, *ran* is what the cells ran):",
        "",
        "| factor | method − versus (ran: k × prompts a step) | Δ, points [95% CI] | seeds "
        "| rollouts to versus's final |",
        "|---|---|---|---|---|",
    ]
    mixed = False
    for row in table["rows"]:
        diff = points(row["diff"], row.get("ci95")) if row["diff"] is not None else "pending"
        reach = ratio(row["rollout_ratio"]) if row["diff"] is not None else "—"
        sides = [methods.get(row["method"], {}), methods.get(row["versus"], {})]
        flag = tuned and all(sides) and len({bool(m.get("setting")) for m in sides}) == 2
        mixed |= flag
        lines.append(f"| {row['factor']}{' †' if flag else ''} | {side(row['method'])} − {side(row['versus'])} | "
                     f"{diff} | {row.get('n', '—')} | {reach} |")  # fmt: skip
    if mixed:
        lines += ["", "† an untuned method against a tuned one: the difference also holds the tuning's share."]
    h = table.get("headroom")
    if h is not None and h["oracle_diff"] is not None:
        best = "no learned prior has finished" if h["best_learned"] is None else (
            f"the best learned prior, `{h['best_learned']}` (picked after the fact"
            f"{'' if h['best_learned'] not in methods else ', ' + ran_text(methods[h['best_learned']], tuned)}), "
            f"{points(h['best_learned_diff'], h['best_learned_ci95'])}")  # fmt: skip
        ci = h["oracle_ci95"]
        captured = (f"; it captures {h['captured']:.0%} of the oracle's gain" if h["captured"] is not None else
                    "" if h["best_learned"] is None or ci is None or ci[0] > 0 else
                    "; no share of the oracle's gain is quoted: that gain's interval reaches 0")  # fmt: skip
        status = {n: (f" ({ran_text(methods[n], tuned)})" if n in methods else "") for n in (h["control"], h["oracle"])}
        lines += ["", f"Headroom over `{h['control']}`{status[h['control']]}: the oracle `{h['oracle']}`"
                      f"{status[h['oracle']]} {points(h['oracle_diff'], h['oracle_ci95'])} points; "
                      f"{best}{captured}."]  # fmt: skip
    return [*lines, ""]


def tuning_markdown(grid: Grid, tuning: dict[str, Any] | None) -> list[str]:
    """The tuning sweep of one task as markdown lines: a row per tuned method, a column per setting (score, spike)."""
    if not tuning or grid.tuning is None:
        return []
    names = [s.name for s in grid.tuning.settings]
    described = "; ".join(
        f"`{s.name}`: {', '.join(s.overrides) or 'the config'}" + (f", batch × {s.batch_scale:g}" if s.batch_scale != 1
                                                                   else "")
        for s in grid.tuning.settings
    )  # fmt: skip
    lines = [
        f"Equal tuning budget (seed {grid.tuning.seed}, not one of the comparison's seeds; rule `{grid.tuning.rule}`"
        f"; {described}): each cell is the tuning score (the max/median gradient-norm spike); **bold** is the "
        "setting the comparison above used.",
        "",
        "| method | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for method, entry in tuning.items():
        row = []
        for name in names:
            v = entry["settings"].get(name)
            text = "pending" if v is None else f"{fmt(v['score'])} ({fmt(v['grad_norm_spike'], '.1f', never='—')})"
            row.append(f"**{text}**" if name == entry["chosen"] else text)
        lines.append(f"| {method} | " + " | ".join(row) + " |")
    return [*lines, ""]


def readme_section(results: dict[str, Any], meta: dict[str, Any], doc: str) -> str:
    """The README's results section: the headline table per task setting and a pointer to ``doc``.

    It names the machine (or, for cells restored from a store trained on several, their count: ``doc`` lists them)
    and says so when the grid has not finished.

    A grid whose oracle selects (the selection grid) gives its lead table and the targets' verdicts instead
    (:mod:`v05.grid.lead`), a heading level below the README's section that holds them.
    """
    machines = meta.get("cells_hardware") or {}
    hardware = meta["hardware"] if len(machines) < 2 else f"cells trained on {len(machines)} machines, listed there"
    partial = meta.get("cells_finished", 0) < meta.get("cells_total", 0)
    lines = [
        README_BEGIN,
        "",
        f"From `{meta['command']}` ({hardware}; all numbers and the paper's claims in [{doc}]({doc})).",
        *(
            ["", f"**Partial: {meta['cells_finished']} of the grid's {meta['cells_total']} cells have run; a setting "
                 "without comparison cells is left out.**"]
            if partial
            else []
        ),
        "",
    ]
    if section := _selection_lead(results, "###"):
        return "\n".join([*lines, *section, README_END])
    for name, t in results["tasks"].items():
        lines += [
            f"**{name}** ({t['regime']}: warm start {t['warm_start_eval']:.3f}, {t['budget_rollouts']:,} "
            f"rollouts; reference `{t['reference']}` final {t['reference_final']:.3f})",
            "",
            markdown_table(t),
            "",
            *untuned_note(t),
        ]
    return "\n".join([*lines, README_END])


def replace_readme_section(readme: Path, section: str) -> None:
    """Put ``section`` between the README's markers (which must exist once each)."""
    text = readme.read_text(encoding="utf-8")
    if text.count(README_BEGIN) != 1 or text.count(README_END) != 1:
        raise ValueError(f"{readme}: needs the markers {README_BEGIN!r} and {README_END!r} once each")
    head, rest = text.split(README_BEGIN)
    _, tail = rest.split(README_END)
    readme.write_text(head + section + tail, encoding="utf-8")


__all__ = [
    "HEADLINE_COLUMNS",
    "PROTOCOL_MD",
    "README_BEGIN",
    "README_END",
    "attribution_markdown",
    "claims",
    "headline_rows",
    "markdown_table",
    "methods_markdown",
    "protocol_markdown",
    "readme_section",
    "replace_readme_section",
    "results_markdown",
    "optim_text",
    "ran_text",
    "tuned_any",
    "tuning_markdown",
    "untuned_note",
    "warm_sft_text",
    "write_matrix_report",
]
