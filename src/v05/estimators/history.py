r"""DBB: the discounted Beta–Bernoulli history of each prompt as its baseline (arXiv:2603.18444).

The state (a :class:`v05.allocation.posterior.BetaHistory` keyed by stable prompt ids) is a value passed in and
returned.
Deviation: DBB's method text is not public; the discounting is the MoPPS form (toward the prior), see
:mod:`v05.allocation.posterior`.
"""

from __future__ import annotations

import numpy as np

from v05._checks import RewardRange, as_keys, as_real, check_int, check_positive
from v05.advantages import Scale, scale_advantages
from v05.allocation.posterior import BetaHistory, Decay
from v05.estimators._batch import Estimate, check_prior_scale, prepare
from v05.groups import segment_sum
from v05.rewards import from_pass_rate, to_pass_rate


def dbb(
    rewards: object,
    group: object,
    *,
    prompt_ids: object = None,
    state: BetaHistory | None = None,
    reward_range: RewardRange = "pm1",
    scale: Scale = "model_std",
    lambda_: float = 0.7,
    alpha0: float | None = None,
    beta0: float | None = None,
    decay: Decay = "visit",
    step: int | None = None,
    include_current: bool = True,
) -> Estimate:
    r"""Discounted Beta–Bernoulli baseline from each prompt's history.

        α ← λα + (1 − λ)α₀ + successes,   β ← λβ + (1 − λ)β₀ + failures,   μ̃ = α/(α + β)
        A_i = (r_i − μ̃) / √(μ̃(1 − μ̃))     (``scale="model_std"``, the GRPO-like form; ``"none"`` gives r_i − μ̃)

    (0/1 space for the counts; ±1 rewards are mapped with p = (r + 1)/2.)
    Bias: with ``include_current=True`` (default, posterior mean) b contains this step's rewards (weight
    k/(α + β)); ``include_current=False`` uses the prior-only mean, independent of this batch — unbiased.
    The history lags a changing policy (bias grows with drift). Degenerate cases: with α₀, β₀ > 0, μ̃ ∈ (0, 1), so
    all-equal groups still get non-zero advantages (no variance collapse); an unseen prompt starts at Beta(α₀, β₀).

    Args:
        rewards: (N,) rewards.
        group: (N,) group ids in [0, G).
        prompt_ids: (G,) stable keys of the prompts (ints or strings), required: group ids are batch-local
            (0..G−1 every step), so a history keyed by them would mix different prompts across steps.
        state: the history from earlier steps (default: empty).
        reward_range: ``"pm1"`` or ``"01"``.
        scale: advantage scaling (default ``model_std``).
        lambda_: discount λ in (0, 1].
        alpha0: prior pseudo-successes α₀ > 0 (None: the state's, or 1 for a new history). A value that differs
            from the carried state's is refused (the history keeps the prior it was built with).
        beta0: prior pseudo-failures β₀ > 0 (as ``alpha0``).
        decay: ``"visit"`` (λ per visit) or ``"step"`` (λ^(step − last visit); needs ``step``).
        step: the current training step, increasing across calls (required by ``decay="step"``).
        include_current: use the posterior after this step's outcomes (True) or the prior before them (False).

    Returns:
        The estimate; ``state`` holds the updated history.

    References: Kim et al. (2026) "Discounted Beta–Bernoulli Reward Estimation for Sample-Efficient RLVR",
    arXiv:2603.18444; MoPPS (Qu et al., arXiv:2507.04632) for the discounted update.
    """
    check_prior_scale(scale, "dbb")
    for name, value in (("alpha0", alpha0), ("beta0", beta0)):
        if value is not None:
            check_positive(value, name)
    if not 0.0 < as_real(lambda_, "lambda_") <= 1.0:
        raise ValueError(f"lambda_ must lie in (0, 1], got {lambda_!r}")
    if decay == "step" and step is None:
        raise ValueError("decay='step' discounts by λ^(step − last visit): pass step=<current training step>")
    if step is not None:
        check_int(step, "step", 0, hint=" (the current training step)")
        if step >= 2**63:
            raise ValueError(f"step must be below 2**63 (it is stored as int64), got {step!r}")
    b = prepare(rewards, group, reward_range=reward_range)
    if prompt_ids is None:
        raise ValueError(
            "dbb keeps a per-prompt history: pass prompt_ids=(G,) stable prompt keys (group ids are batch-local, "
            "so a history keyed by them would mix prompts across steps)"
        )
    keys = as_keys(prompt_ids, "prompt_ids", b.n_groups)
    if state is None:
        history = BetaHistory.empty(1.0 if alpha0 is None else alpha0, 1.0 if beta0 is None else beta0)
    elif not isinstance(state, BetaHistory):
        raise ValueError(f"dbb state must be the BetaHistory it returned (or None), got {type(state).__name__}")
    else:
        history = state
        history.check_prior(alpha0, beta0)
    p01 = to_pass_rate(b.rewards, reward_range)  # (N,) success indicator (fractional allowed)
    successes = segment_sum(p01, b.group, b.n_groups)  # (G,)
    updated = history.update(
        keys, successes, b.n_g.astype(np.float64), lambda_=lambda_, decay=decay, step=0 if step is None else step
    )
    alpha, beta = (updated if include_current else history).lookup(keys)
    p_g = alpha / (alpha + beta)  # (G,) μ̃ in (0, 1)
    base = from_pass_rate(p_g, reward_range)[b.group]  # (N,)
    adv = scale_advantages(b.rewards, base, b.group, scale=scale, reward_range=reward_range)
    return Estimate(adv, base, state=updated)


__all__ = ["dbb"]
