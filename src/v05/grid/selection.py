"""The selection grid's fields (issue 42) on a task setting's results: the pool's spread and the oracle's headroom.

Per task setting, beside ``pool``:

- ``pass_rate_var``: the candidate pool's Var(p) as the oracle saw it, each step's ``pool_prior_var`` (the variance
  of the measured p̂ = (s + ½)/(m + 1) over every candidate of the step) averaged over the steps of each seed's run,
  then over the seeds. It holds the sampling noise of m rollouts too, E[p(1 − p)]·m/(m + 1)², the same for every
  setting at equal m and pass rate; None where the oracle's cells have not run or did not log it;
- ``oracle_selection_headroom`` and ``oracle_selection_headroom_ci95``: the oracle's selection − ``control``
  (uniform k = 1 with the running mean), paired over the run and the seeds, as fractions, with its 95 % t-interval
  (the attribution's ``headroom``).

- ``pool_size``: the train pool's prompts (the oracle cells' step-0 row), what SPO's offline init pays
  ``offline_n`` rollouts each for: the cold start's cost where that init was not run (:func:`cold_start_rows`).

Per method: ``vs_uniform_diff`` and ``vs_uniform_ci95`` (its paired difference to ``control``, the fields
``vs_running_mean_*`` of every grid under the name the selection grid's contract gives them) and ``tuned`` (compared
at its best tuning setting, not at its config as it is).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np

from v05.grid.text import points, ratio
from v05.priors.spo import SpoProvider
from v05.registry import ALLOCATORS
from v05.report.plots import pyplot
from v05.report.runs import Run

POOL_VAR_KEY = "pool_prior_var"
"""The metric each step logs: the variance of the prior's pass rates over the step's whole candidate pool."""
POOL_SIZE_KEY = "pool_size"
"""The step-0 row's count of the train pool's prompts (what an offline init draws ``offline_n`` rollouts for)."""
OFFLINE_N = next(f.default for f in fields(SpoProvider) if f.name == "offline_n")
"""SPO's offline init per pool prompt (the recipe's 8; the provider's default, the spo-offline config's)."""


def pool_pass_rate_var(runs: Sequence[Run]) -> float | None:
    """Var(p) of the candidate pool: each run's mean ``pool_prior_var`` over its steps, averaged over the runs."""
    per_run = [float(np.mean(v)) for v in (r.series(POOL_VAR_KEY)[1] for r in runs) if v.size]
    return float(np.mean(per_run)) if per_run else None


def selects(runs: Sequence[Run]) -> bool:
    """Whether the runs' allocator selects and reads the prior (prior_select): their oracle is a selection bound."""
    names = {r.config_value("allocator.name") for r in runs}
    return bool(names) and all(n in ALLOCATORS and ALLOCATORS[n].pool and ALLOCATORS[n].uses_prior for n in names)


def add_selection_fields(
    task: dict[str, Any], headroom: dict[str, Any] | None, oracle_runs: Sequence[Run]
) -> dict[str, Any]:
    """``task`` (one task setting's results) with the module docstring's fields added, where the oracle selects.

    ``headroom`` is the attribution's (None: no oracle or control declared), ``oracle_runs`` the oracle's finished
    runs. An oracle that does not select (the evidence grid's: a baseline at k = 1) leaves ``task`` as it is: its
    headroom is the baseline's, not the selection's.
    """
    if not selects(oracle_runs):
        return task
    task["pass_rate_var"] = pool_pass_rate_var(oracle_runs)
    sizes = [v for v in (r.last(POOL_SIZE_KEY) for r in oracle_runs) if v]
    task["pool_size"] = int(max(sizes)) if sizes else None
    task["oracle_selection_headroom"] = None if headroom is None else headroom["oracle_diff"]
    task["oracle_selection_headroom_ci95"] = None if headroom is None else headroom["oracle_ci95"]
    for entry in task["methods"].values():
        entry["vs_uniform_diff"] = entry.get("vs_running_mean_diff")
        entry["vs_uniform_ci95"] = entry.get("vs_running_mean_ci95")
        entry["tuned"] = entry.get("setting") is not None
    return task


