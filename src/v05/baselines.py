r"""Pure baseline functions: each returns b, the value subtracted from the reward (A = r − b).

All take a validated flat batch (``rewards (N,)``, ``group (N,)`` in [0, G)) and, where they fuse a prior, work in
the paper's ±1 space; :mod:`v05.estimators` maps other reward ranges in and out and validates user input.

>>> import numpy as np
>>> r, g = np.array([1., 0., 0., 1.]), np.zeros(4, np.int64)
>>> group_mean(r, g)                  # r̄ = 0.5 for every rollout
array([0.5, 0.5, 0.5, 0.5])
>>> leave_one_out(r, g)               # (S − r_i)/(n − 1) = (2 − r_i)/3
array([0.33333333, 0.66666667, 0.66666667, 0.33333333])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from v05._types import BoolArray, FloatArray, IntArray
from v05.groups import segment_count, segment_mean
from v05.rewards import to_pass_rate

NoiseModel = Literal["bound", "plugin"]
Switch = Literal["smooth", "hard"]


def group_mean(rewards: FloatArray, group: IntArray, *, n_g: IntArray | None = None) -> FloatArray:
    """b_i = r̄_g = S_g / n_g, shape (N,). Includes r_i itself, so E[A_i] ≠ 0 exactly: bias factor (n_g − 1)/n_g.

    ``n_g``: precomputed (G,) counts (trusted).
    """
    return segment_mean(rewards, group, n_g=n_g)[group]


def leave_one_out(rewards: FloatArray, group: IntArray, *, n_g: IntArray | None = None) -> FloatArray:
    r"""Baseline from the other rollouts of the same prompt.

        b_i = (S_g − r_i) / (n_g − 1),   so   r_i − b_i = n_g/(n_g − 1) · (r_i − r̄_g)

    b_i does not depend on r_i, so the policy-gradient estimate is unbiased.
    Degenerate case: a singleton group (n_g = 1) has no other rollout; its baseline is set to r_i (advantage 0).

    ``n_g``: precomputed (G,) counts (trusted).

    References: Kool, van Hoof & Welling (2019) "Buy 4 REINFORCE Samples, Get a Baseline for Free!";
    Ahmadian et al. (2024) arXiv:2402.14740.
    """
    if n_g is None:
        n_g = segment_count(group)
    s_g = np.bincount(group, weights=rewards, minlength=len(n_g))  # (G,)
    den_g = np.maximum(n_g - 1, 1).astype(np.float64)  # (G,) a singleton keeps b = r (below)
    b = (s_g[group] - rewards) / den_g[group]  # (N,)
    return np.where((n_g > 1)[group], b, rewards)


@dataclass(frozen=True, slots=True)
class Shrinkage:
    """Per-prompt result of the V0.5 shrinkage (all (G,), ±1 space).

    Attributes:
        baseline: b_g = ŵ·v̄ + (1 − ŵ)·V.
        weight: ŵ_g, the weight on the empirical mean.
        delta2: Δ̂²_g = max(0, (v̄ − V)² − σ²/k), the estimated squared prior error (0 ⇔ prior accepted).
        reject: the hypothesis test rejected the prior (Δ̂² > 0).
    """

    baseline: FloatArray
    weight: FloatArray
    delta2: FloatArray
    reject: BoolArray


def v05_shrinkage(
    vbar_g: FloatArray, prior_g: FloatArray, k_g: FloatArray, *, noise: NoiseModel = "bound", switch: Switch = "smooth"
) -> Shrinkage:
    r"""V0.5 empirical shrinkage of the rollout mean toward the prior, with its hypothesis test (±1 space).

        σ² = 1 (``noise="bound"``, paper) or 1 − V² (``"plugin"``, ablation)
        Δ̂² = max(0, (v̄_k − V)² − σ²/k),   ŵ = Δ̂² / (Δ̂² + σ²/k),   b = ŵ·v̄_k + (1 − ŵ)·V

    H0 "the prior is exact" is accepted iff (v̄_k − V)² ≤ σ²/k (then ŵ = 0, b = V). ``switch="hard"`` (ablation)
    uses ŵ = 1 on rejection instead of the smooth weight.
    Bias: ŵ depends on v̄, so b is biased, but |b − v̄_k| ≤ σ/√k always (accepted: |V − v̄| ≤ σ/√k; rejected:
    (1 − ŵ)|v̄ − V| = σ²/(k|v̄ − V|) < σ/√k).
    Degenerate cases: v̄ = V gives b = V; ``noise="plugin"`` with |V| = 1 has σ² = 0 and accepts only v̄ = V.

    References: Zhang et al. (2026) "V0.5: Generalist Value Model as a Prior for Sparse RL Rollouts",
    arXiv:2603.10848 (empirical shrinkage fusion; positive-part test).
    """
    d = vbar_g - prior_g  # (G,)
    sigma2 = np.ones_like(d) if noise == "bound" else np.maximum(1.0 - prior_g * prior_g, 0.0)
    radius2 = sigma2 / k_g  # (G,) σ²/k
    delta2 = np.maximum(0.0, d * d - radius2)
    reject = delta2 > 0
    if switch == "hard":
        weight = reject.astype(np.float64)
    else:
        with np.errstate(invalid="ignore", divide="ignore"):
            weight = np.where(reject, delta2 / (delta2 + radius2), 0.0)
    return Shrinkage(weight * vbar_g + (1.0 - weight) * prior_g, weight, delta2, reject)


def pseudo_count_fusion(
    rewards: FloatArray,
    group: IntArray,
    prior_g: FloatArray,
    n0_g: FloatArray,
    *,
    leave_one_out: bool = False,
    n0_i: FloatArray | None = None,
    n_g: IntArray | None = None,
) -> FloatArray:
    r"""Pseudo-count (Beta-posterior-mean) fusion of the prior with the rollouts, shape (N,).

        plain:          b_i = (n0·V + S_g) / (n0 + n_g)
        leave-one-out:  b_i = (n0_i·V + S_g − r_i) / (n0_i + n_g − 1)

    Bias: the plain form includes r_i in its own baseline (like the group mean); the leave-one-out form does not,
    so it keeps the policy gradient unbiased when n0_i and V do not depend on r_i.
    Limits: n0 → 0 gives the group mean (LOO: the leave-one-out mean); n0 → ∞ gives V.
    Degenerate case: the LOO form with n0_i = 0 and n_g = 1 has no information besides r_i itself; b = r_i there
    (advantage 0, as RLOO's singleton rule), never the prior that was given zero weight.

    Args:
        rewards: (N,) rewards (±1 space).
        group: (N,) group ids in [0, G).
        prior_g: (G,) priors V.
        n0_g: (G,) pseudo-counts n0 ≥ 0.
        leave_one_out: use the LOO form.
        n0_i: (N,) per-rollout pseudo-counts for the LOO form (a per-rollout decision, e.g. a leave-one-out guard);
            default ``n0_g[group]``.
        n_g: precomputed (G,) counts (trusted).
    """
    if n_g is None:
        n_g = segment_count(group)
    s_g = np.bincount(group, weights=rewards, minlength=len(n_g))  # (G,)
    if not leave_one_out:
        # every quantity is per group: fuse on (G,) and gather once; n0 + n_g ≥ 1 > 0 always
        return ((n0_g * prior_g + s_g) / (n0_g + n_g))[group]
    if n0_i is None:
        num_g, den_g = n0_g * prior_g + s_g, n0_g + n_g - 1.0  # (G,)
        num, den = num_g[group] - rewards, den_g[group]  # (N,)
    else:
        num, den = n0_i * prior_g[group] + s_g[group] - rewards, n0_i + (n_g - 1.0)[group]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), rewards)


def beta_binomial_pvalue(successes: IntArray, trials: IntArray, alpha: FloatArray, beta: FloatArray) -> FloatArray:
    r"""Two-sided tail probability of s successes in k trials under the Beta–Binomial(k, α, β) prior predictive.

        P(S = j) = C(k, j) B(j + α, k − j + β) / B(α, β),   p = min(1, 2·min(P(S ≤ s), P(S ≥ s)))

    computed by the ratio recurrence P(j + 1)/P(j) = (k − j)(j + α) / ((j + 1)(k − j − 1 + β)) in log space (numpy
    only; every group at once over a (G, max k + 1) table).
    Degenerate cases: k = 0 gives p = 1 (nothing observed); the doubled tail is capped at 1.

    Args:
        successes: (G,) integers s in [0, k].
        trials: (G,) integers k ≥ 0.
        alpha: (G,) α > 0.
        beta: (G,) β > 0.

    Returns:
        (G,) p-values in (0, 1].
    """
    s, k = np.asarray(successes, np.int64), np.asarray(trials, np.int64)
    if s.size == 0:
        return np.ones(0)
    j = np.arange(int(k.max()) + 1)[None, :]  # (1, K+1)
    a, b, kk = alpha[:, None], beta[:, None], k[:, None]
    valid = j <= kk  # (G, K+1)
    # log P(0) = Σ_{i<k} log((β + i)/(α + β + i)); then cumulative log-ratios for j ≥ 1
    i = j[:, :-1]  # (1, K)
    step0 = np.where(i < kk, np.log((b + i) / (a + b + i)), 0.0)  # (G, K)
    log_p0 = step0.sum(axis=1, keepdims=True)  # (G, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(i < kk, np.log((kk - i) * (i + a) / ((i + 1) * (kk - i - 1 + b))), 0.0)  # (G, K)
    log_pmf = np.concatenate([log_p0, log_p0 + np.cumsum(ratio, axis=1)], axis=1)  # (G, K+1)
    pmf = np.where(valid, np.exp(log_pmf), 0.0)
    pmf = pmf / pmf.sum(axis=1, keepdims=True)  # guards rounding; exact sums are 1
    cdf = np.cumsum(pmf, axis=1)  # (G, K+1)
    rows = np.arange(len(s))
    lower = cdf[rows, s]  # P(S ≤ s)
    upper = 1.0 - cdf[rows, s] + pmf[rows, s]  # P(S ≥ s)
    return np.where(k > 0, np.minimum(1.0, 2.0 * np.minimum(lower, upper)), 1.0)


def eb_guard_pvalue(successes: FloatArray, k: FloatArray, prior_pm1: FloatArray, n0: FloatArray) -> FloatArray:
    r"""p-value of s successes in k rollouts under the prior's own predictive, Beta–Binomial(k, n0·p_V, n0·(1 − p_V)).

    The pseudo-count model behind ``v05_eb`` says p ~ Beta(n0·p_V, n0·(1 − p_V)), p_V = (V + 1)/2 clipped to
    [1e-3, 1 − 1e-3]; a prompt whose outcomes are improbable under it (two-sided tail, see
    :func:`beta_binomial_pvalue`) is evidence of a failed prior. The test is exact for k-sample
    binomial outcomes: under the model it rejects at most at its level, at every k and every V (a Gaussian radius
    does not: it fires on ordinary k = 4 extremes of a good prior and never on a weak one). n0 = 0 (no trust)
    gives p = 1. Shapes (G,); successes and k must be whole numbers.
    """
    p_v = np.clip(to_pass_rate(prior_pm1, "pm1"), 1e-3, 1.0 - 1e-3)
    n0_safe = np.maximum(n0, 1e-12)
    p = beta_binomial_pvalue(
        np.rint(successes).astype(np.int64), np.rint(k).astype(np.int64), n0_safe * p_v, n0_safe * (1.0 - p_v)
    )
    return np.where(n0 > 0, p, 1.0)


__all__ = [
    "NoiseModel",
    "Shrinkage",
    "Switch",
    "beta_binomial_pvalue",
    "eb_guard_pvalue",
    "group_mean",
    "leave_one_out",
    "pseudo_count_fusion",
    "v05_shrinkage",
]
