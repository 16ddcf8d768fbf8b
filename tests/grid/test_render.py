"""The pages: the results page states every claim and lists every method; a method missing on a task setting."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.grid._grids import REPO, fake_run, fake_store, finish, task_of, write_grid
from v05.grid.cells import grid_cells
from v05.grid.render import README_BEGIN, README_END, methods_markdown, protocol_markdown, results_markdown
from v05.grid.run import bench_matrix
from v05.grid.spec import Grid, load_grid


def test_results_markdown_states_every_claim():
    """The generated page names the command, the hardware, each task's table and one paragraph per claim."""
    ref = [fake_run("grpo4", s, [(0, 0.2), (1000, 0.6)], grad=1.0, entropy=0.4) for s in (0, 1)]
    g16 = [fake_run("grpo16", s, [(0, 0.2), (1000, 0.5)], grad=0.8, entropy=0.3) for s in (0, 1)]
    v05 = [
        fake_run("v05", s, [(0, 0.2), (1000, 0.65)], estimator="v05", allocator="osla", grad=0.5, entropy=0.6)
        for s in (0, 1)
    ]
    k4 = [fake_run("v05_k4", s, [(0, 0.2), (1000, 0.55)], estimator="v05") for s in (0, 1)]
    task = task_of({"grpo4": ref, "grpo16": g16, "v05": v05, "v05_k4": k4})
    meta = {
        "command": "v05 bench matrix g.yaml",
        "hardware": "2 CPU cores",
        "cells_wall_time_s": 3600.0,
        "cells_finished": 8,
        "cells_total": 8,
        "generated": "today",
    }

    grid = Grid(name="g", path=Path("g.yaml"), seeds=(0, 1), reference="grpo4", tasks=(), methods=())
    text = results_markdown(grid, {"tasks": {"t": task}}, meta)
    assert "v05 bench matrix g.yaml" in text and "2 CPU cores" in text and "1.00 h" in text
    assert "0.525 (sd 0.025) vs grpo4 1.050 (sd 0.050)" in text and "lower, smoother" in text
    assert "0.600 vs grpo4 0.400 (higher)" in text
    assert "k = 4 beats GRPO@16" in text or "k = 4 ties GRPO@16" in text
    assert "| v05 | v05 | 2 |" in text
    # the promise: the best V0.5-line method with its 95 % interval, never a method named as the oracle bound
    assert "best V0.5-line method `v05` (picked after the fact): +" in text
    attribution = {"t": {"rows": [], "headroom": {"oracle": "v05", "oracle_diff": None}}}
    oracle = results_markdown(grid, {"tasks": {"t": task}, "attribution": attribution}, meta)
    assert "best V0.5-line method `v05_k4` (picked after the fact)" in oracle
    # the evidence grid names the paper's method v05_paper: the claims read it there too
    renamed = task_of({"grpo4": ref, "grpo16": g16, "v05_paper": v05, "v05_k4": k4})
    text = results_markdown(grid, {"tasks": {"t": renamed}}, meta)
    assert "0.525 (sd 0.025) vs grpo4 1.050 (sd 0.050)" in text and "0.600 vs grpo4 0.400 (higher)" in text
    assert "leaves out" not in text  # every task setting reported
    part = results_markdown(grid, {"tasks": {"t": task}}, meta | {"tasks_left_out": ["easy"]})
    assert "this report leaves out the grid's task setting(s) easy (`--tasks`)" in part
    nothing = results_markdown(grid, {"tasks": {"t": task_of({"grpo4": ref, "grpo16": g16})}}, meta)
    assert "no run of the paper's V0.5" in nothing


