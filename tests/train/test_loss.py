import math

import numpy as np
import pytest
import torch

from v05.train.loss import (
    AGG_MODES,
    LossConfig,
    LossNorm,
    LossTerms,
    kl_estimate,
    loss_norm,
    overlong_shaping,
    policy_loss,
)

# ---------------------------------------------------------------------------------------------------------------------
# Hand-computed example: 2 rollouts, T = 3, old_logp = 0 so ρ = exp(logp); ε_lo = 0.2, ε_hi = 0.28, c = 3.
#   rollout 0, A = +1, mask [1, 1, 1], ρ = [1, 1.5, 0.5]
#     t0: ρ = 1   -> max(−1, −1) = −1                                  (no clip)
#     t1: ρ = 1.5 -> max(−1.5, −1.28) = −1.28                          (clip-higher: 1 + 0.28; clipped branch active)
#     t2: ρ = 0.5 -> max(−0.5, −0.8) = −0.5                            (A > 0 is never clipped below)
#     Σ = −2.78
#   rollout 1, A = −1, mask [1, 1, 0], ρ = [0.5, 4, 2 (padding)]
#     t0: ρ = 0.5 -> max(0.5, 0.8) = 0.8                               (lower clip 1 − 0.2; clipped branch active)
#     t1: ρ = 4   -> max(4, 1.28) = 4, dual clip min(4, −A·c = 3) = 3  (dual clip)
#     Σ = 3.8
#   token-mean              = (−2.78 + 3.8) / 5             = 0.204
#   seq-mean-token-mean     = (−2.78/3 + 3.8/2) / 2         = (−0.926667 + 1.9) / 2 = 0.4866667
#   seq-mean-token-sum-norm = (−2.78 + 3.8) / (2 rollouts · T = 3) = 0.17
#   clip_frac = 2/5, dual_clip_frac = 1/5, ratio_mean = (1 + 1.5 + 0.5 + 0.5 + 4)/5 = 1.5
# ---------------------------------------------------------------------------------------------------------------------
HAND_RATIO = torch.tensor([[1.0, 1.5, 0.5], [0.5, 4.0, 2.0]], dtype=torch.float64)
HAND_ADV = torch.tensor([1.0, -1.0], dtype=torch.float64)
HAND_MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])
HAND_LOSS = {
    "token-mean": 1.02 / 5,
    "seq-mean-token-mean": (-2.78 / 3 + 3.8 / 2) / 2,
    "seq-mean-token-sum-norm": 1.02 / 6,
}


@pytest.mark.parametrize("agg", AGG_MODES)
def test_hand_computed_example(agg):
    """Clip-higher, lower clip and dual clip each fire once; the loss matches the arithmetic above for each mode."""
    terms = policy_loss(HAND_RATIO.log(), torch.zeros_like(HAND_RATIO), HAND_ADV, HAND_MASK, config=LossConfig(agg=agg))
    assert terms.loss.item() == pytest.approx(HAND_LOSS[agg], abs=1e-12)
    assert terms.pg_loss.item() == pytest.approx(0.204, abs=1e-12)  # the diagnostic is a token-mean in every mode
    assert terms.clip_frac.item() == pytest.approx(0.4)
    assert terms.dual_clip_frac.item() == pytest.approx(0.2)
    assert terms.ratio_mean.item() == pytest.approx(1.5)
    # k3 of KL(old‖new) = mean(ρ − 1 − log ρ) over the 5 tokens
    k3 = sum(r - 1 - math.log(r) for r in (1.0, 1.5, 0.5, 0.5, 4.0)) / 5
    assert terms.approx_kl_old.item() == pytest.approx(k3)


