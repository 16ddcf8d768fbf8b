"""Contract tests of the TRL adapter: real CPU training steps with the tiny char-level Llama (TRL 1.16)."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("trl")

import torch  # noqa: E402

from datasets import Dataset  # noqa: E402
from v05.adapters.trl import (  # noqa: E402
    FIXED_K_MESSAGE,
    STATE_FILE,
    V05GRPOConfig,
    V05GRPOTrainer,
    check_trl_version,
    no_checkpointing_args,
)
from v05.adapters.trl_batch import _group_keys  # noqa: E402
from v05.adapters.trl_harness import trl_grpo_rollouts_per_s  # noqa: E402
from v05.estimators import PriorErrorState  # noqa: E402
from v05.priors import group_outcomes, make_provider  # noqa: E402
from v05.registry import estimate  # noqa: E402
from v05.round import state_to_json  # noqa: E402
from v05.tasks.arithmetic import ArithmeticTask  # noqa: E402
from v05.tasks.base import render_prompt  # noqa: E402
from v05.train.policy import PolicyConfig, load_policy  # noqa: E402

K = 4  # num_generations
N_PROMPTS = 4  # prompts per step


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


class Recording(V05GRPOTrainer):
    """Records what leaves scoring (the v05 batch and the advantages handed to TRL) and what the loss reads."""

    def __init__(self, *args, **kwargs):
        self.scored: list[tuple[object, np.ndarray]] = []
        self.loss_advantages: list[np.ndarray] = []
        super().__init__(*args, **kwargs)

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        self.scored.append((self.v05_last_batch, out["advantages"].detach().double().numpy().copy()))
        return out

    def _compute_loss(self, model, inputs):
        self.loss_advantages.append(inputs["advantages"].detach().double().numpy().copy())
        return super()._compute_loss(model, inputs)


def arithmetic_setup():
    """The tiny policy, 8 arithmetic prompts as plain strings with a prompt_id column, and a recording reward."""
    task = ArithmeticTask(n_train=8, n_eval=1, seed=0)
    prompts = list(task.train_prompts())
    model, tokenizer = load_policy(PolicyConfig(device="cpu"))
    texts = [render_prompt(task, p, tokenizer, template="plain") for p in prompts]
    dataset = Dataset.from_dict({"prompt": texts, "prompt_id": [p.key for p in prompts]})
    by_key = {p.key: p for p in prompts}
    calls: list[dict] = []

    def arithmetic_reward(prompts, completions, prompt_id, **kwargs):
        rewards = task.score([by_key[k] for k in prompt_id], completions).rewards
        calls.append(
            {
                "prompts": list(prompts),
                "prompt_id": list(prompt_id),
                "completions": list(completions),
                "rewards": rewards,
            }
        )
        return rewards.tolist()

    return model, tokenizer, dataset, arithmetic_reward, calls


def odd_first_char(prompts, completions, **kwargs):
    """Reward 1 if the first character's code is odd: about half the random policy's rollouts, so groups are mixed."""
    return [float(ord(c[0]) % 2) if c else 0.0 for c in completions]


def config(tmp_path, **kwargs):
    base = dict(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        **no_checkpointing_args(),
        per_device_train_batch_size=N_PROMPTS * K,
        num_generations=K,
        max_completion_length=6,
        max_steps=2,
        learning_rate=1e-4,
        beta=0.0,
        seed=0,
    )
    return V05GRPOConfig(**(base | kwargs))


def test_v05_trainer_uses_registry_advantages(tmp_path):
    """Two CPU steps with estimator v05 + running_mean prior: the advantages TRL's loss reads are exactly
    v05.registry.estimate("v05", ...) on the same rewards (TRL's weighted sum 0.5·arithmetic + 0.5·odd_first_char),
    groups (contiguous K-blocks) and prior (an independent running_mean provider fed the same outcomes); v05/*
    metrics reach TRL's log; the weights move."""
    model, tokenizer, dataset, reward, calls = arithmetic_setup()
    before = [p.detach().clone() for p in model.parameters()]
    args = config(tmp_path, reward_weights=[0.5, 0.5])
    trainer = Recording(
        model=model,
        reward_funcs=[reward, odd_first_char],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    trainer.train()

    assert len(trainer.scored) == 2 and len(calls) == 2
    provider = make_provider("running_mean")
    group = np.arange(N_PROMPTS * K) // K
    for (batch, handed), call in zip(trainer.scored, calls, strict=True):
        rewards = 0.5 * call["rewards"] + 0.5 * np.asarray(odd_first_char(None, call["completions"]))  # (N,)
        np.testing.assert_array_equal(batch.rewards, rewards)  # the reward functions' values, in TRL's order
        np.testing.assert_array_equal(batch.group, group)
        assert list(batch.prompt_ids) == call["prompt_id"][::K]  # one prompt per contiguous block of K
        assert all(len(set(call["prompt_id"][g * K : (g + 1) * K])) == 1 for g in range(N_PROMPTS))
        pred = provider.predict(list(batch.prompt_ids), call["prompts"][::K])
        prior = (pred.mean + 1.0) / 2.0
        expected = estimate("v05", rewards, group, prior=prior, reward_range="01")
        np.testing.assert_allclose(batch.prior, prior, atol=1e-12)
        np.testing.assert_allclose(handed, expected.advantages, atol=1e-6)  # float32 round trip
        provider.update(
            list(batch.prompt_ids), call["prompts"][::K], *group_outcomes(rewards, group, reward_range="01")
        )
    assert len({float(np.round(b.prior[0], 6)) for b, _ in trainer.scored}) == 2  # the prior learned between steps
    # the loss reads the same advantages (TRL shuffles the generation batch before slicing it into steps)
    for (_, handed), used in zip(trainer.scored, trainer.loss_advantages, strict=True):
        np.testing.assert_allclose(np.sort(used), np.sort(handed), atol=1e-7)
    assert any(np.any(np.abs(h) > 0) for _, h in trainer.scored)

    logged = trainer.state.log_history[0]
    for key in (
        "v05/reject_rate",
        "v05/mean_weight",
        "v05/zero_adv_frac",
        "v05/prior_tau2",
        "v05/prior_auc",
        "v05/prior_n0",
    ):
        assert key in logged, key
    assert 0.0 <= logged["v05/mean_weight"] <= 1.0
    changed = [not torch.equal(b, a.detach()) for b, a in zip(before, model.parameters(), strict=True)]
    assert any(changed)


def test_grpo_estimator_matches_trl_group_scaling(tmp_path):
    """Estimator grpo with TRL's default group scaling reproduces TRL's own advantages on the same batch.

    TRL: (r − r̄_g)/(std_g + 1e-4); v05 (as verl): ε = 1e-6, both with the unbiased std. With ε = 1e-4 passed to
    v05 they agree to float32 precision; with v05's default the gap is ≤ |r − r̄|·(1e-4 − 1e-6)/std² ≤ 0.75·1e-4/0.25
    = 3e-4 for binary rewards at K = 4 (a mixed group has std ≥ 0.5).
    """
    model, tokenizer, dataset, _, _ = arithmetic_setup()

    args = config(tmp_path, v05_estimator="grpo")
    assert args.scale_rewards == "group"  # unset follows the estimator: TRL computes its group-scaled advantages
    trainer = Recording(
        model=model, reward_funcs=odd_first_char, args=args, train_dataset=dataset, processing_class=tokenizer
    )
    trainer.train()
    for batch, handed in trainer.scored:
        engine = batch.engine_advantages
        assert engine is not None and np.any(np.abs(engine) > 0)
        matched = estimate("grpo", batch.rewards, batch.group, reward_range="01", eps=1e-4).advantages
        np.testing.assert_allclose(engine, matched, atol=1e-5)
        np.testing.assert_allclose(
            handed, estimate("grpo", batch.rewards, batch.group, reward_range="01").advantages, atol=1e-6
        )
        np.testing.assert_allclose(engine, handed, atol=3e-4 + 1e-6)
    assert trainer.v05_provider is None
    assert "v05/zero_adv_frac" in trainer.state.log_history[0]


def test_v05_eb_carries_state_and_feeds_n0(tmp_path):
    """v05_eb: the PriorErrorState is carried across steps (2 steps × 4 groups) and n0 comes from the provider."""
    model, tokenizer, dataset, reward, _ = arithmetic_setup()
    trainer = Recording(
        model=model,
        reward_funcs=reward,
        args=config(tmp_path, v05_estimator="v05_eb"),
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    trainer.train()
    assert isinstance(trainer.v05_state, PriorErrorState) and trainer.v05_state.n_groups == 2 * N_PROMPTS
    first, _ = trainer.scored[0]
    fresh = make_provider("running_mean").predict(list(first.prompt_ids), list(first.prompt_ids))
    np.testing.assert_allclose(first.estimate.n0, fresh.n0)  # the provider's n0 before any outcome
    assert "v05/n0" in trainer.state.log_history[0]


def test_checkpoint_resume_restores_prior_and_estimator_state(tmp_path):
    """A checkpoint holds v05_state.json (the provider's and v05_eb's states after step 1); a run resumed from it
    starts step 2 with them: its prior is the saved provider's prediction and its state holds 2 steps × 4 groups (a
    fresh state would hold 4). Resuming with another estimator raises."""
    model, tokenizer, dataset, _, _ = arithmetic_setup()
    first = Recording(
        model=model,
        reward_funcs=odd_first_char,
        args=config(tmp_path, v05_estimator="v05_eb", max_steps=1, save_strategy="steps", save_steps=1),
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    first.train()
    checkpoint = tmp_path / "checkpoint-1"
    saved = json.loads((checkpoint / STATE_FILE).read_text())
    assert saved["estimator_state"] == json.loads(json.dumps(state_to_json(first.v05_state)))
    assert saved["provider"] == json.loads(json.dumps(first.v05_provider.state_dict()))

    model, tokenizer, dataset, _, _ = arithmetic_setup()
    resumed = Recording(
        model=model,
        reward_funcs=odd_first_char,
        args=config(tmp_path, v05_estimator="v05_eb", max_steps=2),
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    resumed.train(resume_from_checkpoint=str(checkpoint))
    ((batch, _),) = resumed.scored  # step 2 only
    restored = make_provider("running_mean")
    restored.load_state_dict(saved["provider"])
    pred = restored.predict(list(batch.prompt_ids), list(batch.prompt_ids))  # running_mean: one V for every prompt
    np.testing.assert_allclose(batch.prior, (pred.mean + 1.0) / 2.0, atol=1e-12)
    assert isinstance(resumed.v05_state, PriorErrorState) and resumed.v05_state.n_groups == 2 * N_PROMPTS

    other = V05GRPOTrainer(
        model=model,
        reward_funcs=odd_first_char,
        args=config(tmp_path, v05_estimator="v05", max_steps=2),
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    with pytest.raises(ValueError, match="resume with the estimator it was saved with"):
        other.train(resume_from_checkpoint=str(checkpoint))


@pytest.mark.parametrize("name", ["drgrpo", "rloo", "reinforce_pp_baseline", "dbb"])
def test_other_estimators_hand_their_advantages_to_trl(tmp_path, name):
    """Every other registered estimator (oracle needs the truth) runs a TRL step and hands over its advantages."""
    model, tokenizer, dataset, _, _ = arithmetic_setup()
    trainer = Recording(
        model=model,
        reward_funcs=odd_first_char,
        args=config(tmp_path, v05_estimator=name, max_steps=1),
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    trainer.train()
    ((batch, handed),) = trainer.scored
    np.testing.assert_allclose(handed, batch.estimate.advantages, atol=1e-6)
    assert np.all(np.isfinite(handed)) and trainer.v05_provider is None
    assert (trainer.v05_state is not None) == (name == "dbb")  # dbb's per-prompt history is carried


def test_rewards_outside_unit_interval_raise(tmp_path):
    """A weighted reward sum outside [0, 1] is refused with a message naming the fix."""
    model, tokenizer, dataset, _, _ = arithmetic_setup()

    def two(prompts, completions, **kwargs):
        return [2.0] * len(completions)

    trainer = V05GRPOTrainer(
        model=model,
        reward_funcs=two,
        args=config(tmp_path, max_steps=1),
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    with pytest.raises(ValueError, match=r"outside v05_reward_range='01' \[0, 1\].*reward_weights"):
        trainer.train()


def test_osla_allocator_is_refused(tmp_path):
    """TRL's fixed contiguous K cannot express OSLA's per-prompt extra rollouts."""
    with pytest.raises(ValueError) as err:
        config(tmp_path, v05_allocator="osla")
    assert FIXED_K_MESSAGE in str(err.value)
    assert "TRL's GRPOTrainer samples a fixed num_generations per prompt in contiguous blocks" in FIXED_K_MESSAGE


def test_scale_rewards_for_prior_estimators(tmp_path):
    """V0.5-family estimators: unset scale_rewards is forced to 'none'; an explicit 'group' (or True) raises."""
    assert config(tmp_path).scale_rewards == "none"
    assert config(tmp_path, scale_rewards=False).scale_rewards == "none"
    for value in ("group", True):
        with pytest.raises(ValueError, match="set scale_rewards='none'"):
            config(tmp_path, scale_rewards=value)
    with pytest.raises(ValueError, match="contradicts"):
        config(tmp_path, v05_estimator="rloo", scale_rewards="group")
    assert config(tmp_path, v05_estimator="grpo", v05_estimator_options={"scale": "none"}).scale_rewards == "none"


def test_unknown_names_list_the_valid_ones(tmp_path):
    """Unknown estimator, prior and option names raise and list what is valid."""
    with pytest.raises(ValueError, match="unknown v05_estimator 'nope'; valid: grpo, drgrpo, rloo"):
        config(tmp_path, v05_estimator="nope")
    with pytest.raises(ValueError, match="unknown v05_prior 'nope'; valid: running_mean, history"):
        config(tmp_path, v05_prior="nope")
    with pytest.raises(ValueError, match="v05_prior='oracle' is a bound .* only v05 train draws"):
        config(tmp_path, v05_prior="oracle")  # never a silent running-mean fallback every step
    for prior, options in (("probe", None), ("spo", {"start_from": "probe"})):  # the policy is never bound here
        with pytest.raises(ValueError, match=f"v05_prior='{prior}' .* reads the live policy's hidden states"):
            config(tmp_path, v05_prior=prior, v05_prior_options=options)
    started = {"start_from": "history", "rho": "constant"}
    assert config(tmp_path, v05_prior="spo", v05_prior_options=started).v05_prior_options == started
    with pytest.raises(ValueError, match="no option.*foo; valid: scale, noise, switch"):
        config(tmp_path, v05_estimator_options={"foo": 1})
    with pytest.raises(ValueError, match="fuses a prior"):
        config(tmp_path, v05_prior=None)
    with pytest.raises(ValueError, match="may not set state"):
        config(tmp_path, v05_estimator="v05_eb", v05_estimator_options={"state": None})


def test_trl_version_check():
    """Versions outside [1.16, 2) are refused with the supported range in the message."""
    check_trl_version()  # the installed one
    check_trl_version("1.16.0")
    check_trl_version("1.17.0.dev0")
    for bad in ("1.15.2", "2.0.0", "0.19.1", "unknown"):
        with pytest.raises(ValueError, match=r"trl>=1.16,<2"):
            check_trl_version(bad)


def test_group_layout_is_checked():
    """A block of K rollouts whose prompt keys differ breaks TRL's layout assumption and raises."""
    keys, texts = _group_keys(["a", "a", "b", "b"], ["x", "x", "y", "y"], 2)
    assert list(keys) == ["a", "b"] and texts == ["x", "y"]
    with pytest.raises(ValueError, match="contiguous"):
        _group_keys(["a", "b", "b", "b"], ["x"] * 4, 2)


def test_trl_rollouts_per_s_runs(tmp_path):
    """Plain TRL for 3 steps: steps 2..3 are timed and the numbers are positive; the caller's model is untouched."""
    model, tokenizer, dataset, _, _ = arithmetic_setup()
    task = ArithmeticTask(n_train=8, n_eval=1, seed=0)
    by_text = {render_prompt(task, p, tokenizer, template="plain"): p for p in task.train_prompts()}

    def arithmetic_reward(prompts, completions, **kwargs):  # plain TRL: the prompt text is the only key
        return task.score([by_text[t] for t in prompts], completions).rewards.tolist()

    before = [p.detach().clone() for p in model.parameters()]
    out = trl_grpo_rollouts_per_s(
        model,
        tokenizer,
        list(dataset["prompt"]),
        arithmetic_reward,
        num_generations=K,
        batch_prompts=N_PROMPTS,
        max_new_tokens=6,
        steps=3,
        output_dir=str(tmp_path),
    )
    assert out["steps"] == 2 and out["rollouts"] == 2 * N_PROMPTS * K
    assert out["seconds"] > 0 and out["rollouts_per_s"] > 0
    assert all(torch.equal(b, a) for b, a in zip(before, model.parameters(), strict=True))


def test_trl_contract_the_private_methods_the_adapter_wraps():
    """The adapter wraps TRL 1.16's private GRPOTrainer._calculate_rewards and _generate_and_score_completions and
    reads the output dict's "advantages" and the config's scale_rewards / num_generations: pin their presence and
    signatures so a TRL upgrade that moves them fails here, not silently in training."""
    import inspect

    import trl

    calc = inspect.signature(trl.GRPOTrainer._calculate_rewards)
    assert list(calc.parameters)[:2] == ["self", "inputs"]
    gen = inspect.signature(trl.GRPOTrainer._generate_and_score_completions)
    assert list(gen.parameters)[:2] == ["self", "inputs"]
    src = inspect.getsource(trl.GRPOTrainer._generate_and_score_completions)
    assert '"advantages"' in src and "_calculate_rewards" in src
    fields = trl.GRPOConfig.__dataclass_fields__
    assert {"scale_rewards", "num_generations", "multi_objective_aggregation"} <= set(fields)
