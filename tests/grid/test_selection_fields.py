"""The selection grid's JSON fields (issue 42) by hand: the pool's Var(p), the oracle's selection headroom."""

from __future__ import annotations

import json

import pytest

from tests.grid._grids import REPO, fake_run, task_of
from v05.grid.lead import (
    lead_markdown,
    lead_rows,
    method_target_rows,
    method_targets_markdown,
    picked_selector,
    target_rows,
    targets_markdown,
    verdict_markdown,
)
from v05.grid.render import README_BEGIN, README_END, readme_section
from v05.grid.results import attribution_results
from v05.grid.selection import (
    OFFLINE_N,
    add_selection_fields,
    cold_start_markdown,
    cold_start_rows,
    headroom_markdown,
    headroom_rows,
    plot_headroom,
    pool_pass_rate_var,
)
from v05.grid.spec import Attribution, AttributionRow

ROW = AttributionRow(factor="o", method="sel_oracle", versus="uniform_rm")
SPEC = Attribution(rows=(ROW,), control="uniform_rm", oracle="sel_oracle")


def _groups(oracle_allocator: str) -> dict:
    ref = [fake_run("grpo4", s, [(0, 0.2), (500, 0.3), (1000, 0.4)]) for s in (0, 1)]
    uni = [fake_run("uniform_rm", s, [(0, 0.2), (500, 0.35), (1000, 0.45)]) for s in (0, 1)]
    orc = [fake_run("sel_oracle", s, [(0, 0.2), (500, 0.4 + 0.01 * s), (1000, 0.5)], allocator=oracle_allocator)
           for s in (0, 1)]  # fmt: skip
    for run, variances in zip(orc, ([0.04, 0.02], [0.06, 0.04]), strict=True):
        for row, v in zip(run.metrics[1:], variances, strict=True):
            row["pool_prior_var"] = v
            row["prior/oracle_rollouts"] = 4000 * row["step"] + 1000 * run.seed  # seed 0: 8,000 at the end; 1: 9,000
    return {"grpo4": ref, "uniform_rm": uni, "sel_oracle": orc}


def test_the_selection_fields_by_hand():
    """pass_rate_var: seed 0's steps average 0.03, seed 1's 0.05, so 0.04 (the steps' last values would give 0.03, the
    first 0.05); the headroom is the attribution's oracle − uniform difference, above 0 here; vs_uniform_* are the
    control pairing; tuned follows the cell's setting; pool_prior_var is each method's own (none logged by the
    uniform runs); oracle_rollouts the oracle's last count, averaged over seeds (8,000 and 9,000)."""
    groups = _groups("prior_select")
    task = task_of(groups, control="uniform_rm")
    task["methods"]["uniform_rm"]["setting"] = "batch-double"
    head = attribution_results(SPEC, groups)["headroom"]
    out = add_selection_fields(task, head, groups, "sel_oracle")
    assert out["pass_rate_var"] == pytest.approx(0.04)
    assert out["pool_size"] is None  # the oracle's runs logged no pool_size
    assert out["oracle_selection_headroom"] == pytest.approx(head["oracle_diff"]) and head["oracle_diff"] > 0
    assert out["oracle_selection_headroom_ci95"] == head["oracle_ci95"]
    m = out["methods"]
    assert (m["uniform_rm"]["tuned"], m["sel_oracle"]["tuned"]) == (True, False)
    assert m["sel_oracle"]["vs_uniform_diff"] == m["sel_oracle"]["vs_running_mean_diff"]
    assert m["sel_oracle"]["vs_uniform_diff"] == pytest.approx(head["oracle_diff"])
    assert m["sel_oracle"]["pool_prior_var"] == pytest.approx(0.04) and m["uniform_rm"]["pool_prior_var"] is None
    assert m["sel_oracle"]["oracle_rollouts"] == pytest.approx(8500.0) and m["uniform_rm"]["oracle_rollouts"] is None


