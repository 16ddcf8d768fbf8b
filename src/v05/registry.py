"""The one registry of names: estimators (and allocators) by the names the CLI, adapters and configs use.

An unknown name raises ``ValueError`` listing the valid ones. Nothing registers itself at import time: the dicts
below are the whole list.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

import numpy as np

from v05._checks import RewardRange, as_real
from v05.allocation import Allocator, DynamicSampling, Fixed
from v05.allocation.dps import DPS, DpsState
from v05.allocation.greso import GRESO, GresoState
from v05.allocation.osla import OSLA
from v05.allocation.posterior import BetaHistory
from v05.allocation.sara import SARA
from v05.allocation.select import PriorSelect
from v05.allocation.spo import SpoSample
from v05.estimators import (
    Estimate,
    PriorErrorState,
    dbb,
    drgrpo,
    grpo,
    oracle,
    poise,
    reinforce_pp,
    reinforce_pp_baseline,
    rloo,
    spo,
    v05,
    v05_eb,
)
from v05.names import check_options, lookup


@dataclass(frozen=True, slots=True)
class EstimatorSpec:
    """A registered estimator.

    Attributes:
        fn: the estimator function ``fn(rewards, group, *, reward_range, ...) -> Estimate``.
        uses_prior: it takes ``prior=`` (the value model's prediction on the reward scale).
        needs_truth: it takes ``mu=`` (true values; simulation only).
        stateful: it takes ``state=`` and returns the next state in ``Estimate.state``.
        keyed: it requires ``prompt_ids=`` (G,), stable prompt keys for its per-prompt state.
        needs_values: it takes ``values=`` (N,) per-rollout value predictions (``poise``'s probe).
        single_rollout: its baseline comes from outside the group (a prior, a per-prompt history, the batch, a
            probe), so a group of one rollout still gets a non-zero advantage; group-only estimators (``grpo``,
            ``rloo``, ...) give A = 0 at k = 1 and refuse it where the runner checks (the TRL adapter).
        exact_in_sim: what one group's baselines depend on, which decides how the simulator scores it under a
            fixed k. ``"group"``: the group's own rewards, its prior, its true value and fixed options only, so
            the binomial expectation over the group's outcomes is exact (:mod:`v05.sim.runner`'s ``exact``);
            ``"given_state"``: that plus a state carried in from earlier steps, exact given the state once it holds
            the estimator's ``min_groups`` groups (``exact_given_state``; it must have a ``min_groups`` option);
            None: other groups of the batch or a per-prompt history too (sampled, ``monte_carlo``).
        state_type: the class of its state when ``stateful`` (a frozen value with ``to_dict``/``from_dict``): the one
            place a stateful estimator registers it, so checkpoints can write it (:func:`v05.round.state_to_json`).
    """

    fn: Callable[..., Estimate]
    uses_prior: bool = False
    needs_truth: bool = False
    stateful: bool = False
    keyed: bool = False
    needs_values: bool = False
    single_rollout: bool = False
    exact_in_sim: Literal["group", "given_state"] | None = None
    state_type: type | None = None

    @property
    def options(self) -> tuple[str, ...]:
        """Keyword options the estimator accepts (besides rewards, group, prior, reward_range)."""
        params = inspect.signature(self.fn).parameters
        return tuple(p for p in params if p not in ("rewards", "group", "prior", "reward_range"))

    def bind(
        self,
        options: Mapping[str, Any] | None = None,
        *,
        prior: Any = None,
        n0: Any = None,
        state: Any = None,
        prompt_ids: Any = None,
        step: int | None = None,
        mu: Any = None,
        values: Any = None,
    ) -> dict[str, Any]:
        """The keyword arguments of one call: the user's ``options`` plus the runner's context this estimator takes.

        The one place where a runner's context meets an estimator (the trainer, both adapters, the simulator and
        the bench call it): ``prior`` when it fuses one (``uses_prior``), ``state`` when ``stateful`` (None: a fresh
        state), ``prompt_ids`` when ``keyed`` (or given, when it has a ``prompt_ids`` option), ``mu`` when it
        ``needs_truth``, ``values`` when it ``needs_values``, ``step`` when it has a ``step`` option (and one is
        given), and a provider's pseudo-count ``n0`` when it has an ``n0`` option, one is given and ``options`` does
        not fix it. Context names are never user options
        (:data:`CONTEXT_OPTIONS`; the runners refuse them when a config is built).
        """
        kw = dict(options or {})
        keys = self.keyed or (prompt_ids is not None and "prompt_ids" in self.options)
        for name, takes, value in (("prior", self.uses_prior, prior), ("state", self.stateful, state),
                                   ("prompt_ids", keys, prompt_ids), ("mu", self.needs_truth, mu),
                                   ("values", self.needs_values, values)):  # fmt: skip
            if takes:
                kw[name] = value
        if step is not None and "step" in self.options:
            kw["step"] = step
        if n0 is not None and "n0" in self.options and "n0" not in kw:
            kw["n0"] = n0
        return kw


@dataclass(frozen=True, slots=True)
class TrainerEstimatorSpec:
    """An estimator only the trainer runs: per-token advantages from a value model the trainer learns.

    Not in :data:`ESTIMATORS` (no other runner has the value model; its math is torch, :mod:`v05.train.critic`);
    :mod:`v05.train.value` builds its method.

    Attributes:
        value_model: the learned value model its advantages come from; its options are the trainer config's
            section of that name (``critic.*``), so ``estimator.options`` stays empty.
    """

    value_model: str


TRAINER_ESTIMATORS: dict[str, TrainerEstimatorSpec] = {
    "gae": TrainerEstimatorSpec(value_model="critic"),
}
"""Trainer-only estimator name → spec: ``gae`` is PPO's GAE over a learned critic (``v05 train estimator.name=gae``)."""


