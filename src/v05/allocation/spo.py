r"""SPO's prioritised sampling: a weighted draw of the batch from the candidate pool by the tracker's uncertainty.

Each candidate's pass rate p̂ comes from the prior (the ``spo`` tracker's α/(α + β), reward scale → pass rate):

    w = √(p̂(1 − p̂)) + ε,   π = w / Σw,   the batch = min(B, P) candidates drawn from π without replacement

then ``k`` rollouts each (SPO: k = 1), one round; every drawn prompt enters the loss. Follows verl's
``recipe/spo/spo_ray_trainer.py`` (weights with ε = 0.05, numpy's weighted choice without replacement when the
batch is smaller than the pool). Deviations: the draw uses the step's seeded generator (``pool.rng``), not numpy's
global one; the candidate pool is ``pool_factor`` batches from v05's prompt queue (the recipe: a 14,000-prompt
dataloader batch, about the whole dataset, for 1,024 prompts a step); the README's "Thompson sampling" is not what
the recipe's code does (no Beta draw), nor this.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from v05._checks import check_int, check_positive
from v05._types import BoolArray, FloatArray, IntArray
from v05.allocation.driver import Draw, Finish, Pool
from v05.rewards import to_pass_rate


def spo_weights(pass_rate: FloatArray, *, epsilon: float = 0.05) -> FloatArray:
    r"""(P,) SPO's sampling weights w = √(p̂(1 − p̂)) + ε (unnormalised).

    >>> spo_weights(np.array([0.5, 0.0, 0.9])).round(4).tolist()
    [0.55, 0.05, 0.35]
    """
    p = np.clip(np.asarray(pass_rate, np.float64), 0.0, 1.0)
    return np.sqrt(p * (1.0 - p)) + epsilon


@dataclass(frozen=True, slots=True)
class _SpoRound:
    selected: BoolArray  # (P,) drawn this step
    prob: FloatArray  # (P,) the draw's probabilities π
    drawn: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class SpoSample:
    r"""SPO's prioritised sampling (module docstring): ``batch_size`` of the pool drawn by w = √(p̂(1 − p̂)) + ε.

        rollouts = min(batch_size, P) · k   (exactly)

    Degenerate cases: P ≤ batch_size takes the whole pool; every p̂ at 0 or 1 gives equal weights ε (uniform).
    Statistics: ``pool_weight_mean`` and ``selected_weight_mean``, the mean draw probability π of the pool and of
    the drawn prompts (their ratio says how far the draw leans to uncertain prompts; 1: uniform).
    The prompts not drawn are ``Finish.passed`` (v05's trainer drops them for the epoch: ``allocator.rejects``).
    Needs a prior (``allocate(..., prior=...)``), the ``spo`` tracker's in SPO.

    References: Xu & Ding (2025) "Single-stream Policy Optimization", arXiv:2509.13232; verl ``recipe/spo``.
    """

    k: int = 1
    """rollouts per drawn prompt (SPO: 1)."""
    batch_size: int = 32
    """B, prompts drawn a step (they all reach the loss)."""
    epsilon: float = 0.05
    """ε added to every weight, so a prompt the tracker judges saturated is still drawn (the recipe's 0.05)."""
    pool_factor: int = 4
    """candidate pool = pool_factor · batch_size prompts a step."""

    def candidate_pool(self, batch_size: int) -> int:
        """Prompts a step's candidates come from: ``pool_factor`` batches."""
        return self.pool_factor * batch_size

    def __post_init__(self) -> None:
        check_int(self.k, "k", 1)
        check_int(self.batch_size, "batch_size", 1)
        check_int(self.pool_factor, "pool_factor", 1)
        check_positive(self.epsilon, "epsilon")

    def init(self, pool: Pool, state: Any) -> _SpoRound:  # noqa: D102
        if pool.prior is None:
            raise ValueError("spo sampling needs a prior: pass allocate(..., prior=...) (the spo tracker's)")
        n = pool.n_prompts
        w = spo_weights(to_pass_rate(pool.prior, pool.reward_range), epsilon=self.epsilon)  # (P,)
        prob = w / w.sum()  # (P,)
        b = min(self.batch_size, n)
        selected = np.zeros(n, bool)
        selected[pool.rng.choice(n, size=b, replace=False, p=prob)] = True
        return _SpoRound(selected, prob)

    def ask(self, s: _SpoRound) -> IntArray:  # noqa: D102
        return np.zeros(len(s.selected), np.int64) if s.drawn else np.where(s.selected, self.k, 0).astype(np.int64)

    def tell(self, s: _SpoRound, draw: Draw) -> _SpoRound:  # noqa: D102
        return replace(s, drawn=True)

    def finish(self, s: _SpoRound) -> Finish:  # noqa: D102
        stats = {"pool_weight_mean": float(np.mean(s.prob)), "selected_weight_mean": float(np.mean(s.prob[s.selected]))}
        return Finish(kept=s.selected.copy(), stats=stats, passed=~s.selected)


__all__ = ["SpoSample", "spo_weights"]
