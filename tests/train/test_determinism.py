"""Determinism of the CPU trainer: the same seed and config give identical metrics and bit-identical final weights.

For every method the trainer offers, ``train`` runs twice (2 steps, the tiny task) into two run directories: the
metrics rows equal each other exactly (``comparable``: all but the timings, NaN == NaN) and every tensor of every
safetensors file under ``final/`` is bit-identical. Methods: every registered estimator the trainer accepts
(``oracle`` needs the true values and is refused) with fixed k, every allocator with GRPO, V0.5 / V0.5-EB with OSLA,
POISE (the probe takes over after one bootstrap step), PPO (separate critic and value head) and V0.5-EB with the
probe prior. One check shows the seed reaches the RL sampling (another seed, same warm start, other metrics), and
one runs the CLI in two processes with different ``PYTHONHASHSEED`` (the in-process pairs cannot see a dependence on
``hash(str)``, e.g. set iteration order).

Already covered elsewhere and not repeated here: resume reproduces the uninterrupted run
(``tests/train/test_loop.py::test_resume_reproduces_the_uninterrupted_run``, and for POISE, PPO and the probe prior
``tests/train/test_value.py::test_resume_reproduces_runs_with_probe_critic_or_probe_prior``); an interrupted bench
cell resumes exactly (``tests/grid/test_run.py::test_an_interrupted_cell_resumes_exactly``); the SFT warm start
(``tests/train/test_sft.py::test_same_seed_same_training``), the tiny policy's initialisation
(``tests/train/test_policy.py::test_tiny_policy_seed_is_private_and_deterministic``) and the HF engine's sampling
(``tests/engines/test_hf.py::test_same_seed_same_rollouts_and_global_rng_untouched``) are deterministic per seed.
The simulator's determinism is ``tests/test_determinism.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.train._rows import comparable, rows_of
from tests.train.test_loop import method_overrides
from tests.train.test_value import POISE, PPO, PROBE
from v05.registry import ALLOCATORS, ESTIMATORS
from v05.train.config import load_config
from v05.train.loop import train

TWO_STEPS = ["train.steps=2"]  # the tiny fixture's eval.every=2: evals at steps 0 and 2


def _methods() -> list:
    """(id, overrides) of every method: the registries' (so a new estimator or allocator is tested) plus the
    trainer's value methods."""
    out = []
    for name, spec in ESTIMATORS.items():
        if spec.needs_truth:  # oracle: the trainer refuses it (simulation only)
            continue
        over = POISE if name == "poise" else method_overrides(name, "fixed")  # POISE: probe used from step 2
        out.append(pytest.param(over, id=f"{name}-fixed"))
    out += [pytest.param(method_overrides("grpo", a), id=f"grpo-{a}") for a in ALLOCATORS if a != "fixed"]
    out += [pytest.param(method_overrides(e, "osla"), id=f"{e}-osla") for e in ("v05", "v05_eb")]
    out += [pytest.param(PPO, id="ppo_separate"), pytest.param([*PPO, "critic.mode=head"], id="ppo_head"),
            pytest.param(PROBE, id="v05_eb-probe_prior")]  # fmt: skip
    return out


def _weights(run_dir: Path) -> dict[str, dict]:
    """Every safetensors file under ``final/`` (the policy)."""
    files = sorted((run_dir / "final").rglob("*.safetensors"))
    assert files, f"no safetensors under {run_dir / 'final'}"
    return {str(f.relative_to(run_dir)): load_file(f) for f in files}


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's raw bits (an integer view), so that -0.0 vs 0.0 or NaN payloads count as differences."""
    t = t.detach().contiguous().view(-1)
    if t.dtype.is_floating_point or t.dtype.is_complex:
        t = t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])
    return t