def test_hand_example_without_dual_clip():
    """dual_clip=None leaves rollout 1's t1 at 4 instead of 3: token-mean = (−2.78 + 0.8 + 4)/5 = 0.404."""
    terms = policy_loss(
        HAND_RATIO.log(), torch.zeros_like(HAND_RATIO), HAND_ADV, HAND_MASK, config=LossConfig(dual_clip=None)
    )
    assert terms.loss.item() == pytest.approx(2.02 / 5)
    assert terms.dual_clip_frac.item() == 0.0


@pytest.mark.parametrize("agg", AGG_MODES)
def test_all_masked_row_is_ignored(agg):
    """Appending an all-masked rollout (with garbage values) changes nothing in any mode: it is not counted in S."""
    ratio = torch.cat([HAND_RATIO, torch.tensor([[9.0, 9.0, 9.0]], dtype=torch.float64)])
    mask = torch.cat([HAND_MASK, torch.zeros(1, 3, dtype=torch.long)])
    adv = torch.cat([HAND_ADV, torch.tensor([5.0], dtype=torch.float64)])
    terms = policy_loss(ratio.log(), torch.zeros_like(ratio), adv, mask, config=LossConfig(agg=agg))
    assert terms.loss.item() == pytest.approx(HAND_LOSS[agg], abs=1e-12)


@pytest.mark.parametrize("agg", AGG_MODES)
def test_all_masked_batch_gives_zero_loss_and_gradient(agg):
    """A batch without response tokens gives loss 0 and zero gradient (verl: 0/0 = NaN for token-mean)."""
    logp = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    terms = policy_loss(logp, torch.zeros(2, 4), torch.ones(2), torch.zeros(2, 4), config=LossConfig(agg=agg))
    terms.loss.backward()
    assert terms.loss.item() == 0.0 and terms.pg_loss.item() == 0.0
    assert logp.grad is not None and torch.all(logp.grad == 0)


# --------------------------------------------------------------------------------------------------- random inputs


def _random_batch(seed, n_rollouts=8, width=7, scale=0.4):
    """Ragged masks (one all-masked row), log-ratios wide enough that every clip fires."""
    gen = torch.Generator().manual_seed(seed)
    old = -torch.rand(n_rollouts, width, generator=gen, dtype=torch.float64) * 3
    logp = old + scale * torch.randn(n_rollouts, width, generator=gen, dtype=torch.float64)
    lengths = torch.randint(1, width + 1, (n_rollouts,), generator=gen)
    lengths[2] = 0
    mask = (torch.arange(width)[None, :] < lengths[:, None]).to(torch.float64)
    adv = torch.randn(n_rollouts, generator=gen, dtype=torch.float64)
    ref = old + 0.3 * torch.randn(n_rollouts, width, generator=gen, dtype=torch.float64)
    entropy = torch.rand(n_rollouts, width, generator=gen, dtype=torch.float64) * 2
    return logp, old, adv, mask, ref, entropy


def _verl_actor_config(agg, *, clip_c=3.0, global_batch_info=None):
    from verl.workers.config import ActorConfig

    config = ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio_low=0.2,
        clip_ratio_high=0.28,
        clip_ratio_c=clip_c,
        loss_agg_mode=agg,
    )
    config.global_batch_info.update(global_batch_info or {})
    return config


