r"""Group-relative estimators: GRPO, Dr. GRPO, RLOO, REINFORCE++-baseline, and the oracle.

They match verl 0.9.1 (``verl/trainer/ppo/core_algos.py``) on groups of two or more rollouts. Deliberate
deviation (singleton groups): verl gives a one-rollout group mean 0 and std 1, i.e. A = r, which treats a lone reward
as signal against a zero baseline. Here a singleton's baseline is its own reward (the group mean of one), so its
advantage is 0 for ``grpo``, ``drgrpo``, ``rloo`` and ``reinforce_pp_baseline`` (before batch whitening).
"""

from __future__ import annotations

import numpy as np

from v05._checks import RewardRange, check_positive
from v05.advantages import Scale, scale_advantages
from v05.baselines import group_mean, leave_one_out
from v05.estimators._batch import Estimate, check_scale, per_group, prepare
from v05.groups import segment_mean


def grpo(
    rewards: object, group: object, *, reward_range: RewardRange = "pm1", scale: Scale = "group_std", eps: float = 1e-6
) -> Estimate:
    r"""GRPO: the group mean as baseline, scaled by the group's unbiased std.

        A_i = (r_i − r̄_g) / (std_g + ε),   std_g = √(Σ_{j∈g} (r_j − r̄_g)² / (n_g − 1)),   ε = 1e-6

    Bias: r̄_g contains r_i, so E[A_i ∇log π] is shrunk by (n_g − 1)/n_g, and the std division rescales prompts
    unevenly (Dr. GRPO's objection). Degenerate cases: an all-equal group has A = 0 (no signal); a singleton group
    has A = 0 (verl: A = r, see the module docstring).

    References: Shao et al. (2024) "DeepSeekMath", arXiv:2402.03300, §4.1.2.

    >>> grpo([1., 0., 0., 1.], [0, 0, 0, 0], reward_range="01").advantages.round(4)
    array([ 0.866, -0.866, -0.866,  0.866])
    """
    check_scale(scale)
    check_positive(eps, "eps")  # eps = 0 would divide an all-equal group's 0 by its std 0
    b = prepare(rewards, group, reward_range=reward_range)
    mean_g = segment_mean(b.rewards, b.group, n_g=b.n_g)  # (G,)
    base = mean_g[b.group]  # (N,)
    adv = scale_advantages(
        b.rewards, base, b.group, scale=scale, reward_range=reward_range, eps=eps, n_g=b.n_g, mean_g=mean_g
    )
    return Estimate(adv, base)


def drgrpo(rewards: object, group: object, *, reward_range: RewardRange = "pm1") -> Estimate:
    r"""Dr. GRPO: the group mean as baseline, no std division.

        A_i = r_i − r̄_g

    Bias: as GRPO's mean (factor (n_g − 1)/n_g), without the per-prompt std reweighting.
    Degenerate cases: all-equal and singleton groups have A = 0.

    References: Liu et al. (2025) "Understanding R1-Zero-Like Training: A Critical Perspective", arXiv:2503.20783.
    """
    return grpo(rewards, group, reward_range=reward_range, scale="none")


def rloo(rewards: object, group: object, *, reward_range: RewardRange = "pm1", scale: Scale = "none") -> Estimate:
    r"""RLOO: each rollout's baseline is the mean of the other rollouts of its prompt.

        A_i = r_i − (S_g − r_i)/(n_g − 1) = n_g/(n_g − 1) · (r_i − r̄_g)

    Bias: none; b_i does not depend on r_i. Degenerate cases: all-equal groups have A = 0; a singleton group has
    no other rollout and gets A = 0 (verl: A = r).

    References: Kool, van Hoof & Welling (2019) "Buy 4 REINFORCE Samples, Get a Baseline for Free!";
    Ahmadian et al. (2024) arXiv:2402.14740.

    >>> rloo([1., 0., 0., 1.], [0, 0, 0, 0]).advantages   # 4/3 · (r − 0.5)
    array([ 0.66666667, -0.66666667, -0.66666667,  0.66666667])
    """
    check_scale(scale)
    b = prepare(rewards, group, reward_range=reward_range)
    base = leave_one_out(b.rewards, b.group, n_g=b.n_g)
    adv = scale_advantages(b.rewards, base, b.group, scale=scale, reward_range=reward_range, n_g=b.n_g)
    return Estimate(adv, base)


