"""Metrics rows as tests compare them."""

from __future__ import annotations

import json


def rows_of(run_dir) -> list[dict]:
    """The rows of a run's metrics.jsonl."""
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def comparable(row: dict) -> dict:
    """A metrics row without its timings, NaN replaced by a marker so that equal rows compare equal."""
    return {k: ("nan" if isinstance(v, float) and v != v else v) for k, v in row.items()
            if not k.startswith("time/") and k != "wall_time"}  # fmt: skip
