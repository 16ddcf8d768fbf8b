"""The refactor "one round from prior to update" changes no number of the verl plugin (``tests/golden/verl.json.gz``).

Recorded by ``tests/golden/record.py --sections verl`` in the verl environment from the code before the refactor
(commit 262772b), compared exactly here (floats bit for bit, NaN equal to NaN):

- ``VerlEstimator`` for every name in ``VERL_ESTIMATORS`` on a fixed synthetic trace of 4 steps: ragged groups
  (singletons included) in shuffled rows, string uids, an OSLA extra round joining its prompt's group
  (``extra_info["v05_group"]``), verl's ``pad…`` rows, priors with their n0 and stable keys in ``extra_info``
  (``v05_key`` or ``index``), prompts that recur across steps (``dbb``'s history); both reward ranges, each prior
  scale, n0 fed or not; read from ``non_tensor_batch``, or bound with ``bind(rows, step=…)``, or bound with
  verl V1's ``trajectory_keys`` (multi-output trajectories). One estimator per variant, so the stateful ones
  (``v05_eb``, ``v05_dbb``) carry their state over the 4 steps. Per step: the (bs, L) advantages verl receives,
  the float64 estimate and ``state_`` (``v05.train.state.state_to_json``).
- verl's own V1 fit loop in trainer mode ``v05`` (the harness of ``test_verl.py``: scripted agent loop, recording
  actor; 3 steps, 8 prompts): OSLA (k_init 4 → k_max 8, history prior) with ``v05`` and with ``v05_eb``, and the
  launch script's EB1 set (``v05_eb`` + history, k = 1: the prior as recorded, :data:`PINNED_EB1_PROVIDER`). verl
  draws uuid uids and runs the agent-loop sessions concurrently, so rows arrive in no fixed order: each step is
  recorded per prompt key — its prior and n0 as ``extra_info`` carried them, and the sorted (reward, advantage)
  pairs of its rollouts — with the padding advantages, the step's ``v05/*`` metrics, and at the end the estimator's
  state. This part is *not* bit for bit:
  the arrival order changes the order of v05's float sums over groups (the history prior's calibration n0 and τ²,
  ``v05_eb``'s window, the metrics' means), so two runs of the same code differ in the last bits (prior n0
  0.6141211826531378 vs …379, seeded uuids or not), and a float32 advantage can move by one ulp. Its floats are
  compared to a relative (and absolute) tolerance of ``FIT_REL_TOL``; structure, counts, keys and rewards exactly.
  (The provider's ``state_dict`` lists its rows in arrival order: not recorded; what it learned reaches the next
  step's priors, which are.) The exact guarantee for the estimator math is the synthetic trace.

On another CPU or other library versions than the golden file names, the tests skip and say why.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("verl")
pytest.importorskip("verl.trainer.ppo.ray_trainer", reason="verl installed without its dependencies (v05[verl])")

import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from tests.adapters.test_verl import (  # noqa: E402
    AgentLoopManager,
    build_trainer,
    launch_arrays,
    trainer_overrides,
    verl_config,
)
from tests.golden.record import GOLDEN_DIR, canon, first_difference, golden_or_skip, meta  # noqa: E402
from v05.adapters.verl import register  # noqa: E402
from v05.adapters.verl_estimators import VERL_ESTIMATORS, VerlConfig, VerlEstimator, prompt_rows  # noqa: E402

try:  # the state serializer (type-tagged JSON): v05.round since the refactor, v05.train.state in the recorded tree
    from v05.round import state_to_json  # noqa: E402
except ImportError:
    from v05.train.state import state_to_json  # noqa: E402

PACKAGES = ("torch", "numpy", "scipy", "verl")
"""Libraries whose version can change these numbers: a golden file recorded with other versions is skipped."""
GOLDEN = GOLDEN_DIR / "verl.json.gz"
STEPS = 4
WIDTH = 6  # response length L of the synthetic batches
N_PROMPTS = 10  # the pool the synthetic steps draw from (so prompts recur across steps)
VARIANTS: dict[str, dict[str, Any]] = {
    "01-extra_info": {"config": {"reward_range": "01"}, "path": "extra_info"},
    "pm1-extra_info-pm1_prior": {"config": {"reward_range": "pm1", "prior_scale": "pm1"}, "path": "extra_info"},
    "01-bind": {"config": {"reward_range": "01"}, "path": "bind"},
    "pm1-bind-no_n0": {"config": {"reward_range": "pm1", "feed_n0": False}, "path": "bind"},
    "pm1-trajectories": {"config": {"reward_range": "pm1"}, "path": "trajectories"},
}
"""The synthetic trace's variants: reward range and ``algorithm.v05`` settings, and how the prompt rows reach the
estimator (``non_tensor_batch``; ``bind(rows, step)``; ``bind(rows, step, trajectory_keys)``)."""
FIT_RUNS = ("osla-v05", "osla-v05_eb", "EB1")
PINNED_EB1_PROVIDER = "+algorithm.v05.provider=history"
"""The EB1 run's prior as recorded (the launch script's EB1 runs the running mean since 2026-12-06)."""
"""verl fit-loop runs (module docstring)."""
FIT_REL_TOL = 1e-6
"""Tolerance of the fit loop's floats (module docstring): 8 float32 ulps; run-to-run noise measured ≤ 1.2e-15 in
float64 (n0 2.9999999999999964 vs 3.0), a changed formula moves far more."""


# -- the synthetic trace ------------------------------------------------------------------------------------------


def synthetic_step(step: int, variant: str) -> dict[str, Any]:
    """One verl batch of the trace: tensors, uids, ``extra_info`` and (multi-output) trajectory keys.

    Prompt q of the pool has true pass rate p_q, prior p̂_q (a pass rate, or 2p̂_q − 1 with ``prior_scale=pm1``) and
    pseudo-count n0_q; even q carry their key as ``v05_key``, odd q as ``index``. A step draws 4–6 prompts, 1–6
    rollouts each, one prompt gets an extra round under its own uid (``v05_group`` naming the first), rows are
    shuffled and 1–3 padding rows appended. With ``trajectories`` every third rollout has 2 outputs (its reward on
    each, the last output final), keyed ``{uid}_{session}_{index}``.
    """
    spec = VARIANTS[variant]
    reward_range, pm1_prior = spec["config"]["reward_range"], spec["config"].get("prior_scale") == "pm1"
    pool = np.random.default_rng(2026)
    p_true = pool.uniform(0.05, 0.95, size=N_PROMPTS)
    p_hat = np.clip(p_true + pool.normal(0.0, 0.2, size=N_PROMPTS), 0.0, 1.0)
    n0 = pool.uniform(1.0, 12.0, size=N_PROMPTS)
    rng = np.random.default_rng([step, sorted(VARIANTS).index(variant)])
    prompts = rng.choice(N_PROMPTS, size=int(rng.integers(4, 7)), replace=False)
    rows: list[tuple[str, dict[str, Any], float]] = []  # (uid, extra_info, reward)
    for i, q in enumerate(prompts):
        info: dict[str, Any] = {"v05_prior": float(2 * p_hat[q] - 1 if pm1_prior else p_hat[q]),
                                "v05_prior_n0": float(n0[q])}  # fmt: skip
        info["v05_key" if q % 2 == 0 else "index"] = f"q{q}" if q % 2 == 0 else int(q)
        uid = f"s{step}-q{q}"
        n = int(rng.integers(1, 7))
        extra = int(rng.integers(1, 3)) if i == 0 else 0
        for j in range(n + extra):
            success = rng.random() < p_true[q]
            reward = (1.0 if success else 0.0) if reward_range == "01" else (1.0 if success else -1.0)
            if j < n:
                rows.append((uid, dict(info), reward))
            else:  # an OSLA extra round: its own uid, its prompt's group
                rows.append((f"{uid}-x", dict(info, v05_group=uid), reward))
    rows = [rows[i] for i in rng.permutation(len(rows))]
    n_pad = 1 + step % 3
    rows += [(f"pad{step:02d}{i:02x}", dict(rows[0][1]), 0.0) for i in range(n_pad)]
    uids, infos, rewards = [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]
    outputs = [2 if spec["path"] == "trajectories" and i % 3 == 0 and not u.startswith("pad") else 1
               for i, u in enumerate(uids)]  # fmt: skip
    keys: list[str] = []
    sessions: dict[str, int] = {}
    row_uids, row_infos, row_rewards, lengths = [], [], [], []
    for uid, info, reward, n_out in zip(uids, infos, rewards, outputs, strict=True):
        session = sessions[uid] = sessions.get(uid, -1) + 1
        for index in range(n_out):
            keys.append(f"{uid}_{session}_{index}")
            row_uids.append(uid)
            row_infos.append(info)
            row_rewards.append(reward)
            lengths.append(0 if uid.startswith("pad") else int(rng.integers(1, WIDTH + 1)))
    length = np.asarray(lengths)
    mask = torch.as_tensor(np.arange(WIDTH)[None, :] < length[:, None], dtype=torch.float32)  # (bs, L)
    token_rewards = torch.zeros(len(row_uids), WIDTH)  # (bs, L) the reward on the last response token
    for i, (reward, n_tok) in enumerate(zip(row_rewards, length, strict=True)):
        token_rewards[i, max(int(n_tok) - 1, 0)] = reward
    return {
        "token_level_rewards": token_rewards,
        "response_mask": mask,
        "uid": np.asarray(row_uids, dtype=object),
        "extra_info": np.asarray(row_infos, dtype=object),
        "trajectory_keys": keys,
    }


def algorithm(name: str, variant: str) -> Any:
    """verl's ``algorithm`` config node of the variant."""
    return OmegaConf.create({"adv_estimator": name, "use_kl_in_reward": False, "v05": VARIANTS[variant]["config"]})


