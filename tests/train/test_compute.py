"""Honest budgets in the loop: every metrics row carries cumulative ``tokens_total`` and ``compute_total``, and each
method's token-passes follow from its passes by hand (a forward of one token by one model counts 1, a backward 2)."""

from __future__ import annotations

import pytest

from tests.train._rows import rows_of
from v05.train.config import load_config
from v05.train.loop import train

POISE = ["estimator.name=poise", "allocator.options={k: 2}", "poise.bootstrap_steps=1", "poise.pca_prompt=8",
         "poise.pca_response=8", "poise.features={layer: -1, n_prompt: 4, n_response: 4}"]  # fmt: skip
PPO = ["estimator.name=gae", "allocator.options={k: 1}", "train.batch_size=16"]
PROBE = ["estimator.name=v05_eb", "estimator.options={scale: none}", "prior.name=probe",
         "prior.options={context_size: 64, min_context: 4, head_options: {n_components: 4}}",
         "poise.features={layer: -1, n_prompt: 4}"]  # fmt: skip


def _run(tmp_path, tiny_overrides, over):
    train(load_config(None, [*tiny_overrides, *over]), tmp_path / "run")
    return [r for r in rows_of(tmp_path / "run") if r["step"] > 0], rows_of(tmp_path / "run")


@pytest.mark.parametrize(("name", "over"), [("grpo", ["allocator.options={k: 4}"]), ("poise", POISE), ("ppo", PPO),
                                            ("probe", PROBE)])  # fmt: skip
def test_totals_are_cumulative_and_split_by_part(tmp_path, tiny_overrides, name, over):
    """compute_total and tokens_total start at 0 (the step-0 eval row), grow by each step's compute_step and
    tokens_step, and compute_step is the sum of the parts; generation counts every rollout's prompt and response."""
    steps, rows = _run(tmp_path, tiny_overrides, over)
    assert rows[0]["step"] == 0 and rows[0]["compute_total"] == 0 and rows[0]["tokens_total"] == 0
    total = tokens = 0
    for r in steps:
        parts = {k: v for k, v in r.items() if k.startswith("compute/")}
        assert r["compute_step"] == sum(parts.values()) > 0
        total, tokens = total + r["compute_step"], tokens + r["tokens_step"]
        assert (r["compute_total"], r["tokens_total"]) == (total, tokens)
        assert r["compute/generate"] > r["tokens_step"] > 0  # prompts + responses > responses


def test_grpo_policy_passes_by_hand(tmp_path, tiny_overrides):
    """GRPO k = 4, shared-prefix forward, float32 (no recompute): generation = 4·ΣP_g + ΣR_i (each rollout prefills
    its prompt), the update = 3·(ΣP_g + ΣR_i) (one forward per group's prompt + a backward); nothing else."""
    steps, _ = _run(tmp_path, tiny_overrides, ["allocator.options={k: 4}"])
    for r in steps:
        prompts = (r["compute/generate"] - r["tokens_step"]) / 4  # ΣP_g
        assert prompts == int(prompts) > 0
        assert r["compute/policy"] == 3 * (prompts + r["tokens_step"])
        assert r["compute/critic"] == r["compute/reference"] == r["compute/probe"] == r["compute/recompute"] == 0


def test_ppo_critic_and_poise_probe_are_charged(tmp_path, tiny_overrides):
    """PPO's separate critic (k = 1) costs a no-grad value pass and a forward + backward per epoch over the same
    tokens as generation: critic = 4 × generate. POISE's feature pass is one no-grad policy forward: recompute =
    policy / 3. At equal rollouts both spend more compute than GRPO's 3·(ΣP + ΣR) + generation."""
    ppo, _ = _run(tmp_path / "ppo", tiny_overrides, PPO)
    assert all(r["compute/critic"] == 4 * r["compute/generate"] for r in ppo)
    poise, _ = _run(tmp_path / "poise", tiny_overrides, POISE)
    assert all(3 * r["compute/recompute"] == r["compute/policy"] > 0 for r in poise)


def test_probe_prior_prefills_are_charged(tmp_path, tiny_overrides):
    """The probe prior runs the policy over prompts every step (never cached): its token-passes are counted."""
    steps, _ = _run(tmp_path, tiny_overrides, PROBE)
    assert all(r["compute/probe"] > 0 for r in steps[1:])
