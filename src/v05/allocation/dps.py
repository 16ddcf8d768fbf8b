r"""DPS: pre-rollout prompt selection with a 3-state hidden Markov model per prompt (numpy only).

Each prompt has a solving state z ∈ {0 = unsolved, 1 = partially solved, 2 = solved}, a belief π (3,) over its next
state, a *source* distribution σ (3,) over its state at the last step, and Dirichlet transition pseudo-counts
α (3, 3); P = α / colsum(α) is the expected transition matrix (column j: the next-state distribution from state j).
After k rollouts the state is observed exactly (success rate 0 → 0, 1 → 2, else 1; one-hot e). Per step:

    selected:    ξ = (e ⊗ σ) ∘ P / Σ(e ⊗ σ) ∘ P,   α ← λ·α + (1 − λ)·α₀ + ξ,   π ← P(α) e,   σ ← e
    unselected:  α ← λ·α + (1 − λ)·α₀,   π ← P(α) π,   σ ← π (the belief before this step's propagation)

The transition is credited from σ, the prompt's *last observed* state (or its propagated belief when it was not
selected), to the state observed now — as the DPS code does (``pis_before``), not from the predicted belief π.
An unseen prompt has α = α₀, π = σ = uniform.

Deviations from the DPS code (``recipe/dps/task_sampler.py``): only prompts that have been selected at least once
are stored (an unseen prompt is uniform and stays so under α₀ = ones); the candidate pool is whatever ``allocate``
is given (DPS draws ``candidate_ratio × B`` prompts itself; the prompts it does not select are reported as
``Finish.passed``, so v05's trainer drops them for the epoch as DPS's dataloader does); only the ``topk`` variant
and the all-ones α₀.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from v05._checks import RewardRange, check_int
from v05._types import BoolArray, FloatArray, IntArray
from v05.allocation.driver import Draw, Finish, Pool, require_keys
from v05.allocation.keyed import find, upsert
from v05.rewards import to_pass_rate

UNSOLVED, PARTIAL, SOLVED = 0, 1, 2


def transition_matrix(alpha: FloatArray) -> FloatArray:
    """Expected transition matrices P = α / colsum(α), shape (P, 3, 3); P[:, i, j] = Pr(next = i | now = j)."""
    return alpha / alpha.sum(axis=1, keepdims=True)


def hmm_update(
    alpha: FloatArray, source: FloatArray, observed: IntArray, *, lambda_: float, alpha0: float = 1.0
) -> tuple[FloatArray, FloatArray]:
    r"""One DPS step for prompts whose state was observed: learn the transition, predict the next belief.

        ξ = (e ⊗ σ) ∘ P / Σ_ij (e ⊗ σ) ∘ P,   α' = λ·α + (1 − λ)·α₀ + ξ,   π' = P(α') e

    The new source is e itself (the caller stores it).

    Args:
        alpha: (P, 3, 3) Dirichlet transition counts (column j: from state j).
        source: (P, 3) σ, the distribution of the prompt's state at its last step: one-hot of the last observed
            state, the propagated belief if it was not selected since, uniform for an unseen prompt.
        observed: (P,) observed state in {0, 1, 2}.
        lambda_: decay λ in (0, 1].
        alpha0: the Dirichlet prior count (all entries).

    Returns:
        ``(alpha' (P, 3, 3), belief' (P, 3))``.

    Degenerate case: σ with zero mass where P is positive cannot zero the normaliser with α₀ > 0 (P > 0 everywhere
    and σ is a distribution).

    References: DPS, arXiv:2603.10887; ``maoyixiu/DPS`` ``BayesianHMMSampler.update_transition_params`` /
    ``train`` (source ``pis_before``).
    """
    p = transition_matrix(alpha)  # (P, 3, 3)
    e = np.eye(3)[observed]  # (P, 3) one-hot
    xi = e[:, :, None] * source[:, None, :] * p  # (P, 3, 3): ξ_ij ∝ e_i σ_j P_ij
    xi = xi / xi.sum(axis=(1, 2), keepdims=True)
    alpha_new = lambda_ * alpha + (1.0 - lambda_) * alpha0 + xi
    belief_new = np.einsum("pij,pj->pi", transition_matrix(alpha_new), e)  # (P, 3) = P e
    return alpha_new, belief_new


def hmm_propagate(
    alpha: FloatArray, belief: FloatArray, *, lambda_: float, alpha0: float = 1.0
) -> tuple[FloatArray, FloatArray]:
    """One DPS step for unselected prompts: α ← λα + (1 − λ)α₀, π ← P(α) π; shapes (P, 3, 3), (P, 3)."""
    alpha_new = lambda_ * alpha + (1.0 - lambda_) * alpha0
    return alpha_new, np.einsum("pij,pj->pi", transition_matrix(alpha_new), belief)


@dataclass(frozen=True, slots=True)
class DpsState:
    """DPS's per-prompt HMM state across steps (a value passed in and returned).

    Attributes:
        keys: (S,) sorted keys of the prompts selected at least once.
        alpha: (S, 3, 3) Dirichlet transition counts.
        belief: (S, 3) π, predicted state distribution for the next step.
        source: (S, 3) σ, distribution of the state at the last step (one-hot once observed); the source of the
            next transition credited (see the module docstring).
    """

    keys: np.ndarray
    alpha: FloatArray
    belief: FloatArray
    source: FloatArray

    @classmethod
    def empty(cls) -> DpsState:
        """A state with no prompts."""
        return cls(np.array([], np.int64), np.zeros((0, 3, 3)), np.zeros((0, 3)), np.zeros((0, 3)))

    def to_dict(self) -> dict[str, object]:
        """JSON-serialisable form (never pickle)."""
        return {n: getattr(self, n).tolist() for n in ("keys", "alpha", "belief", "source")}

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> DpsState:
        """Inverse of :meth:`to_dict`."""
        keys = np.asarray(d["keys"])
        if keys.size == 0:
            return cls.empty()
        arrays = [np.asarray(d[n], np.float64).reshape(shape) for n, shape in
                  (("alpha", (-1, 3, 3)), ("belief", (-1, 3)), ("source", (-1, 3)))]  # fmt: skip
        return cls(keys, *arrays)

    def lookup(self, keys: np.ndarray, alpha0: float) -> tuple[FloatArray, FloatArray, FloatArray]:
        """(α, π, σ) for each key; unknown keys get α₀·ones and the uniform belief and source."""
        n = len(keys)
        alpha, belief, source = np.full((n, 3, 3), float(alpha0)), np.full((n, 3), 1 / 3), np.full((n, 3), 1 / 3)
        pos, found = find(self.keys, keys)
        alpha[found], belief[found], source[found] = (
            self.alpha[pos[found]],
            self.belief[pos[found]],
            self.source[pos[found]],
        )
        return alpha, belief, source


@dataclass(frozen=True, slots=True)
class _DpsRound:
    """DPS round state: the selected prompts, the beliefs used, and the observed states once drawn."""

    keys: np.ndarray  # (P,)
    selected: BoolArray  # (P,)
    alpha: FloatArray  # (P, 3, 3) for pool prompts
    belief: FloatArray  # (P, 3) π, used for selection
    source: FloatArray  # (P, 3) σ, the source of the transition credited this step
    observed: IntArray | None  # (P,) observed state (selected prompts only); None before the draw
    state: DpsState
    reward_range: RewardRange


@dataclass(frozen=True, kw_only=True, slots=True)
class DPS:
    r"""DPS: take the top-``batch_size`` pool prompts by predicted P(partially solved), ``k`` rollouts each.

    Selection happens before any rollout, from the HMM beliefs carried in ``Allocation.state`` (a
    :class:`DpsState` keyed by ``pool.keys``); unknown prompts have the uniform belief; ties are broken by the
    step's rng. One round; every selected prompt enters the loss; then the HMM is updated (see the module
    docstring) for the selected prompts and propagated for every other stored prompt.

        rollouts = min(batch_size, P) · k

    References: Dynamic Prompt Selection (DPS, ICLR 2026), arXiv:2603.10887; code ``maoyixiu/DPS``
    (``BayesianHMMSampler``, λ = ``hmm_transition_decay_ratio``: 0.7 math, 0.5 Countdown).
    """

    k: int = 8
    """rollouts per selected prompt (the base group size n)."""
    batch_size: int = 32
    """B, prompts to select (they all reach the loss)."""
    lambda_: float = 0.7
    """transition-count decay λ in (0, 1]."""
    alpha0: float = 1.0
    """Dirichlet prior count for every transition (> 0; DPS's all-ones prior)."""

    def candidate_pool(self, batch_size: int) -> int:
        """Prompts a step's candidates come from: four batches, from which it selects ``batch_size``."""
        return 4 * batch_size

    def __post_init__(self) -> None:
        check_int(self.k, "k", 1)
        check_int(self.batch_size, "batch_size", 1)
        if not 0.0 < self.lambda_ <= 1.0:
            raise ValueError(f"lambda_ must lie in (0, 1], got {self.lambda_}")
        if not (np.isfinite(self.alpha0) and self.alpha0 > 0):
            raise ValueError(f"alpha0 must be > 0 and finite, got {self.alpha0}")

    def init(self, pool: Pool, state: Any) -> _DpsRound:  # noqa: D102
        if state is None:
            state = DpsState.empty()
        if not isinstance(state, DpsState):
            raise ValueError(f"dps state must be the DpsState it returned (or None), got {type(state).__name__}")
        keys = require_keys(pool, "dps")
        alpha, belief, source = state.lookup(keys, self.alpha0)
        order = np.lexsort((pool.rng.random(pool.n_prompts), -belief[:, PARTIAL]))  # P(partial) desc, rng ties
        selected = np.zeros(pool.n_prompts, bool)
        selected[order[: self.batch_size]] = True
        return _DpsRound(keys, selected, alpha, belief, source, None, state, pool.reward_range)

    def ask(self, s: _DpsRound) -> IntArray:  # noqa: D102
        return np.where(s.selected & (s.observed is None), self.k, 0).astype(np.int64)

    def tell(self, s: _DpsRound, draw: Draw) -> _DpsRound:  # noqa: D102
        n = len(s.selected)
        success = to_pass_rate(draw.rewards, s.reward_range)  # (N,) success in [0, 1]
        rate = np.bincount(draw.prompt, weights=success, minlength=n) / np.maximum(
            np.bincount(draw.prompt, minlength=n), 1
        )  # (P,) ŝ
        observed = np.where(rate <= 0.0, UNSOLVED, np.where(rate >= 1.0, SOLVED, PARTIAL))
        return replace(s, observed=observed)

    def finish(self, s: _DpsRound) -> Finish:  # noqa: D102
        sel = np.flatnonzero(s.selected)
        observed = s.observed if s.observed is not None else np.full(len(s.selected), PARTIAL)
        alpha_sel, belief_sel = hmm_update(
            s.alpha[sel], s.source[sel], observed[sel], lambda_=self.lambda_, alpha0=self.alpha0
        )
        source_sel = np.eye(3)[observed[sel]]  # (S', 3) the observed state is the next transition's source
        # every stored prompt is propagated one step (its source becomes its belief before the propagation);
        # the selected ones are then overwritten by their update
        alpha_all, belief_all = hmm_propagate(s.state.alpha, s.state.belief, lambda_=self.lambda_, alpha0=self.alpha0)
        keys, (alpha, belief, source) = upsert(
            s.state.keys,
            (alpha_all, belief_all, s.state.belief),
            s.keys[sel],
            (alpha_sel, belief_sel, source_sel),
        )
        stats = {"mean_p_partial_selected": float(s.belief[sel, PARTIAL].mean()) if sel.size else float("nan")}
        return Finish(s.selected.copy(), DpsState(keys, alpha, belief, source), stats, passed=~s.selected)


__all__ = ["DPS", "DpsState", "hmm_propagate", "hmm_update", "transition_matrix"]
