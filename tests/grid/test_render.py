"""The pages: the results page states every claim and lists every method."""

from __future__ import annotations

from pathlib import Path

from tests.grid._grids import REPO, fake_run, task_of
from v05.grid.render import methods_markdown, protocol_markdown, results_markdown
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
