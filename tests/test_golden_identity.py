"""The refactor "one round from prior to update" changes no number: trainer runs and TRL advantages equal the golden.

The golden files (``tests/golden/*.json.gz``, written by ``tests/golden/record.py`` from the code before the refactor,
commit 262772b) hold, for every packaged trainer config that runs offline on CPU, the metrics rows of
``v05 train --config NAME --quick`` without their wall-clock fields and the ``state.json`` of its step-3 and final
checkpoints without ``counters.wall_time``; and the advantages ``V05GRPOTrainer`` computed for every batch of the TRL
parity bench's ``rec_k1``/``rec_k2`` runs at a tiny budget. The code under test must reproduce them exactly (floats
bit for bit, NaN equal to NaN); a failure names the config, step and field. New fields are allowed in two places
only, the top level of a metrics row and ``state["counters"]`` (:func:`on_golden_keys`: e.g. ``compute_user`` and
the prefill/decode/update splits of :mod:`v05.train.compute`): there every golden key must be present and equal, and
keys the golden file lacks are ignored; everywhere else (the round's and the method's states) keys must match too.

Not slow: the configs that cover the refactored paths — ``v05-recommended`` (history prior, ``v05_eb`` state),
``demo-v05-eb-select`` (the ``prior_select`` allocator, combined prior), ``demo-v05`` (OSLA's extra rounds, V0 prior),
``demo-sara`` (a stateful allocator), ``demo-poise`` (the probe critic) — the resume of a checkpoint written before
the refactor (``v05-recommended``, ``demo-sara``), and the TRL advantages. Every other recorded config: ``slow``.
Trained numbers are machine-specific: on another CPU (or other library versions) than the golden file names, the
tests skip and say why. The quick runs warm-start from the default cache (``~/.cache/v05/warm_start`` or
``$V05_WARM_START_DIR``; trained there if missing); its weights are checked against the recorded hash first, so a
foreign cache is reported as such, not as a changed number.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from huggingface_hub import try_to_load_from_cache
from transformers import TrainerCallback

from tests.golden.record import GOLDEN_DIR, canon, cpu_identity, first_difference, golden_or_skip, meta, read_golden
from v05.train.config import load_config, packaged_configs, quick_config
from v05.train.loop import train
from v05.train.policy import TINY_NAME
from v05.train.warmstart import warm_start_dir

try:  # the state serializer (type-tagged JSON): v05.round since the refactor, v05.train.state in the recorded tree
    from v05.round import state_to_json
except ImportError:
    from v05.train.state import state_to_json

try:
    from v05.adapters import trl_parity
except ImportError as err:  # reported by the TRL test itself (a failure unless trl is absent): the rest still runs
    trl_parity, TRL_IMPORT_ERROR = None, err
else:
    TRL_IMPORT_ERROR = None

PACKAGES = ("torch", "numpy", "scipy", "scikit-learn", "transformers", "sentence-transformers", "trl")
"""Libraries whose version changes trained numbers: a golden file recorded with other versions is skipped."""
TRAIN_GOLDEN = GOLDEN_DIR / "train_quick.json.gz"
TRL_GOLDEN = GOLDEN_DIR / "trl_parity.json.gz"
FAST = ("v05-recommended", "demo-v05-eb-select", "demo-v05", "demo-sara", "demo-poise")
"""Configs checked in the default (not slow) run: history prior + v05_eb state, prior_select, OSLA, SARA, POISE."""
RESUME = ("v05-recommended", "demo-sara")
"""Configs whose golden step-3 checkpoint state is resumed by the code under test."""
RECORDED_AS: dict[str, tuple[str, ...]] = {"v05-recommended": ("prior.name=history",)}
"""Packaged configs re-picked since the recording, with the overrides that give back the config the golden run
trained: issue 42 re-picked ``v05-recommended``'s prior (the running mean; ``history`` when recorded)."""
TRL_RUNS = ("rec_k1", "rec_k2")
"""The parity bench's configurations trained by ``V05GRPOTrainer`` (``grpo4`` is TRL's own GRPOTrainer)."""
TRL_SEED, TRL_STEPS = 30, 6
"""The bench's first seed; 6 steps: the combined prior (``refit_every`` 4) refits once and the state carries."""


