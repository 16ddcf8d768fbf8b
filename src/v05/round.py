r"""One round from prior to update, written once: v05's trainer, ``V05GRPOTrainer`` and the verl plugin call it.

Per step, for the prompts of a batch (each runner supplies only what is its own: rollouts, rewards, groups, keys):

    prior = rnd.predict(keys, texts)                    V and n0 per prompt, through the PriorGuard
    alloc = rnd.allocate(sample, prior=prior, ...)      the allocator's rounds (built once per run; its state carried)
    est   = rnd.advantages(rewards, group, prior=...)   the estimator, its step context bound (its state carried)
    rnd.learn(keys, texts, rewards, group, step=...)    the provider (and the guard's running mean) learn the outcomes

The prior's path. A provider predicts a score V ∈ [−1, 1] (±1 space, μ = 2p − 1); :meth:`Round.predict` converts it
once to the run's reward scale, :attr:`Prior.value`, the one scale every consumer inside reads (estimators and
allocators take their prior on the reward scale; the core maps it to its own ±1 math internally). It leaves the round
at two edges only: :attr:`Prior.pass_rate` (value metrics) and :attr:`Prior.score` (a runner that stores the
provider's own ±1 prediction, as verl's ``extra_info`` does). ``feed_n0`` (whether the provider's pseudo-count n0
reaches an estimator's or allocator's ``n0``) is decided once, when the round is built: the runner's switch and the
provider's declared ``feeds_n0`` (:class:`v05.priors.ProviderSpec`); :meth:`Round.n0_of` is what the consumers get.
The reward range is checked once here, when the round is built; each public core function still checks its own
inputs (STYLE: public functions validate at entry).

State across steps: the estimator's (``v05_eb``'s prior-error window, ``dbb``'s history), the allocator's (SARA,
DPS, GRESO), the provider's and the guard's. Estimator and allocator states are the core's own values, declared by
their registry specs (``EstimatorSpec.state_type``, ``AllocatorSpec.state_type``: the one place a new stateful
method registers its state type) and written as type-tagged JSON (:func:`state_to_json`): no pickle, exact.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from v05._checks import RewardRange, check_reward_range
from v05._types import FloatArray
from v05.allocation import Allocation, Allocator, allocate
from v05.estimators import Estimate
from v05.names import check_options
from v05.priors import Calibration, get_provider_spec, group_outcomes, make_provider
from v05.priors.guard import PriorGuard
from v05.registry import ALLOCATORS, ESTIMATORS, get_estimator
from v05.rewards import score_to_reward_scale, to_pass_rate

STATE_TYPES: dict[str, type] = {
    spec.state_type.__name__: spec.state_type
    for spec in (*ESTIMATORS.values(), *ALLOCATORS.values())
    if spec.state_type is not None
}
"""State type name → class: every state an estimator or allocator spec declares (``state_type``)."""


def state_to_json(state: Any) -> dict[str, Any] | None:
    """``{"type": name, "data": state.to_dict()}`` (None stays None).

    Raises:
        ValueError: a state whose type no registry spec declares (so a new stateful method cannot be silently
            dropped from a checkpoint).
    """
    if state is None:
        return None
    name = type(state).__name__
    if STATE_TYPES.get(name) is not type(state):
        raise ValueError(f"cannot checkpoint a state of type {name}; supported: {', '.join(STATE_TYPES)}")
    return {"type": name, "data": state.to_dict()}


def state_from_json(data: Mapping[str, Any] | None) -> Any:
    """Inverse of :func:`state_to_json`."""
    if data is None:
        return None
    if data.get("type") not in STATE_TYPES:
        raise ValueError(f"unknown state type {data.get('type')!r} in checkpoint; supported: {', '.join(STATE_TYPES)}")
    return STATE_TYPES[data["type"]].from_dict(data["data"])


@dataclass(frozen=True, slots=True)
class Prior:
    """The prior of G prompts for one step, as the round hands it on.

    Attributes:
        value: (G,) the prior on the run's reward scale (what estimators and allocators read).
        n0: (G,) the provider's pseudo-counts in rollouts, or None (a dataset's prior without one).
        reward_range: the scale of ``value``.
        score: (G,) the provider's own ±1 prediction V, or None (a prior read from a dataset).
        fallbacks: how many of the G the guard's running mean stood in for.
    """

    value: FloatArray
    n0: FloatArray | None
    reward_range: RewardRange
    score: FloatArray | None = None
    fallbacks: int = 0

    @property
    def pass_rate(self) -> FloatArray:
        """(G,) the prior as a pass rate p̂ (value metrics)."""
        return to_pass_rate(self.value, self.reward_range)

    def take(self, index: Any) -> Prior:
        """The rows at ``index`` (fallbacks are a count of the whole call and stay)."""

        def rows(a: FloatArray | None) -> FloatArray | None:
            return None if a is None else a[index]

        return replace(self, value=self.value[index], n0=rows(self.n0), score=rows(self.score))


class Round:
    """A run's estimator, prior provider and allocator, with their states (module docstring for one step).

    Args:
        estimator: a name in ``v05.registry.ESTIMATORS``, or None when the runner computes advantages another way
            (the trainer's PPO critic); the round then predicts, allocates and learns only.
        options: the estimator's keyword options (context names excluded: the round binds them).
        reward_range: the scale of rewards and of :attr:`Prior.value` (``"01"`` or ``"pm1"``).
        prior: a provider name in ``v05.priors.PROVIDERS``, or None (no prior, or one that arrives with the data).
        prior_options: the provider's keyword options.
        feed_n0: give the provider's n0 to an estimator's or allocator's ``n0`` (also needs the provider's
            ``feeds_n0``).
        allocator: a configured allocator (``v05.registry.get_allocator``), built once per run, or None.

    Attributes:
        provider: the prior provider (None without one); runners bind what its spec says it needs.
        guard: the :class:`~v05.priors.guard.PriorGuard` around it (None without a provider).
        estimator_state: the estimator's state across steps (None for stateless estimators).
        allocator_state: the allocator's state across steps (None for stateless allocators).

    Raises:
        ValueError: an unknown estimator, option, provider or reward range.
    """

    def __init__(
        self,
        estimator: str | None,
        *,
        options: Mapping[str, Any] | None = None,
        reward_range: RewardRange = "01",
        prior: str | None = None,
        prior_options: Mapping[str, Any] | None = None,
        feed_n0: bool = True,
        allocator: Allocator | None = None,
    ) -> None:
        check_reward_range(reward_range)
        self.estimator = estimator
        self.spec = None if estimator is None else get_estimator(estimator)
        self.options = dict(options or {})
        if self.spec is not None:
            check_options(self.options, self.spec.options, "estimator", estimator)
        self.reward_range: RewardRange = reward_range
        self.prior_name = prior
        self.provider: Any = None if prior is None else make_provider(prior, **dict(prior_options or {}))
        self.guard = None if prior is None else PriorGuard()
        self.feed_n0 = bool(feed_n0) and (prior is None or get_provider_spec(prior).feeds_n0)
        self.allocator = allocator
        self.estimator_state: Any = None
        self.allocator_state: Any = None

    def predict(self, keys: Sequence[Any], texts: Sequence[str]) -> Prior | None:
        """The provider's prior for these prompts on the reward scale (the guard stands in where it fails).

        Args:
            keys: (G,) stable prompt keys (read as strings).
            texts: (G,) what the provider reads of each prompt (a bare problem, or the rendered prompt).

        Returns:
            The :class:`Prior`, or None without a provider.
        """
        if self.provider is None or self.guard is None:
            return None
        pred, n_fallback = self.guard.predict(self.provider, [str(k) for k in keys], list(texts))
        value = score_to_reward_scale(pred.mean, self.reward_range)  # (G,) ±1 → reward scale, the one conversion
        return Prior(value, np.asarray(pred.n0, np.float64), self.reward_range, pred.mean, n_fallback)

    def n0_of(self, prior: Prior | None) -> FloatArray | None:
        """(G,) what an estimator's or allocator's ``n0`` gets: the prior's n0 when the round feeds it, else None."""
        return None if prior is None or not self.feed_n0 else prior.n0

    def allocate(
        self, sample: Any, *, n_prompts: int, rng: np.random.Generator, prior: Prior | None = None, keys: Any = None
    ) -> Allocation:
        """One step's allocation over ``n_prompts`` candidates (:func:`v05.allocation.allocate`); its state carried.

        Raises:
            ValueError: the round has no allocator, or the allocator's own refusals.
        """
        if self.allocator is None:
            raise ValueError("this round has no allocator")
        alloc = allocate(self.allocator, sample, n_prompts=n_prompts, rng=rng,
                         prior=None if prior is None else prior.value, n0=self.n0_of(prior),
                         keys=keys, reward_range=self.reward_range, state=self.allocator_state)  # fmt: skip
        self.allocator_state = alloc.state
        return alloc

    def advantages(
        self,
        rewards: FloatArray,
        group: Any,
        *,
        prior: Prior | None = None,
        keys: Any = None,
        step: int | None = None,
        values: FloatArray | None = None,
        carry: bool = True,
    ) -> Estimate:
        """The estimator's estimate of one batch, the step's context bound (``EstimatorSpec.bind``).

        Args:
            rewards: (N,) rewards on the reward scale.
            group: (N,) group ids in [0, G).
            prior: the groups' :class:`Prior` (G,), or None; an estimator that fuses none ignores it.
            keys: (G,) stable prompt keys (per-prompt histories and windows), or None.
            step: the training step (``dbb``'s decay), or None.
            values: (N,) per-rollout value predictions (``poise``), or None.
            carry: keep the estimator's new state (False: an evaluation batch, or a runner that sets it itself).

        Raises:
            ValueError: the round has no estimator, or the estimator's own refusals (a missing prior, bad rewards).
        """
        if self.spec is None:
            raise ValueError("this round has no registered estimator")
        kw = self.spec.bind(self.options, prior=None if prior is None else prior.value,
                            n0=self.n0_of(prior), state=self.estimator_state, prompt_ids=keys,
                            step=step, values=values)  # fmt: skip
        est = self.spec.fn(rewards, group, reward_range=self.reward_range, **kw)
        if carry and self.spec.stateful:
            self.estimator_state = est.state
        return est

    def learn(self, keys: Sequence[Any], texts: Sequence[str], rewards: FloatArray, group: Any, *, step: int) -> bool:
        """Feed each group's mean ±1 score and rollout count to the provider and the guard's running mean.

        Returns:
            False when the provider's ``update`` raised (logged and counted by the guard; the run goes on), else True
            (also without a provider: nothing to learn).
        """
        if self.provider is None or self.guard is None:
            return True
        scores, counts = group_outcomes(rewards, group, reward_range=self.reward_range)  # (G,) ±1 means, (G,) n_g
        return self.guard.update(self.provider, [str(k) for k in keys], list(texts), scores, counts, step=step)

    def calibration(self) -> Calibration | None:
        """The provider's calibration (τ², AUC, n0, n), or None without a provider."""
        return None if self.provider is None else self.provider.calibration()

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state: ``allocator``, ``provider``, ``prior_guard`` and ``estimator`` (when it has one)."""
        out: dict[str, Any] = {
            "allocator": state_to_json(self.allocator_state),
            "provider": None if self.provider is None else self.provider.state_dict(),
            "prior_guard": None if self.guard is None else self.guard.state_dict(),
        }
        if self.spec is not None:
            out["estimator"] = state_to_json(self.estimator_state)
        return out

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (a missing key leaves that part fresh: a checkpoint from before it existed)."""
        if self.spec is not None and "estimator" in state:
            self.estimator_state = state_from_json(state["estimator"])
        self.allocator_state = state_from_json(state.get("allocator"))
        if self.provider is not None and state.get("provider") is not None:
            self.provider.load_state_dict(state["provider"])
        if self.provider is not None:
            self.guard = PriorGuard()  # a state written before the guard existed resumes with a fresh one
            if state.get("prior_guard") is not None:
                self.guard.load_state_dict(state["prior_guard"])


__all__ = ["STATE_TYPES", "Prior", "Round", "state_from_json", "state_to_json"]
