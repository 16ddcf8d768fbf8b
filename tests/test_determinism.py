"""Determinism of the simulator: the same seed and config give bit-identical records for every method it supports.

Every estimator the simulator accepts (``v05.registry.ESTIMATORS`` but those that need a policy's probe values) runs
under every allocator (``v05.registry.ALLOCATORS``), with a noisy/hallucinating oracle prior and the prior-quality
sweep, twice with one seed: every number of every record (NaN equal to NaN), the notes included, is the same; a
different seed changes some record, so the comparison can fail. The learned priors (``v05.priors`` providers the
simulator can fit) and the ``v05 simulate`` CLI (synthetic population drawn from ``--seed``, JSON output) are
checked the same way, the CLI also in fresh processes with other ``PYTHONHASHSEED`` values (an in-process pair cannot
see a dependence on ``hash(str)``). The slow ``combined`` prior (~30 s) is marked ``slow``.

Already covered elsewhere and not repeated here: ``tests/sim/test_runner.py::test_results_do_not_depend_on_grid_order``
(random streams are derived per cell, so adding a method changes no other record). The trainer's determinism is
``tests/train/test_determinism.py``.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from v05.cli import main
from v05.datasets.v0 import load_v0
from v05.registry import ALLOCATORS, ESTIMATORS
from v05.sim import SimConfig, run_simulation, v0_population

SIM_ESTIMATORS = tuple(name for name, spec in ESTIMATORS.items() if not spec.needs_values)
"""Every estimator the simulator accepts (``needs_values`` ones, POISE, need a policy: SimConfig refuses them)."""
PRIORS = ("context_mean", "oracle:noise=0.2,bias=0.05,halluc=0.1")
"""The headline prior and a random one (its noise and hallucinations are drawn from the seed)."""
SLOW_PROVIDERS = frozenset({"combined"})
"""Learned providers that take ~20 s per simulation (the ``combined`` refit): marked slow."""


def _canon(x: object) -> object:
    """A value as exact-comparable Python data: NaN as a marker (so NaN == NaN), arrays and tuples as lists."""
    if isinstance(x, dict):
        return {str(k): _canon(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, np.ndarray)):
        return [_canon(v) for v in (x.tolist() if isinstance(x, np.ndarray) else x)]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and math.isnan(x):
        return "nan"
    return x


def _canon_result(res) -> dict:
    return {"records": _canon(list(res.records)), "notes": list(res.notes), "population": res.population}


@pytest.fixture(scope="module")
def population():
    return v0_population(load_v0())


def _providers() -> list:
    try:
        from v05.priors import PROVIDERS  # noqa: PLC0415 (optional extra)
    except ImportError:
        return []
    # a prior that reads a live policy (probe) or draws its rollouts (the oracle bound) is train-only: the simulator
    # refuses it (its "oracle" is the built-in noisy μ, in PRIORS)
    names = [n for n, s in PROVIDERS.items() if not s.needs_policy and not s.needs_sampler]
    return [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_PROVIDERS else n for n in names]


def test_the_simulator_accepts_every_listed_estimator_and_allocator():
    """The method lists below are the registries' (minus the policy-bound estimators), so a new method is tested."""
    assert set(SIM_ESTIMATORS) == {n for n in ESTIMATORS if not ESTIMATORS[n].needs_values}
    assert "grpo" in SIM_ESTIMATORS and len(SIM_ESTIMATORS) >= 8
    SimConfig(estimators=SIM_ESTIMATORS, allocators=tuple(ALLOCATORS), priors=PRIORS)  # every name is valid


