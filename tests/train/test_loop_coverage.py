"""The loop's update options reach the optimizer: micro-batches, PPO epochs, the KL and entropy terms, aggregation.

Each run is 2 steps of 8 prompts × 4 rollouts (same seed), with gradient clipping off so that gradients compare as
computed. A spy on the loop's ``_optimizer`` wraps ``optimizer.step`` to record the full gradient vector g (float64
copy of every parameter's .grad) at each optimizer step; a spy on the loop's ``update_policy`` records the kept
rollouts. Runs are cached per module: the reference run is shared. "Equal" means ‖g_a − g_b‖ ≤ 1e-4·‖g_a‖ (float32
summation order across micro-batches or the shared-prefix path, measured ~1e-6); "differ" means > 1e-3·‖g_a‖.
"""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest
import torch

import v05.train.loop as loop_module
from v05.train.config import load_config
from v05.train.loop import train

BASE = ["train.steps=2", "eval.at_start=false", "eval.every=0", "optim.grad_clip=null"]
EQUAL, DIFFER = 1e-4, 1e-3


class Run:
    """One recorded training run: optimizer-step gradients, kept rollouts per update, metrics rows, final weights."""

    def __init__(self, grads, updates, rows, weights, cfg) -> None:
        self.grads, self.updates, self.rows, self.weights, self.cfg = grads, updates, rows, weights, cfg

    def row(self, step: int) -> dict:
        return next(r for r in self.rows if r["step"] == step)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """``runs(base_overrides, *extra)`` trains once per distinct override list and returns the cached ``Run``."""
    cache: dict[tuple[str, ...], Run] = {}

    def get(base: list[str], *extra: str, reweight=None) -> Run:
        key = (*base, *BASE, *extra)
        label = key + (() if reweight is None else (reweight.__name__,))
        if label not in cache:
            cache[label] = _record(key, tmp_path_factory.mktemp("run"), reweight)
        return cache[label]

    return get


def _record(overrides: tuple[str, ...], folder, reweight=None) -> Run:
    grads: list[torch.Tensor] = []
    updates: list[dict] = []
    rows: list[dict] = []
    held: dict = {}
    real_optimizer, real_update = loop_module._optimizer, loop_module.update_policy
    signature = inspect.signature(real_update)

    def optimizer_spy(cfg, model):
        opt, scheduler = real_optimizer(cfg, model)
        params = [p for g in opt.param_groups for p in g["params"]]
        real_step = opt.step

        def step(*args, **kwargs):
            grads.append(torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).detach().double().flatten()
                                    for p in params]))  # fmt: skip
            return real_step(*args, **kwargs)

        opt.step = step
        held["model"] = model
        return opt, scheduler

    def update_spy(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        a = bound.arguments
        updates.append({"rollouts": a["rollouts"], "advantages": np.asarray(a["advantages"], np.float64)})
        if reweight is not None:  # the test's own per-rollout reweighting of the advantages
            a["advantages"] = reweight(a["rollouts"], np.asarray(a["advantages"], np.float64))
        return real_update(*bound.args, **bound.kwargs)

    cfg = load_config(None, list(overrides))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loop_module, "_optimizer", optimizer_spy)
        mp.setattr(loop_module, "update_policy", update_spy)
        train(cfg, folder / "run", log=rows.append)
    weights = {k: v.detach().clone() for k, v in held["model"].state_dict().items()}
    return Run(grads, updates, rows, weights, cfg)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """‖a − b‖ / ‖a‖."""
    return float((a - b).norm() / a.norm())


def max_weight_diff(a: Run, b: Run) -> float:
    return max(float((a.weights[k] - b.weights[k]).abs().max()) for k in a.weights)


def test_micro_batches_accumulate_the_full_batch_gradient(runs, tiny_overrides):
    """train.micro_batch_size=3 (11 micro-batches of 32 rollouts, groups of 4 split across them) gives, at both
    optimizer steps, the gradient of the whole batch in one micro-batch, so the same loss, grad norm and weights:
    each micro-batch's loss is divided by the step's global counts (``loss_norm``), not its own."""
    full, micro = runs(tiny_overrides), runs(tiny_overrides, "train.micro_batch_size=3")
    assert len(full.grads) == len(micro.grads) == 2
    assert len(full.updates[0]["rollouts"]) > 3 * 2  # really several micro-batches
    for step, (g_full, g_micro) in enumerate(zip(full.grads, micro.grads, strict=True), start=1):
        assert g_full.norm() > 0
        assert rel(g_full, g_micro) < EQUAL, step
        assert micro.row(step)["grad_norm"] == pytest.approx(full.row(step)["grad_norm"], rel=EQUAL), step
        assert micro.row(step)["loss"] == pytest.approx(full.row(step)["loss"], rel=EQUAL, abs=1e-6), step
    assert max_weight_diff(full, micro) < 2e-6  # measured ~3e-7; one AdamW step moves a weight by up to lr = 1e-5