def test_an_oracle_that_does_not_select_gives_no_selection_headroom():
    """The evidence grid's oracle is a baseline at k = 1 (allocator fixed): its headroom is not a selection's, so the
    task gets none of the fields; runs that never logged pool_prior_var give None."""
    groups = _groups("fixed")
    task = task_of(groups, control="uniform_rm")
    out = add_selection_fields(task, attribution_results(SPEC, groups)["headroom"], groups, "sel_oracle")
    assert "oracle_selection_headroom" not in out and "pass_rate_var" not in out
    assert pool_pass_rate_var(groups["uniform_rm"]) is None


def test_the_headroom_section_and_figure(tmp_path):
    """The page's section lists each task setting with the fields (Var(p) to 4 places, the headroom and the best
    learned selector in points with their 95 % intervals, each learned selector's spread of p and its share of Var(p);
    "pending" where a part has not run) and links the figure;
    the figure is written once a setting has both Var(p) and the headroom, and not before."""
    results = {
        "tasks": {
            "a": {"pool": "mixed", "pass_rate_var": 0.0612, "oracle_selection_headroom": 0.034,
                  "oracle_selection_headroom_ci95": [0.03, 0.038],
                  "budget_rollouts": 38400,
                  "methods": {"sel_combined": {"pool_prior_var": 0.0306}, "sel_history": {"pool_prior_var": None},
                              "sel_oracle": {"oracle_rollouts": 1228800.0}}},
            "b": {"pool": "fresh", "pass_rate_var": None, "oracle_selection_headroom": None,
                  "oracle_selection_headroom_ci95": None, "methods": {}},
            "c": {"pool": "revisited"},  # no oracle that selects: not a row
        },
        "attribution": {"a": {"headroom": {"oracle": "sel_oracle", "best_learned": "sel_combined",
                                           "best_learned_diff": 0.016,
                                           "best_learned_ci95": [0.012, 0.02],
                                           "learned": ["sel_history", "sel_combined"]}}},
    }  # fmt: skip
    rows = headroom_rows(results)
    assert [r["task"] for r in rows] == ["a", "b"]
    text = "\n".join(headroom_markdown(rows, "x-headroom.png"))
    assert ("| a | mixed | 0.0612 | +3.4 [+3.0, +3.8] (1,228,800 uncounted rollouts a run, 32× the budget) "
            "| `sel_combined` +1.6 [+1.2, +2.0] | `sel_combined` 0.0306 (50 %) |") in text  # sel_history: no spread
    assert "| b | fresh | pending | pending | pending | pending |" in text and "](x-headroom.png)" in text
    assert plot_headroom(rows[1:], tmp_path / "none.png") is None and not (tmp_path / "none.png").exists()
    out = plot_headroom(rows, tmp_path / "h.png")
    assert out == tmp_path / "h.png" and out.stat().st_size > 1000
    assert headroom_markdown([], None) == []


def test_the_cold_start_rows_by_hand():
    """On a fresh pool: every method but the oracle with its counted init and its rollouts to the reference's final;
    with no offline init run there, the row of what SPO's would cost: 8 × 40,000 = 320,000 rollouts before step 1,
    ≥ 320,000 / 30,000 = 10.7× the reference's rollouts to its own final and 8.3× the 38,400 budget. A revisited pool
    gets no rows; a fresh pool where an init ran gets no hypothetical row."""
    groups = _groups("prior_select")
    for run in groups["sel_oracle"]:
        run.metrics[0]["pool_size"] = 40000
    fresh = add_selection_fields(task_of(groups, control="uniform_rm"), attribution_results(SPEC, groups)["headroom"],
                                 groups, "sel_oracle")  # fmt: skip
    assert fresh["pool_size"] == 40000
    fresh |= {"pool": "fresh", "budget_rollouts": 38400}
    fresh["methods"]["grpo4"]["rollouts_to_reference_final"] = 30000.0
    revisited = {**fresh, "pool": "revisited"}
    results = {"tasks": {"f": fresh, "r": revisited}, "attribution": {"f": {"headroom": {"oracle": "sel_oracle"}}}}
    rows = cold_start_rows(results)
    assert OFFLINE_N == 8
    assert [(r["task"], r["method"]) for r in rows] == [("f", "grpo4"), ("f", "uniform_rm"), ("f", "offline_init")]
    off = rows[-1]
    assert off["init"] == 320000.0 and off["ratio"] == pytest.approx(320000 / 30000) and not off["run"]
    text = "\n".join(cold_start_markdown(rows))
    assert "| f | `offline_init` | 320,000 (8.3× the budget) | ≥ 320,000 (not run) | ≥ 10.7× |" in text
    assert "| f | `grpo4` | 0 | 30,000 | 1.00× |" in text
    fresh["methods"]["uniform_rm"]["init_rollouts"] = 4000.0
    assert "offline_init" not in [r["method"] for r in cold_start_rows(results)]
    assert cold_start_markdown([]) == []


