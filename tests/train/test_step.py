"""Claims about one training step's update (``v05.train.step``): the loss normaliser, the learning-rate schedule,
old log-probs recomputed by the training forward (bf16), the compute meter, and the overlong-buffer guard."""

from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np
import pytest
import torch

from v05.engines.hf import GenerationConfig, HFEngine
from v05.tasks import make_task
from v05.train import step as step_module
from v05.train.compute import ComputeMeter
from v05.train.config import load_config
from v05.train.loop import recompute_old_logp, train
from v05.train.policy import PolicyConfig, load_policy
from v05.train.schedule import LRSchedule
from v05.train.step import check_overlong_buffer, update_policy
from v05.train.value import EstimatorMethod, PoiseMethod


@pytest.fixture(scope="module")
def policy():
    return load_policy(PolicyConfig(seed=0))


def _rollouts(model, tokenizer, *, k=4, max_new_tokens=6, seed=0):
    prompts = ["12+7=", "3-5=", "40+1=", "9*12="]
    engine = HFEngine(model, tokenizer, GenerationConfig(max_new_tokens=max_new_tokens), seed=seed)
    ro = engine.generate(prompts, [k] * len(prompts))
    return ro, ro.prompt_index.copy()


def _optimizer(model, cfg):
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.optim.lr)
    return opt, LRSchedule(opt, lr=cfg.optim.lr, warmup_steps=0, schedule="constant", horizon=1.0)


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_loss_normaliser_horizon_is_the_configured_max_new_tokens(policy, monkeypatch, agg):
    """Every micro-batch's LossNorm has max_len = generation.max_new_tokens (verl divides Dr. GRPO's token sums by
    its padded response length, the configured maximum), not the step's longest response: with 16 allowed tokens
    and responses of at most 6, a step-dependent normaliser would be ≤ 6."""
    model, tok = policy
    ro, group = _rollouts(model, tok, max_new_tokens=6)
    cfg = load_config(None, ["generation.max_new_tokens=16", f"loss.agg={agg}", "train.micro_batch_size=5"])
    seen = []
    real = step_module.policy_loss

    def spy(*args, **kwargs):
        seen.append(kwargs["norm"])
        return real(*args, **kwargs)

    monkeypatch.setattr(step_module, "policy_loss", spy)
    opt, sched = _optimizer(model, cfg)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    try:
        update_policy(cfg, model, None, opt, sched, ro, group, np.linspace(-1, 1, len(ro)), compute=ComputeMeter())
    finally:
        model.load_state_dict(state)
    assert len(seen) == math.ceil(len(ro) / 5)
    assert all(n.max_len == 16 for n in seen)
    assert all(n.n_seqs == len(ro) and n.n_tokens == int(ro.lengths.sum()) for n in seen)


def test_schedule_hand_values():
    """lr_s = lr · min(1, (s+1)/W) · ½(1 + cos πx): W = 2, x = 0, 0.25, 0.5 at s = 0, 1, 2 → lr · (0.5, 0.8536,
    0.5); the constant schedule keeps the warm-up only; a state saved with another horizon is refused."""
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = LRSchedule(opt, lr=2.0, warmup_steps=2, schedule="cosine", horizon=4.0)
    got = []
    for start in (0.0, 1.0, 2.0):
        sched.begin_step(start, 1.0)
        got.append(sched.apply(0, 1))
        sched.step()
    assert got == pytest.approx([2.0 * 0.5, 2.0 * 0.5 * (1 + math.cos(math.pi / 4)), 2.0 * 0.5])
    assert opt.param_groups[0]["lr"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="does not match"):
        LRSchedule(opt, lr=2.0, warmup_steps=2, schedule="cosine", horizon=8.0).load_state_dict(sched.state_dict())
    again = LRSchedule(opt, lr=2.0, warmup_steps=2, schedule="cosine", horizon=4.0)
    again.load_state_dict(sched.state_dict())
    assert again.steps == 3


