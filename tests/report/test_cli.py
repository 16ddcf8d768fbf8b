"""``v05 report`` in-process through its own argparse registration: writes report.html, bad input raises."""

import argparse

import pytest

from tests.report._fake import eval_run
from v05.report.cli import register


def _parse(argv):
    parser = argparse.ArgumentParser(prog="v05")
    register(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


def test_report_cli_on_a_parent_directory(tmp_path, capsys):
    """`v05 report runs/demo --out runs/demo/report` finds the runs one level down, exits 0, prints path and table."""
    demo = tmp_path / "demo"
    for name in ("grpo4", "grpo16", "v05"):
        for seed in (0, 1, 2):
            eval_run(demo, f"{name}_s{seed}", name, seed, [(64, 0.1), (128, 0.2 + 0.01 * seed)])
    out = demo / "report"
    args = _parse(["report", str(demo), "--out", str(out), "--title", "demo"])
    assert args.func(args) == 0
    assert (out / "report.html").is_file() and (out / "summary.json").is_file()
    printed = capsys.readouterr().out
    assert str(out / "report.html") in printed and "grpo16" in printed
    args = _parse(["report", str(demo), "--out", str(out), "--reference", "v05", "--target", "0.15"])
    assert args.func(args) == 0  # a second report into the same directory (the old one is not a run)


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["--target", "1.5"], "--target"),
        (["--reference", "nope"], "unknown reference"),
    ],
)
def test_report_cli_bad_options_raise(tmp_path, extra, match):
    """A target outside [0, 1] or an unknown reference is a ValueError (exit 2 through v05.cli.main)."""
    eval_run(tmp_path, "r", "grpo4", 0, [(64, 0.1)])
    args = _parse(["report", str(tmp_path / "r"), "--out", str(tmp_path / "o"), *extra])
    with pytest.raises(ValueError, match=match):
        args.func(args)


def test_report_cli_missing_run_raises_naming_it(tmp_path):
    """A directory without metrics.jsonl anywhere is a ValueError that names it."""
    (tmp_path / "empty_dir").mkdir()
    args = _parse(["report", str(tmp_path / "empty_dir"), "--out", str(tmp_path / "o")])
    with pytest.raises(ValueError, match="empty_dir"):
        args.func(args)