@pytest.mark.parametrize("agg", AGG_MODES)
@pytest.mark.parametrize("per_token_adv", [False, True])
def test_matches_verl_vanilla_policy_loss(agg, per_token_adv):
    """policy_loss equals verl 0.9.1's compute_policy_loss_vanilla (+ agg_loss), its clip fractions included."""
    pytest.importorskip("verl")
    from verl.trainer.ppo.core_algos import compute_policy_loss_vanilla

    clip_fracs, dual_clip_fracs = [], []
    for seed in range(5):
        logp, old, adv, mask, _, _ = _random_batch(seed, n_rollouts=12, scale=1.0)
        adv_bt = adv[:, None].expand_as(logp) if not per_token_adv else torch.randn_like(logp)
        ours = policy_loss(logp, old, adv_bt if per_token_adv else adv, mask, config=LossConfig(agg=agg))
        verl_loss, metrics = compute_policy_loss_vanilla(old, logp, adv_bt, mask, agg, config=_verl_actor_config(agg))
        clip_fracs.append(ours.clip_frac.item())
        dual_clip_fracs.append(ours.dual_clip_frac.item())
        torch.testing.assert_close(ours.loss, verl_loss, rtol=1e-7, atol=1e-9)
        assert ours.clip_frac.item() == pytest.approx(metrics["actor/pg_clipfrac"], rel=1e-6)
        assert ours.dual_clip_frac.item() == pytest.approx(metrics["actor/pg_clipfrac_lower"], rel=1e-6)
        # verl logs ppo_kl = k1 = mean(−log ρ); we log k3 = mean(ρ − 1 − log ρ) instead (hand example above)
        k1 = -((logp - old) * mask).sum() / mask.sum()
        assert metrics["actor/ppo_kl"] == pytest.approx(k1.item(), rel=1e-6)
    assert 0 < min(clip_fracs) and max(clip_fracs) < 1 and max(dual_clip_fracs) > 0  # every branch is exercised


def test_dual_clip_none_matches_verl_with_huge_c():
    """dual_clip=None equals verl with clip_ratio_c so large that the cap never binds."""
    pytest.importorskip("verl")
    from verl.trainer.ppo.core_algos import compute_policy_loss_vanilla

    logp, old, adv, mask, _, _ = _random_batch(0, scale=1.5)
    ours = policy_loss(logp, old, adv, mask, config=LossConfig(dual_clip=None))
    config = _verl_actor_config("token-mean", clip_c=1e12)
    verl_loss, _ = compute_policy_loss_vanilla(old, logp, adv[:, None].expand_as(logp), mask, "token-mean", config)
    torch.testing.assert_close(ours.loss, verl_loss)


@pytest.mark.parametrize("agg", AGG_MODES)
def test_matches_verl_agg_loss_with_global_counts(agg):
    """With a LossNorm, each micro-batch loss equals verl's agg_loss given batch_num_tokens/global_batch_size."""
    pytest.importorskip("verl")
    from verl.trainer.ppo.core_algos import compute_policy_loss_vanilla

    logp, old, adv, mask, _, _ = _random_batch(3)
    norm = loss_norm([mask[:3], mask[3:]], max_len=11)
    info = {"batch_num_tokens": norm.n_tokens, "global_batch_size": norm.n_seqs, "loss_scale_factor": norm.max_len}
    for rows in (slice(0, 3), slice(3, None)):
        ours = policy_loss(logp[rows], old[rows], adv[rows], mask[rows], config=LossConfig(agg=agg), norm=norm)
        config = _verl_actor_config(agg, global_batch_info=info)
        adv_bt = adv[rows, None].expand_as(logp[rows])
        verl_loss, _ = compute_policy_loss_vanilla(old[rows], logp[rows], adv_bt, mask[rows], agg, config=config)
        torch.testing.assert_close(ours.loss, verl_loss)


@pytest.mark.parametrize(("ours", "theirs"), [("k1", "kl"), ("k2", "mse"), ("k3", "low_var_kl")])
def test_kl_estimate_matches_verl(ours, theirs):
    """k1/k2/k3 equal verl's kl/mse/low_var_kl, including the ±20 and ±10 clamps of low_var_kl."""
    pytest.importorskip("verl")
    from verl.trainer.ppo.core_algos import kl_penalty

    logp, _, _, _, ref, _ = _random_batch(1)
    ref = ref.clone()
    ref[0, :3] = logp[0, :3] + torch.tensor([15.0, 25.0, -30.0], dtype=torch.float64)  # exp(15) > 10; ±20 clamp
    torch.testing.assert_close(kl_estimate(logp, ref, estimator=ours), kl_penalty(logp, ref, theirs))
    torch.testing.assert_close(kl_estimate(logp, ref, estimator=ours), kl_penalty(logp, ref, ours))


