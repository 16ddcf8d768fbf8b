"""The interface contract of `v05 train`, `v05 report` and `v05 demo`, run in-process as a user would."""

from __future__ import annotations

import json

from v05.cli import main


def test_train_quick_demo_v05_then_resume_and_report(tmp_path, monkeypatch, capsys):
    """`v05 train --config demo-v05 --out RUN --quick` exits 0 and writes config.yaml, metrics.jsonl (every line with
    step, rollouts_total, train_pass_rate; eval lines with eval_pass_rate), checkpoints/ and TensorBoard events;
    `--resume` on the finished run adds no step; `v05 report RUN --out DIR` writes DIR/report.html."""
    monkeypatch.setenv("V05_WARM_START_DIR", str(tmp_path / "warm"))
    run = tmp_path / "run"
    assert main(["train", "--config", "demo-v05", "--out", str(run), "--quick", "run.progress=false"]) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert all({"step", "rollouts_total", "train_pass_rate"} <= set(r) for r in rows)
    assert [r["step"] for r in rows] == list(range(7))
    assert [r["step"] for r in rows if "eval_pass_rate" in r] == [0, 3, 6]
    assert (run / "config.yaml").is_file() and (run / "checkpoints" / "latest").is_file()
    assert any((run / "tensorboard").glob("events.out.tfevents.*"))
    assert main(["train", "--config", "demo-v05", "--out", str(run), "--quick", "--resume", "run.progress=false"]) == 0
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 7
    capsys.readouterr()
    assert main(["report", str(run), "--out", str(tmp_path / "report")]) == 0
    assert (tmp_path / "report" / "report.html").stat().st_size > 10_000
    assert "report.html" in capsys.readouterr().out
