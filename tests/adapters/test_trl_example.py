"""The README's TRL example is examples/trl/train_tiny.py, and it runs as written (a fresh interpreter, CPU)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "trl" / "train_tiny.py"


def test_the_readme_shows_the_example_line_for_line():
    """The README's TRL code block is the example file after its docstring, so neither can drift from the other."""
    body = EXAMPLE.read_text().split('"""\n\n', 1)[1]
    assert f"```python\n{body}```" in (ROOT / "README.md").read_text()


def test_the_example_runs_as_written(tmp_path):
    """``python examples/trl/train_tiny.py`` from a clean working directory: 20 TRL steps at one rollout per prompt
    with v05_eb + history (v05-recommended's form); it exits 0 and TRL's log carries v05's metrics (the prior
    learned 64 prompts a step)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = proc.stdout + proc.stderr
    assert "'v05/prior_n': '1024'" in out and "'v05/n0'" in out  # 20 steps x 64 one-rollout groups, v05_eb
    assert (tmp_path / "runs" / "trl-tiny").is_dir()