# -- recording and reading back a quick run -----------------------------------------------------------------------


def recorded_config(name: str):  # noqa: ANN201 (a TrainConfig)
    """Packaged config ``name`` (quick) as the golden run trained it (:data:`RECORDED_AS`)."""
    return load_config(name, RECORDED_AS.get(name, ()), quick=True)


def without_timing(row: dict[str, Any]) -> dict[str, Any]:
    """A metrics row without its wall-clock fields (``wall_time``, ``time/*``; every other field is a count or a
    computed number)."""
    return {k: v for k, v in row.items() if k != "wall_time" and not k.startswith("time/")}


def checkpoint_state(folder: Path) -> dict[str, Any] | None:
    """A checkpoint's ``state.json`` without ``counters.wall_time`` (None if the run never wrote that checkpoint)."""
    path = folder / "state.json"
    if not path.is_file():
        return None
    state = json.loads(path.read_text(encoding="utf-8"))
    state["counters"].pop("wall_time")
    return state


def quick_numbers(run_dir: Path) -> dict[str, Any]:
    """What the golden file keeps of a quick run: rows (no timings), step-3 and final checkpoint states."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    latest = (run_dir / "checkpoints" / "latest").read_text(encoding="utf-8").strip()
    return {
        "rows": [without_timing(r) for r in rows],
        "state_step3": checkpoint_state(run_dir / "checkpoints" / "step_000003"),
        "final_checkpoint": latest,
        "state_final": checkpoint_state(run_dir / "checkpoints" / latest),
    }


def warm_start_sha256(name: str, root: Path | None = None) -> str | None:
    """sha256 of the warm start's weights that config ``name`` (quick) loads, under ``root`` or the default cache."""
    cfg = recorded_config(name)
    if not cfg.warmup.enabled:
        return None
    folder = warm_start_dir(cfg) if root is None else root / warm_start_dir(cfg).name
    weights = folder / "model.safetensors"
    return hashlib.sha256(weights.read_bytes()).hexdigest() if weights.is_file() else None


def offline_reason(name: str) -> str | None:
    """Why config ``name`` cannot run here (its policy's weights are not on disk and the hub is off), or None."""
    policy = load_config(name, quick=True).policy.name_or_path
    if policy == TINY_NAME or Path(policy).exists():
        return None
    if isinstance(try_to_load_from_cache(policy, "config.json"), str):
        return None
    return f"policy {policy!r} is not in the local Hugging Face cache and the hub is off (HF_HUB_OFFLINE=1)"


def record_train(scratch: Path) -> dict[str, Any]:
    """Golden payload of ``train_quick.json.gz``: every packaged config as ``v05 train --config NAME --quick`` in a
    fresh process, warm-started from a fresh cache (the recorded code trains the warm start too)."""
    warm = scratch / "warm_start"
    env = os.environ | {"V05_WARM_START_DIR": str(warm), "OPENBLAS_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
                        "TRANSFORMERS_OFFLINE": "1"}  # fmt: skip
    configs, skipped = {}, {}
    for name in sorted(packaged_configs()):
        reason = offline_reason(name)
        if reason is not None:
            skipped[name] = reason
            continue
        run_dir = scratch / "runs" / name
        argv = [sys.executable, "-m", "v05", "train", "--config", name, "--quick", "--out", str(run_dir)]
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr[-3000:]}")
        configs[name] = quick_numbers(run_dir) | {"warm_start_sha256": warm_start_sha256(name, warm)}
    return {"meta": meta(PACKAGES), "configs": configs, "skipped": skipped}


# -- recording the TRL parity bench's advantages ------------------------------------------------------------------


