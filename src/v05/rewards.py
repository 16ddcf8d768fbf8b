"""Reward scales: the paper's ±1 space (``pm1``) and the 0/1 space (``01``).

The V0.5 math (noise bound σ² ≤ 1, test radius 1/√k) lives in ±1 space. An estimator given ``01`` rewards maps
rewards and prior to ±1 with ``x ↦ 2x − 1``, computes the baseline there and maps it back with ``b ↦ (b + 1)/2``,
so ``01`` baselines are exactly the affine image of ``pm1`` baselines and unscaled ``01`` advantages are half
of the ``pm1`` ones.
"""

from __future__ import annotations

import numpy as np

from v05._checks import RewardRange, check_reward_range
from v05._types import FloatArray


def to_pm1(x: FloatArray, reward_range: RewardRange) -> FloatArray:
    """Map values on the declared reward scale to ±1 space (identity for ``pm1``)."""
    check_reward_range(reward_range)
    return x if reward_range == "pm1" else 2.0 * x - 1.0


def from_pm1(x: FloatArray, reward_range: RewardRange) -> FloatArray:
    """Map ±1-space values back to the declared reward scale (identity for ``pm1``)."""
    check_reward_range(reward_range)
    return x if reward_range == "pm1" else (x + 1.0) / 2.0


def to_pass_rate(x: FloatArray, reward_range: RewardRange) -> FloatArray:
    """Map values on the declared reward scale to pass rates in [0, 1] (p = (v + 1)/2 in ±1 space)."""
    return (to_pm1(x, reward_range) + 1.0) / 2.0


def from_pass_rate(p: FloatArray, reward_range: RewardRange) -> FloatArray:
    """Map pass rates in [0, 1] to the declared reward scale (v = 2p − 1 in ±1 space); the inverse of to_pass_rate."""
    return from_pm1(to_pm1(p, "01"), reward_range)


def score_to_reward_scale(score: object, reward_range: RewardRange) -> FloatArray:
    """A ±1 score (a prior provider's mean) on the reward scale, clipped to the range first.

    The one boundary between the providers (±1 space) and the estimators (the run's reward scale): the trainer's
    and the TRL adapter's priors cross it here. A provider's mean may overshoot ±1 by rounding; NaN stays NaN.

    >>> score_to_reward_scale([-1.5, 0.0, 0.5], "01")
    array([0.  , 0.5 , 0.75])
    """
    return from_pm1(np.clip(np.asarray(score, np.float64), -1.0, 1.0), reward_range)


__all__ = ["RewardRange", "from_pass_rate", "from_pm1", "score_to_reward_scale", "to_pass_rate", "to_pm1"]
