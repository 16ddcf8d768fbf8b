import json

import numpy as np
import pytest

from v05.bench import ragged_batch
from v05.cli import main


def test_ragged_batch_shapes_and_groups():
    """ragged_batch gives N ±1 rewards over exactly G non-empty groups."""
    r, g = ragged_batch(100, 7, np.random.default_rng(0))
    assert r.shape == (100,) and set(np.unique(r)) <= {-1.0, 1.0}
    assert np.all(np.bincount(g, minlength=7) >= 1) and g.max() == 6


def test_bench_core_smoke(tmp_path):
    """`v05 bench core` on a tiny batch exits 0 and writes timings for every estimator (tiny budget smoke run)."""
    out = tmp_path / "bench.json"
    argv = ["bench", "core", "--n-rollouts", "2000", "--n-groups", "100", "--repeats", "1", "--json", str(out)]
    assert main(argv) == 0
    res = json.loads(out.read_text())
    assert set(res["seconds"]) >= {"grpo", "v05", "v05_eb"} and res["import_seconds"] > 0


@pytest.mark.parametrize("argv", [["--n-groups", "0"], ["--n-rollouts", "5", "--n-groups", "9"], ["--repeats", "0"]])
def test_bench_core_bad_sizes_exit_2(argv, capsys):
    """Bad sizes are a one-line error with exit code 2."""
    assert main(["bench", "core", *argv]) == 2
    assert "error" in capsys.readouterr().err