@pytest.mark.parametrize("agg", AGG_MODES)
@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
def test_full_loss_matches_verl_ppo_loss_assembly(agg, estimator):
    """loss = pg + β·agg(KL) − entropy_coef·agg(H), assembled as verl's workers/utils/losses.ppo_loss does."""
    pytest.importorskip("verl")
    from verl.trainer.ppo.core_algos import agg_loss, compute_policy_loss_vanilla, kl_penalty

    logp, old, adv, mask, ref, entropy = _random_batch(2)
    config = LossConfig(agg=agg, kl_coef=0.05, kl_estimator=estimator, entropy_coef=0.01)
    ours = policy_loss(logp, old, adv, mask, config=config, ref_logp=ref, entropy=entropy)
    pg, _ = compute_policy_loss_vanilla(old, logp, adv[:, None].expand_as(logp), mask, agg, _verl_actor_config(agg))
    expected = pg - 0.01 * agg_loss(entropy, mask, agg) + 0.05 * agg_loss(kl_penalty(logp, ref, estimator), mask, agg)
    torch.testing.assert_close(ours.loss, expected)


# ------------------------------------------------------------------------------------ micro-batch gradient identity


@pytest.mark.parametrize("agg", AGG_MODES)
def test_micro_batch_gradients_sum_to_full_batch_gradient(agg):
    """Σ_k ∇loss(micro-batch k; LossNorm of the step) = ∇loss(full batch), with ragged masks, KL and entropy terms."""
    logp0, old, adv, mask, ref, _ = _random_batch(4, n_rollouts=9)
    config = LossConfig(agg=agg, kl_coef=0.1, entropy_coef=0.02)
    slices = [slice(0, 3), slice(3, 4), slice(4, 9)]  # ragged micro-batch sizes 3, 1, 5

    def forward(theta, rows, norm):
        logp = logp0[rows] + theta[rows]
        entropy = torch.nn.functional.softplus(logp)  # any differentiable per-token entropy stand-in
        return policy_loss(
            logp, old[rows], adv[rows], mask[rows], config=config, ref_logp=ref[rows], entropy=entropy, norm=norm
        ).loss

    theta_full = torch.zeros_like(logp0, requires_grad=True)
    full = forward(theta_full, slice(None), None)
    full.backward()

    theta_micro = torch.zeros_like(logp0, requires_grad=True)
    norm = loss_norm([mask[rows] for rows in slices])
    micro_losses = [forward(theta_micro, rows, norm) for rows in slices]
    for micro_loss in micro_losses:
        micro_loss.backward()  # gradients accumulate in theta_micro.grad, as in gradient accumulation
    total = torch.stack(micro_losses).sum()

    torch.testing.assert_close(total, full, rtol=0, atol=1e-12)
    assert theta_full.grad is not None and theta_micro.grad is not None
    assert theta_full.grad.abs().max() > 0
    torch.testing.assert_close(theta_micro.grad, theta_full.grad, rtol=0, atol=1e-6)


def test_loss_norm_counts():
    """loss_norm counts response tokens and non-empty rollouts over all micro-batches; max_len = widest T."""
    masks = [torch.tensor([[1, 1, 0], [0, 0, 0]]), torch.tensor([[True, False, False, False]])]
    assert loss_norm(masks) == LossNorm(n_tokens=3, n_seqs=2, max_len=4)
    assert loss_norm(masks, max_len=16).max_len == 16


# --------------------------------------------------------------------------------------------- limits and properties


def test_zero_advantage_gives_zero_pg_loss_and_gradient():
    """A = 0: L = −0·ρ = 0 for every token, so no policy gradient whatever ρ is."""
    logp0, old, _, mask, _, _ = _random_batch(5, scale=1.0)
    logp = logp0.clone().requires_grad_()
    terms = policy_loss(logp, old, torch.zeros(logp.shape[0]), mask, config=LossConfig())
    terms.loss.backward()
    assert terms.loss.item() == 0.0 and terms.pg_loss.item() == 0.0
    assert logp.grad is not None and torch.all(logp.grad == 0)