def headroom_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Per task setting with the selection fields: its pool, Var(p), the oracle's and the best learned gain.

    The best learned selector's gain over uniform k = 1 is the attribution's (picked after the fact); fractions, as
    in the JSON; [] where no task setting has the fields.
    """
    rows = []
    for name, task in results["tasks"].items():
        if "oracle_selection_headroom" not in task:
            continue
        head = (results.get("attribution", {}).get(name) or {}).get("headroom") or {}
        rows.append({
            "task": name, "pool": task.get("pool"), "var": task.get("pass_rate_var"),
            "oracle": task["oracle_selection_headroom"], "oracle_ci95": task["oracle_selection_headroom_ci95"],
            "best": head.get("best_learned"), "best_diff": head.get("best_learned_diff"),
            "best_ci95": head.get("best_learned_ci95"),
        })  # fmt: skip
    return rows


SELECTOR_PICK = "selector"
"""The name of the selection grid's pick among its learned selectors (``tuning.picks``)."""


def picked_selector(results: dict[str, Any]) -> str | None:
    """The method of the grid's :data:`SELECTOR_PICK` pick, None until it is decided (or in a grid without one)."""
    return ((results.get("picks") or {}).get(SELECTOR_PICK) or {}).get("method")


SPO_METHOD, SPO_OFFLINE_METHOD = "spo", "spo_offline"
"""The selection grid's SPO without and with its offline init (counted), which the lead table sets the pick against."""


def lead_rows(results: dict[str, Any], pick: str | None, spo: str = SPO_METHOD) -> list[dict[str, Any]]:
    """The lead table (issue 42's README table), per task setting with the selection fields.

    Uniform k = 1 (the attribution's control) − the reference (GRPO k = 4); the oracle's selection headroom over
    uniform (the bound); the picked learned selector ``pick`` − uniform and its share of the bound (only where the
    bound's 95 % interval lies above 0); SPO − uniform; ``pick`` − SPO (the attribution row, paired); the rollouts
    ``pick`` and SPO need to reach the reference's final ÷ the reference's own with the pick's 95 % interval, and
    their compute ratios (this trainer's, a TRL/verl user's); ``pick`` − SPO with its offline init counted (at equal
    total rollouts: the attribution row (pick, spo_offline); not run on the fresh pools, whose init would exceed the
    budget). Fractions; None where a part has not run.
    """
    rows = []
    for name, task in results["tasks"].items():
        if "oracle_selection_headroom" not in task:
            continue
        methods = task["methods"]
        attribution = results.get("attribution", {}).get(name) or {}
        uniform = (attribution.get("headroom") or {}).get("control")
        u, p, o = methods.get(uniform, {}), methods.get(pick, {}), methods.get(spo, {})
        pairs = {(r["method"], r["versus"]): r for r in attribution.get("rows", [])}
        versus, offline = pairs.get((pick, spo), {}), pairs.get((pick, SPO_OFFLINE_METHOD))
        bound, bound_ci = task["oracle_selection_headroom"], task["oracle_selection_headroom_ci95"]
        share = None
        if bound and bound_ci and bound_ci[0] > 0 and p.get("vs_uniform_diff") is not None:
            share = p["vs_uniform_diff"] / bound
        rows.append({
            "task": name, "pool": task.get("pool"),
            "uniform": u.get("paired_diff_mean"), "uniform_ci95": u.get("paired_diff_ci95"),
            "bound": bound, "bound_ci95": bound_ci,
            "pick": p.get("vs_uniform_diff"), "pick_ci95": p.get("vs_uniform_ci95"), "share": share,
            "spo": o.get("vs_uniform_diff"), "spo_ci95": o.get("vs_uniform_ci95"),
            "pick_vs_spo": versus.get("diff"), "pick_vs_spo_ci95": versus.get("ci95"),
            "offline_run": offline is not None,  # spo_offline runs on this setting (not on the fresh pools)
            "pick_vs_offline": (offline or {}).get("diff"), "pick_vs_offline_ci95": (offline or {}).get("ci95"),
            "pick_ratio": p.get("rollout_ratio"), "pick_ratio_ci95": p.get("rollout_ratio_ci95"),
            "pick_compute": (p.get("compute_ratio"), p.get("compute_ratio_user")),
            "spo_ratio": o.get("rollout_ratio"), "spo_compute": (o.get("compute_ratio"), o.get("compute_ratio_user")),
        })  # fmt: skip
    return rows