def test_the_lead_table_by_hand():
    """Per setting: uniform − GRPO, the bound, the pick − uniform with its share of the bound (+1.6 of +3.2: 50 %),
    SPO − uniform, the pick − SPO from the attribution row (pick, spo), the rollout ratios (the pick's interval
    "never" where a resample never reaches) and both compute ratios; a bound whose interval reaches 0 gives no
    share; a pick not yet decided leaves its cells pending."""
    def method(diff, ci, ratio=None, ratio_ci=None, compute=(None, None)):
        return {"vs_uniform_diff": diff, "vs_uniform_ci95": ci, "rollout_ratio": ratio, "rollout_ratio_ci95": ratio_ci,
                "compute_ratio": compute[0], "compute_ratio_user": compute[1]}  # fmt: skip

    task = {
        "pool": "mixed", "oracle_selection_headroom": 0.032, "oracle_selection_headroom_ci95": [0.02, 0.044],
        "methods": {
            "uniform_rm": {"paired_diff_mean": 0.021, "paired_diff_ci95": [0.003, 0.04], **method(0.0, None)},
            "sel_combined": method(0.016, [0.012, 0.02], 0.35, [0.3, None], (0.6, 0.45)),
            "spo": method(0.004, [-0.002, 0.01], 0.7, [0.5, 0.9], (1.2, 0.9)),
        },
    }  # fmt: skip
    flat = {**task, "oracle_selection_headroom": 0.01, "oracle_selection_headroom_ci95": [-0.01, 0.03]}
    rows_of = {"rows": [{"method": "sel_combined", "versus": "spo", "diff": 0.012, "ci95": [0.004, 0.02]}],
               "headroom": {"control": "uniform_rm"}}  # fmt: skip
    mixed = {"rows": [*rows_of["rows"], {"method": "sel_combined", "versus": "spo_offline", "diff": 0.03,
                                         "ci95": [0.02, 0.04]}], "headroom": rows_of["headroom"]}  # fmt: skip
    results = {"tasks": {"m": task, "f": flat, "x": {"pool": "revisited", "methods": {}}},
               "attribution": {"m": mixed, "f": rows_of},
               "picks": {"selector": {"method": "sel_combined"}}}  # fmt: skip
    assert picked_selector(results) == "sel_combined" and picked_selector({"picks": {"selector": None}}) is None
    rows = lead_rows(results, "sel_combined")
    assert [r["task"] for r in rows] == ["m", "f"]
    assert rows[0]["share"] == pytest.approx(0.5) and rows[1]["share"] is None
    assert rows[0]["pick_vs_spo"] == 0.012 and rows[0]["pick_compute"] == (0.6, 0.45)
    text = "\n".join(lead_markdown(rows, "sel_combined"))
    assert ("| m (mixed) | +2.1 [+0.3, +4.0] | +3.2 [+2.0, +4.4] | +1.6 [+1.2, +2.0] | 50 % | +0.4 [-0.2, +1.0] "
            "| +1.2 [+0.4, +2.0] | +3.0 [+2.0, +4.0] | 0.35× [0.30, never] / 0.70× "
            "| 0.60×, 0.45× / 1.20×, 0.90× |") in text
    assert "| +1.2 [+0.4, +2.0] | not run | 0.35×" in text  # f: no spo_offline row (a fresh pool's)
    readme = readme_section(results, {"command": "v05 bench matrix s.yaml", "hardware": "2 CPU cores"}, "s.md")
    assert readme.startswith(README_BEGIN) and readme.endswith(README_END) and "[s.md](s.md)" in readme
    assert "\n### The lead table" in readme and "\n### Targets for the picked selector" in readme  # the README's level
    assert "| m (mixed) | +2.1 [+0.3, +4.0] | +3.2 [+2.0, +4.4] |" in readme and "| m (mixed) | — | " in readme
    assert "2 CPU cores" in readme and "Partial" not in readme
    meta = {"command": "c", "hardware": "this-machine", "cells_finished": 3, "cells_total": 9,
            "cells_hardware": {"intel": 2, "amd": 1}}  # fmt: skip
    partial = readme_section(results, meta, "s.md")
    assert "**Partial: 3 of the grid's 9 cells have run" in partial and "this-machine" not in partial
    assert "cells trained on 2 machines" in partial
    pending = "\n".join(lead_markdown(lead_rows(results, None), None))
    assert "| pending | — |" in pending and "pending / 0.70×" in pending
    assert lead_markdown([], None) == []