def test_ratio_one_gives_minus_mean_advantage():
    """ρ = 1 (logp = old_logp), token-mean, full mask: pg_loss = −mean(A), nothing clipped, ∇ = −A/n (REINFORCE)."""
    logp0, _, _, _, _, _ = _random_batch(6)
    logp = logp0.clone().requires_grad_()
    adv = torch.randn_like(logp0)
    terms = policy_loss(logp, logp0, adv, torch.ones_like(logp0), config=LossConfig())
    terms.loss.backward()
    assert terms.pg_loss.item() == pytest.approx(-adv.mean().item())
    assert terms.loss.item() == pytest.approx(-adv.mean().item())
    assert terms.clip_frac.item() == 0.0 and terms.dual_clip_frac.item() == 0.0
    assert terms.ratio_mean.item() == 1.0 and terms.approx_kl_old.item() == 0.0
    assert logp.grad is not None
    torch.testing.assert_close(logp.grad, -adv / adv.numel())


def test_rollout_advantages_broadcast_like_token_advantages():
    """A of shape (B,) gives exactly the result of the same A repeated over tokens, (B, T)."""
    logp, old, adv, mask, _, _ = _random_batch(7)
    a = policy_loss(logp, old, adv, mask, config=LossConfig())
    b = policy_loss(logp, old, adv[:, None].expand_as(logp), mask, config=LossConfig())
    for name in LossTerms.__slots__:
        torch.testing.assert_close(getattr(a, name), getattr(b, name), rtol=0, atol=0)


def test_diagnostics_are_detached():
    """Only `loss` carries a gradient; diagnostics are detached, and kl/entropy are token-means of their inputs."""
    logp0, old, adv, mask, ref, entropy = _random_batch(8)
    logp = logp0.clone().requires_grad_()
    terms = policy_loss(logp, old, adv, mask, config=LossConfig(), ref_logp=ref, entropy=entropy.requires_grad_())
    assert terms.loss.requires_grad
    for name in ("pg_loss", "kl", "entropy", "clip_frac", "dual_clip_frac", "ratio_mean", "approx_kl_old"):
        assert not getattr(terms, name).requires_grad, name
    assert terms.entropy.item() == pytest.approx(((entropy * mask).sum() / mask.sum()).item())
    k3 = kl_estimate(logp0, ref)
    assert terms.kl.item() == pytest.approx(((k3 * mask).sum() / mask.sum()).item())


def test_loss_is_pg_loss_plus_weighted_kl_minus_entropy_in_token_mean():
    """In token-mean mode without a LossNorm, loss = pg_loss + β·kl − entropy_coef·entropy (the diagnostics)."""
    logp, old, adv, mask, ref, entropy = _random_batch(9)
    config = LossConfig(kl_coef=0.3, kl_estimator="k2", entropy_coef=0.05)
    terms = policy_loss(logp, old, adv, mask, config=config, ref_logp=ref, entropy=entropy)
    expected = terms.pg_loss + 0.3 * terms.kl - 0.05 * terms.entropy
    torch.testing.assert_close(terms.loss, expected)


# ----------------------------------------------------------------------------------------------------------- overlong


def test_overlong_shaping_hand_values():
    """L_max = 10, L_buf = 4, penalty 1: expected length 6; L = 7 -> −1/4, 8 -> −2/4, 10 -> −1, 12 -> −1 (floor)."""
    out = overlong_shaping(np.array([0, 6, 7, 8, 10, 12]), max_len=10, buffer=4, penalty=1.0)
    np.testing.assert_array_equal(out, [0.0, 0.0, -0.25, -0.5, -1.0, -1.0])
    assert out.dtype == np.float64