def lead_markdown(rows: Sequence[dict[str, Any]], pick: str | None, heading: str = "##") -> list[str]:
    """The results page's lead table from :func:`lead_rows` (the README's, one ``heading`` level down)."""
    if not rows:
        return []
    name = "pending" if pick is None else f"`{pick}`"
    lines = [
        f"{heading} The lead table: selection beside SPO and GRPO k = 4",
        "",
        f"The picked learned selector ({name}, by the grid's `selector` pick below) against uniform k = 1 with the "
        "running mean, the oracle's selection (the bound) and SPO; points paired over the run with 95 % t-intervals "
        "over seeds; rollouts to GRPO k = 4's final ÷ its own with the paired percentile-bootstrap 95 % interval; "
        "compute ÷ GRPO k = 4's as this trainer counts it and as a TRL/verl user pays it. Share of the bound: only "
        "where the bound's interval lies above 0.",
        "",
        "| setting (pool) | uniform k = 1 − GRPO k = 4 | oracle selection − uniform (bound) | pick − uniform | "
        "share of the bound | SPO − uniform | pick − SPO | pick − SPO with its offline init | "
        "rollouts to GRPO's final: pick / SPO | compute ÷ GRPO (trainer, TRL/verl user): pick / SPO |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        pts = {k: points(r[k], r[f"{k}_ci95"], missing="pending") for k in (
            "uniform", "bound", "pick", "spo", "pick_vs_spo", "pick_vs_offline")}  # fmt: skip
        share = "—" if r["share"] is None else f"{100 * r['share']:.0f} %"
        compute = " / ".join(
            "pending" if c[0] is None and c[1] is None else ", ".join(ratio(v, missing="pending") for v in c)
            for c in (r["pick_compute"], r["spo_compute"])
        )
        never = "pending" if r["pick_ratio_ci95"] is None else "never"
        reach = ratio(r["pick_ratio"], r["pick_ratio_ci95"], missing=never)
        lines.append(
            f"| {r['task']} ({r['pool'] or '—'}) | {pts['uniform']} | {pts['bound']} | {pts['pick']} | {share} "
            f"| {pts['spo']} | {pts['pick_vs_spo']} | {pts['pick_vs_offline'] if r['offline_run'] else 'not run'} "
            f"| {reach} / {ratio(r['spo_ratio'], missing='pending')} | {compute} |"
        )
    return [*lines, ""]


TARGETS = (
    ("share", "takes ≥ ½ of the oracle's headroom, its interval above 0 (≥ 4 of the 6 hard settings)"),
    ("no_loss", "never loses to uniform k = 1 beyond the noise (its interval not below 0)"),
    ("rollouts", "reaches GRPO k = 4's final with ≤ 0.4× its rollouts, the interval's upper end ≤ 0.55"),
    ("compute", "… with ≤ 0.7× its compute as a TRL/verl user pays it"),
    ("beats_spo", "beats SPO at equal total rollouts by ≥ +1 point, its interval above 0 (fresh and mixed pools)"),
)
"""Issue 42's targets for the picked learned selector, each judged per task setting by :func:`target_rows`."""


def target_rows(rows: Sequence[dict[str, Any]], regimes: dict[str, str]) -> list[dict[str, Any]]:
    """Each setting's verdict on each of :data:`TARGETS` from the lead rows: True (met), False, or None.

    The targets are the hard settings' (``regimes``); on an easy one only ``no_loss`` is judged.

    None: not applicable (``share`` where the bound's interval reaches 0, ``beats_spo`` on a revisited pool) or not
    measured yet. ``beats_spo`` is ``pick − spo_offline`` where SPO's offline init runs (the mixed pools; equal total
    rollouts, its init counted) and ``pick − spo`` on the fresh pools, where the init (8 × the pool) exceeds the
    budget, so SPO at equal total rollouts would not have trained at all: the stricter reading, against SPO without
    it. Thresholds as fractions (+1 point = 0.01); an interval end None (never reached) fails a bound on it.
    """
    out = []
    for r in rows:
        ci = r["pick_ci95"]
        no_loss = None if ci is None else ci[1] >= 0
        if regimes.get(r["task"]) != "hard":  # the easy setting: only "never loses" applies
            out.append({"task": r["task"], "pool": r["pool"], **dict.fromkeys(k for k, _ in TARGETS),
                        "no_loss": no_loss, "beats_spo_versus": None})  # fmt: skip
            continue
        share = None if r["share"] is None or ci is None else r["share"] >= 0.5 and ci[0] > 0
        reach, reach_ci = r["pick_ratio"], r["pick_ratio_ci95"]
        rollouts = None if reach_ci is None else (reach is not None and reach <= 0.4 and reach_ci[1] is not None
                                                  and reach_ci[1] <= 0.55)  # fmt: skip
        user = r["pick_compute"][1]
        compute = None if reach_ci is None else user is not None and user <= 0.7
        key = "pick_vs_offline" if r["offline_run"] else "pick_vs_spo"
        diff, diff_ci = r[key], r[f"{key}_ci95"]
        beats = None if r["pool"] == "revisited" or diff is None or diff_ci is None else diff >= 0.01 and diff_ci[0] > 0
        versus = SPO_OFFLINE_METHOD if r["offline_run"] else SPO_METHOD
        out.append({"task": r["task"], "pool": r["pool"], "share": share, "no_loss": no_loss, "rollouts": rollouts,
                    "compute": compute, "beats_spo": beats, "beats_spo_versus": versus})  # fmt: skip
    return out


