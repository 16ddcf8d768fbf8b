r"""Rollout allocators: how many rollouts each prompt of a candidate pool gets this step (numpy only).

An allocator never generates anything. :func:`allocate` is the only loop: it asks the allocator for counts,
calls ``sample(prompt_ids, counts)`` (the seam for the simulator, HF generate, vLLM or verl), tells the allocator
the rewards, and repeats until the allocator is done. Allocators are frozen configs with pure ``init/ask/tell/
finish`` methods over an explicit round state; state that persists across steps (DPS's HMM, SARA's history) is a
value passed in and returned (``Allocation.state``).

Protocol (``S`` is the allocator's own frozen round state):
    candidate_pool(batch_size) -> int   candidate prompts a runner draws for a loss batch of ``batch_size``
    init(pool: Pool, state) -> S        before the first round
    ask(s: S) -> counts (P,) int        rollouts to draw now per pool prompt; all zero ends the step
    tell(s: S, draw: Draw) -> S         the rewards of the last draw
    finish(s: S) -> Finish              kept (P,) prompts whose rollouts enter the loss, the state for the next step,
                                        and the step's statistics (rejection rate, extra rollouts, ...)

This module holds the driver and the protocol; the allocators live beside it in the package: ``Fixed`` and
``DynamicSampling`` (:mod:`v05.allocation.uniform`), ``OSLA`` (:mod:`v05.allocation.osla`), ``SARA``
(:mod:`v05.allocation.sara`), ``DPS`` (:mod:`v05.allocation.dps`), ``GRESO`` (:mod:`v05.allocation.greso`),
``PriorSelect`` (:mod:`v05.allocation.select`); names are in ``v05.registry.ALLOCATORS``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from v05._checks import RewardRange, as_float_1d, as_keys, check_in_range, check_reward_range
from v05._types import BoolArray, FloatArray, IntArray
from v05.groups import group_index

Order = Literal["pool", "random"]
"""How fresh prompts are taken from the pool: in pool order, or in one permutation drawn from the step's rng."""

SampleFn = Callable[[IntArray, IntArray], FloatArray]
"""sample(prompt_ids (M,), counts (M,)) -> rewards (Σ counts,), laid out as ``np.repeat(prompt_ids, counts)``."""


@dataclass(frozen=True, slots=True)
class Pool:
    """The candidate prompts of one step.

    Attributes:
        n_prompts: P, the pool size; prompts are indexed [0, P).
        keys: (P,) stable prompt keys, or None when the caller gave none. Allocators that keep per-prompt state
            across steps (SARA, DPS) require them (:func:`require_keys`): pool positions change between steps.
        prior: (P,) value-model prior on the reward scale, or None.
        n0: (P,) the prior's worth in rollouts (its pseudo-count σ̄²/τ², from ``v05_eb``'s state or a provider's
            calibration), or None; read by OSLA's ``eb_guard`` rule and by ``PriorSelect``'s belief.
        reward_range: ``"pm1"`` or ``"01"``.
        rng: the step's random generator (allocators that randomise draw from it).
    """

    n_prompts: int
    keys: np.ndarray | None
    prior: FloatArray | None
    n0: FloatArray | None
    reward_range: RewardRange
    rng: np.random.Generator


@dataclass(frozen=True, slots=True)
class Draw:
    """The rollouts of one round: ``rewards (M,)`` for pool prompts ``prompt (M,)``."""

    prompt: IntArray
    rewards: FloatArray


@dataclass(frozen=True, slots=True)
class Finish:
    """What an allocator returns at the end of a step.

    Attributes:
        kept: (P,) prompts whose rollouts enter the loss.
        state: the allocator's state for the next step (None if it keeps none).
        stats: the step's statistics as JSON-serialisable values (e.g. OSLA's ``reject_rate``, ``mean_weight``,
            ``extra_rollouts``, ``k_hist``), for the training log.
        passed: (P,) prompts the allocator looked at and chose not to sample (a pre-rollout selection's rejects,
            GRESO's skips), or None: every unsampled prompt was simply not reached (OSLA, SARA and dynamic
            sampling stop early). A caller with a prompt queue may drop the passed prompts for this epoch, as the
            DPS, MoPPS and GRESO trainers do, and hand the unreached ones back.
    """

    kept: BoolArray
    state: Any = None
    stats: dict[str, Any] = field(default_factory=dict)
    passed: BoolArray | None = None