def test_budgeted_cosine_ends_with_the_budget(tmp_path, tiny_overrides):
    """With train.max_rollouts = 96 (3 steps of 32) and train.steps = 50, the cosine runs over the budget: the
    logged lr of steps 1, 2, 3 is lr · ½(1 + cos π·x) at x = 0, 1/3, 2/3 → lr · (1, 0.75, 0.25). With the old
    horizon of train.steps it stayed above 0.99·lr, so a budgeted run never decayed."""
    over = [*tiny_overrides, "train.steps=50", "train.max_rollouts=96", "allocator.options={k: 4}",
            "optim.schedule=cosine", "optim.warmup_steps=0", "optim.lr=1.0e-4"]  # fmt: skip
    rows = []
    train(load_config(None, over), tmp_path / "run", log=rows.append)
    assert [r["lr"] for r in rows] == pytest.approx([1e-4, 0.75e-4, 0.25e-4])


def test_ppo_epochs_share_the_horizon(tmp_path, tiny_overrides):
    """No budget, train.steps = 3, ppo_epochs = 2: the optimizer steps at x = (t + e/2)/3, so the last epoch of the
    last step runs at lr · ½(1 + cos(π·2.5/3)) (≈ 0.067·lr), not past the end of the schedule (the old
    LambdaLR counted epochs against train.steps and hit 0 halfway)."""
    over = [*tiny_overrides, "train.ppo_epochs=2", "optim.schedule=cosine", "optim.warmup_steps=0",
            "optim.lr=1.0e-4"]  # fmt: skip
    rows = []
    train(load_config(None, over), tmp_path / "run", log=rows.append)
    want = [1e-4 * 0.5 * (1 + math.cos(math.pi * (t + 0.5) / 3)) for t in range(3)]
    assert [r["lr"] for r in rows] == pytest.approx(want)


def test_bf16_old_logp_recomputed_so_the_first_ratio_is_one(policy):
    """A bf16 policy recomputes the old log-probs with the training forward (the default ``auto``), so every token's
    first-epoch ratio is 1 ± 1e-3 and nothing clips (clip range 0.001 here, to see it), whatever the generation
    logits were; without the recompute the generation's log-probs are the ratio's denominator. In bf16, generate's
    KV-cached logits differ from the training forward on some CPUs and agree on others (one with AMX-bf16), so the
    mismatch is made explicit: the generation log-probs are moved by ±0.01 nats per token (what an engine whose
    kernels differ from the trainer's returns), which the ratio without the recompute must show."""
    model32, tok = policy
    model = copy.deepcopy(model32).to(torch.bfloat16)
    ro, group = _rollouts(model, tok, k=8, max_new_tokens=8)
    signs = torch.where(torch.arange(ro.old_logp.numel()).reshape(ro.old_logp.shape) % 2 == 0, 1.0, -1.0)
    ro = dataclasses.replace(ro, old_logp=ro.old_logp + 0.01 * signs * ro.response_mask)
    cfg = load_config(None, ["generation.max_new_tokens=8", "loss.clip_low=0.001", "loss.clip_high=0.001"])
    grpo = EstimatorMethod(cfg)
    assert recompute_old_logp(cfg, model, grpo) and not recompute_old_logp(cfg, model32, grpo)
    adv = np.where(np.arange(len(ro)) % 2 == 0, 1.0, -1.0)
    out = {}
    for flag in (False, True):
        state = {k: v.clone() for k, v in model.state_dict().items()}
        opt, sched = _optimizer(model, cfg)
        out[flag] = update_policy(cfg, model, None, opt, sched, ro, group, adv, compute=ComputeMeter(),
                                  recompute_old_logp=flag)  # fmt: skip
        model.load_state_dict(state)
    assert out[True]["ratio_max_dev_first_epoch"] <= 1e-3 and out[True]["clip_frac_first_epoch"] == 0.0
    assert abs(out[True]["ratio_first_epoch"] - 1.0) <= 1e-3
    assert out[False]["ratio_max_dev_first_epoch"] > 5e-3 and out[False]["clip_frac_first_epoch"] > 0.0


def test_recompute_modes(policy):
    """``auto`` recomputes for a non-float32 policy except under POISE (its feature pass already is the training
    forward); ``always`` and ``never`` override."""
    model, tok = policy
    bf16 = copy.deepcopy(model).to(torch.bfloat16)
    cfg = load_config(None, [])
    grpo, poise = EstimatorMethod(cfg), PoiseMethod(load_config(None, ["estimator.name=poise"]), bf16, tok)
    assert not recompute_old_logp(cfg, model, grpo) and recompute_old_logp(cfg, bf16, grpo)
    assert not recompute_old_logp(cfg, bf16, poise)
    assert recompute_old_logp(load_config(None, ["train.recompute_old_logp=always"]), model, grpo)
    assert not recompute_old_logp(load_config(None, ["train.recompute_old_logp=never"]), bf16, grpo)