def estimator_trace(name: str, variant: str) -> list[dict[str, Any]]:
    """A fresh ``VerlEstimator`` of verl name ``name`` over the trace's steps: per step its advantages, estimate
    and state."""
    estimator = VerlEstimator(VERL_ESTIMATORS[name])
    algo, path = algorithm(name, variant), VARIANTS[variant]["path"]
    out = []
    for step in range(1, STEPS + 1):
        batch = synthetic_step(step, variant)
        tensors = {"token_level_rewards": batch["token_level_rewards"], "response_mask": batch["response_mask"]}
        if path == "extra_info":
            non_tensor = {"uid": batch["uid"], "extra_info": batch["extra_info"]}
            advantages, returns = estimator(**tensors, index=batch["uid"], config=algo, non_tensor_batch=non_tensor)
        else:
            rows = prompt_rows(batch["uid"], batch["extra_info"], config=VerlConfig.from_algorithm(algo))
            keys = batch["trajectory_keys"] if path == "trajectories" else None
            with estimator.bind(rows, step=step, trajectory_keys=keys):
                advantages, returns = estimator(**tensors, index=batch["uid"], config=algo)
        last = estimator.last_
        out.append(canon({
            "step": step,
            "dtype": str(advantages.dtype),
            "advantages": advantages.tolist(),
            "returns_equal_advantages": bool(torch.equal(returns, advantages)),
            "estimate_advantages": None if last is None else last.estimate.advantages,
            "n_padding": None if last is None else last.n_padding,
            "n_outputs": None if last is None else last.n_outputs,
            "state": state_to_json(estimator.state_),
        }))  # fmt: skip
    return out


