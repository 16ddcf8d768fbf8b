"""The selection grid's lead table (issue 42's README table) and its targets judged per task setting.

From a results dict with the selection fields (:mod:`v05.grid.selection`): the picked learned selector (the tuning's
``selector`` pick) against uniform k = 1, the oracle's selection (the bound), SPO with and without its offline init
and GRPO k = 4 (:func:`lead_rows`), and the issue's targets for the pick judged per setting by a rule fixed before
the comparison seeds ran (:func:`target_rows`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from v05.grid.text import points, ratio

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
            # spo_offline runs on this setting (not on the fresh pools); a method without that pairing in the
            # attribution leaves its beating SPO unmeasured there instead of read against spo
            "offline_run": offline is not None or SPO_OFFLINE_METHOD in methods,
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


def _targets_header(first: str) -> list[str]:
    """A markdown table's header and rule: column ``first``, then one column per target of :data:`TARGETS`."""
    return [f"| {first} | " + " | ".join(text for _, text in TARGETS) + " |", "|---|" + "---|" * len(TARGETS)]


def targets_markdown(rows: Sequence[dict[str, Any]], heading: str = "##") -> list[str]:
    """The results page's verdict per setting on each of :data:`TARGETS` (the rule is written on the page)."""
    if not rows:
        return []
    mark = {True: "met", False: "**missed**", None: "—"}
    lines = [f"{heading} Targets for the picked selector (issue 42), per setting", "",
             "Judged from the lead table by a rule fixed before the comparison seeds ran "
             "(`v05.grid.lead.target_rows`; the targets are the hard settings', only the second applies to the "
             "easy one): —: not applicable or not measured yet. Beating SPO reads "
             "`spo_offline` where its init runs (equal total rollouts) and `spo` on the fresh pools, where the init "
             "alone exceeds the budget.", "", *_targets_header("task setting (pool)")]  # fmt: skip
    for r in rows:
        lines.append(f"| {r['task']} ({r['pool'] or '—'}) | " + " | ".join(mark[r[k]] for k, _ in TARGETS) + " |")
    met = {k: sum(r[k] is True for r in rows) for k, _ in TARGETS}
    known = {k: sum(r[k] is not None for r in rows) for k, _ in TARGETS}
    lines += ["", "Met: " + "; ".join(f"{k} {met[k]} of {known[k]} judged" for k, _ in TARGETS) + ".", ""]
    return lines


def method_target_rows(results: dict[str, Any], regimes: dict[str, str]) -> list[dict[str, Any]]:
    """Every compared method judged by the pick's targets: per target, the hard settings met and judged.

    Each method of the grid but the attribution's control (uniform k = 1, the zero of every target) takes the pick's
    place in :func:`lead_rows` and :func:`target_rows`; ``beats_spo`` is judged only where the grid pairs the method
    with SPO (an attribution row), so a method without that pairing is unmeasured there, never read against another
    SPO. Per method: ``{target: (met, judged)}`` over the hard settings (the easy one's ``no_loss`` included, as in
    :func:`targets_markdown`), ``pick``: True for the grid's pick and ``oracle``: True for the
    bound, whose ranking rollouts are reported but never counted (so its rollouts and compute are not a selector's).
    """
    tasks = [t for t in results["tasks"].values() if "oracle_selection_headroom" in t]
    names = list(dict.fromkeys(m for t in tasks for m in t["methods"]))
    headroom = next((a["headroom"] for a in (results.get("attribution") or {}).values() if a.get("headroom")), {})
    control, oracle = headroom.get("control"), headroom.get("oracle")
    out = []
    for name in names:
        if name == control:
            continue
        judged = target_rows(lead_rows(results, name), regimes)
        counts = {k: (sum(t[k] is True for t in judged), sum(t[k] is not None for t in judged)) for k, _ in TARGETS}
        out.append({"method": name, "oracle": name == oracle, "pick": name == picked_selector(results),
                    "targets": counts})  # fmt: skip
    return out


def method_targets_markdown(rows: Sequence[dict[str, Any]], heading: str = "##") -> list[str]:
    """The results page's table of :func:`method_target_rows`: each method's settings met of those judged."""
    if not rows:
        return []
    lines = [f"{heading} The targets, every method", "",
             "Each compared method put in the pick's place and judged by the same rule (`v05.grid.lead."
             "method_target_rows`): settings met of those judged; beating SPO only where the grid pairs the method "
             "with SPO. The oracle is the bound: its ranking rollouts are reported, never counted, so its rollouts "
             "and compute columns are not a selector's.", "", *_targets_header("method")]  # fmt: skip
    for r in rows:
        name = f"`{r['method']}`" + (" (the pick)" if r["pick"] else "") + (" (the bound)" if r["oracle"] else "")
        cells = ("—" if judged == 0 else f"{met} of {judged}" for met, judged in (r["targets"][k] for k, _ in TARGETS))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return [*lines, ""]


