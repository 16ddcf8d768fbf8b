r"""GRESO: skip prompts before any rollout when their recent groups had zero variance (numpy only).

Each prompt keeps two streaks: c, its consecutive all-correct groups, and w, its consecutive all-wrong groups, both
ending at its last sampled group (so at most one is non-zero). Two exploration probabilities ρ_c, ρ_w are shared by
all prompts. Per step, over the sampled groups only:

    skip probability   q = 1 − max(ρ_c^c, κ)  if c > 0,   1 − max(ρ_w^w, κ)  if w > 0,   0 otherwise
    streaks            c ← c + 1 if the group is all correct else 0,   w ← w + 1 if it is all wrong else 0
    adaptation         ρ ← max(ρ − δ, ρ_min) if f ≥ t  else  min(ρ + δ, ρ_max)   (f: the step's share of
                       all-correct groups for ρ_c, all-wrong for ρ_w; t: its target)

Defaults are GRESO's (``Infini-AI-Lab/GRESO``, ``train-scripts/*_greso.sh`` and ``verl/trainer/ppo/ray_trainer.py``):
ρ_c = ρ_w = 0.5 at the start, κ = 0.01, δ = 0.01, [ρ_min, ρ_max] = [0.05, 0.95], targets t_c = 0.25/3 and
t_w = 0.25·2/3 (``target_zero_variance = 0.25``, two thirds of it for all-wrong groups).

Deviations from the GRESO code: all-correct / all-wrong are exact (every reward at the top / bottom of the reward
range) instead of its mean-reward thresholds 0.98 / 0.11 on its {0, 0.1, 1} reward (the same test for binary rewards
and its k = 8); the walk stops at ``batch_size`` unskipped prompts and refills from the skipped ones when the pool
runs out, instead of filtering a whole sampling batch and topping up with DAPO's post-rollout filter (every sampled
group enters the loss here); one uniform per prompt (GRESO draws once per applicable rule, and at most one applies);
the skipped prompts are reported as ``Finish.passed`` (v05's trainer drops them for the epoch, as GRESO's
filtered batch does; the prompts after the walk's end go back to the queue); the adaptation is frozen while no pool
prompt has been sampled before (GRESO's ``epoch > 0``: in a first pass over
the data no prompt has a history).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from v05._checks import RewardRange, check_int, check_probability
from v05._types import BoolArray, FloatArray, IntArray
from v05.allocation.driver import Draw, Finish, Pool, group_extremes, require_keys
from v05.allocation.keyed import find, upsert
from v05.rewards import to_pass_rate


def skip_probability(
    streak_correct: object,
    streak_wrong: object,
    *,
    p_explore_correct: float,
    p_explore_wrong: float,
    min_keep: float = 0.01,
) -> FloatArray:
    r"""GRESO's pre-rollout skip probability of each prompt from its zero-variance streaks.

        q = 1 − max(ρ_c^c, κ)  if c > 0,     q = 1 − max(ρ_w^w, κ)  if w > 0,     q = 0  if c = w = 0

    A fresh prompt (or one whose last group was mixed) is never skipped; every streak keeps a chance κ of being
    re-sampled, so a prompt the policy has started to solve (or to fail) is eventually tested again.

    Args:
        streak_correct: (P,) c ≥ 0, consecutive all-correct groups.
        streak_wrong: (P,) w ≥ 0, consecutive all-wrong groups (c·w = 0: the streaks end at the same group).
        p_explore_correct: ρ_c in [0, 1].
        p_explore_wrong: ρ_w in [0, 1].
        min_keep: κ in [0, 1], the keep probability's floor (0.01 in GRESO).

    Returns:
        (P,) q in [0, 1 − κ].

    Raises:
        ValueError: shapes differ, a streak is negative or not an integer, both streaks of a prompt are positive, or a
            probability lies outside [0, 1].

    References: GRESO, Zheng et al. (2025) "Act Only When It Pays: Efficient Reinforcement Learning for LLM Reasoning
    via Selective Rollouts", arXiv:2506.02177; ``Infini-AI-Lab/GRESO`` ``verl/trainer/ttis/presampling_selector.py``
    (``DataProfiler.easy_probabilistic_skip`` / ``hard_probabilistic_skip``).

    >>> skip_probability([0, 3, 0, 7], [0, 0, 2, 0], p_explore_correct=0.5, p_explore_wrong=0.5)
    array([0.   , 0.875, 0.75 , 0.99 ])
    """
    c, w = np.asarray(streak_correct), np.asarray(streak_wrong)
    if c.shape != w.shape or c.ndim != 1:
        raise ValueError(f"streak_correct {c.shape} and streak_wrong {w.shape} must be 1-D of the same shape")
    for arr, name in ((c, "streak_correct"), (w, "streak_wrong")):
        if arr.size and (arr.dtype.kind not in "iu" or arr.min() < 0):
            raise ValueError(f"{name} must hold integers >= 0, got dtype {arr.dtype}, min {arr.min()!r}")
    if np.any((c > 0) & (w > 0)):
        raise ValueError("a prompt cannot have both streaks positive (they end at the same group)")
    for value, name in ((p_explore_correct, "p_explore_correct"), (p_explore_wrong, "p_explore_wrong"),
                        (min_keep, "min_keep")):  # fmt: skip
        check_probability(value, name)
    return _skip_probability(c, w, p_explore_correct, p_explore_wrong, min_keep)


def _skip_probability(c: IntArray, w: IntArray, p_c: float, p_w: float, min_keep: float) -> FloatArray:
    """The skip probability q on trusted (P,) streaks (see :func:`skip_probability`)."""
    keep = np.where(c > 0, np.float64(p_c) ** c, np.where(w > 0, np.float64(p_w) ** w, 1.0))  # (P,) ρ^streak
    return np.where((c > 0) | (w > 0), 1.0 - np.maximum(keep, min_keep), 0.0)


def adapt_explore(p: float, frac: float, *, target: float, step: float, p_min: float, p_max: float) -> float:
    r"""One step of GRESO's exploration-probability controller.

        ρ' = max(ρ − δ, ρ_min)  if f ≥ t   (too many zero-variance groups: skip more)
        ρ' = min(ρ + δ, ρ_max)  if f < t   (too few: explore more)

    Degenerate case: f = t counts as too many (GRESO's ``>=``); δ = 0 freezes ρ.

    Args:
        p: ρ, the current exploration probability.
        frac: f, this step's share of sampled groups of the controlled kind (all correct, or all wrong).
        target: t, the share to steer towards.
        step: δ ≥ 0.
        p_min: ρ_min, the lower bound.
        p_max: ρ_max, the upper bound.

    Returns:
        ρ'.

    References: ``Infini-AI-Lab/GRESO`` ``verl/trainer/ppo/ray_trainer.py`` (``RayPPOTrainer.fit``, "adjust
    exploration factor").

    >>> adapt_explore(0.5, 0.2, target=0.25 * 2 / 3, step=0.01, p_min=0.05, p_max=0.95)
    0.49
    """
    if frac >= target:
        return max(p - step, p_min)
    return min(p + step, p_max)


@dataclass(frozen=True, slots=True)
class GresoState:
    """GRESO's state across steps (a value passed in and returned).

    Attributes:
        keys: (S,) sorted keys of the prompts sampled at least once.
        streak_correct: (S,) c, consecutive all-correct groups ending at the prompt's last sampled group.
        streak_wrong: (S,) w, consecutive all-wrong groups (c·w = 0).
        p_explore_correct: ρ_c, the exploration probability of all-correct streaks.
        p_explore_wrong: ρ_w, the exploration probability of all-wrong streaks.
    """

    keys: np.ndarray
    streak_correct: IntArray
    streak_wrong: IntArray
    p_explore_correct: float
    p_explore_wrong: float

    @classmethod
    def empty(cls, p_explore_correct: float, p_explore_wrong: float) -> GresoState:
        """A state with no prompts and the given exploration probabilities."""
        none = np.zeros(0, np.int64)
        return cls(none, none, none.copy(), float(p_explore_correct), float(p_explore_wrong))

    def to_dict(self) -> dict[str, object]:
        """JSON-serialisable form (never pickle)."""
        return {
            "keys": self.keys.tolist(),
            "streak_correct": self.streak_correct.tolist(),
            "streak_wrong": self.streak_wrong.tolist(),
            "p_explore_correct": float(self.p_explore_correct),
            "p_explore_wrong": float(self.p_explore_wrong),
        }

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> GresoState:
        """Inverse of :meth:`to_dict`.

        Raises:
            ValueError: the arrays differ in length.
        """
        keys = np.asarray(d["keys"])
        c = np.asarray(d["streak_correct"], np.int64).reshape(-1)
        w = np.asarray(d["streak_wrong"], np.int64).reshape(-1)
        if not (len(keys) == len(c) == len(w)):
            raise ValueError(f"greso state: {len(keys)} keys but {len(c)} and {len(w)} streaks")
        if keys.size == 0:
            keys = np.zeros(0, np.int64)
        return cls(keys, c, w, float(d["p_explore_correct"]), float(d["p_explore_wrong"]))  # type: ignore[arg-type]

    def lookup(self, keys: np.ndarray) -> tuple[IntArray, IntArray, BoolArray]:
        """(c, w, known) for each key; unknown keys have c = w = 0."""
        pos, found = find(self.keys, keys)
        c, w = np.zeros(len(keys), np.int64), np.zeros(len(keys), np.int64)
        c[found], w[found] = self.streak_correct[pos[found]], self.streak_wrong[pos[found]]
        return c, w, found


@dataclass(frozen=True, slots=True)
class _GresoRound:
    """GRESO round state: the selection (made in init) and, once drawn, each prompt's extreme pass rates."""

    keys: np.ndarray  # (P,)
    selected: BoolArray  # (P,)
    streak_correct: IntArray  # (P,) c before this step
    streak_wrong: IntArray  # (P,) w before this step
    known: BoolArray  # (P,) the prompt has been sampled in an earlier step
    skipped: int  # prompts the walk passed over (skips honoured)
    filled: int  # skipped prompts taken back because the pool ran out
    passed: BoolArray  # (P,) the prompts the walk skipped and did not take back (the rest of the unsampled: unreached)
    state: GresoState
    reward_range: RewardRange
    lo: FloatArray | None = None  # (P,) lowest pass-rate-scale reward of the draw; None before it
    hi: FloatArray | None = None  # (P,) highest


@dataclass(frozen=True, kw_only=True, slots=True)
class GRESO:
    r"""GRESO: walk the pool in a random order, skip prompts with zero-variance streaks, sample the first B.

    The walk is one permutation of the pool drawn from ``pool.rng``; each prompt's skip is one uniform u from
    ``pool.rng`` against its :func:`skip_probability` q (skipped iff u < q). The first ``batch_size`` prompts not
    skipped get ``k`` rollouts each, in one round; every sampled prompt enters the loss. Then each sampled prompt's
    streaks are updated and ρ_c, ρ_w move one step δ towards their targets (see the module docstring).

        rollouts = min(batch_size, P) · k   (exactly)

    Degenerate cases: when fewer than B prompts survive the walk, the batch is filled with the skipped prompts in
    walk order (``filled`` counts them), so the batch never shrinks; P ≤ B samples the whole pool. A fresh prompt is
    never skipped. A group whose rewards are all equal but strictly inside the reward range (possible only with
    non-binary rewards) counts in ``zero_var_frac`` but resets both streaks, as GRESO's mean thresholds would.
    The adaptation is frozen on a step where no pool prompt is in the state (GRESO adapts only from its second
    epoch); with δ = 0 it is off.

    Statistics: ``skipped`` (skips honoured), ``filled``, ``p_explore_correct`` / ``p_explore_wrong`` (after this
    step's adaptation: the values the next step uses, as GRESO logs them), ``zero_var_frac``, ``all_correct_frac``
    and ``all_wrong_frac`` of the sampled groups.

    References: GRESO, Zheng et al. (2025) arXiv:2506.02177; code ``Infini-AI-Lab/GRESO``
    (``verl/trainer/ttis/presampling_selector.py``: ``DataProfiler.filter_examples_all_probabilistic``;
    ``verl/trainer/ppo/ray_trainer.py``: the targets in ``RayPPOTrainer.__init__``, the adaptation in ``fit``).
    """

    k: int = 8
    """rollouts per sampled prompt (≥ 2: a single rollout always looks zero-variance; GRESO uses 8)."""
    batch_size: int = 32
    """B, prompts to sample (they all reach the loss)."""
    p_explore_correct: float = 0.5
    """ρ_c at the start (GRESO's ``p_easy`` = 0.5 in its scripts); the state carries it afterwards."""
    p_explore_wrong: float = 0.5
    """ρ_w at the start (GRESO's ``p_hard`` = 0.5)."""
    target_correct: float = 0.25 / 3
    """t_c, target share of all-correct groups (GRESO: ``target_zero_variance`` 0.25, one third of it)."""
    target_wrong: float = 0.25 * 2 / 3
    """t_w, target share of all-wrong groups (two thirds of 0.25: hard prompts are explored more)."""
    adapt_step: float = 0.01
    """δ in [0, 1], the change of ρ per step (0 turns the adaptation off)."""
    p_explore_min: float = 0.05
    """ρ_min, the lower bound of ρ (GRESO's ``min_p``)."""
    p_explore_max: float = 0.95
    """ρ_max, the upper bound of ρ (GRESO's ``max_p``)."""
    min_keep: float = 0.01
    """κ, the floor of a streaked prompt's keep probability ρ^streak (so q ≤ 1 − κ)."""

    def candidate_pool(self, batch_size: int) -> int:
        """Prompts a step's candidates come from: four batches, from which it selects ``batch_size``."""
        return 4 * batch_size

    def __post_init__(self) -> None:
        check_int(self.k, "k", 2)
        check_int(self.batch_size, "batch_size", 1)
        for name in ("p_explore_correct", "p_explore_wrong", "target_correct", "target_wrong", "adapt_step",
                     "p_explore_min", "p_explore_max", "min_keep"):  # fmt: skip
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
                raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")
            check_probability(value, name)
        if not self.p_explore_min <= self.p_explore_max:
            raise ValueError(f"p_explore_min ({self.p_explore_min}) must be <= p_explore_max ({self.p_explore_max})")
        for name in ("p_explore_correct", "p_explore_wrong"):
            if not self.p_explore_min <= getattr(self, name) <= self.p_explore_max:
                raise ValueError(
                    f"{name} ({getattr(self, name)}) must lie in [p_explore_min, p_explore_max] = "
                    f"[{self.p_explore_min}, {self.p_explore_max}]"
                )

    def init(self, pool: Pool, state: Any) -> _GresoRound:  # noqa: D102
        if state is None:
            state = GresoState.empty(self.p_explore_correct, self.p_explore_wrong)
        if not isinstance(state, GresoState):
            raise ValueError(f"greso state must be the GresoState it returned (or None), got {type(state).__name__}")
        keys = require_keys(pool, "greso")
        c, w, known = state.lookup(keys)
        n = pool.n_prompts
        order = pool.rng.permutation(n)  # (P,) the walk
        u = pool.rng.random(n)  # (P,) one uniform per prompt, in walk order
        q = _skip_probability(c, w, state.p_explore_correct, state.p_explore_wrong, self.min_keep)  # (P,)
        skip = u < q[order]  # (P,) in walk order
        b = min(self.batch_size, n)
        free_rank = np.cumsum(~skip)  # (P,) unskipped prompts walked so far
        n_free = int(free_rank[-1])
        if n_free >= b:
            take = ~skip & (free_rank <= b)
            walked = int(np.searchsorted(free_rank, b)) + 1  # the walk stops at the b-th unskipped prompt
            skipped, filled = int(skip[:walked].sum()), 0
            passed_walk = skip & (np.arange(n) < walked)  # (P,) in walk order
        else:  # the pool ran out: the earliest-walked skipped prompts fill the batch
            filled = b - n_free
            take = ~skip | (np.cumsum(skip) <= filled)
            skipped = int(skip.sum()) - filled
            passed_walk = skip & ~take
        selected = np.zeros(n, bool)
        selected[order[take]] = True
        passed = np.zeros(n, bool)
        passed[order[passed_walk]] = True
        return _GresoRound(keys, selected, c, w, known, skipped, filled, passed, state, pool.reward_range)

    def ask(self, s: _GresoRound) -> IntArray:  # noqa: D102
        if s.lo is not None:
            return np.zeros(len(s.selected), np.int64)
        return np.where(s.selected, self.k, 0).astype(np.int64)

    def tell(self, s: _GresoRound, draw: Draw) -> _GresoRound:  # noqa: D102
        success = Draw(draw.prompt, to_pass_rate(draw.rewards, s.reward_range))  # pass-rate scale: 1 top, 0 bottom
        lo, hi = group_extremes(success, len(s.selected))  # (P,) each
        return replace(s, lo=lo, hi=hi)

    def finish(self, s: _GresoRound) -> Finish:  # noqa: D102
        sel = np.flatnonzero(s.selected)
        if s.lo is None or s.hi is None:  # finished before its draw (not reachable through allocate): learn nothing
            return Finish(s.selected.copy(), s.state, {"skipped": s.skipped, "filled": s.filled}, s.passed.copy())
        lo, hi = s.lo[sel], s.hi[sel]  # (S',)
        all_correct, all_wrong = lo >= 1.0, hi <= 0.0  # (S',) every reward at the top / at the bottom
        c_new = np.where(all_correct, s.streak_correct[sel] + 1, 0)  # (S',)
        w_new = np.where(all_wrong, s.streak_wrong[sel] + 1, 0)
        f_c, f_w = float(all_correct.mean()), float(all_wrong.mean())
        p_c, p_w = s.state.p_explore_correct, s.state.p_explore_wrong
        if s.known.any():  # GRESO adapts from its second epoch, once prompts have a history
            bounds = {"step": self.adapt_step, "p_min": self.p_explore_min, "p_max": self.p_explore_max}
            p_c = adapt_explore(p_c, f_c, target=self.target_correct, **bounds)
            p_w = adapt_explore(p_w, f_w, target=self.target_wrong, **bounds)
        keys, (c, w) = upsert(s.state.keys, (s.state.streak_correct, s.state.streak_wrong), s.keys[sel], (c_new, w_new))
        stats = {
            "skipped": s.skipped,
            "filled": s.filled,
            "p_explore_correct": float(p_c),
            "p_explore_wrong": float(p_w),
            "zero_var_frac": float(np.mean(lo == hi)),
            "all_correct_frac": f_c,
            "all_wrong_frac": f_w,
        }
        return Finish(s.selected.copy(), GresoState(keys, c, w, float(p_c), float(p_w)), stats, s.passed.copy())


__all__ = ["GRESO", "GresoState", "adapt_explore", "skip_probability"]