# -- verl's fit loop -----------------------------------------------------------------------------------------------


@contextlib.contextmanager
def local_ray() -> Iterator[Any]:
    """A local Ray cluster (2 CPUs) with verl's TransferQueue (one storage unit), as ``test_verl.local_ray``."""
    import ray  # noqa: PLC0415 (verl's dependencies; the module is skipped without them)
    import transfer_queue as tq  # noqa: PLC0415

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}))
    try:
        yield tq
    finally:
        tq.close()
        ray.shutdown()


def fit_overrides(run: str, tmp_path: Path) -> list[str]:
    """The Hydra overrides of fit-loop run ``run`` (as ``test_verl.py``'s fit-loop tests compose them)."""
    if run.startswith("osla-"):
        return trainer_overrides(tmp_path, run.removeprefix("osla-"))
    sizes = ("data.train_batch_size", "actor_rollout_ref.actor.ppo_mini_batch_size")
    script = [o.replace("${PRIOR_BACKEND}", "minilm") for o in launch_arrays()[run] if not o.startswith(sizes)]
    if run == "EB1":  # recorded with the history prior, the script's EB1 provider until the re-pick of 2026-12-06
        script = [PINNED_EB1_PROVIDER if o.startswith("+algorithm.v05.provider=") else o for o in script]
    test_only = [o for o in trainer_overrides(tmp_path, "v05_eb") if not o.startswith(("+algorithm.v05.",
                 "actor_rollout_ref.rollout.n", "algorithm.adv_estimator", "trainer.v1.trainer_mode"))]  # fmt: skip
    return [*test_only, *script]


def update_numbers(update: dict[str, Any]) -> dict[str, Any]:
    """One actor update, independent of row order and uuid uids: per prompt key, its prior/n0 and the sorted
    (reward, advantage) pairs of its rollouts; the padding rows' count and advantages."""
    prompts: dict[str, dict[str, Any]] = {}
    padding = []
    for uid, info, reward, advantage in zip(update["uid"], update["extra_info"], update["reward"],
                                            update["advantage"], strict=True):  # fmt: skip
        if uid.startswith("pad"):
            padding.append(float(advantage))
            continue
        key = str(info["v05_key"])
        entry = prompts.setdefault(
            key, {"prior": info.get("v05_prior"), "n0": info.get("v05_prior_n0"), "rollouts": []}
        )
        entry["rollouts"].append([float(reward), float(advantage)])
    for entry in prompts.values():
        entry["rollouts"].sort()
    return canon({"prompts": dict(sorted(prompts.items())), "padding_advantages": padding})


