r"""Per-group metrics, exact binomial enumeration, and the accumulator behind every simulator record.

Definitions (±1 rewards; a *group* is the kept rollouts of one prompt in one step):
- ``mse``: per group, m_g = mean_{i∈g} (b_i − μ)²; the record's MSE is the mean over prompts of the (probability-
  weighted) average of m_g over the steps in which the prompt reached the loss. Every prompt weighs the same,
  whatever its number of rollouts (OSLA gives biased-prior prompts more), and with fixed k this is exactly the
  per-rollout MSE. ``mse_rollout`` weighs each kept rollout equally instead.
- ``zero_adv_frac``: fraction of kept groups whose advantages are all |A_i| < 1e-12 (no learning signal).
- ``grad_weight_var``: W_g = Σ_{i∈g} A_i, the total policy-gradient weight the group puts on its prompt; per prompt
  the variance of W_g across steps (within-prompt noise), averaged over prompts. Any estimator whose advantages sum
  to zero within a group (GRPO, Dr. GRPO, RLOO, REINFORCE++-baseline) has W_g ≡ 0; prior-based baselines trade a
  non-zero W_g for a lower-variance per-rollout signal.

Exact expectations: with k rollouts x ~ Binomial(k, p), p = (μ + 1)/2. An estimator whose baseline for a group
depends only on that group's rewards, its prior and fixed parameters is evaluated on an *enumerated* batch holding,
for every prompt, one group per outcome x = 0..k (x rewards +1, k − x rewards −1), each weighted by its binomial
probability. The real estimator runs on it, so no estimator math is re-derived here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import comb

import numpy as np

from v05._types import BoolArray, FloatArray, IntArray
from v05.estimators import Estimate
from v05.groups import segment_count, segment_sum
from v05.rewards import to_pass_rate
from v05.stats import mean_se

ZERO_ADV_TOL = 1e-12
"""|A| below this counts as a zero advantage."""


def binomial_pmf(k: int, mu: FloatArray) -> FloatArray:
    """(P, k + 1) probabilities of x = 0..k successes in k rollouts, p = (μ + 1)/2."""
    p = to_pass_rate(np.asarray(mu, np.float64), "pm1")  # (P,)
    x = np.arange(k + 1)
    coef = np.array([comb(k, int(j)) for j in x], np.float64)  # (k+1,)
    return coef[None, :] * p[:, None] ** x[None, :] * (1.0 - p[:, None]) ** (k - x)[None, :]  # (P, k+1)


@dataclass(frozen=True, slots=True)
class Enumerated:
    """Every outcome of k ±1 rollouts for each of P prompts, as one flat batch of P·(k + 1) groups.

    Attributes:
        rewards: (P·(k+1)·k,) rewards; group (p, x) holds x rewards +1 then k − x rewards −1.
        group: (P·(k+1)·k,) group ids, group = p·(k + 1) + x.
        prompt: (P·(k+1),) prompt of each group.
        prob: (P·(k+1),) binomial probability of each group's outcome.
    """

    rewards: FloatArray
    group: IntArray
    prompt: IntArray
    prob: FloatArray


def enumerate_outcomes(k: int, mu: FloatArray) -> Enumerated:
    """The enumerated batch for ``k`` rollouts of prompts with true values ``mu`` (P,)."""
    n = len(mu)
    x = np.arange(k + 1)
    one_group = np.where(np.arange(k)[None, :] < x[:, None], 1.0, -1.0)  # (k+1, k): row x has x successes
    rewards = np.tile(one_group.ravel(), n)  # (P·(k+1)·k,)
    group = np.repeat(np.arange(n * (k + 1)), k)
    prompt = np.repeat(np.arange(n), k + 1)
    return Enumerated(rewards, group, prompt, binomial_pmf(k, mu).ravel())


@dataclass(frozen=True, slots=True)
class GroupStats:
    """Per-group metrics of one estimator call (all (G,)).

    Attributes:
        prompt: population index of each group.
        prob: weight of the group (1 for a sampled group, the binomial probability for an enumerated one).
        k: rollouts in the group.
        mse: mean over the group's rollouts of (b_i − μ)².
        sq_sum: Σ over the group's rollouts of (b_i − μ)².
        weight_sum: W_g = Σ A_i.
        zero: all |A_i| < ``ZERO_ADV_TOL``.
        reject: the prior was rejected (fusion estimators), else None.
        fusion_weight: weight on the rollout mean (fusion estimators), else None.
    """

    prompt: IntArray
    prob: FloatArray
    k: IntArray
    mse: FloatArray
    sq_sum: FloatArray
    weight_sum: FloatArray
    zero: BoolArray
    reject: BoolArray | None
    fusion_weight: FloatArray | None


def group_stats(est: Estimate, group: IntArray, mu_g: FloatArray, prompt_g: IntArray, prob_g: FloatArray) -> GroupStats:
    """Metrics of each group of a batch the estimator ran on (``mu_g``, ``prompt_g``, ``prob_g``: (G,))."""
    n_groups = len(mu_g)
    err2 = (est.baseline - mu_g[group]) ** 2  # (N,)
    k_g = segment_count(group, n_groups)  # (G,)
    sq = segment_sum(err2, group, n_groups)  # (G,)
    w_g = segment_sum(est.advantages, group, n_groups)  # (G,)
    n_nonzero = np.bincount(group, np.abs(est.advantages) >= ZERO_ADV_TOL, n_groups)  # (G,)
    return GroupStats(
        prompt=prompt_g,
        prob=prob_g,
        k=k_g,
        mse=sq / np.maximum(k_g, 1),
        sq_sum=sq,
        weight_sum=w_g,
        zero=n_nonzero == 0,
        reject=None if est.reject is None else np.asarray(est.reject, bool),
        fusion_weight=None if est.weight is None else np.asarray(est.weight, np.float64),
    )


@dataclass(slots=True)
class Tally:
    """Accumulates :class:`GroupStats` over steps and replicates into one record's metrics (local, mutable).

    Each step adds total weight 1 per kept prompt (one sampled group, or k + 1 enumerated outcomes whose
    probabilities sum to 1), so sampled and exact steps mix freely. ``replicate`` numbers the independent passes
    over the population; the Monte Carlo SE of the MSE is the SE of the per-replicate MSEs.
    """

    n_prompts: int
    w: FloatArray = field(init=False)
    w_mse: FloatArray = field(init=False)
    w_ws: FloatArray = field(init=False)
    w_ws2: FloatArray = field(init=False)
    rep_mse: dict[int, list[float]] = field(default_factory=dict)
    zero: float = 0.0
    groups: float = 0.0
    sq: float = 0.0
    rollouts_kept: float = 0.0
    reject: float = 0.0
    reject_n: float = 0.0
    fweight: float = 0.0
    fweight_n: float = 0.0
    sampled: FloatArray = field(init=False)
    k_hist: dict[int, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.w, self.w_mse, self.w_ws, self.w_ws2, self.sampled = (np.zeros(self.n_prompts) for _ in range(5))

    def add(self, s: GroupStats, *, replicate: int, sampled: bool) -> None:
        """Add one step's groups (``sampled``: drawn at random, weight 1 each; else enumerated)."""
        if sampled:
            self.sampled += np.bincount(s.prompt, minlength=self.n_prompts)
        n = self.n_prompts
        self.w += np.bincount(s.prompt, s.prob, n)
        self.w_mse += np.bincount(s.prompt, s.prob * s.mse, n)
        self.w_ws += np.bincount(s.prompt, s.prob * s.weight_sum, n)
        self.w_ws2 += np.bincount(s.prompt, s.prob * s.weight_sum**2, n)
        self.rep_mse.setdefault(replicate, [0.0, 0.0])
        acc = self.rep_mse[replicate]
        acc[0] += float(np.sum(s.prob * s.mse))
        acc[1] += float(np.sum(s.prob))
        self.zero += float(np.sum(s.prob * s.zero))
        self.groups += float(np.sum(s.prob))
        self.sq += float(np.sum(s.prob * s.sq_sum))
        self.rollouts_kept += float(np.sum(s.prob * s.k))
        if s.reject is not None:
            self.reject += float(np.sum(s.prob * s.reject))
            self.reject_n += float(np.sum(s.prob))
        if s.fusion_weight is not None:
            self.fweight += float(np.sum(s.prob * s.fusion_weight))
            self.fweight_n += float(np.sum(s.prob))
        hist = np.bincount(s.k, s.prob)  # (max k + 1,)
        for kk in np.flatnonzero(hist):
            self.k_hist[int(kk)] = self.k_hist.get(int(kk), 0.0) + float(hist[kk])

    def summary(self) -> dict[str, object]:
        """The record's metric fields (see the module docstring)."""
        seen = self.w > 0
        w = self.w[seen]
        mean_ws = self.w_ws[seen] / w
        var_ws = np.maximum(self.w_ws2[seen] / w - mean_ws**2, 0.0)
        # Bessel-correct sample variances (all steps of the prompt sampled); enumerated moments are exact.
        n_s = self.sampled[seen]
        var_ws = np.where((n_s > 1) & (n_s >= w - 1e-9), var_ws * n_s / np.maximum(n_s - 1, 1), var_ws)
        reps = [a / b for a, b in self.rep_mse.values() if b > 0]
        se = mean_se(reps)[1] or 0.0  # 0 with one replicate or none
        return {
            "mse": float(np.mean(self.w_mse[seen] / w)),
            "mse_se": se,
            "mse_rollout": self.sq / max(self.rollouts_kept, 1e-12),
            "zero_adv_frac": self.zero / max(self.groups, 1e-12),
            "grad_weight_var": float(np.mean(var_ws)),
            "reject_rate": self.reject / self.reject_n if self.reject_n else None,
            "mean_weight": self.fweight / self.fweight_n if self.fweight_n else None,
            "k_hist": {str(k): round(v, 6) for k, v in sorted(self.k_hist.items())},
            "prompts_seen": int(seen.sum()),
        }


__all__ = ["ZERO_ADV_TOL", "Enumerated", "GroupStats", "Tally", "binomial_pmf", "enumerate_outcomes", "group_stats"]
