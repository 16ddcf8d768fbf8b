"""POISE, the PPO critic and the probe prior in the trainer: they train, resume exactly, and keep POISE's order."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from tests.train._rows import comparable, rows_of
from v05.train.compute import ComputeMeter
from v05.train.config import load_config
from v05.train.loop import train

POISE = ["estimator.name=poise", "allocator.options={k: 2}", "poise.bootstrap_steps=1", "poise.pca_prompt=8",
         "poise.pca_response=8", "poise.features={layer: -1, n_prompt: 4, n_response: 4}"]  # fmt: skip
PPO = ["estimator.name=gae", "allocator.options={k: 1}", "train.batch_size=16"]
PROBE = ["estimator.name=v05_eb", "estimator.options={scale: none}", "prior.name=probe",
         "prior.options={min_context: 8, head_options: {n_components: 4}}", "poise.features={n_prompt: 4}"]  # fmt: skip



@pytest.mark.parametrize(
    ("name", "over"),
    [("poise", POISE), ("ppo_separate", PPO), ("ppo_head", [*PPO, "critic.mode=head"]), ("probe", PROBE)],
)
def test_value_methods_train_and_log_value_quality(tmp_path, tiny_overrides, name, over):
    """A 3-step run of POISE (the probe takes over after 1 bootstrap step), PPO with a separate critic or a value
    head, and v05_eb with the probe prior: finite losses, value-quality metrics once a value estimate exists."""
    cfg = load_config(None, [*tiny_overrides, *over])
    res = train(cfg, tmp_path / "run")
    rows = [r for r in rows_of(tmp_path / "run") if r["step"] > 0]
    assert res.steps == 3 and all(np.isfinite(r["loss"]) and np.isfinite(r["grad_norm"]) for r in rows)
    if name == "poise":
        assert [r["poise/bootstrap"] for r in rows] == [1.0, 0.0, 0.0]
        assert "value/mae" in rows[-1] and rows[-1]["poise/buffer_rows"] > 0
    if name.startswith("ppo"):
        assert all("value/mae" in r for r in rows)
        assert (name == "ppo_separate") == all("critic/loss" in r for r in rows)
    if name == "probe":
        assert all("prior/tau2" in r and "value/mae" in r for r in rows)


@pytest.mark.parametrize(("name", "over"), [("poise", POISE), ("ppo", PPO), ("probe", PROBE)])
def test_resume_reproduces_runs_with_probe_critic_or_probe_prior(tmp_path, tiny_overrides, name, over):
    """Killed after the step-2 checkpoint and resumed, a run with POISE's probe/buffer, the critic or the probe
    prior reproduces the uninterrupted run's metrics (but times) and final weights."""
    from safetensors.torch import load_file

    cfg = load_config(None, [*tiny_overrides, *over, "train.steps=4", "run.checkpoint_every=2"])
    train(cfg, tmp_path / "full")

    def die_at_3(row):
        if row["step"] == 3:
            raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        train(cfg, tmp_path / "cut", log=die_at_3)
    train(cfg, tmp_path / "cut", resume=True)
    for ra, rb in zip(rows_of(tmp_path / "full"), rows_of(tmp_path / "cut"), strict=True):
        assert comparable(ra) == comparable(rb), (name, ra["step"])
    wa = load_file(tmp_path / "full" / "checkpoints" / "step_000004" / "policy" / "model.safetensors")
    wb = load_file(tmp_path / "cut" / "checkpoints" / "step_000004" / "policy" / "model.safetensors")
    assert all(bool((wa[k] == wb[k]).all()) for k in wa)


