"""The report files: summary.json, PNGs, a self-contained and escaped report.html, and the terminal table."""

import json

from tests.report._fake import eval_run, write_run
from v05.report import load_runs, render_table, summary_table, write_report
from v05.report.runs import group_runs

FULL = {
    "grad_norm": 0.8,
    "entropy": 0.5,
    "rollouts_per_prompt": 4.0,
    "k_hist": [0, 0, 1, 3, 12],
    "zero_adv_frac": 0.2,
    "all_equal_frac": 0.3,
    "value/mae": 0.3,
    "value/auc": 0.7,
    "prior/auc": 0.8,
    "prior/tau2": 0.04,
    "prior/n0": 2.5,
}


def _runs(tmp_path, *, extra=None, names=("grpo4", "v05")):
    dirs = [
        eval_run(tmp_path, f"{name}_{seed}", name, seed, [(64, 0.1 + 0.1 * seed), (128, 0.3), (192, 0.4)], extra=extra,
                 compute_per_rollout=20 if extra else None, compute_user_per_rollout=30 if extra else None)
        for name in names
        for seed in (0, 1)
    ]
    return load_runs(dirs)


def test_report_is_self_contained_with_table_and_figures(tmp_path):
    """report.html embeds every PNG as a data URI and holds the summary table; summary.json has one row per method."""
    out = tmp_path / "out"
    path = write_report(_runs(tmp_path, extra=FULL), out, title="demo")
    page = path.read_text()
    assert path == out / "report.html"
    assert page.count("data:image/png;base64,") == 12
    assert '<table class="summary">' in page and "grpo4 (reference)" in page and "0.400 ± 0.000" in page
    assert "Equal rollouts consumed" in page and "not drawn" not in page
    for name in ("eval_vs_rollouts", "eval_vs_compute", "eval_vs_compute_user", "eval_vs_steps", "eval_vs_wall_time",
                 "train_pass_rate", "grad_norm", "entropy"):
        assert (out / f"{name}.png").stat().st_size > 1000
    assert (out / "rollouts_per_prompt.png").is_file() and (out / "zero_adv.png").is_file()
    assert (out / "value_quality.png").is_file() and (out / "prior.png").stat().st_size > 1000
    summary = json.loads((out / "summary.json").read_text())
    assert [r["method"] for r in summary] == ["grpo4", "v05"] and summary[0]["is_reference"]


def test_every_run_string_is_escaped(tmp_path):
    """A method name and a title with markup appear escaped, never as live tags."""
    runs = _runs(tmp_path, names=("<b>x</b>",))
    page = write_report(runs, tmp_path / "out", title="<script>t</script>").read_text()
    assert "&lt;b&gt;x&lt;/b&gt;" in page and "<b>x</b>" not in page
    assert "&lt;script&gt;" in page and "<script>" not in page


def test_a_missing_metric_skips_its_figure_and_says_so(tmp_path):
    """Runs that log no grad_norm, entropy, k or zero-advantage fraction: those figures are skipped and listed."""
    out = tmp_path / "out"
    page = write_report(_runs(tmp_path), out).read_text()
    for name in ("grad_norm", "entropy", "rollouts_per_prompt", "zero_adv", "eval_vs_compute_user"):
        assert not (out / f"{name}.png").exists()
        assert f"<code>{name}.png</code>: skipped: no run logs" in page
    assert "no run logs eval_pass_rate with compute_user" in page
    assert (out / "eval_vs_rollouts.png").is_file() and page.count("data:image/png;base64,") == 4


def test_restarted_wall_clock_leaves_out_one_method_not_the_report(tmp_path):
    """A run whose wall_time goes back (a resume) is left out of the wall-time figure, with a note."""
    runs = _runs(tmp_path)
    lines = [{"step": s, "rollouts_total": 64 * s, "wall_time": w, "eval_pass_rate": 0.2} for s, w in ((1, 9), (2, 1))]
    runs += load_runs([write_run(tmp_path, "odd", name="odd", lines=lines)])
    out = tmp_path / "out"
    page = write_report(runs, out).read_text()
    assert (out / "eval_vs_wall_time.png").is_file() and "odd: not drawn" in page


def test_render_table_is_plain_text(tmp_path):
    """The terminal table names every method, marks the reference and shows the target, without colour codes."""
    text = render_table(summary_table(group_runs(_runs(tmp_path, extra=FULL))))
    assert "grpo4 *" in text and "v05" in text and "target eval pass rate 0.400" in text
    assert "compute ÷ ref" in text and "user compute ÷ ref" in text  # both compute ratios
    assert "\x1b[" not in text
