r"""The prior-provider interface, its prediction type, and the noise-corrected calibration every provider reports.

A *prior provider* maps prompts (stable id + text) of one policy to a predicted score V ∈ [−1, 1] (±1 space,
μ = 2p − 1) and a pseudo-count n0 saying how many rollouts the prediction is worth. Calibration against observed
group means v̄ (k rollouts each) corrects for their sampling noise (SPEC §3.4, priors-on-real-data.md §5.4):

    τ̂² = max(mean((v̄ − V)²) − mean(s²_v̄), floor),   s²_v̄ = (1 − v̄²)/(k − 1)   (unbiased for Var v̄ = (1 − μ²)/k)
    σ̄² = mean((1 − v̄²)·k/(k − 1))                                               (unbiased for E[1 − μ²])
    n0  = σ̄² / τ̂²                                                               (the prior is worth n0 rollouts)

Deviation: a group with k = 1 has no unbiased noise estimate; its noise term uses the plug-in (1 − V²)/1 instead.
The sums are :func:`v05.estimators.fusion.prior_error_stats`, shared with the ``v05_eb`` estimator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from v05._checks import as_float_1d, as_index_1d, check_in_range, check_int, check_same_length
from v05._types import FloatArray
from v05.allocation.posterior import BetaPosterior
from v05.estimators.fusion import TAU2_FLOOR, prior_error_stats
from v05.groups import segment_count, segment_mean
from v05.rewards import to_pass_rate, to_pm1


@dataclass(frozen=True, slots=True)
class PriorPrediction:
    """A provider's prediction for Q prompts (±1 reward space).

    Attributes:
        mean: (Q,) predicted score V in [−1, 1] (V = 2p̂ − 1).
        tau2: (Q,) the provider's estimate of its error variance E[(V − μ)²] for each prompt.
        n0: (Q,) pseudo-count σ̄²/τ² in rollouts (what ``v05_eb`` gives the prior).
    """

    mean: FloatArray
    tau2: FloatArray
    n0: FloatArray

    def __post_init__(self) -> None:
        arrays = [np.asarray(getattr(self, n), np.float64) for n in ("mean", "tau2", "n0")]
        if len({a.shape for a in arrays}) != 1 or arrays[0].ndim != 1:
            raise ValueError(f"mean, tau2 and n0 must be 1-D of one shape, got {[a.shape for a in arrays]}")
        for name, a in zip(("mean", "tau2", "n0"), arrays, strict=False):
            object.__setattr__(self, name, a)

    def __len__(self) -> int:
        return len(self.mean)

    @property
    def pass_rate(self) -> FloatArray:
        """(Q,) predicted pass rate p̂ = (V + 1)/2."""
        return to_pass_rate(self.mean, "pm1")

    def to_beta(self) -> BetaPosterior:
        """Beta(n0·p̂, n0·(1 − p̂)) beliefs (what allocators read)."""
        return BetaPosterior.from_mean(self.pass_rate, np.maximum(self.n0, 1e-6))

    def take(self, index: np.ndarray) -> PriorPrediction:
        """The rows at ``index``."""
        return PriorPrediction(self.mean[index], self.tau2[index], self.n0[index])

    @staticmethod
    def concat(parts: Sequence[PriorPrediction]) -> PriorPrediction:
        """Concatenate predictions in order."""
        return PriorPrediction(
            np.concatenate([p.mean for p in parts]),
            np.concatenate([p.tau2 for p in parts]),
            np.concatenate([p.n0 for p in parts]),
        )


@dataclass(frozen=True, slots=True)
class Calibration:
    """How good a prior has been against observed group means (±1 space).

    Attributes:
        tau2: noise-corrected error variance τ̂² (≥ floor).
        auc: AUC of V against 1[v̄ > 0] (NaN when one class is missing).
        n0: σ̄²/τ̂², the prior's worth in rollouts.
        n: number of groups the figures rest on (0: a default, not a measurement).
        mse: raw mean((v̄ − V)²) before the noise correction.
        noise: mean sampling variance of v̄ removed from ``mse``.
        sigma2: σ̄², the estimate of E[1 − μ²].
    """

    tau2: float
    auc: float
    n0: float
    n: int
    mse: float = float("nan")
    noise: float = float("nan")
    sigma2: float = float("nan")

    def to_dict(self) -> dict[str, float]:
        """JSON-serialisable form (metric names prefixed for a training log)."""
        return {f"prior/{k}": float(getattr(self, k)) for k in ("tau2", "auc", "n0", "n", "mse", "noise", "sigma2")}


def auc_score(score: FloatArray, label: np.ndarray) -> float:
    """ROC-AUC of ``score`` for the boolean ``label`` (Mann–Whitney with mid-ranks for ties).

    NaN where it is undefined: one class only, or a NaN score (it cannot be ranked).

    Raises:
        ValueError: ``score`` is not a 1-D array of numbers, or ``label`` has another length.
    """
    try:
        score = np.asarray(score, np.float64)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"score must be a 1-D array of numbers, got {type(score).__name__}") from None
    label = np.asarray(label, bool)
    if score.ndim != 1 or label.shape != score.shape:
        raise ValueError(f"score and label must be 1-D of one shape, got {score.shape} and {label.shape}")
    if np.isnan(score).any():
        return float("nan")
    n_pos, n_neg = int(label.sum()), int((~label).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(score, kind="mergesort")
    ranks = np.empty(len(score), np.float64)
    sorted_score = np.asarray(score)[order]
    # mid-ranks: every member of a tie block gets the mean of the block's 1-based ranks
    _, first, counts = np.unique(sorted_score, return_index=True, return_counts=True)
    mid = first + (counts + 1) / 2.0  # (B,) mean rank of each tie block
    ranks[order] = np.repeat(mid, counts)
    return float((ranks[label].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def calibrate(
    prediction: FloatArray, observed: FloatArray, counts: FloatArray, *, floor: float = TAU2_FLOOR
) -> Calibration:
    r"""Noise-corrected error variance, AUC and implied pseudo-count of a prior (equations in the module docstring).

    Args:
        prediction: (G,) prior V in [−1, 1].
        observed: (G,) observed group means v̄ in [−1, 1].
        counts: (G,) rollouts k ≥ 1 behind each v̄.
        floor: smallest τ̂² (and σ̄²) reported.

    Returns:
        The calibration; with G = 0 the fields are NaN and n = 0.

    Raises:
        ValueError: the arrays are not 1-D numbers of one length, a value is NaN or infinite, counts < 1, or values
            so large that the error variance overflows.
    """
    v, vbar, k = (as_float_1d(a, n, allow_empty=True) for a, n in
                  ((prediction, "prediction"), (observed, "observed"), (counts, "counts")))  # fmt: skip
    if not (v.shape == vbar.shape == k.shape):
        raise ValueError(
            f"prediction, observed and counts must be 1-D of one shape, got {v.shape}, {vbar.shape}, {k.shape}"
        )
    if v.size == 0:
        nan = float("nan")
        return Calibration(nan, nan, nan, 0, nan, nan, nan)
    if np.any(k < 1):
        raise ValueError(f"counts must be >= 1, got min {k.min()}")
    k_safe = np.maximum(k, 2.0)
    s2 = (1 - vbar**2) * k_safe / (k_safe - 1)  # (G,) unbiased variance of ±1 rewards (read where k ≥ 2)
    d2, noise_sum, var_sum, n = prior_error_stats(vbar, v, s2, k)  # the one implementation (v05_eb uses it too)
    mse, noise = d2 / n, noise_sum / n
    tau2 = max(mse - noise, floor)
    sigma2 = max(var_sum / n, floor)  # all-deterministic outcomes would give n0 = 0 and 0/0 later
    if not np.isfinite([mse, noise, tau2, sigma2]).all():  # squares of huge values (|V| ~ 1e155) overflow
        raise ValueError(
            f"prediction / observed too large: the error variance overflows (max |V| {np.abs(v).max():.3g}, "
            f"max |v̄| {np.abs(vbar).max():.3g}; both are ±1-space values)"
        )
    return Calibration(tau2, auc_score(v, vbar > 0), sigma2 / tau2, int(v.size), mse, noise, sigma2)


def group_outcomes(
    rewards: FloatArray, group: np.ndarray, *, n_groups: int | None = None, reward_range: str = "pm1"
) -> tuple[FloatArray, FloatArray]:
    """Per-group mean score (±1 space) and rollout count of a flat batch, the arguments of ``update``.

    Args:
        rewards: (N,) rewards in ``reward_range`` (``"pm1"`` or ``"01"``).
        group: (N,) prompt index in [0, G).
        n_groups: G (default: max(group) + 1); a group without rollouts is a ValueError (nothing to learn from).
        reward_range: the declared range of ``rewards``.

    Returns:
        (G,) mean ±1 score v̄_g and (G,) counts n_g.

    Raises:
        ValueError: bad rewards or group ids, a group without rollouts, or ``n_groups`` below the ids or not an
            integer.
    """
    r, g = as_float_1d(rewards, "rewards"), as_index_1d(group, "group")
    check_same_length([r, g], ["rewards", "group"])
    check_in_range(r, "rewards", reward_range)
    if n_groups is not None:
        check_int(n_groups, "n_groups", 1)
    if int(g.max()) >= len(r):  # every group needs a rollout: refuse before counting a huge id's bins
        raise ValueError(f"group {len(r)} has no rollouts (ids reach {int(g.max())} with {len(r)} rollouts)")
    n_g = segment_count(g, n_groups)  # (G,)
    if np.any(n_g == 0):
        raise ValueError(f"group {int(np.flatnonzero(n_g == 0)[0])} has no rollouts")
    return segment_mean(to_pm1(r, reward_range), g, n_groups), n_g.astype(np.float64)  # type: ignore[arg-type]


@runtime_checkable
class PriorProvider(Protocol):
    """What the simulator, trainer and engine adapters call (see ``v05.priors`` for the step protocol)."""

    name: str

    def predict(self, prompt_ids: Sequence[str], texts: Sequence[str], *, policy: str = "default") -> PriorPrediction:
        """Predict the score of each prompt under ``policy``, before its rollouts."""
        ...

    def update(
        self,
        prompt_ids: Sequence[str],
        texts: Sequence[str],
        scores: FloatArray,
        counts: FloatArray,
        *,
        policy: str = "default",
        step: int | None = None,
    ) -> None:
        """Record one step's observed group means (±1) and rollout counts under ``policy``."""
        ...

    def prefetch(self, texts: Sequence[str]) -> None:
        """Precompute per-prompt features (embeddings) of a known prompt pool; a no-op where there are none."""
        ...

    def calibration(self, policy: str = "default") -> Calibration:
        """The provider's current calibration for ``policy``."""
        ...

    def state_dict(self) -> dict[str, object]:
        """JSON-serialisable state (plus arrays as lists); never pickled."""
        ...

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Restore what :meth:`state_dict` returned."""
        ...


__all__ = ["TAU2_FLOOR", "Calibration", "PriorPrediction", "PriorProvider", "auc_score", "calibrate", "group_outcomes"]