class _Batches(TrainerCallback):
    """After each optimizer step, what ``V05GRPOTrainer`` computed for that step's generation batch."""

    def __init__(self) -> None:
        self.trainer: Any = None
        self.batches: list[dict[str, Any]] = []

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        batch = self.trainer.v05_last_batch
        self.batches.append(canon({
            "step": state.global_step,
            "mode": batch.mode,
            "prompt_ids": list(batch.prompt_ids),
            "rewards": batch.rewards,
            "prior": batch.prior,
            "advantages": batch.advantages,
            "state": state_to_json(self.trainer.v05_state),
        }))  # fmt: skip


def trl_parity_run(name: str, out: Path) -> dict[str, Any]:
    """The parity bench's ``train_trl`` for configuration ``name`` (seed 30, ``TRL_STEPS`` steps, one eval at the
    end), with ``--quick``'s warm-up and eval size; its eval rows and every batch's advantages."""
    if trl_parity is None:
        raise RuntimeError(f"v05.adapters.trl_parity does not import: {TRL_IMPORT_ERROR}")
    spec = trl_parity.CONFIGS[name]
    budget = spec.k * spec.prompts * TRL_STEPS
    make_trainer, make_config = trl_parity.trl_trainer, trl_parity.parity_config
    recorder = _Batches()

    def recording_trainer(*args: Any, callbacks: Any = (), **kwargs: Any) -> Any:
        recorder.trainer = make_trainer(*args, callbacks=[*callbacks, recorder], **kwargs)
        return recorder.trainer

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(trl_parity, "trl_trainer", recording_trainer)
        mp.setattr(trl_parity, "parity_config", lambda *a: quick_config(make_config(*a)))
        rows = trl_parity.train_trl(name, TRL_SEED, budget, budget, out)
    cfg = quick_config(make_config(name, TRL_SEED, budget, budget))
    warm = warm_start_dir(cfg) / "model.safetensors"
    return {
        "budget": budget,
        "eval_rows": canon(rows),
        "batches": recorder.batches,
        "warm_start_sha256": hashlib.sha256(warm.read_bytes()).hexdigest(),
    }


def record_trl(scratch: Path) -> dict[str, Any]:
    """Golden payload of ``trl_parity.json.gz`` (warm starts trained into a fresh cache)."""
    previous = os.environ.get("V05_WARM_START_DIR")
    os.environ["V05_WARM_START_DIR"] = str(scratch / "warm_start")
    try:
        runs = {name: trl_parity_run(name, scratch / name) for name in TRL_RUNS}
    finally:
        if previous is None:
            os.environ.pop("V05_WARM_START_DIR")
        else:
            os.environ["V05_WARM_START_DIR"] = previous
    return {"meta": meta(PACKAGES), "seed": TRL_SEED, "steps": TRL_STEPS, "runs": runs}


# -- comparing -----------------------------------------------------------------------------------------------------


def assert_same(golden: Any, current: Any, what: str) -> None:
    """Fail naming ``what`` and the first differing field if ``current`` is not ``golden`` exactly."""
    found = first_difference(golden, current)
    if found is not None:
        pytest.fail(f"{what} differs from the golden file: {found}", pytrace=False)


def on_golden_keys(golden: Any, current: Any, encoder: int = 0) -> Any:
    """``current`` without the keys that the dict ``golden`` lacks (fields added since the recording), else as is;
    its ``compute_total`` without the text prior's encoder (``encoder_compute``: counted since the recording, before
    step 1, so every row's total carries it; the row's own field, or ``encoder`` for a state's counters)."""
    if not isinstance(golden, dict) or not isinstance(current, dict):
        return current
    kept = {k: v for k, v in current.items() if k in golden}
    if "compute_total" in kept:
        kept["compute_total"] -= current.get("encoder_compute", encoder)
    return kept


def state_on_golden_keys(golden: Any, current: Any) -> Any:
    """A checkpoint state with its ``counters`` on the golden keys (:func:`on_golden_keys`, the encoder's count
    taken out) and without the fields added at its top level since (``encoder_compute``); the rest as is."""
    if not isinstance(golden, dict) or not isinstance(current, dict) or "counters" not in current:
        return current
    encoder = current.get("encoder_compute", 0)
    rest = {k: v for k, v in current.items() if k != "encoder_compute"}
    return rest | {"counters": on_golden_keys(golden.get("counters"), current["counters"], encoder)}


