r"""POISE: a cross-rollout baseline from a probe on the policy's own hidden states (arXiv:2605.07579).

This module owns the advantage arithmetic only: the probe's per-rollout predictions g(z_i) come in as ``values``
(fitted and queried by :class:`v05.value_probe.PoiseProbe`), and :func:`cross_rollout_targets` gives the rows the
probe is trained on. Order per step (SPEC §6): predict with the previous probe → :func:`poise` → append the step's
``(features, cross_rollout_targets)`` rows to the buffer → refit.

Deviations from the released code (``holi-lab/POISE``, ``src/poise/core.py``): ragged groups are allowed (the release
requires every group to have exactly ``group_size ≥ 2`` rollouts); a singleton group gets A = 0 and a NaN target
instead of an error; ``scale`` may whiten the advantages (default ``none``, the release's raw r − b).
"""

from __future__ import annotations

import numpy as np

from v05._checks import RewardRange, as_float_1d, check_in_range
from v05._types import FloatArray
from v05.advantages import Scale, scale_advantages
from v05.baselines import leave_one_out
from v05.estimators._batch import Estimate, check_prior_scale, prepare
from v05.groups import as_group, segment_count


def poise(
    rewards: object,
    group: object,
    *,
    values: object = None,
    reward_range: RewardRange = "pm1",
    scale: Scale = "none",
) -> Estimate:
    r"""POISE: each rollout's baseline is the mean probe prediction of the *other* rollouts of its prompt.

        b_i = (Σ_{j∈g} g_j − g_i)/(n_g − 1),   A_i = r_i − b_i        (n_g = 2:  b_1 = g_2,  A_1 = r_1 − g_2)

    g_j = g_φ(z_j) is the probe's prediction from rollout j's own features z_j (hidden states and entropies of the
    policy's forward pass), on the reward scale.

    Bias: none, provided the probe φ was fitted on earlier steps only (frozen during this one). b_i is a function of
    (x, y_j for j ≠ i, φ), and the siblings y_j are sampled independently of y_i given the prompt x, so
    E[∇log π(y_i|x)·b_i | x] = E[b_i | x]·E[∇log π(y_i|x) | x] = 0. Using the rollout's *own* prediction g_i as its
    baseline would be biased: z_i carries information about whether y_i succeeded, so Cov(g_i, r_i) ≠ 0.
    Degenerate cases: a singleton group has no sibling, so b_i = r_i and A_i = 0 (the release refuses such groups);
    all-equal groups keep A_i = r_i − b_i ≠ 0 whenever the siblings' predictions differ from the rewards, which is
    how POISE avoids dynamic-sampling filters.

    Args:
        rewards: (N,) rewards on the declared scale.
        group: (N,) group ids in [0, G).
        values: (N,) per-rollout probe predictions g(z_i) on the reward scale, within the reward range (the probe
            clips its output; see :class:`v05.value_probe.PoiseProbe`); required.
        reward_range: ``"pm1"`` or ``"01"`` (the release works in 0/1).
        scale: advantage scaling; ``"none"`` (default, the release), ``"batch_std"``, ``"batch_whiten"`` or
            ``"model_std"``. ``"group_std"`` is refused: siblings' predictions give all-equal groups signal, but their
            std is 0.

    Returns:
        The estimate (``advantages``, ``baseline``); no state (the probe lives outside the estimator).

    Raises:
        ValueError: bad rewards or group ids, ``values`` missing or not 1-D of length N, non-finite or outside the
            reward range, or an unknown / refused ``scale``.

    References:
        POISE: "Policy Optimization with Internal State Value Estimation", arXiv:2605.07579 (released code:
        ``holi-lab/POISE``, ``compute_group_targets_and_cross_baselines``).

    >>> poise([0., 0.5, 1.], [0, 0, 0], values=[0.2, 0.4, 0.9], reward_range="01").baseline
    array([0.65, 0.55, 0.3 ])
    """
    check_prior_scale(scale, "poise")
    if values is None:
        raise ValueError("poise needs values=(N,): the frozen probe's prediction for every rollout of the batch")
    b = prepare(rewards, group, reward_range=reward_range)
    g = as_float_1d(values, "values")
    if len(g) != len(b.rewards):
        raise ValueError(
            f"values must hold one probe prediction per rollout ({len(b.rewards)}), got {len(g)}: predict every "
            "rollout of the batch with the frozen probe"
        )
    check_in_range(g, "values", reward_range)
    has_sibling = (b.n_g > 1)[b.group]  # (N,)
    base = np.where(has_sibling, leave_one_out(g, b.group, n_g=b.n_g), b.rewards)  # (N,) singleton: b = r, A = 0
    adv = scale_advantages(b.rewards, base, b.group, scale=scale, reward_range=reward_range)
    return Estimate(adv, base)


def cross_rollout_targets(rewards: object, group: object) -> FloatArray:
    r"""The probe's regression targets: the mean reward of each rollout's siblings.

        target_i = (S_g − r_i)/(n_g − 1),   S_g = Σ_{j∈g} r_j        (n_g = 2:  target_1 = r_2)

    Row i pairs rollout i's features z_i with the outcome of the *other* rollouts, so the target is conditionally
    independent of the trajectory that produced z_i: the probe learns the prompt's value, not "did this trajectory
    succeed". Any reward scale (the targets are on the scale of ``rewards``).
    Degenerate case: a singleton group has no sibling and gets NaN; the caller drops those rows (``GroupBuffer``
    does).

    Args:
        rewards: (N,) rewards.
        group: (N,) group ids in [0, G).

    Returns:
        (N,) float64 targets, NaN for singleton groups.

    Raises:
        ValueError: non-finite or non-1-D rewards, bad group ids, length mismatch.

    References:
        arXiv:2605.07579; the release's ``target_mode="other_rollout_correctness"``.

    >>> cross_rollout_targets([0., 0.5, 1., 1.], [0, 0, 0, 1])
    array([0.75, 0.5 , 0.25,  nan])
    """
    r = as_float_1d(rewards, "rewards")
    g, n_groups = as_group(group, len(r))
    n_g = segment_count(g, n_groups)  # (G,)
    return np.where((n_g > 1)[g], leave_one_out(r, g, n_g=n_g), np.nan)  # (N,)


__all__ = ["cross_rollout_targets", "poise"]
