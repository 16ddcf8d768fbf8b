"""The policy update moves the right way: rollouts with positive advantage gain log-probability, negative ones lose it.

A spy wraps the ``update_policy`` the loop calls and measures, for the step's kept rollouts, the summed log-probability
log π(y | x) = Σₜ log π(yₜ | x, y₍<ₜ₎) under the policy just before and just after the update (an independent forward,
:func:`v05.engines.logprobs.sequence_logprobs`). The expected direction comes from an oracle that never looks at the
trainer's advantages: the rewards (spied at ``shape_rewards``) and the groups.

Why this is first-order deterministic: with AdamW at β₁ = 0 the step is Δθ = −lr·D·g with a positive diagonal D
(1/√v̂) and g the gradient of the token-mean loss −Σᵢ Aᵢ Σₜ log πᵢₜ / n_tokens at ρ = 1, so
Σᵢ Aᵢ Δlog πᵢ ≈ lr·n_tokens·gᵀDg > 0: the advantage-weighted change is positive, and it flips sign if the advantages
reaching the loss are negated. β₁ = 0 keeps step 2's move its own gradient's (with momentum it is mostly step 1's).
A small lr (1e-5, no warm-up) keeps the change in that first-order regime; the effects measured are 1e-2–1e-1
nats, the float32 forward's rounding ~1e-6, so the margins below (1e-3) are far from both.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

import v05.train.loop as loop_module
from v05.engines.logprobs import sequence_logprobs
from v05.train.config import load_config
from v05.train.loop import train

MARGIN = 1e-3
"""Nats: far above the forward's float32 rounding (~1e-6), far below the measured effects (1e-2–1e-1)."""

LEARN = ["optim.lr=1e-5", "optim.warmup_steps=0", "optim.betas=[0.0, 0.99]", "train.steps=2", "train.batch_size=16",
         "eval.at_start=false", "eval.every=0", "generation.temperature=1.5"]  # fmt: skip
"""Two steps of 16 prompts × 8 rollouts at T = 1.5: the warm start solves most prompts (97 % at T = 1 on a CPU with
AMX, where its SFT ends elsewhere: 3–5 failures, too few), the higher temperature leaves ~20–40 % failures and
enough mixed groups on any CPU."""

CASES = {
    "grpo": ["allocator.options={k: 8}"],  # the default estimator and loss
    "gae": ["estimator.name=gae", "allocator.options={k: 8}"],  # PPO with a separate critic
    "poise": [
        "estimator.name=poise",
        "allocator.options={k: 8}",
        "poise.bootstrap_steps=1",
        "poise.pca_prompt=8",
        "poise.pca_response=8",
        "poise.features={layer: -1, n_prompt: 4, n_response: 4}",
    ],
    "v05_eb": [
        "estimator.name=v05_eb",
        "estimator.options={scale: none}",
        "prior.name=history",
        "allocator.name=osla",
        "allocator.options={k_init: 8, k_max: 16}",
    ],
}
GROUP_MEAN = ("grpo",)
"""Estimators whose baseline is a function of the group's rewards: sign(A_i) = sign(r_i − r̄_g) exactly."""
IN_RANGE = ("poise", "v05_eb")
"""Learned baselines that stay in the reward range: A_i ≥ 0 for successes and ≤ 0 for failures."""


def summed_logp(model, rollouts, temperature: float) -> np.ndarray:
    """(N,) Σₜ log π(yₜ | x, y₍<ₜ₎) of the rollouts under ``model`` (a plain forward, no shared prefix)."""
    with torch.no_grad():
        logp, _ = sequence_logprobs(model, rollouts.prompt_ids, rollouts.prompt_mask, rollouts.response_ids,
                                    rollouts.response_mask, temperature=temperature)  # fmt: skip
    return logp.double().sum(1).cpu().numpy()