CONTEXT_OPTIONS = ("state", "prompt_ids", "step", "prior", "mu", "values")
"""Estimator arguments a runner fills from its context (:meth:`EstimatorSpec.bind`), never set as user options."""


ESTIMATORS: dict[str, EstimatorSpec] = {
    "grpo": EstimatorSpec(grpo, exact_in_sim="group"),
    "drgrpo": EstimatorSpec(drgrpo, exact_in_sim="group"),
    "rloo": EstimatorSpec(rloo, exact_in_sim="group"),
    "reinforce_pp": EstimatorSpec(reinforce_pp, single_rollout=True),
    "reinforce_pp_baseline": EstimatorSpec(reinforce_pp_baseline, exact_in_sim="group"),
    "dbb": EstimatorSpec(dbb, stateful=True, keyed=True, single_rollout=True, state_type=BetaHistory),
    "v05": EstimatorSpec(v05, uses_prior=True, single_rollout=True, exact_in_sim="group"),
    "v05_eb": EstimatorSpec(v05_eb, uses_prior=True, stateful=True, single_rollout=True, exact_in_sim="given_state",
                            state_type=PriorErrorState),
    "oracle": EstimatorSpec(oracle, needs_truth=True, single_rollout=True, exact_in_sim="group"),
    "poise": EstimatorSpec(poise, needs_values=True, single_rollout=True),
    "spo": EstimatorSpec(spo, uses_prior=True, single_rollout=True),
}


def get_estimator(name: str) -> EstimatorSpec:
    """The registered estimator ``name``; unknown names list the valid ones."""
    return lookup(ESTIMATORS, name, "estimator")


def estimate(
    estimator: str,
    rewards: object,
    group: object,
    *,
    prior: object = None,
    reward_range: RewardRange = "pm1",
    **options: object,
) -> Estimate:
    """Run a registered estimator and return its full :class:`~v05.estimators.Estimate` (see compute_advantages)."""
    spec = get_estimator(estimator)
    check_options(options, spec.options, "estimator", estimator)
    if prior is not None and not spec.uses_prior:
        raise ValueError(f"estimator {estimator!r} does not use a prior; use v05 or v05_eb, or pass prior=None")
    if spec.uses_prior:
        options["prior"] = prior
    return spec.fn(rewards, group, reward_range=reward_range, **options)


def compute_advantages(
    estimator: str,
    rewards: object,
    group: object,
    *,
    prior: object = None,
    reward_range: RewardRange = "pm1",
    **options: object,
) -> np.ndarray:
    """Advantages (N,) from the named estimator over a flat ragged batch.

    Args:
        estimator: a name in ``ESTIMATORS`` (grpo, drgrpo, rloo, reinforce_pp_baseline, dbb, v05, v05_eb, oracle).
        rewards: (N,) rewards on the declared scale.
        group: (N,) group ids in [0, G) (map arbitrary uids with ``v05.groups.group_index``).
        prior: the value model's prediction on the reward scale, per group (G,) or per rollout (N,); only for
            estimators that use one (v05, v05_eb).
        reward_range: ``"pm1"`` (rewards in [−1, 1], the paper's space) or ``"01"``.
        **options: the estimator's named parameters (e.g. ``scale="none"``, ``n0=2.0``, ``state=...``).

    Raises:
        ValueError: unknown names or options, NaN/inf or out-of-range rewards, length mismatches, empty batches,
            a prior outside the reward range, a missing or unexpected prior.

    >>> compute_advantages("drgrpo", [1, 0, 0, 1], [0, 0, 0, 0], reward_range="01")
    array([ 0.5, -0.5, -0.5,  0.5])
    """
    return estimate(estimator, rewards, group, prior=prior, reward_range=reward_range, **options).advantages