SHARE_NEEDED, HARD_SETTINGS = 4, 6
"""Issue 42's headline target: the pick takes ≥ ½ of the oracle's headroom on ≥ 4 of the grid's 6 hard settings."""


def _span(values: Sequence[float], one: Callable[[float], str]) -> str:
    """``lo to hi`` of ``values`` written by ``one`` (a single value where both ends read alike)."""
    lo, hi = one(min(values)), one(max(values))
    return lo if lo == hi else f"{lo} to {hi}"


def verdict_markdown(rows: Sequence[dict[str, Any]], regimes: dict[str, str], pick: str | None) -> list[str]:
    """The plain answer, by the headline target alone: does selection by the learned prior pay?

    Decided by a rule fixed with the targets (:func:`target_rows` of ``rows``): **yes** once the pick meets
    ``share`` on :data:`SHARE_NEEDED` hard settings; **no** once it no longer can (met + not yet judged <
    :data:`SHARE_NEEDED`, of the grid's :data:`HARD_SETTINGS`; a setting not yet run counts as not yet judged);
    otherwise not decided yet. Then the spans behind it over the hard settings: the oracle's selection and the pick
    against uniform k = 1, uniform k = 1 against GRPO k = 4 (what k = 1 alone buys), and the pick's rollouts and
    compute (a TRL/verl user's, this trainer's) to GRPO k = 4's final. Nothing before a pick or a hard row.
    """
    hard = [r for r in rows if regimes.get(r["task"]) == "hard"]
    if pick is None or not hard:
        return []
    targets = target_rows(hard, regimes)
    met, missed = (sum(t["share"] is v for t in targets) for v in (True, False))
    open_ = HARD_SETTINGS - met - missed
    if met >= SHARE_NEEDED:
        head = "**Yes: selection by the learned prior pays here.**"
    elif met + open_ < SHARE_NEEDED:
        head = "**No: selection by a learned prior does not pay here.**"
    else:
        head = "**Not decided yet** whether selection by a learned prior pays."
    lines = [
        f"{head} The pick (`{pick}`) takes ≥ ½ of the oracle's headroom, its interval above 0, on {met} of the "
        f"{met + missed} hard settings judged (the target: {SHARE_NEEDED} of {HARD_SETTINGS}; {open_} not judged yet)."
    ]
    said = [f"{name} {_span(v, points)}" for name, key in (("the oracle's selection", "bound"), ("the pick", "pick"))
            if (v := [r[key] for r in hard if r[key] is not None])]  # fmt: skip
    if said:
        lines.append("Over uniform k = 1, in points paired over the run: " + ", ".join(said) + ".")
    if uniform := [r["uniform"] for r in hard if r["uniform"] is not None]:
        lines.append(f"k = 1 alone (uniform k = 1 − GRPO k = 4): {_span(uniform, points)}.")
    if reached := [r for r in hard if r["pick_ratio"] is not None]:
        user, trainer = ([c for r in reached if (c := r["pick_compute"][i]) is not None] for i in (1, 0))
        never = [r["task"] for r in hard if r["pick_ratio"] is None and r["pick_ratio_ci95"] is not None]
        lines.append(
            f"The pick reaches GRPO k = 4's final with {_span([r['pick_ratio'] for r in reached], ratio)} its rollouts"
            + (f", {_span(user, ratio)} its compute as a TRL/verl user pays it" if user else "")
            + (f" ({_span(trainer, ratio)} in this trainer)" if trainer else "")
            + (f"; never on {', '.join(never)}" if never else "")
            + "."
        )
    return [" ".join(lines), ""]


__all__ = [
    "HARD_SETTINGS",
    "SELECTOR_PICK",
    "SHARE_NEEDED",
    "SPO_METHOD",
    "SPO_OFFLINE_METHOD",
    "TARGETS",
    "lead_markdown",
    "lead_rows",
    "method_target_rows",
    "method_targets_markdown",
    "picked_selector",
    "target_rows",
    "targets_markdown",
    "verdict_markdown",
]