def test_results_page_lists_each_method_with_its_config_and_overrides():
    """The standard grid's page says what each method ran: its config and overrides (dps hands its rejects back,
    the grid-wide overrides come first), so a reader can tell the standard grid's DPS from prior-pay's dps_fresh."""
    grid = load_grid(REPO / "benchmarks/grids/standard.yaml")
    text = "\n".join(methods_markdown(grid))
    assert "- `dps`: `demo-dps` + `allocator.rejects=return`" in text
    assert "- `grpo4`: `demo-grpo4`\n" in text and "`run.progress=false`" in text
    assert text.count("\n- `") == len(grid.methods)
    assert "no method was tuned" in protocol_markdown(grid)
    tuned = protocol_markdown(load_grid(REPO / "benchmarks/grids/prior-pay.yaml"))
    assert "no method was tuned" not in tuned and "on seed 100, which is not compared" in tuned and "`ppo`" in tuned


def test_a_method_missing_on_a_task_setting_is_left_out_of_its_tables(tmp_path, tiny_grid):
    """`v05_k2` runs on tiny-hard only (`tasks:`): `--report-only` reports both task settings, tiny-easy without a
    `v05_k2` row, column or attribution row (the row naming it is dropped there, not reported as pending), and the
    results page, the README section and index.html render both settings."""
    body = yaml.safe_load(tiny_grid.read_text())
    body["methods"]["v05_k2"]["tasks"] = ["tiny-hard"]
    body["attribution"] = {"control": "rloo", "oracle": "v05_k2",
                           "rows": [{"factor": "k2", "method": "v05_k2", "versus": "grpo4"},
                                    {"factor": "loo", "method": "rloo", "versus": "grpo4"}]}  # fmt: skip
    grid_file = write_grid(tiny_grid, body)
    out = tmp_path / "mx"
    cells = grid_cells(load_grid(grid_file), out)
    for i, cell in enumerate(cells):
        finish(cell, [0.2, 0.3 + 0.01 * i, 0.4 + 0.01 * i])
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n{README_BEGIN}\nold\n{README_END}\n")
    doc = tmp_path / "results.md"
    res = bench_matrix(grid_file, out, train_cells=False, progress=False, doc=doc, readme=readme)
    tasks, attribution = res["results"]["tasks"], res["results"]["attribution"]
    assert set(tasks) == {"tiny-easy", "tiny-hard"}
    assert set(tasks["tiny-easy"]["methods"]) == {"grpo4", "rloo"}
    assert set(tasks["tiny-hard"]["methods"]) == {"grpo4", "rloo", "v05_k2"}
    assert [r["factor"] for r in attribution["tiny-easy"]["rows"]] == ["loo"]
    assert [r["factor"] for r in attribution["tiny-hard"]["rows"]] == ["k2", "loo"]
    assert attribution["tiny-hard"]["rows"][0]["diff"] is not None
    text = doc.read_text()
    easy, hard = text.split("## tiny-easy")[1].split("## tiny-hard")
    assert "| v05_k2 |" not in easy and "`v05_k2` (" not in easy and "pending" not in easy
    assert "| v05_k2 |" in hard and "`v05_k2` (8 prompts) − `grpo4` (8 prompts)" in hard  # what each cell ran
    assert "- `v05_k2`: `demo-v05-k4` + `allocator.options.k=2` (only on `tiny-hard`)" in text
    section = readme.read_text()
    assert "**tiny-easy**" in section and "**tiny-hard**" in section and section.count("| v05_k2 |") == 1
    assert "claims in [results.md](results.md))" in section  # the link relative to the file it is written into
    assert (out / "index.html").read_text().count("<td>v05_k2</td>") == 1