def reinforce_pp_baseline(
    rewards: object, group: object, *, reward_range: RewardRange = "pm1", eps: float = 1e-8
) -> Estimate:
    r"""REINFORCE++-baseline: subtract the group mean, then whiten over the whole batch.

        a_i = r_i − r̄_g,   A_i = (a_i − mean(a)) / √(var(a) + ε),   var unbiased, ε = 1e-8

    Deviation from verl: verl whitens over response tokens (longer responses weigh more); this per-rollout form
    weighs rollouts equally — identical when all responses have one token.
    Bias: as the group mean; batch whitening couples prompts. Degenerate cases: a batch of all-equal groups has
    a = 0 and A = 0; singleton groups have a = 0.

    References: Hu (2025) "REINFORCE++", arXiv:2501.03262.
    """
    check_positive(eps, "eps")  # eps = 0 would whiten a batch of all-equal groups to 0/0
    b = prepare(rewards, group, reward_range=reward_range)
    base = group_mean(b.rewards, b.group, n_g=b.n_g)
    adv = scale_advantages(b.rewards, base, b.group, scale="batch_whiten", reward_range=reward_range, eps=eps)
    return Estimate(adv, base)


def reinforce_pp(rewards: object, group: object, *, reward_range: RewardRange = "pm1", eps: float = 1e-8) -> Estimate:
    r"""REINFORCE++ (outcome rewards, no KL term): whiten the returns over the whole batch, no group baseline.

        A_i = (r_i − r̄) / √(var(r) + ε),   r̄ = mean over the batch's rollouts, var unbiased, ε = 1e-8

    The batch mean is the baseline, so it works at k = 1 (one rollout per prompt), where every group baseline is r
    itself. Deviation from verl (``compute_reinforce_plus_plus_outcome_advantage``): verl whitens the per-token
    returns (longer responses weigh more) and folds a token-level KL penalty into the reward; this per-rollout form
    weighs rollouts equally (identical for equal-length responses) and leaves KL to the loss.
    Bias: the batch mean includes r_i (a 1/N bias, as the group mean's 1/k); whitening couples prompts.
    Degenerate cases: an all-equal batch has A = 0; a batch of one rollout has var NaN → A = 0 (ε only).

    References: Hu (2025) "REINFORCE++", arXiv:2501.03262.

    >>> reinforce_pp([1., -1., -1., -1.], [0, 1, 2, 3]).baseline.tolist()
    [-0.5, -0.5, -0.5, -0.5]
    """
    check_positive(eps, "eps")
    b = prepare(rewards, group, reward_range=reward_range)
    base = np.full(b.rewards.shape, float(np.mean(b.rewards)) if b.rewards.size else 0.0)
    adv = scale_advantages(b.rewards, base, b.group, scale="batch_whiten", reward_range=reward_range, eps=eps)
    return Estimate(adv, base)


def oracle(
    rewards: object, group: object, *, mu: object = None, reward_range: RewardRange = "pm1", scale: Scale = "none"
) -> Estimate:
    r"""The true value as baseline (simulation and benchmarks only).

        A_i = r_i − μ_g

    Bias: none, and the lowest-variance constant baseline; it needs μ, which only a simulator knows.

    Args:
        rewards: (N,) rewards.
        group: (N,) group ids.
        mu: (G,) or (N,) true values E[r | prompt] on the reward scale (required).
        reward_range: ``"pm1"`` or ``"01"``.
        scale: advantage scaling (default none).

    Raises:
        ValueError: no ``mu``, bad rewards or group ids, or ``mu`` of the wrong length, non-finite or out of range.
    """
    check_scale(scale)
    if mu is None:
        raise ValueError("oracle needs mu=(G,) or (N,) true values E[r | prompt] (simulation only)")
    b = prepare(rewards, group, reward_range=reward_range)
    mu_g = per_group(mu, "mu", b.group, b.n_groups, reward_range)
    base = mu_g[b.group]
    return Estimate(scale_advantages(b.rewards, base, b.group, scale=scale, reward_range=reward_range), base)


__all__ = ["drgrpo", "grpo", "oracle", "reinforce_pp", "reinforce_pp_baseline", "rloo"]
