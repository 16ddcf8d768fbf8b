"""Why a selection method wins or loses: per-cell diagnostics read from a matrix grid's committed store.

For each task setting and method of the store, mean over its seeds of: the train pass rate over the last 20 % of
steps (on the prompts the method chose to train on), the final eval pass rate (held-out prompts), their gap, the
mean share of all-equal groups over steps (what a selection tries to lower) and, for DPS, the mean predicted
P(partial) of the prompts it selected (1/3 = the uniform prior: the HMM knew nothing). A selection that lowers the
all-equal share while its train pass rate climbs away from its eval one trains on a narrow, revisited subset.

Usage: python benchmarks/selection_diagnostics.py [--store benchmarks/results/matrix/standard]
       [--methods grpo4,grpo4@lr-half,dps_fresh,dps_dataset,grpo4_select,greso] [--json PATH]
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import statistics
import sys
from pathlib import Path

_TAIL = 0.2  # the train pass rate is averaged over the last fifth of the steps


def _cell(path: Path) -> dict[str, float]:
    """One run's diagnostics from its ``metrics.jsonl.gz``."""
    with gzip.open(path, "rt") as f:
        rows = [json.loads(line) for line in f]
    if not rows:
        raise ValueError(f"{path}: no metrics rows")
    evals = [r["eval_pass_rate"] for r in rows if "eval_pass_rate" in r]
    tail = rows[int((1 - _TAIL) * len(rows)) :]

    def mean_of(key: str, of: list[dict]) -> float:
        values = [r[key] for r in of if key in r]
        return statistics.fmean(values) if values else math.nan

    return {
        "train_pass_rate_tail": mean_of("train_pass_rate", tail),
        "eval_final": evals[-1] if evals else math.nan,
        "all_equal_frac": mean_of("all_equal_frac", rows),
        "p_partial_selected": mean_of("mean_p_partial_selected", rows),
    }


def diagnose(store: Path, methods: list[str]) -> dict[str, dict[str, dict[str, float]]]:
    """{task: {method: seed-mean diagnostics}} over the comparison seeds (cells ``<method>-s<digit>``; a method at a
    tuning setting is named ``<method>@<setting>``; the tuning seed's cells are skipped)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for task in sorted(p for p in store.iterdir() if p.is_dir()):
        for method in methods:
            cells = sorted(task.glob(f"{method}-s[0-9]/metrics.jsonl.gz"))
            if not cells:
                continue
            per = [_cell(c) for c in cells]
            row = {key: statistics.fmean(c[key] for c in per) for key in per[0]}
            row["gap"] = row["train_pass_rate_tail"] - row["eval_final"]
            row["seeds"] = len(per)
            out.setdefault(task.name, {})[method] = row
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, default=Path("benchmarks/results/matrix/standard"))
    methods = "grpo4,grpo4@lr-half,grpo4@batch-half,dps_fresh,dps_dataset,grpo4_select,greso"
    ap.add_argument("--methods", default=methods)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if not args.store.is_dir():
        ap.error(f"--store {args.store}: not a folder")
    result = diagnose(args.store, [m for m in args.methods.split(",") if m])
    if not result:
        ap.error(f"--store {args.store}: none of the methods has a stored cell")
    head = f"{'task':<22}{'method':<20}{'seeds':>6}{'train(tail)':>13}{'eval':>8}{'gap':>8}"
    sys.stdout.write(head + f"{'all-equal':>11}{'P(partial)':>12}\n")
    for task, rows in result.items():
        for method, r in rows.items():
            sys.stdout.write(
                f"{task:<22}{method:<20}{r['seeds']:>6}{r['train_pass_rate_tail']:>13.3f}{r['eval_final']:>8.3f}"
                f"{r['gap']:>8.3f}{r['all_equal_frac']:>11.3f}{r['p_partial_selected']:>12.3f}\n"
            )
    if args.json is not None:
        clean = {
            t: {m: {k: None if math.isnan(v) else v for k, v in r.items()} for m, r in rows.items()}
            for t, rows in result.items()
        }
        args.json.write_text(json.dumps(clean, indent=1) + "\n")  # NaN (no such metric) as null
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