@dataclass(frozen=True, slots=True)
class AllocatorSpec:
    """A registered allocator.

    Attributes:
        cls: its config class (keyword options = its fields; ``batch_size``, the prompts that reach the loss, is
            one of every allocator's).
        k_option: the field that sets its base group size (fixed: rollouts per prompt; osla: k_init; the pool
            allocators: their group size); the simulator's k grid sets it.
        pool: it selects its batch from a larger candidate pool (its ``candidate_pool`` exceeds the batch), so the
            groups that reach the loss are a selection; the simulator gives it a context pool to draw from.
        uses_prior: it reads the prior (OSLA's test, prior_select's ranking) and refuses to run without one, so a
            runner needs a prior provider for it (the trainer's ``prior.name``).
        state_type: the class of the state it carries from step to step (``Allocation.state``), or None: the one
            place a stateful allocator registers it, so checkpoints can write it (:func:`v05.round.state_to_json`).
    """

    cls: type
    k_option: str
    pool: bool = False
    uses_prior: bool = False
    state_type: type | None = None


ALLOCATORS: dict[str, AllocatorSpec] = {
    "fixed": AllocatorSpec(Fixed, k_option="k"),
    "osla": AllocatorSpec(OSLA, k_option="k_init", uses_prior=True),
    "dynamic_sampling": AllocatorSpec(DynamicSampling, k_option="k", pool=True),
    "sara": AllocatorSpec(SARA, k_option="group_size", pool=True, state_type=BetaHistory),
    "dps": AllocatorSpec(DPS, k_option="k", pool=True, state_type=DpsState),
    "prior_select": AllocatorSpec(PriorSelect, k_option="k", pool=True, uses_prior=True),
    "greso": AllocatorSpec(GRESO, k_option="k", pool=True, state_type=GresoState),
    "spo": AllocatorSpec(SpoSample, k_option="k", pool=True, uses_prior=True),
}
"""Allocator name → spec (its config class and the properties runners read)."""


def get_allocator_spec(name: str) -> AllocatorSpec:
    """The registered allocator ``name``; unknown names list the valid ones."""
    return lookup(ALLOCATORS, name, "allocator")


def get_allocator(name: str, **options: object) -> Allocator:
    """A configured allocator ``name`` (see ``ALLOCATORS``) for :func:`v05.allocation.allocate`.

    Raises:
        ValueError: unknown name (lists the valid ones), unknown option (lists the valid fields), or an invalid
            value (the config's own message).

    >>> get_allocator("osla", k_init=4, schedule="jump").k_max
    16
    """
    cls = get_allocator_spec(name).cls
    check_options(options, [f.name for f in fields(cls)], "allocator", name)
    checked = {f.name: _check_option_type(name, f.name, str(f.type), options[f.name]) for f in fields(cls)
               if f.name in options}  # fmt: skip
    return cls(**checked)


MAX_COUNT = 2**40
"""The largest integer option (k, k_max, a budget, a batch size) an allocator takes: beyond it a count array of
int64 sums could overflow, and no run draws 10¹² rollouts for one prompt."""


def _check_option_type(allocator: str, option: str, annotation: str, value: object) -> object:
    """The option's value, refused if it cannot be the field's type, before the config compares it with a number.

    ``float`` fields take any real number and get it as a float (an int beyond the float range reads as ±inf, which
    the range checks refuse); ``int`` fields an integer of magnitude at most :data:`MAX_COUNT`; ``X | None`` fields
    also None. Other fields (names, flags) are left to the config's own checks.
    """
    kinds = {part.strip() for part in annotation.split("|")}
    if value is None and "None" in kinds:
        return value
    where = f"allocator {allocator!r} option {option}"
    if "float" in kinds:
        return as_real(value, where)
    if "int" in kinds:
        if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
            raise ValueError(f"{where} must be an integer, got {type(value).__name__} {value!r}")
        if abs(value) > MAX_COUNT:
            raise ValueError(f"{where} must be at most {MAX_COUNT}, got {value!r}")
    return value


__all__ = [
    "ALLOCATORS",
    "AllocatorSpec",
    "ESTIMATORS",
    "EstimatorSpec",
    "TRAINER_ESTIMATORS",
    "TrainerEstimatorSpec",
    "compute_advantages",
    "estimate",
    "get_allocator",
    "get_allocator_spec",
    "get_estimator",
]
