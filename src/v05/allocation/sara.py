r"""SARA: sequential adaptive rollout allocation with a Beta posterior and two thresholds (reconstructed).

Each pool prompt has a Beta(a, b) belief over its pass rate p, from a discounted per-prompt history
(:class:`v05.allocation.posterior.BetaHistory`, carried across steps in ``Allocation.state``), updated within the
step by its probe outcomes (s successes of m). The closed-form probability that a group of G is *effective*
(mixed rewards):

    m = 0:              P_eff = 1 − E[p^G] − E[(1−p)^G]
    m probes all 1:     P_eff = 1 − E'[p^(G−m)]          (a' = a + s, b' = b + m − s)
    m probes all 0:     P_eff = 1 − E'[(1−p)^(G−m)]
    mixed probes:       P_eff = 1,          E[p^k] = Π_{i<k} (a + i)/(a + b + i)

Deviations: SARA's paper is not public beyond its abstract; this follows the reconstruction in
``methods-siblings.md`` §6.2 (SPEC §5). Abandoned probe rollouts are counted as spent and not kept; they still
update the history. The pool ``prior`` is not used (SARA's belief comes from history only).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from v05._checks import as_float_1d, check_int, check_probability
from v05._types import BoolArray, FloatArray, IntArray
from v05.allocation.driver import Draw, Finish, Order, Pool, check_order, prompt_order, require_keys
from v05.allocation.posterior import BetaHistory, BetaPosterior

FRESH, PROBING, COMMITTED, ABANDONED = 0, 1, 2, 3
"""Per-prompt status within a step."""


def p_eff(belief: BetaPosterior, successes: object, trials: object, *, group_size: int) -> FloatArray:
    r"""Probability that a group of ``group_size`` rollouts is mixed, given the belief and m probes (G,).

        m = 0:  1 − E[p^G] − E[(1−p)^G];   all-success: 1 − E'[p^(G−m)];   all-failure: 1 − E'[(1−p)^(G−m)];
        mixed (0 < s < m): 1;   with E' under Beta(a + s, b + m − s).

    Degenerate case: m ≥ G with agreeing probes gives 0 (the group is complete and all-equal).

    Args:
        belief: (G,) Beta(a, b) beliefs before the probes.
        successes: (G,) s, successes among the probes (integers in [0, m]).
        trials: (G,) m, probe rollouts drawn (integers ≥ 0).
        group_size: G, the target group size (≥ 2).

    Returns:
        (G,) P_eff in [0, 1].

    Raises:
        ValueError: shapes differ, m < 0, s outside [0, m], G < 2.

    >>> p_eff(BetaPosterior(np.ones(3), np.ones(3)), [0, 2, 1], [0, 2, 2], group_size=8).round(3)
    array([0.778, 0.667, 1.   ])
    """
    check_int(group_size, "group_size", 2)
    s = as_float_1d(successes, "successes", allow_empty=True)
    m = as_float_1d(trials, "trials", allow_empty=True)
    if not (s.shape == m.shape == belief.alpha.shape):
        raise ValueError(f"successes {s.shape}, trials {m.shape} and belief {belief.alpha.shape} must match")
    if np.any(m < 0) or np.any(s < 0) or np.any(s > m):
        raise ValueError("trials must be >= 0 and successes must lie in [0, trials]")
    return _p_eff(belief.alpha, belief.beta, s, m, group_size)


def _p_eff(a: FloatArray, b: FloatArray, s: FloatArray, m: FloatArray, group_size: int) -> FloatArray:
    """P_eff on trusted (G,) inputs (see :func:`p_eff`)."""
    post, flip = BetaPosterior(a + s, b + m - s), BetaPosterior(b + m - s, a + s)  # flip: belief over 1 − p
    rest = np.maximum(group_size - m, 0)  # (G,) rollouts still to come
    before = 1.0 - post.moment(group_size) - flip.moment(group_size)
    all_success = 1.0 - post.moment(rest)
    all_failure = 1.0 - flip.moment(rest)
    agree = np.where(s >= m, all_success, all_failure)
    return np.clip(np.where(m == 0, before, np.where((s > 0) & (s < m), 1.0, agree)), 0.0, 1.0)


@dataclass(frozen=True, slots=True)
class _SaraRound:
    """SARA round state: beliefs and probe statistics of every pool prompt, and the next draw."""

    keys: np.ndarray  # (P,) stable prompt keys
    history: BetaHistory  # the state passed in (updated in finish)
    alpha: FloatArray  # (P,) history belief before this step's probes
    beta: FloatArray
    order: IntArray  # (P,) order in which fresh prompts are taken
    taken: int  # prompts of ``order`` already started
    status: IntArray  # (P,) FRESH / PROBING / COMMITTED / ABANDONED
    m: IntArray  # (P,) rollouts drawn
    succ: FloatArray  # (P,) successes
    ask: IntArray  # (P,) the next draw (all zero: done)
    spent: int  # rollouts drawn so far
    top: float  # the success reward (1 on both scales); the bottom is −1 (pm1) or 0 (01)
    bottom: float


@dataclass(frozen=True, kw_only=True, slots=True)
class SARA:
    r"""SARA: probe prompts, commit likely-mixed groups, abandon saturated ones, refill from the pool.

    Up to ``wave_size`` prompts (and never more than ``batch_size`` − committed) are in flight. A fresh prompt is
    probed with ``m0`` rollouts; after each probe round its P_eff (:func:`p_eff`) decides: ≥ ``tau_hi`` → commit
    (draw the rest up to ``group_size`` next round; mixed probes commit at once); ≤ ``tau_lo`` → abandon;
    otherwise probe one more, abandoning at ``m_max``. Freed slots are refilled with fresh pool prompts (pool order
    or an rng permutation). The step ends when ``batch_size`` groups are committed, the pool is used up, or the
    rollout ``budget`` would be exceeded: requests are granted in the order commits, running probes, new probes;
    a commit or probe that no longer fits is abandoned, so rollouts ≤ budget always.

        rollouts ≤ min(budget, P · group_size);   kept = committed prompts (≤ batch_size)

    Rewards must be binary (the top or bottom of the reward range). A committed group may still turn out all-equal
    (P_eff < 1); it is kept. State: the :class:`~v05.allocation.posterior.BetaHistory` keyed by ``pool.keys``; at the
    end of the step every sampled prompt's s of m is added with discount ``lambda_`` (``decay="visit"``).

    References: SARA (sequential adaptive rollout allocation; abstract only, reconstructed in
    ``methods-siblings.md`` §6.2); MoPPS, Qu et al. (2025) arXiv:2507.04632 (the discounted Beta history).
    """

    group_size: int = 8
    """G, the rollouts of a committed group (the base group size)."""
    batch_size: int = 32
    """B, groups to commit (prompts that should reach the loss)."""
    m0: int = 2
    """rollouts of the first probe of a prompt (1 ≤ m0 ≤ m_max)."""
    m_max: int = 4
    """probe rollouts at most before abandoning (m_max ≤ group_size)."""
    tau_lo: float = 0.4
    """abandon when P_eff ≤ tau_lo (history Beta(8, 1) or stronger abandons after two successes: P_eff ≤ 0.375)."""
    tau_hi: float = 0.7
    """commit when P_eff ≥ tau_hi (tau_lo < tau_hi); under a flat prior two agreeing probes give 0.667 < 0.7, so
    only mixed probes commit until the history is informative."""
    budget: int | None = None
    """rollouts per step at most (None: no cap beyond the pool)."""
    wave_size: int | None = None
    """prompts probed at once (None: batch_size); smaller waves waste less but take more rounds."""
    lambda_: float = 0.7
    """history discount λ in (0, 1] (1 keeps all evidence)."""
    alpha0: float = 1.0
    """Beta prior α₀ of unseen prompts (and the discount target)."""
    beta0: float = 1.0
    """Beta prior β₀."""
    order: Order = "pool"
    """``"pool"``: fresh prompts in pool order; ``"random"``: in a permutation drawn from the step's rng."""

    def candidate_pool(self, batch_size: int) -> int:
        """Prompts a step's candidates come from: four batches, from which it selects ``batch_size``."""
        return 4 * batch_size

    def __post_init__(self) -> None:
        check_int(self.group_size, "group_size", 2)
        check_int(self.batch_size, "batch_size", 1)
        check_int(self.m0, "m0", 1)
        check_int(self.m_max, "m_max", 1)
        if not self.m0 <= self.m_max <= self.group_size:
            raise ValueError(f"need 1 <= m0 ({self.m0}) <= m_max ({self.m_max}) <= group_size ({self.group_size})")
        check_probability(self.tau_lo, "tau_lo")
        check_probability(self.tau_hi, "tau_hi")
        if not self.tau_lo < self.tau_hi:
            raise ValueError(f"tau_lo ({self.tau_lo}) must be < tau_hi ({self.tau_hi})")
        if self.budget is not None:
            check_int(self.budget, "budget", 1, hint=" (or None for no cap)")
        if self.wave_size is not None:
            check_int(self.wave_size, "wave_size", 1, hint=" (or None for batch_size)")
        if not 0.0 < self.lambda_ <= 1.0:
            raise ValueError(f"lambda_ must lie in (0, 1], got {self.lambda_}")
        if not (self.alpha0 > 0 and self.beta0 > 0):
            raise ValueError(f"alpha0 and beta0 must be > 0, got {self.alpha0}, {self.beta0}")
        check_order(self.order)

    def init(self, pool: Pool, state: Any) -> _SaraRound:  # noqa: D102
        if state is None:
            state = BetaHistory.empty(self.alpha0, self.beta0)
        if not isinstance(state, BetaHistory):
            raise ValueError(f"sara state must be the BetaHistory it returned (or None), got {type(state).__name__}")
        state.check_prior(self.alpha0, self.beta0)
        keys = require_keys(pool, "sara")
        alpha, beta = state.lookup(keys)
        n = pool.n_prompts
        bottom = -1.0 if pool.reward_range == "pm1" else 0.0
        s = _SaraRound(
            keys=keys, history=state, alpha=alpha, beta=beta, order=prompt_order(pool, self.order), taken=0,
            status=np.zeros(n, np.int64), m=np.zeros(n, np.int64), succ=np.zeros(n), ask=np.zeros(n, np.int64),
            spent=0, top=1.0, bottom=bottom,
        )  # fmt: skip
        return self._plan(s)

    def ask(self, s: _SaraRound) -> IntArray:  # noqa: D102
        return s.ask

    def tell(self, s: _SaraRound, draw: Draw) -> _SaraRound:  # noqa: D102
        r = draw.rewards
        if np.any((r != s.top) & (r != s.bottom)):
            raise ValueError(f"sara needs binary rewards ({s.bottom:g} or {s.top:g}); got other values")
        n = len(s.m)
        m = s.m + np.bincount(draw.prompt, minlength=n)  # (P,)
        succ = s.succ + np.bincount(draw.prompt, weights=(r == s.top).astype(np.float64), minlength=n)
        status = s.status.copy()
        probing = np.flatnonzero(status == PROBING)  # every probing prompt was drawn this round
        peff = _p_eff(s.alpha[probing], s.beta[probing], succ[probing], m[probing].astype(np.float64), self.group_size)
        commit = peff >= self.tau_hi
        abandon = ~commit & ((peff <= self.tau_lo) | (m[probing] >= self.m_max))
        status[probing[commit]] = COMMITTED
        status[probing[abandon]] = ABANDONED
        new_commit = np.zeros(n, bool)
        new_commit[probing[commit]] = True
        s = replace(s, status=status, m=m, succ=succ, spent=s.spent + len(r))
        return self._plan(s, new_commit)

    def _plan(self, s: _SaraRound, new_commit: BoolArray | None = None) -> _SaraRound:
        """Next draw: fills of new commits, then running probes, then refills, within the rollout budget."""
        status, m = s.status.copy(), s.m
        n = len(status)
        left = (self.budget if self.budget is not None else n * self.group_size) - s.spent
        ask = np.zeros(n, np.int64)
        if new_commit is not None:
            fills = np.flatnonzero(new_commit)
            need = self.group_size - m[fills]  # (C,) ≥ 0
            ok = np.cumsum(need) <= left
            ask[fills[ok]] = need[ok]
            status[fills[~ok]] = ABANDONED  # the budget cannot complete the group
            left -= int(need[ok].sum())
        running = np.flatnonzero(status == PROBING)
        ok = np.arange(1, len(running) + 1) <= left
        ask[running[ok]] = 1
        status[running[~ok]] = ABANDONED
        left -= int(ok.sum())
        n_committed, n_probing = int(np.sum(status == COMMITTED)), int(ok.sum())
        slots = min(self.wave_size or self.batch_size, self.batch_size - n_committed) - n_probing
        n_new = max(0, min(slots, left // self.m0, n - s.taken))
        fresh = s.order[s.taken : s.taken + n_new]
        status[fresh] = PROBING
        ask[fresh] = self.m0
        return replace(s, taken=s.taken + n_new, status=status, ask=ask)

    def finish(self, s: _SaraRound) -> Finish:  # noqa: D102
        seen = np.flatnonzero(s.m > 0)
        history = s.history.update(s.keys[seen], s.succ[seen], s.m[seen].astype(np.float64), lambda_=self.lambda_)
        kept = s.status == COMMITTED
        stats = {
            "rollouts": s.spent,
            "committed": int(kept.sum()),
            "abandoned": int(np.sum(s.status == ABANDONED)),
            "probed": int(seen.size),
        }
        return Finish(kept, history, stats)


__all__ = ["SARA", "p_eff"]