def targets_markdown(rows: Sequence[dict[str, Any]], heading: str = "##") -> list[str]:
    """The results page's verdict per setting on each of :data:`TARGETS` (the rule is written on the page)."""
    if not rows:
        return []
    mark = {True: "met", False: "**missed**", None: "—"}
    lines = [f"{heading} Targets for the picked selector (issue 42), per setting", "",
             "Judged from the lead table by a rule fixed before the comparison seeds ran "
             "(`v05.grid.selection.target_rows`; the targets are the hard settings', only the second applies to the "
             "easy one): —: not applicable or not measured yet. Beating SPO reads "
             "`spo_offline` where its init runs (equal total rollouts) and `spo` on the fresh pools, where the init "
             "alone exceeds the budget.", "",
             "| task setting (pool) | " + " | ".join(text for _, text in TARGETS) + " |",
             "|---|" + "---|" * len(TARGETS)]  # fmt: skip
    for r in rows:
        lines.append(f"| {r['task']} ({r['pool'] or '—'}) | " + " | ".join(mark[r[k]] for k, _ in TARGETS) + " |")
    met = {k: sum(r[k] is True for r in rows) for k, _ in TARGETS}
    known = {k: sum(r[k] is not None for r in rows) for k, _ in TARGETS}
    lines += ["", "Met: " + "; ".join(f"{k} {met[k]} of {known[k]} judged" for k, _ in TARGETS) + ".", ""]
    return lines