def fit_run(run: str, tq: Any, tmp_path: Path) -> dict[str, Any]:
    """Three steps of verl's fit loop (``run``): every actor update, the ``v05/*`` metrics, the final estimator
    state."""
    from verl.trainer.ppo.v1 import trainer_base  # noqa: PLC0415 (as test_verl.py: verl's trainer stack)

    logged: list[dict[str, Any]] = []
    pass_rates = np.array([0.02, 0.98, 0.5, 0.9, 0.1, 0.7, 0.3, 0.95] * 2)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(trainer_base.Tracking, "log", lambda self, data, step, **kw: logged.append(dict(data)))
        trainer, worker = build_trainer(verl_config(*fit_overrides(run, tmp_path)), tq, pass_rates)
        trainer.fit(AgentLoopManager(worker))
    metrics = [{k: v for k, v in sorted(m.items()) if k.startswith("v05/")} for m in logged]
    return canon({
        "updates": [update_numbers(u) for u in trainer.actor_rollout_wg.updates],
        "metrics": metrics,
        "estimator_state": state_to_json(trainer.v05_estimator.state_),
    })  # fmt: skip


def record_verl(scratch: Path) -> dict[str, Any]:
    """Golden payload of ``verl.json.gz``."""
    register()
    trace = {v: {n: estimator_trace(n, v) for n in sorted(VERL_ESTIMATORS)} for v in VARIANTS}
    with local_ray() as tq:
        fit = {run: fit_run(run, tq, scratch / run) for run in FIT_RUNS}
    return {"meta": meta(PACKAGES), "trace": trace, "fit": fit}


# -- the tests -----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def golden() -> dict[str, Any]:
    payload = golden_or_skip(GOLDEN, PACKAGES, section="verl")
    register()
    return payload


def assert_same(golden: Any, current: Any, what: str, *, rel_tol: float = 0.0) -> None:
    """Fail naming ``what`` and the first differing field if ``current`` is not ``golden`` (exactly, or to
    ``rel_tol``)."""
    found = first_difference(golden, current, rel_tol=rel_tol)
    if found is not None:
        pytest.fail(f"{what} differs from the golden file: {found}", pytrace=False)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_verl_estimators_on_the_synthetic_trace_equal_the_golden(golden, variant):
    """Every ``VERL_ESTIMATORS`` name over the 4-step trace of this variant: the advantages verl receives, the float64
    estimate, padding/output counts and the carried state, step by step, exactly as before the refactor. An estimator
    registered since (``v05_spo``) has no golden numbers; none of the recorded ones may disappear."""
    missing = sorted(set(golden["trace"][variant]) - set(VERL_ESTIMATORS))
    assert not missing, f"verl estimator(s) of the golden file no longer registered: {missing}"
    for name, steps in golden["trace"][variant].items():
        current = estimator_trace(name, variant)
        for g, c in zip(steps, current, strict=True):
            assert_same(g, c, f"{variant}: {name}: step {g['step']}")


@pytest.fixture(scope="module")
def ray_tq() -> Iterator[Any]:
    with local_ray() as tq:
        yield tq


@pytest.mark.parametrize("run", FIT_RUNS)
def test_verl_fit_loop_advantages_equal_the_golden(golden, ray_tq, run, tmp_path):
    """verl's V1 fit loop in trainer mode ``v05`` (3 steps): every prompt's prior, n0 and (reward, advantage) pairs
    as verl's actor received them, the padding rows, the ``v05/*`` metrics and the final estimator state, as before
    the refactor (floats to ``FIT_REL_TOL``: the loop's row order is not reproducible, module docstring)."""
    gold = golden["fit"][run]
    current = fit_run(run, ray_tq, tmp_path)
    for i, g in enumerate(gold["updates"]):
        c = current["updates"][i] if i < len(current["updates"]) else None
        assert_same(g, c, f"{run}: actor update of step {i + 1}", rel_tol=FIT_REL_TOL)
        assert_same(gold["metrics"][i], current["metrics"][i] if i < len(current["metrics"]) else None,
                    f"{run}: v05/* metrics of step {i + 1}", rel_tol=FIT_REL_TOL)  # fmt: skip
    assert_same(gold, current, run, rel_tol=FIT_REL_TOL)  # update count, final state
