r"""SPO's advantage: a per-prompt tracker's value as the baseline, normalised over the whole batch (numpy only).

    A_i = (a_i − mean(a)) / (std(a) + ε),   a_i = r_i − V_g(i),   std unbiased over the batch, ε = 1e-8

V is the prompt's tracker value *before* this step's outcomes (:class:`v05.priors.spo.SpoProvider`, the ``spo``
prior), so the baseline never contains r_i. Matches verl's ``recipe/spo`` (``spo_ray_trainer.py``: A = r − p̂,
then ``(A − A.mean()) / (A.std() + 1e-8)`` over the batch's sequences, one scalar per sequence).
"""

from __future__ import annotations

from v05._checks import RewardRange, check_positive
from v05.advantages import Scale, scale_advantages
from v05.estimators._batch import Estimate, check_prior_scale, prepare, require_prior


def spo(
    rewards: object,
    group: object,
    *,
    prior: object = None,
    reward_range: RewardRange = "pm1",
    scale: Scale = "batch_norm",
    eps: float = 1e-8,
) -> Estimate:
    r"""SPO: the prior (the tracker's value) as the baseline, then global batch normalisation.

        b_i = V_g(i),   A_i = (a_i − ā) / (std(a) + ε),   a = r − b   (``scale="batch_norm"``, the recipe's)

    Bias: b does not depend on r_i (the tracker is read before it learns the step), so r − b is unbiased; the
    batch normalisation couples prompts (ā and std(a) contain a_i, a 1/N effect, as in REINFORCE++ and the recipe).
    Degenerate cases: a batch of one rollout has no std (A = 0 after centring); an all-equal a gives A = 0;
    ``scale="none"`` gives the plain A = r − V (a prior baseline at any k).

    References: Xu & Ding (2025) "Single-stream Policy Optimization", arXiv:2509.13232; verl ``recipe/spo``.

    >>> spo([1., 0., 1., 0.], [0, 1, 2, 3], prior=[0.5, 0.5, 0.25, 0.75], reward_range="01").advantages.round(4)
    array([ 0.6794, -0.6794,  1.019 , -1.019 ])
    """
    check_prior_scale(scale, "spo")
    check_positive(eps, "eps")
    b = prepare(rewards, group, prior=prior, reward_range=reward_range)
    base = require_prior(b, "spo")[b.group]  # (N,) the tracker's value of each rollout's prompt
    adv = scale_advantages(b.rewards, base, b.group, scale=scale, reward_range=reward_range, eps=eps)
    return Estimate(adv, base)


__all__ = ["spo"]