@pytest.mark.parametrize("allocator", list(ALLOCATORS))
def test_same_seed_same_records_for_every_method(population, allocator):
    """Every estimator under this allocator (ks 2 and 4, two priors, the noise sweep, equal-budget records): two
    runs with seed 3 give identical records (exact floats, NaN == NaN) and notes; seed 4 changes some record."""

    def run(seed: int):
        cfg = SimConfig(estimators=SIM_ESTIMATORS, allocators=(allocator,), priors=PRIORS, ks=(2, 4),
                        noise_sweep=(0.3,), reps=2, seed=seed)  # fmt: skip
        return _canon_result(run_simulation(population, cfg))

    a, b = run(3), run(3)
    assert {r["estimator"] for r in a["records"]} == set(SIM_ESTIMATORS)  # every method ran under this allocator
    assert len(a["records"]) == len(b["records"])
    for ra, rb in zip(a["records"], b["records"], strict=True):
        assert ra == rb, (ra["estimator"], ra["allocator"], ra["prior"], ra["k"])
    assert a == b
    c = run(4)
    assert [(r["estimator"], r["prior"], r["k"]) for r in c["records"]] == [
        (r["estimator"], r["prior"], r["k"]) for r in a["records"]
    ]
    assert c["records"] != a["records"]  # the seed reaches the draws: the comparison above can fail


@pytest.mark.parametrize("provider", _providers())
def test_same_seed_same_records_with_a_learned_prior(population, provider):
    """A learned prior (fitted per snapshot on the context rows) under fixed k and OSLA: same seed, same records."""

    def run(seed: int):
        cfg = SimConfig(estimators=("grpo", "v05", "v05_eb"), allocators=("fixed", "osla"), priors=(provider,),
                        ks=(4,), noise_sweep=(), reps=2, seed=seed)  # fmt: skip
        return _canon_result(run_simulation(population, cfg))

    a, b = run(0), run(0)
    assert a == b
    assert run(1)["records"] != a["records"]


def _cli_json(tmp_path, name: str, seed: int, population: str, *, hash_seed: str | None = None) -> dict:
    """``v05 simulate --json`` of every method; in this process, or in a fresh one with ``PYTHONHASHSEED``."""
    path = tmp_path / f"{name}.json"
    methods = ["--estimators", ",".join(SIM_ESTIMATORS), "--allocators", ",".join(ALLOCATORS)]
    grid = ["--ks", "4", "--noise-sweep", "0.3", "--reps", "2", "--seed", str(seed)]
    synthetic = ["--n-prompts", "16", "--n-batches", "2"] if population != "v0" else []
    argv = ["simulate", "--quiet", "--no-figure", "--population", population, *synthetic, *methods, *grid,
            "--json", str(path)]  # fmt: skip
    if hash_seed is None:
        assert main(argv) == 0
    else:
        env = os.environ | {"PYTHONHASHSEED": hash_seed, "OPENBLAS_NUM_THREADS": "1"}
        proc = subprocess.run([sys.executable, "-m", "v05", *argv], env=env, capture_output=True, text=True,
                              timeout=600, check=False)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
    payload = json.loads(path.read_text())
    payload["config"].pop("elapsed_s")  # the only wall-clock field
    return _canon(payload)


@pytest.mark.parametrize("population_name", ["bimodal", "v0"])
def test_simulate_cli_same_seed_same_json(tmp_path, population_name):
    """``v05 simulate --seed S --json`` twice (every method; a synthetic population drawn from the seed, or V0):
    identical JSON (records, claims, notes) but the elapsed time; another seed gives other results."""
    a = _cli_json(tmp_path, "a", 11, population_name)
    b = _cli_json(tmp_path, "b", 11, population_name)
    assert a == b
    c = _cli_json(tmp_path, "c", 12, population_name)
    assert c["results"] != a["results"]


def test_simulate_same_json_across_processes_and_hash_seeds(tmp_path):
    """Fresh processes with PYTHONHASHSEED 1 and 2 write the JSON this process writes: no random stream depends on
    ``hash(str)`` or set order (the runner derives streams with ``zlib.crc32``)."""
    here = _cli_json(tmp_path, "here", 5, "bimodal")
    assert _cli_json(tmp_path, "h1", 5, "bimodal", hash_seed="1") == here
    assert _cli_json(tmp_path, "h2", 5, "bimodal", hash_seed="2") == here