def assert_bit_equal(a: object, b: object, where: str) -> None:
    """Nested dicts/lists of tensors and plain values: the same structure, tensors bit-identical (dtype, shape)."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), where
        assert a.dtype == b.dtype and a.shape == b.shape, where
        assert _bits(a).equal(_bits(b)), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for k in a:
            assert_bit_equal(a[k], b[k], f"{where}/{k}")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_bit_equal(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and a != a:
        assert isinstance(b, float) and b != b, where
    else:
        assert a == b, (where, a, b)


def _no_wall_times(x: object) -> object:
    if isinstance(x, dict):
        return {k: _no_wall_times(v) for k, v in x.items() if k != "wall_time" and not str(k).startswith("time/")}
    if isinstance(x, list):
        return [_no_wall_times(v) for v in x]
    return x


def _last_checkpoint(run_dir: Path) -> dict[str, object]:
    """The run's last checkpoint (written at the end even with checkpoint_every=0): every safetensors, torch and JSON
    file in it, loaded (the optimizer, a separate critic, the engine's RNG and every method state live there)."""
    latest = run_dir / "checkpoints" / "latest"
    if not latest.exists():
        return {}
    folder = run_dir / "checkpoints" / latest.read_text().strip()
    out: dict[str, object] = {}
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        name = str(f.relative_to(run_dir))
        if f.suffix == ".safetensors":
            out[name] = load_file(f)
        elif f.suffix == ".pt":
            out[name] = torch.load(f, weights_only=True, map_location="cpu")
        elif f.suffix == ".json":
            out[name] = _no_wall_times(json.loads(f.read_text()))
        else:
            out[name] = f.read_bytes()
    return out


def assert_same_run(a: Path, b: Path) -> None:
    """Metrics rows equal but the timings; every final tensor bit-identical (dtype and shape included); the last
    checkpoint (optimizer, critic, RNG and method states) identical but its wall time."""
    ra, rb = rows_of(a), rows_of(b)
    assert [r["step"] for r in ra] == [r["step"] for r in rb]
    for x, y in zip(ra, rb, strict=True):
        cx, cy = comparable(x), comparable(y)
        assert cx == cy, (
            x["step"],
            {k: (cx.get(k), cy.get(k)) for k in cx.keys() | cy.keys() if cx.get(k) != cy.get(k)},
        )
    assert_bit_equal(_weights(a), _weights(b), "final")
    assert_bit_equal(_last_checkpoint(a), _last_checkpoint(b), "checkpoint")


@pytest.mark.parametrize("over", _methods())
def test_same_seed_same_metrics_and_weights(tmp_path, tiny_overrides, over):
    """Two 2-step runs of one method and config: identical metrics rows (but times) and final weights."""
    cfg = load_config(None, [*tiny_overrides, *over, *TWO_STEPS])
    ra = train(cfg, tmp_path / "a")
    rb = train(cfg, tmp_path / "b")
    assert ra.steps == rb.steps == 2 and ra.rollouts_total == rb.rollouts_total
    assert_same_run(tmp_path / "a", tmp_path / "b")


def test_another_seed_changes_the_run(tmp_path, tiny_overrides):
    """The seed reaches the RL run itself: with one warm start for both (``warmup.per_seed=false``), seeds 0 and 1
    give other metrics (prompt order, rollouts) and other final weights; so the equalities above can fail."""
    base = [*tiny_overrides, *method_overrides("grpo", "fixed"), *TWO_STEPS, "warmup.per_seed=false"]
    train(load_config(None, [*base, "seed=0"]), tmp_path / "s0")
    train(load_config(None, [*base, "seed=1"]), tmp_path / "s1")
    r0 = [comparable(r) for r in rows_of(tmp_path / "s0") if r["step"] > 0]
    r1 = [comparable(r) for r in rows_of(tmp_path / "s1") if r["step"] > 0]
    assert r0 != r1
    w0, w1 = _weights(tmp_path / "s0"), _weights(tmp_path / "s1")
    assert any(not bool((w0[f][k] == w1[f][k]).all()) for f in w0 for k in w0[f])
    assert _last_checkpoint(tmp_path / "s0")  # the end-of-run checkpoint is compared too
    with pytest.raises(AssertionError):
        assert_same_run(tmp_path / "s0", tmp_path / "s1")  # the comparator sees the difference


CROSS_PROCESS = {  # keyed state (DBB's per-prompt history), a keyed learned prior with OSLA, a pool allocator
    "dbb-fixed": method_overrides("dbb", "fixed"),
    "grpo-dps": method_overrides("grpo", "dps"),
    "v05_eb-osla-history": [*method_overrides("v05_eb", "osla"), "prior.name=history"],
}
_CHILD = """
import json, sys
from v05.train.config import load_config
from v05.train.loop import train
for out, over in json.loads(sys.argv[1]).items():
    train(load_config(None, over), out)
"""


def test_same_seed_same_run_across_processes_and_hash_seeds(tmp_path, tiny_overrides):
    """Fresh processes with PYTHONHASHSEED 1 and 2 (string hashes, hence set orders, differ) train the same metrics
    and weights, for methods whose state is keyed by prompt (DBB, the history prior, DPS's history, OSLA)."""
    for hash_seed in ("1", "2"):
        jobs = {}
        for name, over in CROSS_PROCESS.items():
            over = [*tiny_overrides, *over, *TWO_STEPS]
            load_config(None, over)  # valid here before it runs there
            jobs[str(tmp_path / f"{name}-{hash_seed}")] = over
        env = os.environ | {"PYTHONHASHSEED": hash_seed, "OPENBLAS_NUM_THREADS": "1"}
        proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(jobs)], env=env, capture_output=True,
                              text=True, timeout=600, check=False)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
    for name in CROSS_PROCESS:
        assert_same_run(tmp_path / f"{name}-1", tmp_path / f"{name}-2")