def test_the_targets_by_hand():
    """Issue 42's targets from lead rows: share ≥ ½ with the pick's interval above 0; no loss (the interval's upper
    end ≥ 0); rollouts ≤ 0.4× with the bootstrap's upper end ≤ 0.55 (an end never reached fails); the user's compute
    ≤ 0.7×; beats SPO by ≥ +1 point with its interval above 0, against spo_offline where it ran and spo on a fresh
    pool, not judged on a revisited one; on an easy setting only "no loss" is judged."""
    base = {"pool": "mixed", "share": 0.5, "pick_ci95": [0.012, 0.02], "pick_ratio": 0.35,
            "pick_ratio_ci95": [0.3, 0.5], "pick_compute": (0.6, 0.45), "offline_run": True,
            "pick_vs_offline": 0.03, "pick_vs_offline_ci95": [0.02, 0.04], "pick_vs_spo": 0.005,
            "pick_vs_spo_ci95": [0.0, 0.01]}  # fmt: skip
    rows = [
        {**base, "task": "all"},
        {**base, "task": "miss", "share": 0.49, "pick_ratio_ci95": [0.3, None], "pick_compute": (0.6, 0.71),
         "pick_vs_offline": 0.009},
        {**base, "task": "fresh", "pool": "fresh", "offline_run": False, "pick_ci95": [-0.03, -0.001],
         "pick_ratio": 0.41, "share": None},
        {**base, "task": "rev", "pool": "revisited", "pick_vs_offline": -0.05},
        {**base, "task": "easy", "pick_ci95": [-0.01, 0.01]},
    ]  # fmt: skip
    regimes = {"all": "hard", "miss": "hard", "fresh": "hard", "rev": "hard", "easy": "easy"}
    got = {r["task"]: r for r in target_rows(rows, regimes)}
    keys = ("share", "no_loss", "rollouts", "compute", "beats_spo")
    assert [got["all"][k] for k in keys] == [True, True, True, True, True]
    assert got["all"]["beats_spo_versus"] == "spo_offline"
    assert [got["miss"][k] for k in keys] == [False, True, False, False, False]
    assert [got["fresh"][k] for k in keys] == [None, False, False, True, False]  # spo: +0.5 < +1 point
    assert got["fresh"]["beats_spo_versus"] == "spo"
    assert got["rev"]["beats_spo"] is None and [got["easy"][k] for k in keys] == [None, True, None, None, None]
    text = "\n".join(targets_markdown(list(got.values())))
    assert "| all (mixed) | met | met | met | met | met |" in text and "| easy (mixed) | — | met | — | — | — |" in text
    assert "share 2 of 3 judged; no_loss 4 of 5 judged" in text and targets_markdown([]) == []