def assert_same_rows(golden: list[dict], current: list[dict], what: str) -> None:
    """Rows equal on the golden keys exactly (new fields allowed: :func:`on_golden_keys`); else fail at the first
    differing step, listing every field that differs there."""
    current = [on_golden_keys(g, c) for g, c in zip(golden, current, strict=False)] + current[len(golden) :]
    for g, c in zip(golden, current, strict=False):
        if first_difference(g, c) is not None:
            fields = sorted(k for k in g.keys() | c.keys() if first_difference(g.get(k), c.get(k)) is not None)
            pytest.fail(
                f"{what}: step {g.get('step')} differs from the golden file in {len(fields)} field(s) "
                f"{', '.join(fields)}; first: {first_difference(g, c)}",
                pytrace=False,
            )
    if len(golden) != len(current):
        pytest.fail(f"{what}: {len(current)} rows, the golden file has {len(golden)}", pytrace=False)


def assert_warm_start(name: str, recorded: str | None) -> None:
    """The warm start the run loaded is the one the golden run trained (else the cache, not the code, differs)."""
    here = warm_start_sha256(name)
    if here != recorded:
        folder = warm_start_dir(recorded_config(name))
        pytest.fail(
            f"{name}: the cached warm start {folder} (sha256 {here}) is not the one the golden run trained "
            f"({recorded}); its rows cannot match. Remove that folder to retrain it with the code under test.",
            pytrace=False,
        )


@pytest.fixture(scope="module")
def golden_train() -> dict[str, Any]:
    return golden_or_skip(TRAIN_GOLDEN, PACKAGES, section="train")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], Path]]:
    """``quick_run(name)``: the run directory of ``v05 train --config name --quick`` by the code under test (trained
    once per module, in process; the resume test copies it)."""
    root, done = tmp_path_factory.mktemp("golden-runs"), {}

    def run(name: str) -> Path:
        if name not in done:
            train(recorded_config(name), root / name)
            done[name] = root / name
        return done[name]

    yield run


def _recorded_configs() -> list:
    """Every config of the golden file (slow unless in FAST), the skipped ones with their recorded reason."""
    if not TRAIN_GOLDEN.is_file():
        return []
    payload = read_golden(TRAIN_GOLDEN)
    out = [pytest.param(n, marks=() if n in FAST else pytest.mark.slow, id=n) for n in payload["configs"]]
    return out + [pytest.param(n, marks=pytest.mark.skip(reason=r), id=n) for n, r in payload["skipped"].items()]


# -- the tests -----------------------------------------------------------------------------------------------------


def test_the_golden_cpu_label_tells_apart_two_generations_behind_one_name():
    """Two virtual AMD EPYCs with AVX-512 and one model name, of another family/model, get two labels (so a golden
    file recorded on one skips on the other, instead of failing one ulp off); the first processor's fields count."""
    def info(model: int) -> str:
        one = (f"processor\t: 0\ncpu family\t: 25\nmodel\t\t: {model}\nmodel name\t: AMD EPYC\nstepping\t: 1\n"
               "flags\t\t: avx2 avx512f")  # fmt: skip
        return one + "\n\n" + one.replace("processor\t: 0", "processor\t: 1").replace(f": {model}\n", ": 99\n")

    assert cpu_identity(info(17), "x") == "AMD EPYC, AVX-512, family 25 model 17 stepping 1"
    assert cpu_identity(info(160), "x") != cpu_identity(info(17), "x")
    assert cpu_identity("flags\t: avx2\n", "box") == "box, AVX2"


def test_the_golden_file_covers_the_refactored_paths(golden_train):
    """The fast subset and the resumed configs were recorded; every recorded config still ships."""
    missing = sorted(set(FAST + RESUME) - set(golden_train["configs"]))
    assert not missing, f"not in {TRAIN_GOLDEN.name}: {missing}; re-record from the baseline tree"
    gone = sorted(set(golden_train["configs"]) - set(packaged_configs()))
    assert not gone, f"recorded configs no longer packaged: {gone}"


