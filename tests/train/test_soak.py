"""Soak (issue 15 item 4): 3,000 training steps over 20,000 prompts with the ``history`` and ``combined`` priors.

The two runs go in parallel child processes (``tests/train/_soak.py``; one core each), so resident memory is each
run's own. Flat means: resident memory grows < 64 MiB from step 500 to the end (a leak of one row per step of the
prior's buffers would already be visible), the median step CPU time of the last 300 steps is < 1.5× that of steps
200–500 (CPU time, not wall time: a busy machine stretches wall time unevenly along a run, which once failed this
check at 2.5× with another process starting mid-run), the calibration rows sit at the provider's window (1024), the
combined prior's context buffer at its capacity, the history at most one entry per prompt seen, and the checkpoint
state grows no faster than the prompts seen. The measurements are printed (``-s``) and written to
``soak-<prior>.json`` in the test's tmp folder.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.soak

ROOT = Path(__file__).resolve().parents[2]
STEPS = 3000
PRIORS = ("history", "combined")


@pytest.fixture(scope="module")
def soaked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Both soak runs, in parallel; their measurements by prior."""
    root = tmp_path_factory.mktemp("soak")
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    procs = {p: subprocess.Popen([sys.executable, "-m", "tests.train._soak", p, str(root / f"soak-{p}.json"),
                                  str(root / f"run-{p}"), str(STEPS)], cwd=ROOT, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for p in PRIORS}  # fmt: skip
    out = {}
    for prior, proc in procs.items():
        log, _ = proc.communicate(timeout=3600)
        assert proc.returncode == 0, log[-3000:]
        out[prior] = json.loads((root / f"soak-{prior}.json").read_text())
    return out


def summary(m: dict) -> dict:
    """Start/end figures of one soak run (what the closing note and docs/reliability.md quote)."""
    t, rss = m["step_cpu_s"], m["rss_mib"]
    return {
        "steps": m["steps"], "rss_mib_step_500": round(rss[499], 1), "rss_mib_end": round(rss[-1], 1),
        "step_ms_200_500": round(1e3 * statistics.median(t[199:500]), 1),
        "step_ms_last_300": round(1e3 * statistics.median(t[-300:]), 1), **m["sizes"], **m["state_bytes"],
    }  # fmt: skip


@pytest.mark.parametrize("prior", PRIORS)
def test_soak_memory_and_step_time_stay_flat(soaked, prior):
    """3,000 steps: memory and step time flat, buffers at their caps, state bounded (module docstring)."""
    m = soaked[prior]
    s = summary(m)
    print(f"soak {prior}: {s}")
    assert m["steps"] == STEPS and m["pool"] == 20_000
    assert s["rss_mib_end"] - s["rss_mib_step_500"] < 64, s
    assert s["step_ms_last_300"] < 1.5 * s["step_ms_200_500"], s
    assert s["online_rows"] == 1024  # the online calibration window, full and not beyond
    assert 0 < s["history_prompts"] <= m["prompts_sampled"]  # one Beta history per prompt seen, never more
    if prior == "combined":
        assert s["buffer_rows"] == s["buffer_capacity"] > 0  # the in-context buffer full, not beyond its capacity
    half, end = (m["state_bytes"][k] for k in sorted(m["state_bytes"]))
    assert end < 2.2 * half, m["state_bytes"]  # grows with the prompts seen (twice as many), nothing else