def test_the_plain_answer_by_hand():
    """Yes at 4 hard settings whose share is met; no once met + not judged < 4 of 6; else not decided. The spans are
    over the hard settings only (the easy one's numbers never enter); a pick that never reaches is named; no pick or
    no hard row: nothing."""

    def row(task, share, pick=0.002, ci=(0.001, 0.003), bound=0.04, uniform=0.02, reach=0.5, compute=(0.8, 0.6)):
        return {
            "task": task,
            "pool": "mixed",
            "share": share,
            "pick": pick,
            "pick_ci95": list(ci),
            "bound": bound,
            "uniform": uniform,
            "pick_ratio": reach,
            "pick_ratio_ci95": [0.4, None if reach is None else 0.6],
            "pick_compute": compute,
            "offline_run": False,
            "pick_vs_spo": None,
            "pick_vs_spo_ci95": None,
        }

    regimes = {f"h{i}": "hard" for i in range(6)} | {"easy": "easy"}
    easy = row("easy", None, pick=0.5, bound=0.9, uniform=0.9, reach=0.01, compute=(0.01, 0.01))
    yes = [row(f"h{i}", 0.6) for i in range(4)] + [easy]
    text = " ".join(verdict_markdown(yes, regimes, "sel_x"))
    assert text.startswith("**Yes: selection by the learned prior pays here.** The pick (`sel_x`)")
    assert "on 4 of the 4 hard settings judged (the target: 4 of 6; 2 not judged yet)" in text
    assert "the oracle's selection +4.0, the pick +0.2." in text and "(uniform k = 1 − GRPO k = 4): +2.0." in text
    assert "with 0.50× its rollouts, 0.60× its compute as a TRL/verl user pays it (0.80× in this trainer)." in text
    three = [row(f"h{i}", 0.6) for i in range(3)] + [row("h3", 0.1), row("h4", 0.2)]
    assert " ".join(verdict_markdown(three, regimes, "sel_x")).startswith("**Not decided yet**")  # 3 + 1 open
    no = [
        row("h0", 0.6, bound=0.07),
        row("h1", 0.1, pick=-0.009, uniform=0.036, reach=None, compute=(None, None)),
        row("h2", 0.2, reach=0.61, compute=(0.95, 0.69)),
        row("h3", -0.3, reach=0.48, compute=(0.75, 0.54)),
        easy,
    ]
    text = " ".join(verdict_markdown(no, regimes, "sel_x"))
    assert text.startswith("**No: selection by a learned prior does not pay here.**")  # 1 met + 2 open < 4
    assert "on 1 of the 4 hard settings judged (the target: 4 of 6; 2 not judged yet)" in text
    assert "the oracle's selection +4.0 to +7.0, the pick -0.9 to +0.2." in text and "+2.0 to +3.6." in text
    assert (
        "with 0.48× to 0.61× its rollouts, 0.54× to 0.69× its compute as a TRL/verl user pays it (0.75× to 0.95× "
        "in this trainer); never on h1."
    ) in text
    assert verdict_markdown(no, regimes, None) == [] and verdict_markdown([easy], regimes, "sel_x") == []