@pytest.mark.parametrize("name", _recorded_configs())
def test_quick_run_equals_the_golden_run(name, golden_train, quick_run):
    """``v05 train --config NAME --quick`` by the code under test: the same metrics rows (but wall-clock fields) and
    the same step-3 and final checkpoint states (but wall time) as before the refactor, exactly: every golden key
    equal; new keys allowed at a row's top level and in ``state["counters"]`` only (:func:`on_golden_keys`)."""
    gold = golden_train["configs"][name]
    run_dir = quick_run(name)
    assert_warm_start(name, gold["warm_start_sha256"])
    current = quick_numbers(run_dir)
    assert_same_rows(gold["rows"], current["rows"], f"{name}: metrics.jsonl")
    assert_same(gold["state_step3"], state_on_golden_keys(gold["state_step3"], current["state_step3"]),
                f"{name}: checkpoints/step_000003/state.json")  # fmt: skip
    assert_same(gold["final_checkpoint"], current["final_checkpoint"], f"{name}: the final checkpoint's name")
    assert_same(gold["state_final"], state_on_golden_keys(gold["state_final"], current["state_final"]),
                f"{name}: the final checkpoint's state.json")  # fmt: skip


@pytest.mark.parametrize("name", RESUME)
def test_a_checkpoint_written_before_the_refactor_resumes_to_the_golden_rows(name, golden_train, quick_run, tmp_path):
    """A run of the code under test rewound to its step-3 checkpoint, whose ``state.json`` is replaced by the one the
    code before the refactor wrote (its wall time restored), resumes (``--resume``) to the golden rows and final
    state: a checkpoint written before the change still loads and continues the same run."""
    gold = golden_train["configs"][name]
    run_dir = tmp_path / name
    shutil.copytree(quick_run(name), run_dir)
    checkpoints = run_dir / "checkpoints"
    for folder in checkpoints.glob("step_*"):
        if folder.name != "step_000003":
            shutil.rmtree(folder)
    (checkpoints / "latest").write_text("step_000003", encoding="utf-8")
    state_file = checkpoints / "step_000003" / "state.json"
    state = copy.deepcopy(gold["state_step3"])
    state["counters"]["wall_time"] = json.loads(state_file.read_text(encoding="utf-8"))["counters"]["wall_time"]
    state_file.write_text(json.dumps(state), encoding="utf-8")
    result = train(recorded_config(name), run_dir, resume=True)
    assert result.steps == gold["rows"][-1]["step"]
    current = quick_numbers(run_dir)
    assert_same_rows(gold["rows"], current["rows"], f"{name} resumed from the golden step-3 state: metrics.jsonl")
    assert_same(gold["state_final"], state_on_golden_keys(gold["state_final"], current["state_final"]),
                f"{name} resumed: the final checkpoint's state.json")  # fmt: skip


def test_trl_parity_advantages_equal_the_golden(tmp_path):
    """The TRL parity bench's ``rec_k1`` and ``rec_k2`` runs (``V05GRPOTrainer``: ``v05_eb`` + the ``combined``
    prior, n0 fed, ±1 rewards; k = 1 and 2 × 64 prompts, 6 steps): every batch's rewards, prior, advantages and
    carried estimator state, and the final eval, exactly as before the refactor."""
    if trl_parity is None:
        if importlib.util.find_spec("trl") is None:
            pytest.skip("trl is not installed (v05[trl])")
        pytest.fail(f"v05.adapters.trl_parity does not import: {TRL_IMPORT_ERROR!r}", pytrace=False)
    golden = golden_or_skip(TRL_GOLDEN, PACKAGES, section="trl")
    for name in TRL_RUNS:
        gold = golden["runs"][name]
        current = trl_parity_run(name, tmp_path / name)
        assert_same(gold["warm_start_sha256"], current["warm_start_sha256"], f"{name}: the warm start's weights")
        for i, g in enumerate(gold["batches"]):
            c = current["batches"][i] if i < len(current["batches"]) else None
            assert_same(g, c, f"{name}: batch of step {g['step']}")
        assert_same(gold, current, name)  # batch count, eval rows, budget
