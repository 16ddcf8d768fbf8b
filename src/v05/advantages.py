r"""Advantage scaling: the named step after the baseline (A = (r − b) / scale).

Modes (all computed in float64, ``eps`` and ``ddof`` named):
- ``none``: A = r − b (Dr. GRPO, arXiv:2503.20783; default for V0.5).
- ``group_std``: A = (r − b)/(std_g(r) + eps), std with ``ddof`` (GRPO, arXiv:2402.03300; verl uses ddof = 1,
  eps = 1e-6). A singleton group has no std: its advantage is left unscaled (and is 0 for group-mean baselines).
- ``batch_std``: A = (r − b)/(std(r − b) + eps) over the whole batch.
- ``batch_whiten``: A = (a − mean(a)) / √(var(a) + eps), a = r − b, var unbiased (REINFORCE++'s masked_whiten,
  computed per rollout instead of per token).
- ``batch_norm``: A = (a − mean(a)) / (std(a) + eps), a = r − b, std unbiased over the whole batch (SPO's global
  normalisation, arXiv:2509.13232; verl ``recipe/spo``: eps = 1e-8 on the std, per sequence).
- ``model_std``: A = (r − b)/√max(Var_b, floor), the Bernoulli std implied by b: ±1 space Var = 1 − b²
  (floor 1e-2), 0/1 space Var = b(1 − b) (floor 1e-2/4). Scale-invariant between the two ranges.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from v05._checks import RewardRange
from v05._types import FloatArray, IntArray
from v05.groups import segment_count, segment_std

Scale = Literal["none", "group_std", "batch_std", "batch_whiten", "batch_norm", "model_std"]
SCALES: tuple[str, ...] = ("none", "group_std", "batch_std", "batch_whiten", "batch_norm", "model_std")


def scale_advantages(
    rewards: FloatArray,
    baseline: FloatArray,
    group: IntArray,
    *,
    scale: Scale = "none",
    reward_range: RewardRange = "pm1",
    eps: float = 1e-6,
    ddof: int = 1,
    model_std_floor: float = 1e-2,
    n_g: IntArray | None = None,
    mean_g: FloatArray | None = None,
) -> FloatArray:
    """Turn baselines into advantages with the named scaling, shape (N,).

    Args:
        rewards: (N,) rewards on the declared scale.
        baseline: (N,) baselines on the same scale.
        group: (N,) group ids in [0, G).
        scale: one of ``SCALES`` (see the module docstring).
        reward_range: ``"pm1"`` or ``"01"`` (only ``model_std`` reads it).
        eps: added to the std (``group_std``, ``batch_std``, ``batch_norm``) or to the variance (``batch_whiten``).
        ddof: delta degrees of freedom of the std (1 = unbiased, as verl).
        model_std_floor: floor on the ±1-space variance 1 − b² for ``model_std``.
        n_g: precomputed (G,) counts, trusted (``group_std`` only).
        mean_g: precomputed (G,) group means of ``rewards``, trusted (``group_std`` only).

    Raises:
        ValueError: unknown ``scale``.
    """
    a = rewards - baseline  # (N,)
    if scale == "none":
        return a
    if scale == "group_std":
        if n_g is None:
            n_g = segment_count(group)
        std_g = segment_std(rewards, group, ddof=ddof, n_g=n_g, mean_g=mean_g)  # (G,) nan for n_g ≤ ddof
        div_g = np.where(n_g <= ddof, 1.0, std_g + eps)  # (G,) a group too small for a std is left unscaled
        return a / div_g[group]
    if scale == "batch_std":
        if a.size <= ddof:
            return a
        return a / (a.std(ddof=ddof) + eps)
    if scale == "batch_whiten":
        if a.size <= 1:
            return a - a.mean()
        return (a - a.mean()) / np.sqrt(a.var(ddof=1) + eps)
    if scale == "batch_norm":
        if a.size <= 1:
            return a - a.mean()  # one rollout: no std; its centred advantage is 0
        return (a - a.mean()) / (a.std(ddof=1) + eps)
    if scale == "model_std":
        if reward_range == "pm1":
            var = np.maximum(1.0 - baseline * baseline, model_std_floor)
        else:
            var = np.maximum(baseline * (1.0 - baseline), model_std_floor / 4.0)
        return a / np.sqrt(var)
    raise ValueError(f"unknown scale {scale!r}; valid: {', '.join(SCALES)}")


__all__ = ["SCALES", "Scale", "scale_advantages"]