def test_poise_predicts_with_the_previous_probe_then_refits(tmp_path, tiny_overrides):
    """POISE's strict order: this step's baselines come from the probe fitted on *earlier* steps; the step's rows
    join the buffer in ``estimate`` and the probe is refit only in ``after_update`` (after the policy update).
    Checked by replaying the step with a copy of the probe taken before it: the advantages equal poise(values = old
    probe's predictions), the probe is unchanged by ``estimate`` and changed by ``after_update``."""
    import torch

    from v05.engines.hf import GenerationConfig, HFEngine
    from v05.registry import estimate
    from v05.train.features import recompute_pass
    from v05.train.policy import load_policy
    from v05.train.value import PoiseMethod, StepBatch

    cfg = load_config(None, [*tiny_overrides, *POISE])
    model, tok = load_policy(cfg.policy)
    torch.manual_seed(0)
    method = PoiseMethod(cfg, model, tok)
    rng = np.random.default_rng(0)
    prompts = [f"{a}+{b}=" for a, b in rng.integers(0, 10, (16, 2))]
    engine = HFEngine(model, tok, GenerationConfig(max_new_tokens=4), seed=0)

    def batch(step, keys):
        ro = engine.generate(prompts, [2] * 16)
        rewards = np.where(rng.random(len(ro)) < 0.5, 1.0, -1.0)
        return StepBatch(step, ro, rewards, ro.prompt_index, keys)

    first = batch(1, np.arange(16))
    out = method.estimate(first, ComputeMeter())  # bootstrap: fills the buffer
    assert not method.probe.fitted_ and out.metrics["poise/bootstrap"] == 1.0
    method.after_update(out, ComputeMeter())
    before = copy.deepcopy(method.probe)
    second = batch(2, np.arange(16, 32))
    out = method.estimate(second, ComputeMeter())
    _, feats = recompute_pass(model, second.rollouts, group=second.group, config=cfg.poise.features, temperature=1.0,
                              tokenizer=tok)  # fmt: skip
    v01 = before.predict(feats.prompt, feats.response, feats.scalars)
    expected = estimate("poise", second.rewards, second.group, values=2.0 * v01 - 1.0, reward_range="pm1",
                        scale="none")  # fmt: skip
    np.testing.assert_allclose(out.advantages, expected.advantages, atol=1e-10)
    np.testing.assert_array_equal(method.probe.predict(feats.prompt, feats.response, feats.scalars), v01)
    method.after_update(out, ComputeMeter())
    after = method.probe.predict(feats.prompt, feats.response, feats.scalars)
    assert not np.allclose(after, v01)  # refit on this step's rows, after its advantages and the policy update


@pytest.mark.parametrize("config", ["demo-poise", "demo-ppo", "demo-v05-probe"])
def test_packaged_value_configs_run_a_few_steps(tmp_path, tiny_overrides, config):
    """The three packaged configs of this part (POISE at k = 2, PPO with a critic, v05_eb + OSLA + probe prior) run
    a few steps on the tiny task with their methods unchanged (only the task, warm start and sizes shrunk)."""
    cfg = load_config(config, [*tiny_overrides, "train.max_rollouts=null", "poise.bootstrap_steps=1"])
    assert cfg.estimator.name in ("poise", "gae", "v05_eb")
    res = train(cfg, tmp_path / "run")
    assert res.steps == 3 and np.isfinite(res.eval_pass_rate)


def test_make_value_method_follows_the_estimator_spec_and_carries_estimator_state():
    """The loop's one entry point: a trainer-only estimator (``gae``) gets its critic, one that ``needs_values``
    (``poise``) the probe, any other registered one runs as it is; each has every ValueMethod hook. A registered
    estimator's state (v05_eb's prior-error window) is carried from step to step and round-trips through
    save/load: a restored method computes the next step exactly as the live one."""
    from v05.round import Prior
    from v05.train.loop import make_round
    from v05.train.policy import PolicyConfig, load_policy
    from v05.train.value import CriticMethod, EstimatorMethod, PoiseMethod, StepBatch, make_value_method

    model, tok = load_policy(PolicyConfig(seed=0))
    eb = ["estimator.name=v05_eb", "prior.name=running_mean"]
    kinds = {"grpo": ([], EstimatorMethod), "v05_eb": (eb, EstimatorMethod), "poise": (POISE, PoiseMethod),
             "gae": (PPO, CriticMethod)}  # fmt: skip
    for name, (over, kind) in kinds.items():
        cfg = load_config(None, over)
        method = make_value_method(cfg, model, tok, make_round(cfg))
        assert type(method) is kind, name
        hooks = ("estimate", "joint_loss", "after_update", "save", "load")
        assert all(callable(getattr(method, hook)) for hook in hooks), name
        assert method.recomputes_old_logp == (name == "poise")
    cfg = load_config(None, eb)
    rng = np.random.default_rng(0)

    def batch(step):
        group = np.repeat(np.arange(32), 4)
        prior = Prior(rng.uniform(-1, 1, 32), np.full(32, 4.0), "pm1")
        return StepBatch(step, None, np.where(rng.random(128) < 0.5, 1.0, -1.0), group, np.arange(32), prior=prior)

    live = EstimatorMethod(make_round(cfg))
    assert live.round.estimator_state is None
    out = live.estimate(batch(1), ComputeMeter())
    assert live.round.estimator_state.n_groups == 32 and out.value_g is not None
    state = copy.deepcopy(live.round.state_dict())  # the estimator's state is the round's (checkpointed with it)
    assert state["estimator"]["type"] == "PriorErrorState"
    restored = EstimatorMethod(make_round(cfg))
    restored.round.load_state_dict(state)
    nxt = batch(2)
    np.testing.assert_array_equal(live.estimate(nxt, ComputeMeter()).advantages,
                                  restored.estimate(nxt, ComputeMeter()).advantages)  # fmt: skip
    assert live.round.estimator_state.n_groups == restored.round.estimator_state.n_groups == 64