def test_overlong_shaping_matches_verl_dapo_formula_up_to_max_len():
    """For L ≤ L_max, equal to verl's DAPO manager: min(−(L − (L_max − L_buf))/L_buf · f, 0)."""
    lengths = np.arange(0, 513)
    verl = np.minimum(-(lengths - (512 - 128)) / 128 * 0.5, 0)
    np.testing.assert_allclose(overlong_shaping(lengths, max_len=512, buffer=128, penalty=0.5), verl)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"lengths": [1, -1]}, "lengths"),
        ({"lengths": [1.5]}, "lengths"),
        ({"max_len": 0}, "max_len"),
        ({"buffer": 0}, "buffer"),
        ({"buffer": 11}, "buffer"),
        ({"penalty": -1.0}, "penalty"),
        ({"penalty": math.inf}, "penalty"),
    ],
)
def test_overlong_shaping_rejects_bad_arguments(kwargs, field):
    """Bad lengths, max_len, buffer or penalty raise ValueError naming the argument."""
    args = {"lengths": [1, 2], "max_len": 10, "buffer": 4, "penalty": 1.0} | kwargs
    with pytest.raises(ValueError, match=field):
        overlong_shaping(args.pop("lengths"), **args)


# ----------------------------------------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("clip_low", -0.1),
        ("clip_low", 1.0),
        ("clip_low", math.nan),
        ("clip_high", -0.01),
        ("clip_high", math.inf),
        ("dual_clip", 1.0),
        ("dual_clip", 0.5),
        ("dual_clip", math.inf),
        ("agg", "seq-mean-token-sum"),
        ("kl_coef", -0.1),
        ("kl_estimator", "low_var_kl"),
        ("entropy_coef", -1e-3),
    ],
)
def test_bad_config_raises_naming_the_field(field, value):
    """Each invalid LossConfig value raises ValueError whose message names the field."""
    with pytest.raises(ValueError, match=f"LossConfig.{field}"):
        LossConfig(**{field: value})


@pytest.mark.parametrize(
    ("kwargs", "field"), [({"n_tokens": -1}, "n_tokens"), ({"n_seqs": 1.5}, "n_seqs"), ({"max_len": 0}, "max_len")]
)
def test_bad_loss_norm_raises_naming_the_field(kwargs, field):
    """LossNorm counts must be non-negative ints (max_len ≥ 1 or None)."""
    with pytest.raises(ValueError, match=f"LossNorm.{field}"):
        LossNorm(**({"n_tokens": 3, "n_seqs": 1} | kwargs))


def test_bad_inputs_raise_naming_the_argument():
    """Shape mismatches and a missing ref_logp/entropy for a positive coefficient raise ValueError naming it."""
    logp, old, adv, mask, ref, entropy = _random_batch(10)
    config = LossConfig()
    with pytest.raises(ValueError, match="old_logp"):
        policy_loss(logp, old[:, :-1], adv, mask, config=config)
    with pytest.raises(ValueError, match="mask"):
        policy_loss(logp, old, adv, mask[:-1], config=config)
    with pytest.raises(ValueError, match="advantages"):
        policy_loss(logp, old, adv[:-1], mask, config=config)
    with pytest.raises(ValueError, match="logp"):
        policy_loss(logp[0], old[0], adv, mask[0], config=config)
    with pytest.raises(ValueError, match="ref_logp"):
        policy_loss(logp, old, adv, mask, config=LossConfig(kl_coef=0.1))
    with pytest.raises(ValueError, match="entropy"):
        policy_loss(logp, old, adv, mask, config=LossConfig(entropy_coef=0.1))
    with pytest.raises(ValueError, match="entropy"):
        policy_loss(logp, old, adv, mask, config=config, entropy=entropy[:, :2])
    with pytest.raises(ValueError, match="ref_logp"):
        kl_estimate(logp, ref[:2])
    with pytest.raises(ValueError, match="masks"):
        loss_norm([])
