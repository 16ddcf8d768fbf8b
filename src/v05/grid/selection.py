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
``vs_running_mean_*`` of every grid under the name the selection grid's contract gives them), ``tuned`` (compared
at its best tuning setting, not at its config as it is), ``oracle_rollouts`` (an oracle's extra rollouts a run, the
mean over its seeds: reported, never counted; None for a method without them) and ``pool_prior_var``: the spread of
its prior's p over the step's candidate pool, averaged like ``pass_rate_var`` (None for a method that logs none). A
selector whose spread is near 0 ranks the pool by its Thompson draws alone (uniform with noise); a spread is not a
ranking, though: a tracker of a few binary outcomes per prompt spreads as wide as the oracle with much of it noise.
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
ORACLE_ROLLOUTS_KEY = "prior/oracle_rollouts"
"""The metric an oracle's run logs: its extra rollouts so far (the bound's; neither counted nor trained on)."""
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
    task: dict[str, Any], headroom: dict[str, Any] | None, groups: dict[str, Sequence[Run]], oracle: str
) -> dict[str, Any]:
    """``task`` (one task setting's results) with the module docstring's fields added, where the oracle selects.

    ``headroom`` is the attribution's (None: no oracle or control declared), ``groups`` each method's finished runs,
    ``oracle`` the oracle's name. An oracle that does not select (the evidence grid's: a baseline at k = 1) leaves
    ``task`` as it is: its headroom is the baseline's, not the selection's.
    """
    oracle_runs = groups.get(oracle, [])
    if not selects(oracle_runs):
        return task
    task["pass_rate_var"] = pool_pass_rate_var(oracle_runs)
    sizes = [v for v in (r.last(POOL_SIZE_KEY) for r in oracle_runs) if v]
    task["pool_size"] = int(max(sizes)) if sizes else None
    task["oracle_selection_headroom"] = None if headroom is None else headroom["oracle_diff"]
    task["oracle_selection_headroom_ci95"] = None if headroom is None else headroom["oracle_ci95"]
    for name, entry in task["methods"].items():
        entry["vs_uniform_diff"] = entry.get("vs_running_mean_diff")
        entry["vs_uniform_ci95"] = entry.get("vs_running_mean_ci95")
        entry["tuned"] = entry.get("setting") is not None
        entry[POOL_VAR_KEY] = pool_pass_rate_var(groups.get(name, []))
        spent = [v for v in (r.last(ORACLE_ROLLOUTS_KEY) for r in groups.get(name, [])) if v is not None]
        entry["oracle_rollouts"] = float(np.mean(spent)) if spent else None
    return task


def headroom_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Per task setting with the selection fields: its pool, Var(p), the oracle's and the best learned gain.

    The best learned selector's gain over uniform k = 1 is the attribution's (picked after the fact); ``spreads``
    each learned selector's ``pool_prior_var`` (what its prior sees of the pool's spread); fractions, as in the
    JSON; [] where no task setting has the fields.
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
            "spreads": {m: v for m in head.get("learned", []) if (v := task["methods"].get(m, {}).get(POOL_VAR_KEY))
                        is not None},
            "oracle_rollouts": task["methods"].get(head.get("oracle"), {}).get("oracle_rollouts"),
            "budget": task.get("budget_rollouts"),
        })  # fmt: skip
    return rows


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
        "t-interval over seeds; with the extra rollouts its ranking spent a run, neither counted nor trained on), "
        "the best learned selector's (picked after the fact: optimistic), and the spread each learned selector's "
        "prior sees over the same kind of pool (`pool_prior_var`, ÷ the oracle's Var(p)): "
        "near 0, its selection is the Thompson draw's noise; a wide spread is no ranking (a tracker of a few "
        "binary outcomes per prompt spreads wide with noise).",
        "",
        *([f"![headroom against Var(p)]({figure})", ""] if figure else []),
        "| task setting | pool | Var(p) | oracle selection − uniform | best learned selector − uniform "
        "| the learned selectors' spread of p (÷ Var(p)) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        var = "pending" if r["var"] is None else f"{r['var']:.4f}"
        best = "pending" if r["best"] is None else f"`{r['best']}` {points(r['best_diff'], r['best_ci95'])}"
        oracle = points(r["oracle"], r["oracle_ci95"], missing="pending")
        if r["oracle_rollouts"] is not None:  # the bound's price: its extra rollouts, never counted
            times = f", {r['oracle_rollouts'] / r['budget']:.0f}× the budget" if r["budget"] else ""
            oracle += f" ({r['oracle_rollouts']:,.0f} uncounted rollouts a run{times})"
        spreads = "; ".join(
            f"`{m}` {v:.4f}" + (f" ({100 * v / r['var']:.0f} %)" if r["var"] else "") for m, v in r["spreads"].items()
        )
        lines.append(f"| {r['task']} | {r['pool'] or '—'} | {var} | {oracle} | {best} | {spreads or 'pending'} |")
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
    "ORACLE_ROLLOUTS_KEY",
    "POOL_SIZE_KEY",
    "POOL_VAR_KEY",
    "add_selection_fields",
    "cold_start_markdown",
    "cold_start_rows",
    "headroom_markdown",
    "headroom_rows",
    "plot_headroom",
    "pool_pass_rate_var",
    "selects",
]
