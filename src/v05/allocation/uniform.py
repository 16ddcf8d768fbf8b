r"""Uniform allocation (GRPO's fixed k) and DAPO's dynamic sampling (numpy only).

``Fixed`` draws k rollouts for each of the first ``batch_size`` pool prompts in one round; ``DynamicSampling``
over-samples prompt batches and keeps the groups whose rewards are not all equal. Neither keeps state across steps.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from v05._checks import check_int
from v05._types import IntArray
from v05.allocation.driver import Draw, Finish, Order, Pool, check_order, group_extremes, prompt_order

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class Fixed:
    """GRPO-style uniform allocation: ``k`` rollouts for each of the first ``batch_size`` pool prompts, one round.

    Every sampled prompt enters the loss. Keeps no state across steps.
    """

    k: int = 4
    """rollouts per prompt (the group size K; ≥ 1)."""
    batch_size: int | None = None
    """prompts to sample, the first ones of the pool (None: the whole pool)."""

    def candidate_pool(self, batch_size: int) -> int:
        """Prompts a step's candidates come from: the batch itself (every sampled prompt is trained on)."""
        return batch_size

    def __post_init__(self) -> None:
        check_int(self.k, "k", 1)
        if self.batch_size is not None:
            check_int(self.batch_size, "batch_size", 1, hint=" (or None for the whole pool)")

    def init(self, pool: Pool, state: Any) -> tuple[int, bool]:  # noqa: D102
        return pool.n_prompts, False

    def ask(self, s: tuple[int, bool]) -> IntArray:  # noqa: D102
        n, done = s
        counts = np.zeros(n, np.int64)
        if not done:
            counts[: min(self.batch_size or n, n)] = self.k
        return counts

    def tell(self, s: tuple[int, bool], draw: Draw) -> tuple[int, bool]:  # noqa: D102
        return s[0], True

    def finish(self, s: tuple[int, bool]) -> Finish:  # noqa: D102
        return Finish(np.ones(s[0], bool))


@dataclass(frozen=True, slots=True)
class _DSRound:
    """DynamicSampling round state: the prompt order, how far it was consumed, and the kept prompts so far."""

    order: IntArray  # (P,) order in which prompts are taken
    taken: int  # prompts of ``order`` already sampled
    kept: tuple[int, ...]  # pool indices of kept (mixed) groups, in draw order
    rounds: int
    spent: int  # rollouts drawn so far
    done: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class DynamicSampling:
    r"""DAPO dynamic sampling: over-sample prompt batches, drop groups whose rewards all agree, repeat.

    Round t samples the next ``gen_batch_size`` prompts of the pool (pool order, or one permutation drawn from the
    step's rng with ``order="random"``), ``k`` rollouts each, and keeps the groups whose rewards are not all equal
    (std > 0, i.e. a non-zero GRPO advantage). It stops when ``batch_size`` groups are kept, after ``max_rounds``
    rounds, or when the pool is used up; the kept groups are truncated to the first ``batch_size`` in sampling order
    (the pool order, or the random permutation).

        rollouts spent = rounds · gen_batch_size · k   (≤ max_rounds · gen_batch_size · k)

    Degenerate case: if the rounds or the pool run out first, fewer than ``batch_size`` groups are kept (logged at
    INFO; DAPO's verl trainer raises instead, the DPS repo continues as here). Rounds, rollouts spent and groups
    kept are in ``Allocation.stats``. Keeps no state across steps.

    References: Yu et al. (2025) "DAPO: An Open-Source LLM Reinforcement Learning System at Scale",
    arXiv:2503.14476 (dynamic sampling); loop as in the DPS repo (``recipe/dps/our_ray_trainer.py``).
    """

    k: int = 8
    """rollouts per prompt (the group size n; ≥ 2, a group of one is never mixed)."""
    batch_size: int = 32
    """groups that should reach the loss (B)."""
    gen_batch_size: int | None = None
    """prompts sampled per round (None: ``batch_size``; DAPO uses a multiple of it)."""
    max_rounds: int = 4
    """rounds per step at most (``max_num_gen_batches``: 4 in the DPS math scripts, 10 for Countdown)."""
    order: Order = "pool"
    """``"pool"`` takes prompts in pool order; ``"random"`` in a permutation drawn from the step's rng."""

    def candidate_pool(self, batch_size: int) -> int:
        """Prompts a step's candidates come from: ``max_rounds`` rounds of ``gen_batch_size`` (default: the batch)."""
        return (self.gen_batch_size or batch_size) * self.max_rounds

    def __post_init__(self) -> None:
        check_int(self.k, "k", 2, hint=" (a single rollout can never be a mixed group)")
        check_int(self.batch_size, "batch_size", 1)
        if self.gen_batch_size is not None:
            check_int(self.gen_batch_size, "gen_batch_size", 1, hint=" (or None for batch_size)")
        check_int(self.max_rounds, "max_rounds", 1)
        check_order(self.order)

    def init(self, pool: Pool, state: Any) -> _DSRound:  # noqa: D102
        return _DSRound(prompt_order(pool, self.order), 0, (), 0, 0, False)

    def ask(self, s: _DSRound) -> IntArray:  # noqa: D102
        counts = np.zeros(len(s.order), np.int64)
        if not s.done:
            counts[s.order[s.taken : s.taken + (self.gen_batch_size or self.batch_size)]] = self.k
        return counts

    def tell(self, s: _DSRound, draw: Draw) -> _DSRound:  # noqa: D102
        lo, hi = group_extremes(draw, len(s.order))  # (P,)
        batch = s.order[s.taken : s.taken + (self.gen_batch_size or self.batch_size)]  # this round's prompts, in order
        kept = s.kept + tuple(int(i) for i in batch if hi[i] > lo[i])
        taken = min(s.taken + (self.gen_batch_size or self.batch_size), len(s.order))
        rounds = s.rounds + 1
        done = len(kept) >= self.batch_size or rounds >= self.max_rounds or taken >= len(s.order)
        return _DSRound(s.order, taken, kept, rounds, s.spent + len(draw.rewards), done)

    def finish(self, s: _DSRound) -> Finish:  # noqa: D102
        kept = np.zeros(len(s.order), bool)
        kept[list(s.kept[: self.batch_size])] = True  # the first batch_size mixed groups in the sampling order
        if len(s.kept) < self.batch_size:
            logger.info(
                "dynamic_sampling kept %d of batch_size=%d groups (rounds or pool ran out)",
                len(s.kept),
                self.batch_size,
            )
        stats = {"rounds": s.rounds, "rollouts": s.spent, "mixed_groups": len(s.kept), "kept_groups": int(kept.sum())}
        return Finish(kept, None, stats)


__all__ = ["DynamicSampling", "Fixed"]