def test_ppo_epochs_take_one_optimizer_step_each_on_the_same_rollouts(runs, tiny_overrides):
    """train.ppo_epochs=2 takes 2 optimizer steps per training step; the first has the 1-epoch run's gradient (the
    same rollouts and weights), the second another one (the policy moved: ρ ≠ 1, so the logged KL(old‖new) > 0);
    the final weights differ from the 1-epoch run's."""
    one, two = runs(tiny_overrides), runs(tiny_overrides, "train.ppo_epochs=2")
    assert len(one.grads) == 2 and len(two.grads) == 4
    assert rel(one.grads[0], two.grads[0]) < EQUAL
    assert rel(two.grads[0], two.grads[1]) > DIFFER
    assert two.row(1)["approx_kl"] > 0 and one.row(1)["approx_kl"] == pytest.approx(0.0, abs=1e-7)
    assert max_weight_diff(one, two) > 1e-6


def test_kl_term_enters_the_update(runs, tiny_overrides):
    """loss.kl_coef=0.5 (k3 estimator): at step 1 the policy is the reference, k3's gradient (1 − e^δ)·∇log π is 0
    and the gradient equals the KL-free run's; at step 2 (the same rollouts, since step 1 was the same) the KL
    pulls toward the reference and the gradient differs. The logged kl is 0 at step 1 and finite and > 0 at step 2."""
    base, kl = runs(tiny_overrides), runs(tiny_overrides, "loss.kl_coef=0.5")
    assert rel(base.grads[0], kl.grads[0]) < EQUAL
    assert rel(base.grads[1], kl.grads[1]) > DIFFER
    assert kl.row(1)["kl"] == pytest.approx(0.0, abs=1e-7)
    assert math.isfinite(kl.row(2)["kl"]) and kl.row(2)["kl"] > 0


def test_entropy_bonus_enters_the_update(runs, tiny_overrides):
    """loss.entropy_coef=0.05 changes the first step's gradient; the logged entropy (a diagnostic, independent of the
    coefficient) is finite, > 0 and the same in both runs at step 1."""
    base, ent = runs(tiny_overrides), runs(tiny_overrides, "loss.entropy_coef=0.05")
    assert rel(base.grads[0], ent.grads[0]) > DIFFER
    e_base, e_ent = base.row(1)["entropy"], ent.row(1)["entropy"]
    assert math.isfinite(e_ent) and e_ent > 0 and e_ent == pytest.approx(e_base, rel=1e-5)


def seq_mean_weights(rollouts, advantages: np.ndarray) -> np.ndarray:
    """Aᵢ·n_tokens/(S·nᵢ): under token-mean these advantages give seq-mean-token-mean's per-token weights Aᵢ/(S·nᵢ)."""
    n_i = rollouts.response_mask.sum(1).numpy().astype(np.float64)  # (N,)
    n_tokens, n_seqs = n_i.sum(), float((n_i > 0).sum())
    return np.where(n_i > 0, advantages * n_tokens / (n_seqs * np.maximum(n_i, 1)), 0.0)


def test_each_aggregation_mode_reaches_the_loss(runs, tiny_overrides):
    """At step 1 (ρ = 1, no KL or entropy) the loss is −Σᵢₜ wᵢ Aᵢ log πᵢₜ with per-token weights wᵢ = 1/n_tokens
    (token-mean), 1/(S·nᵢ) (seq-mean-token-mean) or 1/(S·T) (seq-mean-token-sum-norm, T = max_new_tokens). So the
    seq-mean-token-sum-norm gradient is n_tokens/(S·T) × the token-mean one, and the seq-mean-token-mean gradient
    equals the token-mean gradient of a run whose advantages the test rescales to Aᵢ·n_tokens/(S·nᵢ); both
    differ from the token-mean gradient by more than rounding, so a mode the loop ignored (or mis-weighted) fails.
    The estimator is v05 with a running-mean prior so that all-equal groups have A ≠ 0 too (with GRPO only the
    few mixed groups count, and their right and wrong answers often have one length)."""
    over = [*tiny_overrides, "estimator.name=v05", "estimator.options={scale: none}", "prior.name=running_mean"]
    tm = runs(over)
    smtm = runs(over, "loss.agg=seq-mean-token-mean")
    snorm = runs(over, "loss.agg=seq-mean-token-sum-norm")
    lengths = tm.updates[0]["rollouts"].response_mask.sum(1).numpy()  # (N,)
    moving = tm.updates[0]["advantages"] != 0
    assert len(set(lengths[moving].tolist())) > 1, "rollouts with A ≠ 0 all of one length: smtm = token-mean"
    n_tokens, n_seqs, horizon = int(lengths.sum()), int((lengths > 0).sum()), tm.cfg.generation.max_new_tokens
    scale = n_tokens / (n_seqs * horizon)
    assert abs(scale - 1) > DIFFER  # the two modes are distinguishable
    g_tm, g_smtm, g_snorm = tm.grads[0], smtm.grads[0], snorm.grads[0]
    assert rel(scale * g_tm, g_snorm) < EQUAL
    g_oracle = runs(over, reweight=seq_mean_weights).grads[0]
    assert rel(g_oracle, g_smtm) < EQUAL
    assert rel(g_tm / g_tm.norm(), g_smtm / g_smtm.norm()) > DIFFER  # not just a rescaled token-mean gradient
    for run in (smtm, snorm):
        assert all(math.isfinite(r["loss"]) for r in run.rows if r["step"] > 0)
