"""Accuracy metrics of a prior against observed scores (±1), V0's own metrics, and the reliability plot.

``auc_within`` is the count-weighted AUC inside each snapshot for s > 0 (V0's Intra-AUC); ``auc_global`` and
``gauc_step`` are V0's ``utils/metrics.py`` figures for the label s ≥ 0 with prob = (ŷ + 1)/2 (gAUC groups by
training step only, pooling models, as V0's code does). The calibration slope is the OLS slope of s on ŷ
(1 = calibrated; < 1 = over-confident spread).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from v05._types import FloatArray
from v05.priors.base import auc_score
from v05.rewards import to_pass_rate


@dataclass(frozen=True, slots=True)
class PriorMetrics:
    """Accuracy of predictions ŷ against scores s (see the module docstring)."""

    mse: float
    mae: float
    pearson: float
    spearman: float
    auc_within: float
    auc_global: float
    gauc_step: float
    calibration_slope: float
    bias: float
    n: int

    def to_dict(self) -> dict[str, float]:
        """JSON-serialisable form."""
        return {k: (float(v) if k != "n" else int(v)) for k, v in asdict(self).items()}


def _weighted_auc(pred: FloatArray, label: np.ndarray, groups: np.ndarray) -> float:
    """Count-weighted mean of per-group AUCs, skipping groups with one class (NaN if none qualify)."""
    aucs, weights = [], []
    for g in np.unique(groups):
        mask = groups == g
        a = auc_score(pred[mask], label[mask])
        if np.isfinite(a):
            aucs.append(a)
            weights.append(mask.sum())
    return float(np.average(aucs, weights=weights)) if aucs else float("nan")


def _rank(x: FloatArray) -> FloatArray:
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x))
    _, first, counts = np.unique(x[order], return_index=True, return_counts=True)
    ranks[order] = np.repeat(first + (counts - 1) / 2.0, counts)
    return ranks


def _corr(a: FloatArray, b: FloatArray) -> float:
    if len(a) < 2 or np.std(a) == 0 or np.std(b) == 0:
        return float("nan")
    return float(np.corrcoef(a, b)[0, 1])


def prior_metrics(pred: FloatArray, score: FloatArray, snapshot: np.ndarray, step: np.ndarray) -> PriorMetrics:
    """Metrics of (R,) predictions against (R,) scores; ``snapshot`` and ``step`` are (R,) group labels."""
    pred, score = np.clip(np.asarray(pred, np.float64), -1, 1), np.asarray(score, np.float64)
    err = pred - score
    var = float(np.var(pred))
    slope = float(np.cov(pred, score, bias=True)[0, 1] / var) if var > 1e-12 else float("nan")
    prob = to_pass_rate(pred, "pm1")
    return PriorMetrics(
        mse=float(np.mean(err**2)),
        mae=float(np.mean(np.abs(err))),
        pearson=_corr(pred, score),
        spearman=_corr(_rank(pred), _rank(score)),
        auc_within=_weighted_auc(pred, score > 0, np.asarray(snapshot)),
        auc_global=auc_score(prob, score >= 0),
        gauc_step=_weighted_auc(prob, score >= 0, np.asarray(step)),
        calibration_slope=slope,
        bias=float(np.mean(err)),
        n=len(score),
    )


def eb_fusion_ratio(pred: FloatArray, n0: FloatArray, score: FloatArray, k: int = 4) -> tuple[float, float]:
    r"""What a prior is worth to ``v05_eb`` at group size k, exactly, with plug-in truth μ = score (±1 space).

        MSE_EB = mean[(k(1 − μ²) + n0²(V − μ)²) / (n0 + k)²],   MSE_GRPO = mean[(1 − μ²)/k]

    (the binomial expectation of b = (n0·V + k·v̄)/(n0 + k) with n0 and V fixed). Returns
    ``(MSE_EB / MSE_GRPO, worth)`` with worth = k·MSE_GRPO/MSE_EB − k, the extra rollouts the prior is worth.
    """
    v, mu, n0 = np.clip(pred, -1.0, 1.0), score, np.asarray(n0, np.float64)
    var = 1.0 - mu * mu
    mse_eb = float(np.mean((k * var + n0 * n0 * (v - mu) ** 2) / (n0 + k) ** 2))
    mse_grpo = float(np.mean(var / k))
    ratio = mse_eb / mse_grpo if mse_grpo > 0 else float("nan")
    return ratio, k / ratio - k if ratio > 0 else float("nan")


def reliability_table(pred: FloatArray, score: FloatArray, bins: int = 8) -> list[tuple[float, float, int]]:
    """(mean ŷ, mean s, count) per equal-width bin of ŷ over [−1, 1], empty bins skipped."""
    edges = np.linspace(-1, 1, bins + 1)
    which = np.clip(np.digitize(pred, edges[1:-1]), 0, bins - 1)
    return [
        (float(pred[which == b].mean()), float(score[which == b].mean()), int((which == b).sum()))
        for b in range(bins)
        if np.any(which == b)
    ]


def reliability_plot(curves: dict[str, tuple[FloatArray, FloatArray]], path: str | Path, *, title: str = "") -> Path:
    """Write a reliability diagram (mean observed score per bin of predicted score) for each named curve."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 5))
    ax.plot([-1, 1], [-1, 1], color="grey", lw=1, ls="--", label="calibrated")
    for name, (pred, score) in curves.items():
        table = reliability_table(np.asarray(pred), np.asarray(score))
        ax.plot([t[0] for t in table], [t[1] for t in table], marker="o", label=name)
    ax.set(xlabel="predicted score ŷ", ylabel="observed score s", xlim=(-1, 1), ylim=(-1, 1), title=title)
    ax.legend(fontsize=8)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


__all__ = ["PriorMetrics", "prior_metrics", "reliability_plot", "reliability_table"]
