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

    A per-rollout array must be constant within each group (it is one value per prompt, repeated). When G = N (one
    rollout per group) both readings coincide only if the group ids are in order (``group == arange(G)``); otherwise
    the array is ambiguous and refused.
    """
    v = as_float_1d(values, name)
    check_in_range(v, name, reward_range)
    if len(v) == n_groups == len(group) and not np.array_equal(group, np.arange(n_groups)):
        raise ValueError(
            f"{name} has {len(v)} values for {n_groups} groups of one rollout each whose ids are not in order, so it "
            f"could be per group or per rollout; reorder the batch so that group == arange(G), or pass it per group "
            f"with the rollouts sorted by group"
        )
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


def check_prior_scale(scale: str, estimator: str) -> None:
    """Reject unknown scales, and ``group_std`` for estimators whose baseline is not the group mean.

    A prior (or history) gives all-equal groups a non-zero advantage, but their empirical std is 0: dividing by it
    would blow the advantage up to ~1e6 (A / ε). ``none`` (default) or ``model_std`` scale safely.
    """
    check_scale(scale)
    if scale == "group_std":
        raise ValueError(
            f"scale='group_std' is not available for {estimator}: it divides by each group's std, which is 0 for the "
            "all-equal groups a prior gives signal to; use scale='none' (default) or 'model_std'"
        )


def check_binary_successes(r_pm1: FloatArray, batch: Batch, what: str) -> FloatArray:
    """Successes per group (G,) of ±1 rewards; ValueError if a reward is not binary (the top or bottom of the range)."""
    binary = (r_pm1 == 1.0) | (r_pm1 == -1.0)
    if not binary.all():
        i = int(np.flatnonzero(~binary)[0])
        raise ValueError(
            f"{what} assumes binary (Bernoulli) rewards; rewards[{i}] = {float(batch.rewards[i])!r} is neither end of "
            f"the reward range {batch.reward_range!r} (turn the guard off for graded rewards)"
        )
    return np.bincount(batch.group, weights=(r_pm1 > 0).astype(np.float64), minlength=batch.n_groups)


def require_prior(batch: Batch, estimator: str) -> FloatArray:
    """The per-group prior, or a ValueError saying the estimator needs one."""
    if batch.prior_g is None:
        raise ValueError(f"estimator {estimator!r} needs a prior (per group (G,) or per rollout (N,), reward scale)")
    return batch.prior_g