class Allocator(Protocol):
    """A rollout allocator (see the module docstring for the protocol).

    ``candidate_pool(batch_size)`` is how many candidate prompts a runner draws for a step whose loss takes
    ``batch_size`` prompts (the batch itself for ``fixed`` and ``osla``, a multiple for the selecting allocators).
    """

    def candidate_pool(self, batch_size: int) -> int: ...  # noqa: D102

    def init(self, pool: Pool, state: Any) -> Any: ...  # noqa: D102

    def ask(self, s: Any) -> IntArray: ...  # noqa: D102

    def tell(self, s: Any, draw: Draw) -> Any: ...  # noqa: D102

    def finish(self, s: Any) -> Finish: ...  # noqa: D102


@dataclass(frozen=True, slots=True)
class Allocation:
    """The outcome of one step's allocation.

    Attributes:
        rewards: (N,) every rollout drawn this step, in draw order.
        prompt: (N,) pool index of each rollout.
        counts: (P,) rollouts drawn per pool prompt (0 = not sampled).
        kept: (P,) prompts whose rollouts enter the loss.
        rounds: number of ``sample`` calls.
        state: the allocator's state for the next step (None if it keeps none).
        stats: the allocator's statistics of this step (see :class:`Finish`).
        passed: (P,) unsampled prompts the allocator looked at and passed over (see :class:`Finish`; never a
            sampled one); the other unsampled prompts were not reached. All False when the allocator says none.
    """

    rewards: FloatArray
    prompt: IntArray
    counts: IntArray
    kept: BoolArray
    rounds: int
    state: Any = None
    stats: dict[str, Any] = field(default_factory=dict)
    passed: BoolArray | None = None

    @property
    def n_rollouts(self) -> int:
        """Rollouts spent this step (kept or not)."""
        return int(self.counts.sum())

    def loss_batch(self) -> tuple[FloatArray, IntArray, IntArray]:
        """The kept rollouts as a flat batch: ``(rewards (N',), group (N',) in [0, G'), pool_index (G',))``.

        Groups are numbered by first appearance of their prompt in draw order.
        """
        mask = self.kept[self.prompt]  # (N,)
        group, pool_index = group_index(self.prompt[mask])
        return self.rewards[mask], group, pool_index.astype(np.int64)


