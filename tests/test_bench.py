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


def test_spread_median_range_and_iqr():
    """spread gives the median, min–max and linear-interpolation quartiles of the rounds, keeping round order:
    [3, 1, 2] → sorted [1, 2, 3], median 2, Q₁ = 1.5, Q₃ = 2.5; [1, 2, 3, 10] → median (2+3)/2 = 2.5."""
    from v05.timing import spread

    s = spread([3.0, 1.0, 2.0])
    assert (s.median, s.low, s.high, s.q1, s.q3, s.values) == (2.0, 1.0, 3.0, 1.5, 2.5, (3.0, 1.0, 2.0))
    assert s.as_dict() == {"median": 2.0, "min": 1.0, "max": 3.0, "iqr": [1.5, 2.5], "rounds": [3.0, 1.0, 2.0]}
    assert spread([1.0, 2.0, 3.0, 10.0]).median == 2.5  # one outlying round barely moves the median
    assert spread([7.0]).as_dict()["iqr"] == [7.0, 7.0]


@pytest.mark.parametrize("values", [[], [1.0, float("nan")], [float("inf")]])
def test_spread_rejects_empty_and_non_finite(values):
    """No rounds, or a non-finite round, is a ValueError (a failed timing must not be quoted)."""
    from v05.timing import spread

    with pytest.raises(ValueError, match="round"):
        spread(values)


def test_interleave_runs_sides_round_robin():
    """interleave calls A, B, C, A, B, C (never A, A, B, B, ...) and returns one {side: measurement} per round."""
    from v05.timing import interleave

    calls = []

    def side(name):
        def measure():
            calls.append(name)
            return len(calls)

        return measure

    rounds = interleave({"a": side("a"), "b": side("b"), "c": side("c")}, 2)
    assert calls == ["a", "b", "c", "a", "b", "c"]
    assert rounds == [{"a": 1, "b": 2, "c": 3}, {"a": 4, "b": 5, "c": 6}]


@pytest.mark.parametrize("repeats", [0, -1, 1.5, True])
def test_interleave_rejects_bad_repeats(repeats):
    """repeats must be an integer >= 1: a one-line ValueError naming it."""
    from v05.timing import interleave

    with pytest.raises(ValueError, match="repeats must be an integer >= 1"):
        interleave({"a": lambda: 1.0}, repeats)


def test_ratio_spread_pairs_rounds():
    """The quoted ratio is the median of per-round ratios x_r/y_r — [200/100, 300/100, 90/60] = [2, 3, 1.5] → 2 —
    not median(x)/median(y) = 200/100 by coincidence of other rounds."""
    from v05.timing import ratio_spread

    rounds = [{"x": 200.0, "y": 100.0}, {"x": 300.0, "y": 100.0}, {"x": 90.0, "y": 60.0}]
    s = ratio_spread(rounds, "x", "y")
    assert s.values == (2.0, 3.0, 1.5) and s.median == 2.0 and (s.low, s.high) == (1.5, 3.0)


def test_bench_core_reports_medians_with_spread(tmp_path):
    """With 3 rounds, every estimator's and anchor's quoted seconds is the median of its 3 per-round times, lying
    within their min–max, and the import time carries its spread too."""
    out = tmp_path / "bench.json"
    argv = ["bench", "core", "--n-rollouts", "2000", "--n-groups", "100", "--repeats", "3", "--no-verl-loop"]
    assert main([*argv, "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["repeats"] == 3 and res["anchors"]["verl_grpo_loop"] is None
    for name, sec in res["seconds"].items():
        s = res["seconds_spread"][name]
        assert len(s["rounds"]) == 3 and sec == sorted(s["rounds"])[1] and s["min"] <= sec <= s["max"]
    assert res["anchors_spread"]["numpy_grpo"]["median"] == res["anchors"]["numpy_grpo"]
    assert res["import_spread"]["min"] <= res["import_seconds"] <= res["import_spread"]["max"]


def test_bench_priors_median_over_fresh_rounds(monkeypatch):
    """`bench_priors` runs `benchmark_throughput` once per round and quotes the medians under its keys, with the
    spread: stand-in rounds of 20, 30 and 25 s for 512 prompts → median 25 s; rates 25.6, 17.07, 20.48 → 20.48."""
    import v05.priors.evaluate as evaluate
    from v05.bench import bench_priors

    seconds = iter([20.0, 30.0, 25.0])

    def fake(n_prompts, *, backend):
        s = next(seconds)
        return {"n_prompts": float(n_prompts), "seconds": s, "prompts_per_s": n_prompts / s, "cached_seconds": 0.01,
                "cached_prompts_per_s": n_prompts / 0.01, "load_seconds": 2.0, "truncated": 0.0}  # fmt: skip

    monkeypatch.setattr(evaluate, "benchmark_throughput", fake)
    res = bench_priors(512, repeats=3)
    assert res["seconds"] == 25.0 and res["prompts_per_s"] == pytest.approx(512 / 25)
    assert res["spread"]["seconds"]["rounds"] == [20.0, 30.0, 25.0] and res["repeats"] == 3
    assert (res["spread"]["prompts_per_s"]["min"], res["spread"]["prompts_per_s"]["max"]) == (512 / 30, 512 / 20)
    with pytest.raises(ValueError, match="repeats"):
        bench_priors(512, repeats=0)
