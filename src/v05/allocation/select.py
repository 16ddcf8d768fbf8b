r"""Prior-driven prompt selection: pick the pool prompts whose rollouts the prior predicts to carry signal (numpy only).

Each pool prompt's pass rate gets a Beta belief from the prior V (reward scale; p = (to_pm1(V) + 1)/2) and the
prior's worth in rollouts n0 (``pool.n0``, else the allocator's ``default_n0``):

    p ~ Beta(α, β),   α = p_V·n0 + α₀,   β = (1 − p_V)·n0 + α₀,   m = α/(α + β)

The score of a prompt is the Bernoulli variance of its outcome, s = p̃(1 − p̃), at a Thompson draw p̃ ~ Beta(α, β)
(or at the mean m). The ``batch_size`` prompts with the largest scores get ``k`` rollouts each, in one round.

Deviations from the cited papers: GRESO (arXiv:2506.02177) skips prompts whose *past* groups had zero variance, with
a skip probability that grows with the zero-variance streak (``greso``); MoPPS (arXiv:2507.04632) samples Beta
posteriors built from each prompt's own history; here the belief is the value prior's (V, n0), so a prompt never
sampled before is scored too, and no state is kept across steps (the prior provider already learns from every
sampled prompt). The exploration share is ours.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np

from v05._checks import RewardRange, as_float_1d, check_int, check_positive
from v05._types import BoolArray, FloatArray, IntArray
from v05.allocation.driver import Draw, Finish, Pool
from v05.allocation.posterior import BetaPosterior
from v05.groups import segment_mean, segment_var
from v05.rewards import to_pass_rate, to_pm1

Score = Literal["variance"]
"""How a prompt is scored: ``"variance"``, the Bernoulli variance p(1 − p) of its outcome."""


def prior_belief(pass_rate: object, n0: object, *, alpha0: float = 0.5) -> BetaPosterior:
    r"""The Beta belief over a prompt's pass rate implied by a prior pass rate and its pseudo-count.

        α = p_V·n0 + α₀,   β = (1 − p_V)·n0 + α₀,   mean m = (p_V·n0 + α₀)/(n0 + 2α₀)

    α₀ > 0 keeps the belief proper where n0 = 0 (Beta(α₀, α₀): the prior is ignored) or p_V ∈ {0, 1}; it pulls the
    mean towards 1/2 by α₀ pseudo-rollouts of each outcome.

    Args:
        pass_rate: (P,) p_V in [0, 1], the prior's predicted pass rate.
        n0: scalar or (P,) n0 ≥ 0, the prior's worth in rollouts.
        alpha0: α₀ > 0 added to both Beta parameters.

    Returns:
        (P,) Beta beliefs.

    Raises:
        ValueError: p_V outside [0, 1] or not finite, n0 < 0 or not finite or of the wrong shape, α₀ ≤ 0.

    >>> b = prior_belief([0.9, 0.5], 4.0, alpha0=0.5)
    >>> b.mean.round(3)   # (0.9·4 + 0.5)/(4 + 1) = 0.82; 0.5 stays 0.5
    array([0.82, 0.5 ])
    """
    p = as_float_1d(pass_rate, "pass_rate")
    if np.any((p < 0.0) | (p > 1.0)):
        raise ValueError(f"pass_rate must lie in [0, 1], got {p[(p < 0.0) | (p > 1.0)][:3]}")
    n0_arr = as_float_1d(np.atleast_1d(np.asarray(n0, dtype=object)), "n0")
    if n0_arr.shape not in ((1,), p.shape):
        raise ValueError(f"n0 must be a scalar or have shape {p.shape}, got {n0_arr.shape}")
    if np.any(n0_arr < 0):
        raise ValueError(f"n0 must be >= 0, got {float(n0_arr.min())!r}")
    check_positive(alpha0, "alpha0")
    n0_p = np.broadcast_to(n0_arr, p.shape)  # (P,)
    return BetaPosterior(p * n0_p + alpha0, (1.0 - p) * n0_p + alpha0)


@dataclass(frozen=True, slots=True)
class _SelectRound:
    """prior_select round state: the selection (made in init) and, once drawn, the realised signal per prompt."""

    selected: BoolArray  # (P,) prompts sampled this step
    explored: BoolArray  # (P,) the selected prompts chosen by exploration, not by score
    mean_score: FloatArray  # (P,) m(1 − m), the score at the belief mean
    prior: FloatArray  # (P,) V on the reward scale
    reward_range: RewardRange
    realised: FloatArray | None = None  # (P,) realised signal per prompt (NaN where not drawn); None before the draw


@dataclass(frozen=True, kw_only=True, slots=True)
class PriorSelect:
    r"""Prior-driven prompt selection: the top-``batch_size`` pool prompts by predicted outcome variance, ``k`` each.

    Belief per prompt (see :func:`prior_belief`): p ~ Beta(p_V·n0 + α₀, (1 − p_V)·n0 + α₀) with p_V the prior's pass
    rate and n0 its pseudo-count (``pool.n0``; ``default_n0`` when the caller gives none). Score (``"variance"``):

        s = p̃(1 − p̃),   p̃ ~ Beta(α, β) from ``pool.rng`` (``thompson=True``)   or   p̃ = m (``thompson=False``)

    Why this score: for k ≥ 2 with a group-mean baseline the expected squared advantage per rollout is
    4·p(1 − p)·(k − 1)/k on ±1 rewards, and for k = 1 against an exact prior baseline it is E[(r − V)²] = 4·p(1 − p):
    at every k the signal is p(1 − p) times a constant, so ranking by p(1 − p) is the same rule for every k.
    Thompson sampling (MoPPS) turns the belief's spread into exploration: a prompt with a saturated mean but few
    pseudo-rollouts (small n0) sometimes draws a p̃ near 1/2 and is re-tested; one the prior is sure about is not.

    Selection: with B' = min(batch_size, P) and n_e = min(⌊explore_frac·B'⌋, P − B'), the B' − n_e highest scores
    are taken (ties broken by ``pool.rng``), and n_e more uniformly at random among the P − B' candidates outside
    the top-B' set, so a prompt the prior judges saturated is re-tested as the policy moves. One round of k
    rollouts each; every sampled prompt enters the loss. Keeps no state across steps. The prompts not selected are
    reported as ``Finish.passed``: v05's trainer drops them for the epoch (``allocator.rejects``), so each step's
    pool is fresh prompts, as in DPS and MoPPS, instead of last step's rejects.

        rollouts = min(batch_size, P) · k   (exactly)

    Degenerate cases: n0 = 0 gives Beta(α₀, α₀) for every prompt (the prior is ignored: with ``thompson=False`` all
    scores tie and the selection is uniform via the rng); P ≤ batch_size takes the whole pool (nothing explored);
    a prior at 0 or 1 with a large n0 scores ≈ 0 and is only reached through exploration.

    Statistics (``Allocation.stats``; signals in ±1 reward-variance units, 4·p(1 − p), so they compare):
    ``predicted_signal`` = mean over the selected prompts of 4·m(1 − m) (the belief mean, not the draw);
    ``realised_signal`` = for k ≥ 2, the mean over the selected prompts of the unbiased within-group variance
    Σ(r − r̄)²/(k − 1) of the ±1 rewards (4·p̂(1 − p̂)·k/(k − 1) for binary rewards; its expectation is 4·p(1 − p),
    so it matches ``predicted_signal`` when the belief is calibrated); for k = 1, the mean of (r − V)² in ±1 space,
    whose expectation is 4·p(1 − p) + (μ − V)²: it overstates the signal by the prior's squared error;
    ``selected_prior_mean`` and ``pool_prior_mean`` (V on the reward scale); ``explored`` (n_e).

    Needs a prior (``allocate(..., prior=...)``).

    References: GRESO, Zheng et al. (2025) "Act Only When It Pays: Efficient Reinforcement Learning for LLM Reasoning
    via Selective Rollouts", arXiv:2506.02177 (skip prompts predicted to give zero-variance groups); MoPPS, Qu et
    al. (2025) arXiv:2507.04632 (Thompson sampling over Beta posteriors of pass rates); DPS, arXiv:2603.10887
    (select a batch from a larger candidate pool before any rollout).
    """

    k: int = 1
    """rollouts per selected prompt (the base group size; ≥ 1)."""
    batch_size: int = 32
    """B, prompts to select (they all reach the loss)."""
    score: Score = "variance"
    """how a prompt is scored: ``"variance"``, p̃(1 − p̃) (see the class docstring)."""
    thompson: bool = True
    """score at a draw p̃ ~ Beta(α, β) from the step's rng (True) or at the belief mean m (False)."""
    explore_frac: float = 0.05
    """share of the batch, n_e = ⌊explore_frac·B⌋, drawn uniformly from the candidates outside the top-B set
    (in [0, 1); 0.05 re-tests ~1 in 20 prompts the score would skip, at the cost of 5% of the batch)."""
    default_n0: float = 4.0
    """the prior's pseudo-count when ``allocate`` is given no n0 (≥ 0; 4 ≈ the prior is worth a group of 4)."""
    alpha0: float = 0.5
    """α₀ > 0 added to both Beta parameters, so n0 = 0 or a prior at 0/1 still gives a proper belief."""

    def candidate_pool(self, batch_size: int) -> int:
        """Prompts a step's candidates come from: four batches, from which it selects ``batch_size``."""
        return 4 * batch_size

    def __post_init__(self) -> None:
        check_int(self.k, "k", 1)
        check_int(self.batch_size, "batch_size", 1)
        if self.score != "variance":
            raise ValueError(f"unknown score {self.score!r}; valid: variance")
        if not isinstance(self.thompson, (bool, np.bool_)):
            raise ValueError(f"thompson must be True or False, got {self.thompson!r}")
        if isinstance(self.explore_frac, bool) or not (0.0 <= self.explore_frac < 1.0):
            raise ValueError(f"explore_frac must lie in [0, 1), got {self.explore_frac!r}")
        if isinstance(self.default_n0, bool):
            raise ValueError(f"default_n0 must be a number >= 0, got {self.default_n0!r}")
        check_positive(self.default_n0, "default_n0", strict=False)
        check_positive(self.alpha0, "alpha0")

    def init(self, pool: Pool, state: Any) -> _SelectRound:  # noqa: D102
        if pool.prior is None:
            raise ValueError("prior_select needs a prior: pass allocate(..., prior=...) with one value per pool prompt")
        n = pool.n_prompts
        n0 = pool.n0 if pool.n0 is not None else self.default_n0
        belief = prior_belief(to_pass_rate(pool.prior, pool.reward_range), n0, alpha0=self.alpha0)
        m = belief.mean  # (P,)
        p_tilde = pool.rng.beta(belief.alpha, belief.beta) if self.thompson else m  # (P,)
        score = p_tilde * (1.0 - p_tilde)  # (P,) s = p̃(1 − p̃)
        order = np.lexsort((pool.rng.random(n), -score))  # score descending, ties by the rng
        b = min(self.batch_size, n)
        n_explore = min(int(np.floor(self.explore_frac * b)), n - b)
        selected = np.zeros(n, bool)
        selected[order[: b - n_explore]] = True
        explored = np.zeros(n, bool)
        if n_explore > 0:
            explored[pool.rng.choice(order[b:], size=n_explore, replace=False)] = True
        selected |= explored
        return _SelectRound(selected, explored, m * (1.0 - m), pool.prior, pool.reward_range)

    def ask(self, s: _SelectRound) -> IntArray:  # noqa: D102
        if s.realised is not None:
            return np.zeros(len(s.selected), np.int64)
        return np.where(s.selected, self.k, 0).astype(np.int64)

    def tell(self, s: _SelectRound, draw: Draw) -> _SelectRound:  # noqa: D102
        n = len(s.selected)
        r_pm1 = to_pm1(draw.rewards, s.reward_range)  # (N,)
        if self.k >= 2:
            realised = segment_var(r_pm1, draw.prompt, n, ddof=1)  # (P,) unbiased; NaN where not drawn
        else:
            v_pm1 = to_pm1(s.prior, s.reward_range)  # (P,)
            realised = segment_mean((r_pm1 - v_pm1[draw.prompt]) ** 2, draw.prompt, n)  # (P,) (r − V)²
        return replace(s, realised=realised)

    def finish(self, s: _SelectRound) -> Finish:  # noqa: D102
        sel = s.selected
        realised = float(np.mean(s.realised[sel])) if s.realised is not None else float("nan")
        stats = {
            "predicted_signal": float(np.mean(4.0 * s.mean_score[sel])),
            "realised_signal": realised,
            "selected_prior_mean": float(np.mean(s.prior[sel])),
            "pool_prior_mean": float(np.mean(s.prior)),
            "explored": int(s.explored.sum()),
        }
        return Finish(sel.copy(), None, stats, passed=~sel)


__all__ = ["PriorSelect", "Score", "prior_belief"]