def test_every_method_judged_by_the_picks_targets_by_hand():
    """Each method but the control takes the pick's place: settings met of those judged per target, the easy
    setting's "no loss" counted; beating SPO only where the grid pairs the method with SPO: a method paired with
    `spo` alone is unmeasured where `spo_offline` runs, never read against `spo`; the bound and the pick are named;
    the README keeps the pick's targets alone."""

    def m(diff, ci, reach=None, reach_ci=None, user=None):
        return {"vs_uniform_diff": diff, "vs_uniform_ci95": ci, "rollout_ratio": reach, "rollout_ratio_ci95": reach_ci,
                "compute_ratio": None if user is None else 2 * user, "compute_ratio_user": user}  # fmt: skip

    def pair(method, versus, diff, ci):
        return {"method": method, "versus": versus, "diff": diff, "ci95": ci}

    uniform = {"paired_diff_mean": 0.02, "paired_diff_ci95": [0.01, 0.03], **m(0.0, None)}
    h1 = {"pool": "mixed", "regime": "hard", "oracle_selection_headroom": 0.04,
          "oracle_selection_headroom_ci95": [0.02, 0.06],
          "methods": {"uniform_rm": uniform, "sel_oracle": m(0.04, [0.02, 0.06], 0.3, [0.25, 0.5], 0.4),
                      "sel_a": m(0.025, [0.01, 0.04], 0.5, [0.4, 0.6], 0.6),
                      "sel_b": m(-0.01, [-0.02, -0.001], None, [0.5, None]),
                      "spo": m(0.0, [-0.01, 0.01], 0.9, [0.8, 1.0], 0.9), "spo_offline": m(0.01, [0.0, 0.02])}}
    h2 = {"pool": "fresh", "regime": "hard", "oracle_selection_headroom": 0.05,
          "oracle_selection_headroom_ci95": [0.03, 0.07],
          "methods": {"uniform_rm": uniform, "sel_a": m(0.01, [0.0, 0.02], 0.35, [0.3, 0.5], 0.5),
                      "sel_b": m(0.03, [0.02, 0.04], 0.3, [0.2, 0.4], 0.8)}}
    easy = {"pool": "revisited", "regime": "easy", "oracle_selection_headroom": 0.01,
            "oracle_selection_headroom_ci95": [0.005, 0.015],
            "methods": {"uniform_rm": uniform, "sel_a": m(-0.01, [-0.02, -0.001]), "sel_b": m(0.0, [-0.01, 0.01])}}
    headroom = {"control": "uniform_rm", "oracle": "sel_oracle"}
    attribution = {
        "h1": {"headroom": headroom, "rows": [pair("sel_a", "spo_offline", 0.02, [0.01, 0.03]),
                                              pair("sel_b", "spo", 0.05, [0.04, 0.06]),
                                              pair("spo_offline", "spo", 0.01, [0.0, 0.02])]},
        "h2": {"headroom": headroom, "rows": [pair("sel_a", "spo", 0.005, [-0.001, 0.01]),
                                              pair("sel_b", "spo", 0.02, [0.01, 0.03])]},
        "e": {"headroom": headroom, "rows": []},
    }
    results = {"tasks": {"h1": h1, "h2": h2, "e": easy}, "attribution": attribution,
               "picks": {"selector": {"method": "sel_a"}}}  # fmt: skip
    regimes = {n: t["regime"] for n, t in results["tasks"].items()}
    rows = {r["method"]: r for r in method_target_rows(results, regimes)}
    assert list(rows) == ["sel_oracle", "sel_a", "sel_b", "spo", "spo_offline"]  # the control is no row
    keys = ("share", "no_loss", "rollouts", "compute", "beats_spo")
    assert [rows["sel_a"]["targets"][k] for k in keys] == [(1, 2), (2, 3), (1, 2), (2, 2), (1, 2)]
    assert [rows["sel_b"]["targets"][k] for k in keys] == [(1, 2), (2, 3), (1, 2), (0, 2), (1, 1)]  # h1: not vs spo
    assert [rows["sel_oracle"]["targets"][k] for k in keys] == [(1, 1)] * 4 + [(0, 0)]
    assert [rows["spo"]["targets"][k] for k in keys] == [(0, 1), (1, 1), (0, 1), (0, 1), (0, 0)]
    assert [rows["spo_offline"]["targets"][k] for k in keys] == [(0, 1), (1, 1), (0, 0), (0, 0), (0, 0)]
    assert rows["sel_a"]["pick"] and not rows["sel_b"]["pick"] and rows["sel_oracle"]["oracle"]
    text = "\n".join(method_targets_markdown(list(rows.values())))
    assert "| `sel_oracle` (the bound) | 1 of 1 | 1 of 1 | 1 of 1 | 1 of 1 | — |" in text
    assert "| `sel_a` (the pick) | 1 of 2 | 2 of 3 | 1 of 2 | 2 of 2 | 1 of 2 |" in text
    assert "| `sel_b` | 1 of 2 | 2 of 3 | 1 of 2 | 0 of 2 | 1 of 1 |" in text and method_targets_markdown([]) == []
    readme = readme_section(results, {"command": "c", "hardware": "h"}, "s.md")
    assert "### Targets for the picked selector" in readme and "The targets, every method" not in readme


def test_the_readmes_lead_section_is_what_the_committed_json_renders():
    """README.md's generated section is ``readme_section`` of benchmarks/results/matrix/selection.json and its meta,
    byte for byte: a hand edit of the README's numbers, or a JSON re-run without ``--readme``, goes red."""
    results = json.loads((REPO / "benchmarks/results/matrix/selection.json").read_text(encoding="utf-8"))
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = README_BEGIN + readme.split(README_BEGIN)[1].split(README_END)[0] + README_END
    assert section == readme_section(results, results["meta"], "docs/results-selection.md")
    page = (REPO / "docs/results-selection.md").read_text(encoding="utf-8")
    assert "\n## The targets, every method\n" in page  # the page judges every method; the README the pick alone