def run_with_spies(tmp_path, overrides, monkeypatch) -> tuple[list[dict], list[dict]]:
    """Train with spies on the loop's ``shape_rewards`` and ``update_policy``; return (per-update records, rows)."""
    real_update, real_shape = loop_module.update_policy, loop_module.shape_rewards
    signature = inspect.signature(real_update)
    records: list[dict] = []
    rows: list[dict] = []

    def shape_spy(overlong, rewards, lengths, **kw):
        records.append({"rewards": np.array(rewards, dtype=np.float64)})
        return real_shape(overlong, rewards, lengths, **kw)

    def update_spy(*args, **kwargs):
        a = signature.bind(*args, **kwargs).arguments
        cfg, model, rollouts = a["cfg"], a["model"], a["rollouts"]
        before = summed_logp(model, rollouts, cfg.generation.temperature)
        out = real_update(*args, **kwargs)
        after = summed_logp(model, rollouts, cfg.generation.temperature)
        records[-1] |= {"group": np.asarray(a["group"]), "advantages": np.asarray(a["advantages"], np.float64),
                        "delta": after - before, "success": records[-1]["rewards"] > _midpoint(cfg)}  # fmt: skip
        return out

    monkeypatch.setattr(loop_module, "shape_rewards", shape_spy)
    monkeypatch.setattr(loop_module, "update_policy", update_spy)
    train(load_config(None, overrides), tmp_path / "run", log=rows.append)
    return [r for r in records if "delta" in r], rows


def _midpoint(cfg) -> float:
    return 0.0 if cfg.train.reward_range == "pm1" else 0.5


def group_mean_sign(rewards: np.ndarray, group: np.ndarray) -> np.ndarray:
    """(N,) sign(r_i − r̄_g): the oracle direction of every group-mean baseline (GRPO, RLOO, Dr. GRPO)."""
    mean_g = np.bincount(group, weights=rewards) / np.bincount(group)  # (G,)
    return np.sign(rewards - mean_g[group])  # (N,)


@pytest.mark.parametrize("name", list(CASES))
def test_update_raises_positive_and_lowers_negative_advantage_rollouts(tmp_path, tiny_overrides, monkeypatch, name):
    """Each of two steps' updates moves the kept rollouts' log-probabilities in the direction of an oracle built from
    the rewards alone: for GRPO (default loss) successes of a mixed group gain log π on average and its failures lose
    it (> 1e-3 nats each way); for the learned baselines (PPO's critic, POISE's probe at step 2, v05_eb with a
    history prior and OSLA), whose sign per rollout is not a function of the group's rewards, the successes gain
    more than the failures (mean Δlog π(success) − mean Δlog π(failure) > 1e-3) and the failures lose. Negating the
    advantages anywhere between the estimator and the loss reverses every one of these inequalities (module
    docstring), so none can pass under negation."""
    records, rows = run_with_spies(tmp_path, [*tiny_overrides, *LEARN, *CASES[name]], monkeypatch)
    assert len(records) == 2, "one update per step"
    if name == "poise":  # step 2 uses the probe fitted on step 1, not the RLOO bootstrap
        assert [r["poise/bootstrap"] for r in rows if r["step"] > 0] == [1.0, 0.0]
    for step, rec in enumerate(records, start=1):
        delta, success, adv = rec["delta"], rec["success"], rec["advantages"]
        assert np.all(np.isfinite(delta)), step
        if name in GROUP_MEAN:
            sign = group_mean_sign(rec["rewards"], rec["group"])
            assert np.array_equal(np.sign(adv), sign), step  # the estimator's output has the oracle's sign
            assert (sign > 0).sum() >= 4 and (sign < 0).sum() >= 4, "too few mixed groups for the check"
            assert delta[sign > 0].mean() > MARGIN, (step, delta[sign > 0].mean())
            assert delta[sign < 0].mean() < -MARGIN, (step, delta[sign < 0].mean())
        else:
            if name in IN_RANGE:  # a baseline inside the reward range: successes ≥ 0, failures ≤ 0
                assert np.all(adv[success] >= 0) and np.all(adv[~success] <= 0), step
            assert success.sum() >= 4 and (~success).sum() >= 4, "too few successes or failures for the check"
            gap = delta[success].mean() - delta[~success].mean()
            assert gap > MARGIN, (step, gap)
            assert delta[~success].mean() < -MARGIN, (step, delta[~success].mean())
