"""The TRL adapter survives a faulty prior provider and faulty reward functions, as v05's own trainer does.

Real CPU training steps with the tiny char-level Llama (the setup of ``test_trl.py``); the faults come from stubs.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

pytest.importorskip("trl")

from tests.adapters.test_trl import N_PROMPTS, K, Recording, arithmetic_setup, config, odd_first_char  # noqa: E402
from v05.adapters.trl import STATE_FILE, V05GRPOConfig, V05GRPOTrainer  # noqa: E402
from v05.priors import group_outcomes, make_provider  # noqa: E402
from v05.priors.base import PriorPrediction  # noqa: E402
from v05.priors.guard import PriorGuard  # noqa: E402


class FaultyProvider:
    """A running_mean provider whose ``predict`` misbehaves on the calls listed in ``predict_faults`` (call number →
    ``"raise"`` or ``"nan_first"``: the first prompt's mean is NaN) and whose ``update`` raises on ``update_faults``."""

    def __init__(self, predict_faults: dict[int, str], update_faults: set[int]) -> None:
        self.inner = make_provider("running_mean")
        self.name = "faulty"
        self.predict_faults, self.update_faults = predict_faults, update_faults
        self.predicted: list[np.ndarray] = []  # what the provider returned on each call that did not raise
        self.n_predict = self.n_update = 0

    def predict(self, prompt_ids, texts, *, policy="default"):
        self.n_predict += 1
        fault = self.predict_faults.get(self.n_predict)
        if fault == "raise":
            raise RuntimeError("prior backend down")
        pred = self.inner.predict(prompt_ids, texts, policy=policy)
        mean = np.asarray(pred.mean, np.float64).copy()
        if fault == "nan_first":
            mean[0] = np.nan
        self.predicted.append(mean)
        return PriorPrediction(mean, pred.tau2, pred.n0)

    def update(self, prompt_ids, texts, scores, counts, *, policy="default", step=None):
        self.n_update += 1
        if self.n_update in self.update_faults:
            raise RuntimeError("prior store read-only")
        self.inner.update(prompt_ids, texts, scores, counts, policy=policy, step=step)

    def calibration(self, policy="default"):
        return self.inner.calibration(policy)

    def state_dict(self):
        return self.inner.state_dict()

    def load_state_dict(self, state):
        self.inner.load_state_dict(state)


def step_logs(trainer):
    """The per-step rows of TRL's log (the last row is the end-of-training summary)."""
    return [row for row in trainer.state.log_history if "v05/zero_adv_frac" in row]


def test_prior_faults_fall_back_to_the_running_mean(tmp_path):
    """Step 1: the provider's predict raises and its update raises; step 2: it returns NaN for the first prompt.
    Training goes on: step 1's prior is the guard's fresh running mean for every prompt (V = 0, p = 0.5; 4 fallbacks),
    step 2's is the provider's except the NaN row, which is the guard's running mean of step 1's outcomes
    (1 fallback); ``v05/prior_update_errors`` reads 1 after both steps; the advantages are finite."""
    model, tokenizer, dataset, _, _ = arithmetic_setup()
    trainer = Recording(
        model=model,
        reward_funcs=odd_first_char,
        args=config(tmp_path),
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    faulty = FaultyProvider({1: "raise", 2: "nan_first"}, {1})
    trainer.v05_provider = faulty
    trainer.train()

    assert len(trainer.scored) == 2 and faulty.n_update == 2
    (first, handed_1), (second, handed_2) = trainer.scored
    np.testing.assert_allclose(first.prior, np.full(N_PROMPTS, 0.5))  # the fallback before any outcome: V = 0
    shadow = PriorGuard()  # the guard's fallback learns step 1's outcomes even though the provider's update raised
    scores, counts = group_outcomes(first.rewards, first.group, reward_range="01")
    shadow.fallback.update(list(first.prompt_ids), list(first.prompt_ids), scores, counts)
    fallback_v = shadow.fallback.predict(list(second.prompt_ids), list(second.prompt_ids)).mean
    provider_v = faulty.predicted[0]  # (G,) the provider's answer on call 2 (NaN first)
    np.testing.assert_allclose(second.prior[0], (fallback_v[0] + 1) / 2, atol=1e-12)
    np.testing.assert_allclose(second.prior[1:], (provider_v[1:] + 1) / 2, atol=1e-12)
    for handed in (handed_1, handed_2):
        assert np.all(np.isfinite(handed))
    logs = step_logs(trainer)
    assert [row["v05/prior_fallbacks"] for row in logs] == [N_PROMPTS, 1]
    assert [row["v05/prior_update_errors"] for row in logs] == [1, 1]
    guard = trainer.v05_prior_guard
    assert (guard.fallbacks, guard.predict_errors, guard.update_errors) == (N_PROMPTS + 1, 1, 1)


def test_prior_guard_state_round_trips_through_the_checkpoint(tmp_path):
    """v05_state.json holds the guard's state (its running mean and counters) after step 1; a run resumed from it
    predicts step 2 with the restored running mean (the provider always raises) and continues its counters. A
    checkpoint without the key (written before the guard existed) resumes with a fresh guard."""
    model, tokenizer, dataset, _, _ = arithmetic_setup()
    first = Recording(
        model=model,
        reward_funcs=odd_first_char,
        args=config(tmp_path, max_steps=1, save_strategy="steps", save_steps=1),
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    always = {i: "raise" for i in range(1, 10)}
    first.v05_provider = FaultyProvider(always, set(range(1, 10)))
    first.train()
    checkpoint = tmp_path / "checkpoint-1"
    saved = json.loads((checkpoint / STATE_FILE).read_text())
    assert saved["prior_guard"] == json.loads(json.dumps(first.v05_prior_guard.state_dict()))
    assert saved["prior_guard"]["fallbacks"] == N_PROMPTS and saved["prior_guard"]["update_errors"] == 1

    def resume(state):
        (checkpoint / STATE_FILE).write_text(json.dumps(state))
        model, tokenizer, dataset, _, _ = arithmetic_setup()
        resumed = Recording(
            model=model,
            reward_funcs=odd_first_char,
            args=config(tmp_path, max_steps=2),
            train_dataset=dataset,
            processing_class=tokenizer,
        )
        resumed.v05_provider = FaultyProvider(always, set(range(1, 10)))
        resumed.train(resume_from_checkpoint=str(checkpoint))
        ((batch, _),) = resumed.scored  # step 2 only
        return resumed.v05_prior_guard, batch

    guard, batch = resume(saved)
    restored = PriorGuard()
    restored.load_state_dict(saved["prior_guard"])
    expected = restored.fallback.predict(list(batch.prompt_ids), list(batch.prompt_ids)).mean
    np.testing.assert_allclose(batch.prior, (expected + 1) / 2, atol=1e-12)
    assert (guard.fallbacks, guard.update_errors) == (2 * N_PROMPTS, 2)

    guard, batch = resume({k: v for k, v in saved.items() if k != "prior_guard"})
    np.testing.assert_allclose(batch.prior, np.full(N_PROMPTS, 0.5))  # a fresh running mean: V = 0
    assert (guard.fallbacks, guard.update_errors) == (N_PROMPTS, 1)


def faulty_reward(calls):
    """A reward function that raises on call 1, hangs (2 s) on call 2 and returns garbage on call 3: NaN, a string,
    +inf at rollouts 0..2, None (TRL's "not applicable") at rollout 3, and first-char parity elsewhere."""

    def flaky_verifier(prompts, completions, **kwargs):
        calls.append(list(completions))
        if len(calls) == 1:
            raise ZeroDivisionError("verifier bug")
        if len(calls) == 2:
            time.sleep(2.0)
        return [float("nan"), "1", float("inf"), None, *odd_first_char(prompts, completions[4:])]

    return flaky_verifier


class RecordingRewards(Recording):
    """Also records TRL's per-function rewards (N, F) of each batch."""

    def __init__(self, *args, **kwargs):
        self.per_func: list[np.ndarray] = []
        super().__init__(*args, **kwargs)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        out = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self.per_func.append(out.detach().double().numpy().copy())
        return out


def test_reward_function_faults_score_zero_and_are_counted(tmp_path):
    """With v05_reward_timeout_s = 0.2: a reward function that raises (step 1) or hangs for 2 s (step 2) scores the
    whole batch 0.0 (16 errors, then 16 timeouts, the hang cut short); on step 3 its NaN, string and +inf elements
    score 0.0 (3 errors) and its None stays TRL's NaN ("not applicable"). The other reward function is untouched
    and the weighted sum 0.5·faulty + 0.5·parity is what v05's estimator sees; the advantages are finite; TRL logs
    the reward under the function's own name."""
    model, tokenizer, dataset, _, _ = arithmetic_setup()
    calls: list[list[str]] = []
    trainer = RecordingRewards(
        model=model,
        reward_funcs=[faulty_reward(calls), odd_first_char],
        args=config(tmp_path, max_steps=3, reward_weights=[0.5, 0.5], v05_reward_timeout_s=0.2),
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    started = time.perf_counter()
    trainer.train()
    assert time.perf_counter() - started < 60  # the 2 s hang did not run to its end... nor anything like it

    n = N_PROMPTS * K
    assert len(calls) == 3 and len(trainer.scored) == 3
    for per_func, completions in zip(trainer.per_func, calls, strict=True):
        np.testing.assert_array_equal(per_func[:, 1], odd_first_char(None, completions))
    np.testing.assert_array_equal(trainer.per_func[0][:, 0], np.zeros(n))
    np.testing.assert_array_equal(trainer.per_func[1][:, 0], np.zeros(n))
    third = trainer.per_func[2][:, 0]
    np.testing.assert_array_equal(third[:3], [0.0, 0.0, 0.0])
    assert np.isnan(third[3])
    np.testing.assert_array_equal(third[4:], odd_first_char(None, calls[2][4:]))
    for (batch, handed), per_func in zip(trainer.scored, trainer.per_func, strict=True):
        np.testing.assert_allclose(batch.rewards, 0.5 * np.nan_to_num(per_func[:, 0]) + 0.5 * per_func[:, 1])
        assert np.all(np.isfinite(handed))
    logs = step_logs(trainer)
    assert [row["v05/verifier_errors"] for row in logs] == [n, 0, 3]
    assert [row["v05/verifier_timeouts"] for row in logs] == [0, n, 0]
    assert "rewards/flaky_verifier/mean" in logs[0]


def test_unguarded_reward_functions_raise_as_in_trl(tmp_path):
    """v05_reward_timeout_s=None (the default) calls the reward functions as TRL does: an exception stops training,
    and no v05/verifier_* metric is logged; a non-positive timeout is refused at config time."""
    model, tokenizer, dataset, _, _ = arithmetic_setup()

    def broken(prompts, completions, **kwargs):
        raise ZeroDivisionError("verifier bug")

    trainer = V05GRPOTrainer(
        model=model,
        reward_funcs=broken,
        args=config(tmp_path, max_steps=1),
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    assert [f.fn for f in trainer.reward_funcs] == [broken] and not trainer.reward_funcs[0].guarded
    with pytest.raises(ZeroDivisionError, match="verifier bug"):
        trainer.train()
    for bad in (0.0, -1.0, float("inf"), True):
        with pytest.raises(ValueError, match="v05_reward_timeout_s must be a positive number"):
            config(tmp_path, v05_reward_timeout_s=bad)
    assert isinstance(config(tmp_path), V05GRPOConfig) and config(tmp_path).v05_reward_timeout_s is None