def test_compute_meter_counts_policy_passes_by_hand(policy):
    """One update of 16 rollouts (4 prompts × k = 4), shared-prefix forward, ppo_epochs = 2, a KL reference:
    policy = 2 epochs × 3 (forward + backward) × (Σ_g P_g + Σ_i R_i), reference = 2 × (Σ_g P_g + Σ_i R_i), and the
    recompute pass once that (Σ_g P_g: each group's prompt once; R_i: real response tokens)."""
    model, tok = policy
    ro, group = _rollouts(model, tok)
    cfg = load_config(None, ["generation.max_new_tokens=6", "train.ppo_epochs=2", "loss.kl_coef=0.1"])
    ref = load_policy(PolicyConfig(seed=0))[0].eval()
    meter = ComputeMeter()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    try:
        opt, sched = _optimizer(model, cfg)
        update_policy(cfg, model, ref, opt, sched, ro, group, np.ones(len(ro)), compute=meter, recompute_old_logp=True)
    finally:
        model.load_state_dict(state)
    first = [int(np.flatnonzero(group == g)[0]) for g in range(4)]
    forward = int(ro.prompt_mask[first].sum()) + int(ro.lengths.sum())
    assert meter.parts["policy"] == 2 * 3 * forward
    assert meter.parts["reference"] == 2 * forward and meter.parts["recompute"] == forward
    assert meter.total == 9 * forward and meter.metrics()["compute_step"] == meter.total


def test_overlong_buffer_that_penalises_correct_answers_is_refused(policy):
    """Arithmetic answers are up to 4 characters + EOS = 5 tokens; with 6 new tokens a buffer of 2 starts the
    penalty after 4 tokens and would punish correct answers (demo-dapo used to: 13.7% of them), so it is refused;
    a buffer of 1 is accepted. The packaged demo-dapo passes."""
    _, tok = policy
    task = make_task("arithmetic")
    pool = list(task.train_prompts())
    bad = load_config(None, ["generation.max_new_tokens=6", "train.overlong={enabled: true, buffer: 2}"])
    with pytest.raises(ValueError, match=r"penalises correct answers.*longest gold answer is 5 tokens"):
        check_overlong_buffer(bad, task, pool, tok)
    check_overlong_buffer(load_config(None, ["generation.max_new_tokens=6", "train.overlong={enabled: true, "
                                             "buffer: 1}"]), task, pool, tok)  # fmt: skip
    check_overlong_buffer(load_config("demo-dapo"), task, pool, tok)


def test_diagnostics_do_not_depend_on_the_micro_batch_size(policy):
    """The logged token-means (pg_loss, entropy, ratio, clip fraction, approx KL) are the whole batch's whatever
    ``micro_batch_size``: each micro-batch is weighted by its share of tokens (by rollouts they moved: entropy
    0.156 vs 0.160 in a 3-step run)."""
    model, tok = policy
    ro, group = _rollouts(model, tok, max_new_tokens=6)
    keep = torch.arange(6)[None, :] < torch.as_tensor(1 + np.arange(len(ro)) % 6)[:, None]  # lengths 1..6
    mask = ro.response_mask * keep
    ro = dataclasses.replace(ro, response_mask=mask, old_logp=ro.old_logp * mask, lengths=mask.sum(1).numpy())
    adv = np.linspace(-1, 1, len(ro))
    out = []
    for mb in (3, 64):
        cfg = load_config(None, ["generation.max_new_tokens=6", f"train.micro_batch_size={mb}", "train.ppo_epochs=2"])
        state = {k: v.clone() for k, v in model.state_dict().items()}
        opt, sched = _optimizer(model, cfg)
        out.append(update_policy(cfg, model, None, opt, sched, ro, group, adv, compute=ComputeMeter()))
        model.load_state_dict(state)
    for key in ("pg_loss", "entropy", "ratio", "clip_frac", "approx_kl", "loss", "ratio_first_epoch"):
        assert out[0][key] == pytest.approx(out[1][key], rel=1e-5, abs=1e-7), key