def cold_start_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The cold start on the fresh pools (issue 42): what each method paid to reach the reference's final.

    Per task setting whose pool is ``fresh`` (each prompt seen about once: a tracker has nothing to learn from) and
    per method but the oracle (a bound): its rollouts before step 1 (``init_rollouts``, counted), its seed-mean
    curve's rollouts to the reference's final with them (``rollouts_to_reference_final``; None: not reached), the
    ratio to the reference's own, the user's compute ratio and the prior's share of the compute. Where no method
    ran an offline init, a row ``offline_init`` gives what SPO's would cost there: ``OFFLINE_N`` × ``pool_size``
    rollouts before step 1, a lower bound on its rollouts to the final (None until ``pool_size`` is known).
    """
    rows = []
    for name, task in results["tasks"].items():
        if task.get("pool") != "fresh" or "oracle_selection_headroom" not in task:
            continue
        head = (results.get("attribution", {}).get(name) or {}).get("headroom") or {}
        ref = task["methods"].get(task.get("reference"), {}).get("rollouts_to_reference_final")
        budget = task.get("budget_rollouts")
        for method, m in task["methods"].items():
            if method == head.get("oracle"):
                continue
            rows.append({"task": name, "method": method, "init": m.get("init_rollouts") or 0.0,
                         "reach": m.get("rollouts_to_reference_final"), "ratio": m.get("rollout_ratio"),
                         "compute_user": m.get("compute_ratio_user"), "prior_compute": m.get("prior_compute_frac"),
                         "budget": budget, "run": True})  # fmt: skip
        if not any(m.get("init_rollouts") for m in task["methods"].values()):
            size = task.get("pool_size")
            init = None if size is None else float(OFFLINE_N * size)
            rows.append({"task": name, "method": "offline_init", "init": init, "reach": None,
                         "ratio": None if init is None or not ref else init / ref, "compute_user": None,
                         "prior_compute": None, "budget": budget, "run": False})  # fmt: skip
    return rows


def cold_start_markdown(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The results page's cold-start section from :func:`cold_start_rows`."""
    if not rows:
        return []
    lines = [
        "## Cold start: a fresh pool, nothing seen",
        "",
        "Each prompt of a fresh pool is seen about once in the budget, so a tracker of its own outcomes has nothing "
        "to reuse; SPO's recipe starts it from offline rollouts of every pool prompt instead, a prior from zero "
        "rollouts (its cost is compute: the encoder's or the probe's share below). Rollouts to the reference's final "
        "on the seed-mean curve, the init included; `offline_init`: what SPO's offline init "
        f"({OFFLINE_N} rollouts a pool prompt) would cost before its first step, not run (a lower bound).",
        "",
        "| task setting | method | init rollouts (counted) | rollouts to the reference's final | ÷ the reference's "
        "| compute ÷ ref (TRL/verl user) | the prior's share of the compute |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        init = "pending" if r["init"] is None else f"{r['init']:,.0f}"
        if r["run"]:
            reach = f"{r['reach']:,.0f}" if r["reach"] is not None else f"not reached in {r['budget']:,}"
            times = ratio(r["ratio"], missing="—")
        else:
            reach = "pending" if r["init"] is None else f"≥ {r['init']:,.0f} (not run)"
            times = "pending" if r["ratio"] is None else f"≥ {r['ratio']:.1f}×"
            if r["init"] is not None and r["budget"]:
                init += f" ({r['init'] / r['budget']:.1f}× the budget)"
        user = ratio(r["compute_user"], missing="—")
        share = "—" if r["prior_compute"] is None else f"{100 * r['prior_compute']:.1f} %"
        lines.append(f"| {r['task']} | `{r['method']}` | {init} | {reach} | {times} | {user} | {share} |")
    return [*lines, ""]


def headroom_markdown(rows: Sequence[dict[str, Any]], figure: str | None) -> list[str]:
    """The results page's section: the oracle's selection headroom against the pool's Var(p), per task setting."""
    if not rows:
        return []
    lines = [
        "## Where selection pays: the oracle's headroom against the pool's spread",
        "",
        "Per task setting: the candidate pool's Var(p) as the oracle measured it (`pass_rate_var`, sampling noise "
        "included), the oracle's selection − uniform k = 1 with the running mean (points paired over the run, 95 % "
        "t-interval over seeds) and the best learned selector's (picked after the fact: optimistic).",
        "",
        *([f"![headroom against Var(p)]({figure})", ""] if figure else []),
        "| task setting | pool | Var(p) | oracle selection − uniform | best learned selector − uniform |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        var = "pending" if r["var"] is None else f"{r['var']:.4f}"
        best = "pending" if r["best"] is None else f"`{r['best']}` {points(r['best_diff'], r['best_ci95'])}"
        oracle = points(r["oracle"], r["oracle_ci95"], missing="pending")
        lines.append(f"| {r['task']} | {r['pool'] or '—'} | {var} | {oracle} | {best} |")
    return [*lines, ""]


def plot_headroom(rows: Sequence[dict[str, Any]], path: str | Path) -> Path | None:
    """The figure of :func:`headroom_markdown`: each setting's headroom (and best learned gain) against Var(p).

    With 95 % intervals; returns None (nothing written) until some setting has both Var(p) and the headroom.
    """
    done = [r for r in rows if r["var"] is not None and r["oracle"] is not None]
    if not done:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    try:
        for key, ci, label, marker in (("oracle", "oracle_ci95", "oracle selection", "o"),
                                       ("best_diff", "best_ci95", "best learned selector", "s")):  # fmt: skip
            pts = [r for r in done if r[key] is not None]
            x = np.array([r["var"] for r in pts])
            y = 100 * np.array([r[key] for r in pts])
            err = np.array([[100 * (r[key] - r[ci][0]), 100 * (r[ci][1] - r[key])] if r[ci] else [0.0, 0.0]
                            for r in pts]).T.reshape(2, -1)  # fmt: skip
            ax.errorbar(x, y, yerr=err, fmt=marker, capsize=3, label=label)
        for r in done:
            ax.annotate(r["task"], (r["var"], 100 * r["oracle"]), fontsize=7, xytext=(4, 3), textcoords="offset points")
        ax.axhline(0.0, color="grey", lw=0.8)
        ax.set_xlabel("Var(p) of the candidate pool (the oracle's p̂)")
        ax.set_ylabel("− uniform k = 1, points (95 % CI)")
        ax.legend(fontsize=8)
        fig.tight_layout()
        out = Path(path)
        fig.savefig(out, dpi=120)
    finally:
        plt.close(fig)
    return out


__all__ = [
    "OFFLINE_N",
    "POOL_SIZE_KEY",
    "POOL_VAR_KEY",
    "SELECTOR_PICK",
    "SPO_METHOD",
    "SPO_OFFLINE_METHOD",
    "TARGETS",
    "add_selection_fields",
    "cold_start_markdown",
    "cold_start_rows",
    "headroom_markdown",
    "headroom_rows",
    "lead_markdown",
    "lead_rows",
    "plot_headroom",
    "picked_selector",
    "pool_pass_rate_var",
    "selects",
    "target_rows",
    "targets_markdown",
]
