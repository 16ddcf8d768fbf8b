"""benchmarks/selection_diagnostics.py: the diagnostics it reads from a matrix store, and its bad-input errors."""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "selection_diagnostics.py"


def _load():
    spec = importlib.util.spec_from_file_location("selection_diagnostics", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _cell(store: Path, name: str, train: list[float], evals: dict[int, float], all_equal: float) -> None:
    run = store / "task-a" / name
    run.mkdir(parents=True)
    rows = [{"step": i + 1, "train_pass_rate": t, "all_equal_frac": all_equal} for i, t in enumerate(train)]
    for step, e in evals.items():
        rows[step - 1]["eval_pass_rate"] = e
    with gzip.open(run / "metrics.jsonl.gz", "wt") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))


def test_diagnostics_average_the_last_fifth_of_train_and_the_final_eval_over_comparison_seeds(tmp_path):
    """Train pass rate over the last 20 % of steps, the last eval, gap = train − eval, seed means; the tuning seed
    (s100) and another method's cells are not mixed in."""
    diag = _load()
    _cell(tmp_path, "dps-s0", [0.0] * 8 + [0.5, 0.7], {5: 0.1, 10: 0.2}, 0.4)
    _cell(tmp_path, "dps-s1", [0.0] * 8 + [0.9, 0.9], {10: 0.4}, 0.6)
    _cell(tmp_path, "dps-s100", [1.0] * 10, {10: 1.0}, 1.0)  # tuning seed: skipped
    _cell(tmp_path, "dps_fresh-s0", [1.0] * 10, {10: 1.0}, 1.0)  # another method
    row = diag.diagnose(tmp_path, ["dps"])["task-a"]["dps"]
    assert row["seeds"] == 2
    assert row["train_pass_rate_tail"] == pytest.approx((0.6 + 0.9) / 2)
    assert row["eval_final"] == pytest.approx(0.3) and row["gap"] == pytest.approx(0.75 - 0.3)
    assert row["all_equal_frac"] == pytest.approx(0.5)
    assert row["p_partial_selected"] != row["p_partial_selected"]  # not logged: NaN (null in the JSON)


def test_a_missing_store_or_no_stored_method_is_a_one_line_usage_error(tmp_path, capsys):
    """A missing store folder or methods none of which are stored exit 2 with a one-line usage error."""
    diag = _load()
    with pytest.raises(SystemExit) as err:
        diag.main(["--store", str(tmp_path / "absent")])
    assert err.value.code == 2 and "not a folder" in capsys.readouterr().err
    with pytest.raises(SystemExit) as err:
        diag.main(["--store", str(tmp_path), "--methods", "nothing"])
    assert err.value.code == 2 and "none of the methods" in capsys.readouterr().err