def test_the_pages_say_what_the_cells_ran_not_what_the_grid_file_says(tmp_path, tiny_grid):
    """The protocol quotes the learning rate and schedule read from the cells (constant here, one method's cosine
    named apart; never the old blanket "cosine over the rollout budget"), each table row and attribution side its
    measured k × prompts a step, and the task setting its warm start as the SFT record measured it, beside the
    target."""
    methods = {"grpo4": "demo-grpo4", "rloo": {"config": "demo-rloo", "overrides": ["optim.schedule=cosine"]}}
    grid_file, store, cells = fake_store(tmp_path, tiny_grid, methods=methods)
    body = yaml.safe_load(grid_file.read_text())
    body["attribution"] = {"rows": [{"factor": "k = 4 x 32 (the grid file's words)", "method": "rloo",
                                     "versus": "grpo4"}]}  # fmt: skip
    write_grid(grid_file, body)
    doc = tmp_path / "results.md"
    res = bench_matrix(grid_file, tmp_path / "out", train_cells=False, progress=False, store=store, doc=doc)
    text = doc.read_text()
    warmup = cells[0].cfg.optim.warmup_steps
    assert "cosine over the rollout budget" not in text
    assert f"(1e-4, held constant after {warmup} linear warm-up steps; 1e-4, cosine-decayed to 0 over the rollout " \
           f"budget after {warmup} linear warm-up steps for `rloo` on tiny-easy)" in text  # fmt: skip
    assert res["results"]["tasks"]["tiny-easy"]["methods"]["rloo"]["ran"] == {
        "prompts_per_step": 8, "lr": 1.0e-4, "schedule": "cosine", "warmup_steps": warmup, "rollouts_per_step": 48.0}
    assert text.count(" | 4 × 8 |") == 2  # each row: what its cells ran
    assert "| k = 4 x 32 (the grid file's words) | `rloo` (4 × 8) − `grpo4` (4 × 8) |" in text
    assert ("the SFT warm-up targeted 0.30 and stopped at 0.350 on the validation split (mean of 1 warm start; their "
            "records, `sft.json`)") in text  # fmt: skip
    assert "percentile-bootstrap" in text and "simulation-only" not in text


def test_every_table_marks_untuned_methods_compared_with_tuned_ones():
    """Where the grid tunes some methods, the headline table, the note under it, the attribution rows and the
    headroom sentence say which ran untuned (the oracle, v0 and probe ran their configs against a tuned running
    mean): a difference between the two also holds the tuning's share."""
    runs = {name: [fake_run(name, s, [(0, 0.2), (1000, 0.5 + 0.01 * i)]) for s in (0, 1)]
            for i, name in enumerate(("grpo4", "eb1_running_mean", "eb1_oracle"))}  # fmt: skip
    task = task_of(runs)
    for name, m in task["methods"].items():
        m["ran"] = {"prompts_per_step": 16 if name == "grpo4" else 64, "lr": 1e-4, "schedule": "constant",
                    "warmup_steps": 10, "rollouts_per_step": 64.0}  # fmt: skip
        m["setting"] = {"grpo4": "batch-half", "eb1_running_mean": "default"}.get(name)
        m["rollouts_per_prompt"] = 4.0 if name == "grpo4" else 1.0
    attribution = {"rows": [{"factor": "(f) oracle", "method": "eb1_oracle", "versus": "eb1_running_mean",
                             "diff": 0.01, "ci95": [0.0, 0.02], "n": 2, "rollout_ratio": 0.9}],
                   "headroom": {"control": "eb1_running_mean", "oracle": "eb1_oracle", "oracle_diff": 0.01,
                                "oracle_ci95": [0.0, 0.02], "best_learned": None, "captured": None}}  # fmt: skip
    grid = Grid(name="g", path=Path("g.yaml"), seeds=(0, 1), reference="grpo4", tasks=(), methods=())
    meta = {"command": "c", "hardware": "h", "cells_wall_time_s": 1.0, "cells_finished": 6, "cells_total": 6,
            "generated": "today"}  # fmt: skip
    text = results_markdown(grid, {"tasks": {"t": task}, "attribution": {"t": attribution}}, meta)
    rows = {line.split(" | ")[0]: line for line in text.splitlines() if line.startswith("| ")}
    assert rows["| grpo4 (ref)"].endswith("| 4 × 16, tuned: batch-half |")
    assert rows["| eb1_oracle"].endswith("| 1 × 64, untuned |")
    assert "Untuned, their configs as they are: `eb1_oracle`" in text
    assert "| (f) oracle † | `eb1_oracle` (1 × 64, untuned) − `eb1_running_mean` (1 × 64, tuned: default) |" in text
    assert "† an untuned method against a tuned one" in text
    headroom = "Headroom over `eb1_running_mean` (1 × 64, tuned: default): the oracle `eb1_oracle` (1 × 64, untuned)"
    assert headroom in text