def allocate(
    allocator: Allocator,
    sample: SampleFn,
    *,
    n_prompts: int,
    rng: np.random.Generator,
    prior: object = None,
    n0: object = None,
    keys: object = None,
    reward_range: RewardRange = "pm1",
    state: Any = None,
    max_rounds: int = 1000,
) -> Allocation:
    """Run one step of rollout allocation: the only sampling loop.

    Args:
        allocator: a configured allocator (see ``v05.registry.ALLOCATORS``).
        sample: ``sample(prompt_ids, counts) -> rewards`` (see ``SampleFn``).
        n_prompts: P, the candidate pool size.
        rng: random generator for allocators that randomise.
        prior: (P,) prior on the reward scale (needed by ``osla`` and ``prior_select``), or None.
        n0: the prior's pseudo-count, scalar or (P,) ≥ 0 (needed by ``osla`` with ``test="eb_guard"``; read by
            ``prior_select``, which falls back to its ``default_n0``), or None.
        keys: (P,) stable prompt keys (ints or strings; required by ``sara``, ``dps`` and ``greso``, which keep
            per-prompt state across steps).
        reward_range: ``"pm1"`` or ``"01"``.
        state: the allocator state returned by the previous step, or None.
        max_rounds: safety cap on rounds; exceeding it raises (an allocator that never finishes is a bug).

    Raises:
        ValueError: bad pool size, prior or keys shape, prior out of range, or a sampler that returns the wrong
            number of rewards or non-finite/out-of-range rewards.
    """
    check_reward_range(reward_range)
    if isinstance(n_prompts, bool) or not isinstance(n_prompts, (int, np.integer)) or n_prompts < 1:
        raise ValueError(f"n_prompts must be a positive integer, got {n_prompts!r}")
    prior_arr = None
    if prior is not None:
        prior_arr = as_float_1d(prior, "prior")
        check_in_range(prior_arr, "prior", reward_range)
        if len(prior_arr) != n_prompts:
            raise ValueError(f"prior must have one value per pool prompt ({n_prompts}), got {len(prior_arr)}")
    n0_arr = None
    if n0 is not None:
        n0_arr = as_float_1d(np.atleast_1d(np.asarray(n0, dtype=object)), "n0")
        if n0_arr.shape not in ((1,), (n_prompts,)):
            raise ValueError(f"n0 must be a scalar or have shape ({n_prompts},), got {n0_arr.shape}")
        n0_arr = np.broadcast_to(n0_arr, (n_prompts,)).copy()
        if np.any(n0_arr < 0):
            raise ValueError(f"n0 must be >= 0, got {float(n0_arr.min())!r}")
    key_arr = None if keys is None else as_keys(keys, "keys", n_prompts)
    pool = Pool(int(n_prompts), key_arr, prior_arr, n0_arr, reward_range, rng)
    s = allocator.init(pool, state)
    counts = np.zeros(n_prompts, np.int64)
    rewards_parts: list[FloatArray] = []
    prompt_parts: list[IntArray] = []
    rounds = 0
    while True:
        raw = np.asarray(allocator.ask(s))
        if raw.shape != (n_prompts,) or raw.dtype.kind not in "iu" or np.any(raw < 0):
            raise ValueError(
                f"allocator returned invalid counts (shape {raw.shape}, dtype {raw.dtype}, min {raw.min(initial=0)}); "
                f"counts must be ({n_prompts},) non-negative integers"
            )
        ask = raw.astype(np.int64)
        if not ask.any():
            break
        if rounds >= max_rounds:
            raise ValueError(f"allocation did not finish within max_rounds={max_rounds}")
        ids = np.flatnonzero(ask)
        r = as_float_1d(sample(ids, ask[ids]), "sampled rewards", allow_empty=False)
        if len(r) != int(ask.sum()):
            raise ValueError(f"sample returned {len(r)} rewards for {int(ask.sum())} requested rollouts")
        check_in_range(r, "sampled rewards", reward_range)
        draw = Draw(np.repeat(ids, ask[ids]), r)
        rewards_parts.append(r)
        prompt_parts.append(draw.prompt)
        counts += ask
        rounds += 1
        s = allocator.tell(s, draw)
    end = allocator.finish(s)
    rewards = np.concatenate(rewards_parts) if rewards_parts else np.zeros(0)
    prompt = np.concatenate(prompt_parts) if prompt_parts else np.zeros(0, np.int64)
    kept = np.asarray(end.kept, bool) & (counts > 0)
    passed = np.zeros(n_prompts, bool) if end.passed is None else np.asarray(end.passed, bool) & (counts == 0)
    return Allocation(rewards, prompt, counts, kept, rounds, end.state, dict(end.stats), passed)


def require_keys(pool: Pool, allocator: str) -> np.ndarray:
    """The pool's stable prompt keys, for an allocator that keeps per-prompt state across steps.

    Raises:
        ValueError: no keys were given (pool positions are batch-local, so a history keyed by them would mix
            prompts across steps), or keys repeat.
    """
    if pool.keys is None:
        raise ValueError(
            f"{allocator} keeps per-prompt state across steps: pass allocate(..., keys=...) with one stable key per "
            "pool prompt (e.g. its dataset index); pool positions change from step to step"
        )
    if len(np.unique(pool.keys)) != pool.n_prompts:
        raise ValueError(f"{allocator} needs distinct pool keys (one per prompt) to track per-prompt state")
    return pool.keys


def check_order(order: str) -> None:
    """Reject an unknown prompt order, listing the valid ones."""
    if order not in ("pool", "random"):
        raise ValueError(f"unknown order {order!r}; valid: pool, random")


def prompt_order(pool: Pool, order: Order) -> IntArray:
    """The order in which fresh pool prompts are taken: pool order, or one permutation drawn from ``pool.rng``."""
    return np.arange(pool.n_prompts) if order == "pool" else pool.rng.permutation(pool.n_prompts)


def group_extremes(draw: Draw, n_prompts: int) -> tuple[FloatArray, FloatArray]:
    """Per-prompt (min, max) reward of one draw, shape (P,) each (+inf/−inf for prompts not drawn)."""
    lo, hi = np.full(n_prompts, np.inf), np.full(n_prompts, -np.inf)
    np.minimum.at(lo, draw.prompt, draw.rewards)  # (P,) reduction over the draw
    np.maximum.at(hi, draw.prompt, draw.rewards)
    return lo, hi


__all__ = [
    "Allocation",
    "Allocator",
    "Draw",
    "Finish",
    "Order",
    "Pool",
    "SampleFn",
    "allocate",
    "check_order",
    "group_extremes",
    "prompt_order",
    "require_keys",
]
