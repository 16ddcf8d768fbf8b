"""`v05 bench matrix` as users call it: the JSON contract, resume, the docs, the smoke grid, bad options."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.grid._grids import CONTRACT, REPO, write_grid
from v05.grid.spec import load_grid


def test_bench_matrix_cli_contract_resume_and_docs(tmp_path, tiny_grid, capsys):
    """`v05 bench matrix GRID --out DIR --json FILE --doc MD` trains every cell, writes the contract JSON, the report
    and the markdown; a second call reuses every finished cell (metrics untouched); a cell whose config changed is
    refused."""
    from v05.cli import main  # noqa: PLC0415 (the CLI parser, as users call it)

    out, js, doc = tmp_path / "mx", tmp_path / "mx.json", tmp_path / "results.md"
    argv = ["bench", "matrix", str(tiny_grid), "--out", str(out), "--json", str(js), "--doc", str(doc)]
    assert main(argv) == 0
    res = json.loads(js.read_text())
    assert set(res["tasks"]) == {"tiny-easy", "tiny-hard"}
    for task in res["tasks"].values():
        assert task["reference"] == "grpo4" and task["budget_rollouts"] == 96
        assert set(task["methods"]) == {"grpo4", "rloo", "v05_k2"}
        assert 0 <= task["warm_start_eval"] <= 1
        for m in task["methods"].values():
            assert CONTRACT <= set(m) and m["seeds"] == [0, 1]
            assert m["final_ci95"][0] <= m["final_mean"] <= m["final_ci95"][1]
        assert task["methods"]["v05_k2"]["family"] == "v05" and task["methods"]["rloo"]["family"] == "other"
        assert task["methods"]["grpo4"]["paired_diff_mean"] == 0.0
    assert (out / "index.html").is_file() and (out / "tiny-easy/report/eval_vs_compute.png").is_file()
    text = doc.read_text()
    assert "v05 bench matrix" in text and "tiny-hard (hard regime, revisited pool)" in text
    assert "Sparsity ablation" in text
    stamp = (out / "tiny-easy/rloo-s1/metrics.jsonl").stat().st_mtime_ns
    saved = out / "tiny-easy/rloo-s1/config.yaml"  # as an older v05 wrote it: without fields added since
    saved.write_text(saved.read_text().replace("  lora: null\n", "").replace("  gguf_file: null\n", ""))
    assert "lora" not in saved.read_text()
    assert main(argv) == 0  # the same config: fields added since read as their defaults, nothing retrained
    assert (out / "tiny-easy/rloo-s1/metrics.jsonl").stat().st_mtime_ns == stamp
    assert json.loads(js.read_text())["tasks"] == res["tasks"]
    body = yaml.safe_load(tiny_grid.read_text())
    body["methods"]["rloo"] = {"config": "demo-rloo", "overrides": ["optim.lr=3.0e-4"]}
    write_grid(tiny_grid, body)
    capsys.readouterr()
    assert main(argv) == 2
    assert "holds a run of another config" in capsys.readouterr().err


def test_standard_grid_quick_smoke(tmp_path, monkeypatch):
    """CI's smoke grid: `v05 bench matrix benchmarks/grids/standard.yaml --quick` trains every task setting of the
    standard grid (its quick methods, seed 0, quick-mode runs, fresh warm starts) and writes the contract JSON."""
    from v05.cli import main  # noqa: PLC0415

    monkeypatch.setenv("V05_WARM_START_DIR", str(tmp_path / "warm"))
    js = tmp_path / "quick.json"
    argv = ["bench", "matrix", str(REPO / "benchmarks/grids/standard.yaml"), "--quick", "--out", str(tmp_path / "q"),
            "--json", str(js)]  # fmt: skip
    assert main(argv) == 0
    res = json.loads(js.read_text())
    grid = load_grid(REPO / "benchmarks/grids/standard.yaml")
    assert set(res["tasks"]) == {t.name for t in grid.tasks}
    for task in res["tasks"].values():
        assert set(task["methods"]) == {grid.reference, *grid.quick_methods}
        assert all(CONTRACT <= set(m) and m["seeds"] == [0] for m in task["methods"].values())
    assert res["failures"] == {}


@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--workers", "0"], "--workers must be >= 1"), (["--tasks", "nope"], "unknown task setting(s) nope")],
)
def test_bad_cli_options_are_one_line_errors(tmp_path, tiny_grid, capsys, extra, message):
    """Each bad option exits 2 with a one-line message (no traceback) before the output folder is created."""
    from v05.cli import main  # noqa: PLC0415

    assert main(["bench", "matrix", str(tiny_grid), "--out", str(tmp_path / "mx"), *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "mx").exists()  # refused before anything was trained
