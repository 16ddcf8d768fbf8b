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
from v05.groups import segment_count, segment_mean, segment_sum

NoiseModel = Literal["bound", "plugin"]
Switch = Literal["smooth", "hard"]


def group_mean(rewards: FloatArray, group: IntArray) -> FloatArray:
    """b_i = r̄_g = S_g / n_g, shape (N,). Includes r_i itself, so E[A_i] ≠ 0 exactly: bias factor (n_g − 1)/n_g."""
    return segment_mean(rewards, group)[group]


def leave_one_out(rewards: FloatArray, group: IntArray) -> FloatArray:
    r"""Baseline from the other rollouts of the same prompt.

        b_i = (S_g − r_i) / (n_g − 1),   so   r_i − b_i = n_g/(n_g − 1) · (r_i − r̄_g)

    b_i does not depend on r_i, so the policy-gradient estimate is unbiased.
    Degenerate case: a singleton group (n_g = 1) has no other rollout; its baseline is set to r_i (advantage 0).

    References: Kool, van Hoof & Welling (2019) "Buy 4 REINFORCE Samples, Get a Baseline for Free!";
    Ahmadian et al. (2024) arXiv:2402.14740.
    """
    n_g, s_g = segment_count(group), segment_sum(rewards, group)  # (G,), (G,)
    n_i = n_g[group]  # (N,)
    return np.where(n_i > 1, (s_g[group] - rewards) / np.maximum(n_i - 1, 1), rewards)


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
    rewards: FloatArray, group: IntArray, prior_g: FloatArray, n0_g: FloatArray, *, leave_one_out: bool = False
) -> FloatArray:
    r"""Pseudo-count (Beta-posterior-mean) fusion of the prior with the rollouts, shape (N,).

        plain:          b_i = (n0·V + S_g) / (n0 + n_g)
        leave-one-out:  b_i = (n0·V + S_g − r_i) / (n0 + n_g − 1)

    Bias: the plain form includes r_i in its own baseline (like the group mean); the leave-one-out form does not,
    so it keeps the policy gradient unbiased when n0 and V do not depend on the batch.
    Limits: n0 → 0 gives the group mean (LOO: the leave-one-out mean); n0 → ∞ gives V.
    Degenerate case: n0 = 0 and n_g = 1 in the LOO form has no information at all; b = V there.
    """
    n_g, s_g = segment_count(group), segment_sum(rewards, group)  # (G,), (G,)
    n0_i, v_i = n0_g[group], prior_g[group]  # (N,)
    if leave_one_out:
        num, den = n0_i * v_i + s_g[group] - rewards, n0_i + n_g[group] - 1
    else:
        num, den = n0_i * v_i + s_g[group], n0_i + n_g[group]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), v_i)


__all__ = ["NoiseModel", "Shrinkage", "Switch", "group_mean", "leave_one_out", "pseudo_count_fusion", "v05_shrinkage"]
