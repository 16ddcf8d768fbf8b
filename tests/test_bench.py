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
    assert set(res["anchors"]) == {"numpy_grpo", "verl_grpo_vectorized", "verl_grpo_loop"}
    assert res["anchors"]["numpy_grpo"] > 0
    if res["anchors"]["verl_grpo_vectorized"] is not None:  # verl installed: both verl variants timed
        assert res["anchors"]["verl_grpo_loop"] > 0
        assert res["ratio_to"]["verl_grpo_vectorized"]["grpo"] > 0


def test_numpy_grpo_anchor_matches_v05_grpo():
    """The bare-numpy anchor computes the same GRPO advantages as v05 (groups of ≥ 2): the timing is like for like."""
    from v05.bench import numpy_grpo
    from v05.registry import compute_advantages

    rng = np.random.default_rng(1)
    g = rng.permutation(np.repeat(np.arange(50), rng.integers(2, 9, 50)))
    r = np.where(rng.random(len(g)) < 0.4, 1.0, -1.0)
    np.testing.assert_allclose(numpy_grpo(r, g), compute_advantages("grpo", r, g), atol=1e-12)


@pytest.mark.parametrize("argv", [["--n-groups", "0"], ["--n-rollouts", "5", "--n-groups", "9"], ["--repeats", "0"]])
def test_bench_core_bad_sizes_exit_2(argv, capsys):
    """Bad sizes are a one-line error with exit code 2."""
    assert main(["bench", "core", *argv]) == 2
    assert "error" in capsys.readouterr().err
