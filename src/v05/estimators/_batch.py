"""The validated batch every estimator starts from, and the result every estimator returns (private)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from v05._checks import RewardRange, as_float_1d, check_in_range, check_reward_range
from v05._types import BoolArray, FloatArray, IntArray
from v05.advantages import SCALES
from v05.groups import as_group, segment_count


@dataclass(frozen=True, slots=True)
class Estimate:
    """What an estimator returns.

    Attributes:
        advantages: (N,) advantages A_i.
        baseline: (N,) baselines b_i on the declared reward scale.
        weight: (G,) weight on the empirical mean (fusion estimators), else None.
        reject: (G,) prior rejected by the hypothesis test / hallucination guard, else None.
        state: the estimator's state after this batch (``dbb``: ``BetaHistory``; ``v05_eb``: ``PriorErrorState``),
            to pass back in on the next step; None for stateless estimators.
        n0: (G,) pseudo-count given to the prior (``v05_eb``), else None.
    """

    advantages: FloatArray
    baseline: FloatArray
    weight: FloatArray | None = None
    reject: BoolArray | None = None
    state: object | None = None
    n0: FloatArray | None = None


@dataclass(frozen=True, slots=True)
class Batch:
    """A validated flat batch: rewards (N,), group (N,), G, n_g (G,), and the optional prior per group (G,)."""

    rewards: FloatArray
    group: IntArray
    n_groups: int
    n_g: IntArray
    prior_g: FloatArray | None
    reward_range: RewardRange


def per_group(values: object, name: str, group: IntArray, n_groups: int, reward_range: RewardRange) -> FloatArray:
    """Accept a per-group (G,) or per-rollout (N,) array on the reward scale and return it per group (G,).

    A per-rollout array must be constant within each group (it is one value per prompt, repeated). When G = N the
    array is read per group.
    """
    v = as_float_1d(values, name)
    check_in_range(v, name, reward_range)
    if len(v) == n_groups:
        return v
    if len(v) == len(group):
        v_g = np.zeros(n_groups)
        v_g[group] = v  # last write wins; verified constant below
        bad = np.flatnonzero(np.abs(v - v_g[group]) > 1e-12)
        if bad.size:
            g = int(group[bad[0]])
            raise ValueError(
                f"{name} given per rollout must be constant within each group; group {g} has several values"
            )
        return v_g
    raise ValueError(f"{name} must have one value per group ({n_groups}) or per rollout ({len(group)}), got {len(v)}")


def prepare(
    rewards: object,
    group: object,
    *,
    prior: object = None,
    reward_range: RewardRange = "pm1",
    prior_name: str = "prior",
) -> Batch:
    """Validate a batch at the public entry (1-D, finite, in range, equal lengths, dense group ids)."""
    check_reward_range(reward_range)
    r = as_float_1d(rewards, "rewards")
    check_in_range(r, "rewards", reward_range)
    g, n_groups = as_group(group, len(r))
    prior_g = None if prior is None else per_group(prior, prior_name, g, n_groups, reward_range)
    return Batch(r, g, n_groups, segment_count(g, n_groups), prior_g, reward_range)


def check_scale(scale: str) -> None:
    """Reject unknown scale names, listing the valid ones."""
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; valid: {', '.join(SCALES)}")


def require_prior(batch: Batch, estimator: str) -> FloatArray:
    """The per-group prior, or a ValueError saying the estimator needs one."""
    if batch.prior_g is None:
        raise ValueError(f"estimator {estimator!r} needs a prior (per group (G,) or per rollout (N,), reward scale)")
    return batch.prior_g
