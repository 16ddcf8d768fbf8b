r"""TRL adapter: v05's advantage estimators and prior providers inside ``trl.GRPOTrainer`` (TRL 1.16 ≤ version < 2).

The only module of v05 that imports ``trl``. TRL terms are translated here: ``num_generations`` → K, a completion →
a rollout, the contiguous block of K completions of one prompt → a group (``group = arange(N) // K``).

Override point. TRL 1.16 computes advantages inline, in the middle of the ~600-line private
``GRPOTrainer._generate_and_score_completions`` (after the rewards are gathered, before the process slice); there is
no narrower method to replace. ``V05GRPOTrainer`` therefore wraps two private methods and keeps all of TRL's code:
``_calculate_rewards`` (unchanged result; it records the gathered rewards, prompt keys and texts and the reward
functions' fault counts) and ``_generate_and_score_completions`` (calls TRL, then replaces ``output["advantages"]``
with the v05 estimate on the recorded rewards, sliced as TRL slices). TRL's own advantages are computed and
discarded; they stay visible in ``V05GRPOTrainer.v05_last_batch.engine_advantages`` (a differential check in the tests).

Multi-process layout (what we assume, as TRL does): ``_calculate_rewards`` returns the rewards of *all* processes,
gathered in process order, and the prompts of a group are contiguous in that order (TRL's ``RepeatSampler``; a group
may straddle two processes). Every process gathers the prompt keys (accelerate's ``gather_object``) and checks the
layout (a block of K rollouts whose prompt keys differ raises). The v05 state lives on the main process (rank 0): only
there is the provider built, and only there do ``provider.predict``, ``estimate`` and ``provider.update`` run, on the
whole batch; the prior, the estimate (advantages and estimator state) and the provider's calibration are then
broadcast (accelerate's ``broadcast_object_list``), so every process holds the same prior, advantages, estimator
state and ``v05/*`` metrics, bit for bit, whatever the provider's numerics, and keeps ``advantages[p·n : (p + 1)·n]``
(p = process index, n = local rollouts), TRL's ``process_slice``. Checkpoints: the main process writes the provider
and estimator states to ``v05_state.json`` in TRL's checkpoint folder; on resume the main process restores the
provider and every process the estimator state.

Deviations from TRL and limits:

- Rewards are TRL's weighted sum Σ_f w_f·r_f per rollout on ``v05_reward_range``'s scale (``"01"``: [0, 1];
  ``"pm1"``: [−1, 1]); a sum outside it raises ``ValueError``, a rollout every reward function scored ``None`` gets
  advantage 0, as in TRL (:mod:`v05.adapters.trl_rewards`, "Rewards").
- ``scale_rewards`` describes the v05 estimator's scaling ("group" ↔ ``scale="group_std"``, "none" otherwise); the
  prior-fusion estimators force "none" (see :class:`V05GRPOConfig`). ``multi_objective_aggregation`` must be
  ``"sum_then_normalize"``. With ``v05_estimator="grpo"`` the advantages differ from TRL's by the ε in
  (r − r̄)/(std + ε): v05 (as verl) uses 1e-6, TRL 1e-4 (``v05_estimator_options={"eps": 1e-4}`` matches TRL).
- Fixed K only: TRL samples ``num_generations`` rollouts for every prompt, so OSLA's per-prompt extra rollouts
  (and any allocator but ``fixed``) are refused; use v05's trainer or the verl plugin for ragged budgets. Which
  prompts a generation batch holds is open: ``v05_sampler="spo"`` (or ``"prior_select"``) replaces TRL's sampler of
  the train dataset with SPO's prioritised draw (or the prior's selection) from a candidate pool, through the round's
  allocator on the main process (broadcast); its
  draw may miss the latest batch's outcomes, as accelerate's data loader reads a batch ahead
  (:mod:`v05.adapters.trl_sampler`). SPO's ``rho="kl"`` needs the policy's drift, which only v05's trainer measures:
  refused (``rho="constant"`` runs).
- Evaluation batches use the prior but do not update it or the estimator state. A checkpoint without
  ``v05_state.json`` (e.g. saved by plain TRL) resumes with a fresh provider and estimator state, with a warning.

Faults, as in v05's trainer: a prior provider whose ``predict`` raises or returns NaN/out-of-range values is
replaced, for those prompts and that batch, by the running mean of :class:`v05.priors.guard.PriorGuard` (its
``update`` raising is logged and the step goes on); ``v05/prior_fallbacks`` counts the batch's replaced prompts and
``v05/prior_update_errors`` the failed updates so far; the guard's state is checkpointed beside the provider's.
Reward functions are fault-tolerant only with ``v05_reward_timeout_s`` set (default None: a raise stops the run, as
in TRL): a raise, a timeout or garbage then scores the range's failure reward (0 on ``01``, −1 on ``pm1``), counted
in ``v05/verifier_errors`` / ``v05/verifier_timeouts`` (:mod:`v05.adapters.trl_rewards`).

TRL workarounds (TRL 1.16 + transformers 5): TRL defaults ``gradient_checkpointing=True``, a deprecated alias that
warns and recomputes activations — pass :func:`no_checkpointing_args` on small models. A tokenizer without a
chat template (the char-level tiny model) takes plain-string prompts (a ``"prompt"`` column of str). TRL seeds the
global RNGs in its constructor (``set_seed(args.seed)``); ``V05GRPOTrainer`` leaves them so, the bench's
:func:`~v05.adapters.trl_harness.trl_grpo_rollouts_per_s` restores the caller's.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import torch
import trl
from accelerate.utils import broadcast_object_list, gather_object
from packaging.version import InvalidVersion, Version
from torch.utils.data import IterableDataset, Sampler
from transformers import TrainingArguments
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

import datasets
from v05._checks import REWARD_RANGES, reward_range_text
from v05._types import FloatArray, IntArray
from v05.adapters.trl_batch import V05Batch, _dataset_keys, _group_keys, _prompt_text, _row_key
from v05.adapters.trl_options import (
    SAMPLER_REWARD_STATS,
    SAMPLERS,
    _builds_provider,
    _estimator_options,
    _needs_drift,
    _sampler,
    _scale_rewards,
)
from v05.adapters.trl_rewards import _guard_rewards, _GuardedReward, _weighted_rewards
from v05.adapters.trl_sampler import PoolSampler
from v05.allocation import Allocation
from v05.estimators import Estimate
from v05.priors import PROVIDERS, Calibration, check_provider_options, provider_spec
from v05.priors.guard import PriorGuard
from v05.registry import ALLOCATORS, ESTIMATORS, get_estimator
from v05.rewards import from_pass_rate
from v05.round import Round

SUPPORTED_TRL = ">=1.16,<2"
"""TRL versions this adapter supports (it wraps private ``GRPOTrainer`` methods; tested on 1.16.0)."""

FIXED_K_MESSAGE = (
    "TRL's GRPOTrainer samples a fixed num_generations per prompt in contiguous blocks; per-prompt extra rollouts "
    "(OSLA) need v05's trainer or the verl plugin"
)
STATE_FILE = "v05_state.json"
"""The file in each TRL checkpoint folder with the provider, prior-guard and estimator states (the main process's)."""
_T = TypeVar("_T")
GRPOConfig = trl.GRPOConfig
"""TRL's own config, unchanged: for v05 modules that run plain TRL (the benches) without importing ``trl``."""
GRPOTrainer = trl.GRPOTrainer
"""TRL's own trainer, unchanged (no v05 estimator): the benches' reference runner."""


def no_checkpointing_args() -> dict[str, bool]:
    """Keyword arguments that turn off TRL's default activation checkpointing, for this transformers version.

    ``activation_checkpointing`` on transformers ≥ 5.11, ``gradient_checkpointing`` before (the field was renamed).
    """
    fields = getattr(TrainingArguments, "__dataclass_fields__", {})
    name = "activation_checkpointing" if "activation_checkpointing" in fields else "gradient_checkpointing"
    return {name: False}


def check_trl_version(version: str | None = None) -> None:
    """Raise ``ValueError`` unless ``version`` (default: the installed ``trl.__version__``) is in ``SUPPORTED_TRL``."""
    found = str(trl.__version__ if version is None else version)
    try:
        release = Version(found).release
    except InvalidVersion:
        release = ()
    if not (1, 16) <= tuple(release[:2]) < (2, 0):
        raise ValueError(
            f"v05.adapters.trl supports trl{SUPPORTED_TRL} (tested on 1.16.0), found trl {found!r}; "
            "install a supported version: pip install 'trl>=1.16,<2'"
        )


class _OneGeneration(int):
    """The integer 1 while ``trl.GRPOConfig.__post_init__`` runs: it passes TRL's ``num_generations < 2`` gate.

    Every other use of it there (the divisibility checks, ``x % 1``) is exact; :class:`V05GRPOConfig` puts a plain
    ``1`` back right after and refuses K = 1 itself for estimators whose baseline is the group's own.
    """

    def __new__(cls) -> _OneGeneration:
        return super().__new__(cls, 1)

    def __lt__(self, other: object) -> bool:
        return False if other == 2 else int(self) < other  # type: ignore[operator]


@dataclass
class V05GRPOConfig(trl.GRPOConfig):
    """``trl.GRPOConfig`` plus the v05 estimator and prior that replace TRL's advantages.

    Parameters (besides every ``trl.GRPOConfig`` field):
        v05_estimator: a name in ``v05.registry.ESTIMATORS`` (refused: ``oracle``, which needs the true pass rates,
            and ``poise``, which needs probe values from the policy's hidden states).
        v05_estimator_options: keyword options of the estimator (e.g. ``{"noise": "plugin"}``); the context options
            (``state``, ``prompt_ids``, ``step``, ``prior``, ``mu``, ``values``) are refused: the adapter fills them.
        v05_prior: a name in ``v05.priors.PROVIDERS`` (default ``running_mean``; ``oracle``, a bound whose extra
            rollouts of the current policy only ``v05 train`` draws, is refused, and so is ``probe`` or a tracker
            started from it: the policy's hidden states only ``v05 train`` binds); required by prior-fusion
            estimators (``v05``, ``v05_eb``), ignored by the others.
        v05_prior_options: keyword options of the provider.
        v05_feed_n0: give the provider's pseudo-count n0 to estimators with an ``n0`` option (``v05_eb``) unless
            ``v05_estimator_options`` fixes ``n0``.
        v05_allocator: only ``"fixed"``: TRL samples K = ``num_generations`` rollouts for every prompt.
        v05_sampler: how each generation batch's prompts are chosen: None (TRL's own shuffled sampler),
            ``"spo"``: SPO's prioritised sampling, B prompts drawn from a pool of ``pool_factor``·B candidates by
            w = √(p̂(1 − p̂)) + ε on the prior's p̂ (:class:`v05.allocation.spo.SpoSample` through the round), or
            ``"prior_select"``: the B of 4·B candidates whose Thompson draw p̃ from the prior's Beta has the largest
            p̃(1 − p̃) (:class:`v05.allocation.select.PriorSelect`, v05 train's ``allocator.name=prior_select``). The
            draw may lag the prior by one generation batch (:mod:`v05.adapters.trl_sampler`). Needs ``v05_prior``.
        v05_sampler_options: the sampler's options (``"spo"``: ``pool_factor``, default 4, and ``epsilon``, 0.05;
            ``"prior_select"``: ``thompson``, ``explore_frac``, ``default_n0``, ``alpha0``);
            ``k`` and ``batch_size`` are the adapter's (``num_generations``, the generation batch's prompts).
        v05_reward_range: the scale of TRL's weighted reward sum Σ_f w_f·r_f: ``"01"`` ([0, 1], e.g. 0/1
            correctness) or ``"pm1"`` ([−1, 1], e.g. ±1 as verl's DAPO scorer). The estimator and the prior work on
            it (at ``scale="none"`` a ±1 reward gives twice the advantage of a 0/1 one).
        v05_reward_timeout_s: opt-in fault tolerance (:mod:`v05.adapters.trl_rewards`): seconds each call of a
            synchronous reward function may take; a call that raises, times out or returns no list of one value per
            rollout, and an element that is not a finite number or None, then score the range's failure reward (0 on
            ``01``, −1 on ``pm1``), counted. None (the default): a reward function that raises stops the run, as in
            TRL, and one that returns garbage raises ``ValueError``.
        scale_rewards: TRL's name for the estimator's scaling, ``"group"`` for ``scale="group_std"`` and ``"none"``
            otherwise. Unset (``None``) takes that value; a value that contradicts the estimator raises. Prior-fusion
            and history estimators (``v05``, ``v05_eb``, ``dbb``) refuse ``scale="group_std"``, so they get ``"none"``.

    Raises:
        ValueError: an unsupported TRL, an allocator other than ``fixed``, unknown estimator/prior/option names (the
            valid ones are listed), a refused estimator, prior or option (above), a prior-fusion estimator without a
            prior, bad prior options, ``scale_rewards`` that contradicts
            the estimator, ``multi_objective_aggregation="normalize_then_sum"``, a ``v05_reward_timeout_s``
            that is not a positive number of seconds, an unknown ``v05_reward_range``, ``num_generations=1`` with
            a group-only estimator, or a prior whose optional packages are missing (naming the extra).

    >>> V05GRPOConfig(output_dir="/tmp/v05-doc", use_cpu=True, report_to=[]).scale_rewards
    'none'
    """

    v05_estimator: str = field(default="v05", metadata={"help": "v05 estimator name (v05.registry.ESTIMATORS)."})
    v05_estimator_options: dict[str, Any] = field(
        default_factory=dict, metadata={"help": "Keyword options of the v05 estimator."}
    )
    v05_prior: str | None = field(
        default="running_mean", metadata={"help": "Prior provider name (v05.priors.PROVIDERS), or None."}
    )
    v05_prior_options: dict[str, Any] = field(
        default_factory=dict, metadata={"help": "Keyword options of the prior provider."}
    )
    v05_feed_n0: bool = field(default=True, metadata={"help": "Give the provider's n0 to estimators with an n0."})
    v05_allocator: str = field(default="fixed", metadata={"help": "Only 'fixed' (TRL's K per prompt)."})
    v05_sampler: str | None = field(
        default=None, metadata={"help": "None (TRL's sampler) or 'spo' (SPO's prioritised draw from a pool)."}
    )
    v05_sampler_options: dict[str, Any] = field(
        default_factory=dict, metadata={"help": "Options of the sampler ('spo': pool_factor, epsilon)."}
    )
    v05_reward_range: str = field(
        default="01",
        metadata={"help": "Scale of the weighted reward sum: '01' ([0, 1], pass = 1) or 'pm1' ([-1, 1], pass = 1)."},
    )
    v05_reward_timeout_s: float | None = field(
        default=None,
        metadata={"help": "Opt-in fault tolerance: per-call timeout (s) of guarded reward functions (None: off)."},
    )
    scale_rewards: str | None = field(  # type: ignore[assignment]
        default=None,
        metadata={"help": "TRL's name for the v05 estimator's scaling ('group' or 'none'); unset follows it."},
    )

    def __post_init__(self) -> None:
        one_rollout = self.num_generations == 1
        if one_rollout:  # TRL's own gate refuses K = 1 for every estimator; v05 decides below, per estimator
            self.num_generations = _OneGeneration()
        super().__post_init__()
        if one_rollout:
            self.num_generations = 1
        check_trl_version()
        if self.v05_allocator != "fixed":
            known = "" if self.v05_allocator in ALLOCATORS else f" (and {self.v05_allocator!r} is not a v05 allocator)"
            hint = "; SPO's sampling is v05_sampler='spo'" if self.v05_allocator in SAMPLERS else ""
            raise ValueError(f"v05_allocator={self.v05_allocator!r} is not available{known}: {FIXED_K_MESSAGE}{hint}")
        if self.v05_estimator not in ESTIMATORS:
            raise ValueError(f"unknown v05_estimator {self.v05_estimator!r}; valid: {', '.join(ESTIMATORS)}")
        spec = get_estimator(self.v05_estimator)
        if spec.needs_truth:
            raise ValueError(f"v05_estimator={self.v05_estimator!r} needs the true pass rates (simulation only)")
        if spec.needs_values:
            raise ValueError(
                f"v05_estimator={self.v05_estimator!r} needs per-rollout probe values from the policy's hidden states; "
                "use v05's trainer (estimator.name=poise)"
            )
        if one_rollout and not spec.single_rollout:
            raise ValueError(
                f"num_generations=1 with v05_estimator={self.v05_estimator!r}: its baseline is the group's own, so "
                "one rollout per prompt has advantage 0; use a baseline from outside the group (v05_eb or v05 with "
                "v05_prior='running_mean'/'combined', dbb, reinforce_pp) or num_generations >= 2"
            )
        self.v05_estimator_options = _estimator_options(self.v05_estimator_options, spec, self.v05_estimator)
        if self.v05_prior is not None and self.v05_prior not in PROVIDERS:
            raise ValueError(f"unknown v05_prior {self.v05_prior!r}; valid: {', '.join(PROVIDERS)}, or None")
        if self.v05_prior is not None and PROVIDERS[self.v05_prior].needs_sampler:
            raise ValueError(f"v05_prior={self.v05_prior!r} is a bound whose extra rollouts of the current "
                             "policy only v05 train draws; use a learned prior (running_mean, history, v0, "
                             "combined)")  # fmt: skip
        if self.v05_prior is not None and provider_spec(self.v05_prior, self.v05_prior_options).needs_policy:
            raise ValueError(f"v05_prior={self.v05_prior!r} with {self.v05_prior_options or {}} reads the live "
                             "policy's hidden states, which only v05 train binds; use a text or key prior "
                             "(running_mean, history, v0, combined)")  # fmt: skip
        if spec.uses_prior and self.v05_prior is None:
            raise ValueError(
                f"v05_estimator={self.v05_estimator!r} fuses a prior: set v05_prior to one of {', '.join(PROVIDERS)}"
            )
        if self.v05_sampler is not None:
            _sampler(self.v05_sampler, self.v05_sampler_options, k=1, batch_size=1)  # names and options checked
            if self.v05_prior is None:
                raise ValueError(f"v05_sampler={self.v05_sampler!r} draws by the prior's p̂: set v05_prior "
                                 "(v05_prior='spo' for SPO's tracker)")  # fmt: skip
        if _builds_provider(spec, self.v05_sampler) and self.v05_prior is not None:
            options = dict(self.v05_prior_options or {})
            check_provider_options(self.v05_prior, options)  # bad options or a missing extra fail here, not mid-run
            if _needs_drift(self.v05_prior, options):
                raise ValueError(
                    f"v05_prior={self.v05_prior!r} with rho='kl' discounts by the policy's drift, which only v05 train "
                    "measures; set v05_prior_options={'rho': 'constant'} (the recipe's rho.type=constant)"
                )
        self.v05_reward_range = reward_range_text(self.v05_reward_range)  # type: ignore[assignment]
        if self.v05_reward_range not in REWARD_RANGES:
            raise ValueError(
                f"unknown v05_reward_range {self.v05_reward_range!r}; valid: {', '.join(REWARD_RANGES)} "
                "('01': rewards in [0, 1]; 'pm1': rewards in [-1, 1])"
            )
        if self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError(
                f"multi_objective_aggregation={self.multi_objective_aggregation!r} normalises each reward "
                "function before v05 sees the rewards; V05GRPOTrainer needs 'sum_then_normalize' (the weighted sum is "
                "the reward)"
            )
        self.scale_rewards = _scale_rewards(spec, self.v05_estimator, self.v05_estimator_options, self.scale_rewards)
        timeout = self.v05_reward_timeout_s
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < math.inf
        ):
            raise ValueError(f"v05_reward_timeout_s must be a positive number of seconds or None, got {timeout!r}")


@dataclass(frozen=True, slots=True)
class _Recorded:
    rewards_per_func: torch.Tensor  # (N, F) gathered over processes
    keys: list[str]  # (N,) gathered
    texts: list[str]  # (N,) gathered
    n_local: int
    verifier_faults: tuple[int, int] | None = None  # (errors incl. garbage, timeouts) summed over processes


@dataclass(frozen=True, slots=True)
class _Shared:
    """What the main process computes for a generation batch and broadcasts to the others."""

    prior: FloatArray | None  # (G,) reward scale, NaN for unscored groups
    estimate: Estimate  # on the scored rollouts: advantages (S,) and the estimator state after the batch
    advantages: FloatArray  # (N,) the estimate's, 0 for the unscored rollouts
    calibration: Calibration | None  # the provider's, after its update (for the v05/prior_* metrics)
    prior_fallbacks: int = 0  # prompts of this batch the guard's running mean stood in for
    prior_update_errors: int = 0  # failed provider updates so far


class V05GRPOTrainer(trl.GRPOTrainer):
    """``trl.GRPOTrainer`` whose advantages come from a v05 estimator (and prior provider); the rest is TRL's.

    Per generation batch, on the main process, through the run's :class:`v05.round.Round` (the one v05's trainer and
    the verl plugin call): V = round.predict(keys, texts) → A = round.advantages(rewards, group, prior=V) →
    round.learn(keys, texts, rewards, group) (training batches only); V, A and the estimator state are broadcast to
    the other processes. ``v05/*`` metrics go to TRL's own
    metric log (``v05/zero_adv_frac``, ``v05/adv_abs_mean``, and when defined ``v05/mean_weight``,
    ``v05/reject_rate``, ``v05/n0``, ``v05/prior_mean``, ``v05/prior_tau2``, ``v05/prior_auc``, ``v05/prior_n0``,
    ``v05/prior_n``, ``v05/prior_fallbacks``, ``v05/prior_update_errors``, and with ``v05_reward_timeout_s`` set
    ``v05/verifier_errors``, ``v05/verifier_timeouts``). The override point, the multi-process layout, checkpoints
    and the fault guards: module docstring.

    Attributes:
        v05_provider: the prior provider on the main process; None on the other processes (they receive its
            prediction) and for estimators without a prior.
        v05_prior_guard: the :class:`~v05.priors.guard.PriorGuard` around ``v05_provider`` (None when it is None).
        v05_state: the estimator state carried across steps (``v05_eb``, ``dbb``), else None; the main process's,
            broadcast, so the same on every process.
        v05_last_batch: a :class:`V05Batch` for the latest generation batch (None before the first).
        v05_uses_prior: the run has a prior provider (the estimator fuses one, or ``v05_sampler`` draws by it).
        v05_draw_stats: the latest sampler draw's statistics (``v05_sampler``; logged as ``v05/sampler_*``), else
            None.
    """

    def __init__(
        self,
        model: Any,
        reward_funcs: Any = None,
        args: V05GRPOConfig | None = None,
        **kwargs: Any,
    ) -> None:
        """Build the trainer.

        Args:
            model: as ``trl.GRPOTrainer``.
            reward_funcs: as ``trl.GRPOTrainer``; their weighted sum must lie in ``args.v05_reward_range`` ([0, 1]
                or [−1, 1]). With ``args.v05_reward_timeout_s`` set, the synchronous callables are guarded
                (:mod:`v05.adapters.trl_rewards`).
            args: a :class:`V05GRPOConfig` (required).
            **kwargs: passed to ``trl.GRPOTrainer`` (``train_dataset``, ``processing_class``, ``callbacks``, ...).

        Raises:
            ValueError: an unsupported TRL, ``args`` not a ``V05GRPOConfig``, or bad prior options.
        """
        check_trl_version()
        if not isinstance(args, V05GRPOConfig):
            raise ValueError(f"V05GRPOTrainer needs args=V05GRPOConfig(...), got {type(args).__name__}")
        self.v05_spec = get_estimator(args.v05_estimator)
        self.v05_uses_prior = _builds_provider(self.v05_spec, args.v05_sampler) and args.v05_prior is not None
        main_prior = args.v05_prior if self.v05_uses_prior and args.process_index == 0 else None
        allocator = None
        if args.v05_sampler is not None:
            if isinstance(kwargs.get("train_dataset"), IterableDataset | datasets.IterableDataset):
                raise ValueError(f"v05_sampler={args.v05_sampler!r} draws rows of a map-style train dataset (a "
                                 "datasets.Dataset), not of an IterableDataset")  # fmt: skip
            allocator = _sampler(args.v05_sampler, args.v05_sampler_options, k=args.num_generations,
                                 batch_size=args.generation_batch_size // args.num_generations)  # fmt: skip
        self.v05_round = Round(args.v05_estimator, options=args.v05_estimator_options,
                               reward_range=args.v05_reward_range, prior=main_prior,
                               prior_options=args.v05_prior_options, feed_n0=args.v05_feed_n0,
                               allocator=allocator)  # fmt: skip
        self.v05_draw_stats: dict[str, float] | None = None
        self.v05_last_batch: V05Batch | None = None
        self._v05_recorded: _Recorded | None = None
        funcs = _guard_rewards(reward_funcs, args.v05_reward_timeout_s, args.v05_reward_range)
        super().__init__(model, funcs, args, **kwargs)

    @property
    def v05_provider(self) -> Any:
        """The round's prior provider (main process; None elsewhere and without a prior)."""
        return self.v05_round.provider

    @v05_provider.setter
    def v05_provider(self, provider: Any) -> None:
        self.v05_round.provider = provider

    @property
    def v05_prior_guard(self) -> PriorGuard | None:
        """The round's guard around the provider (None without one)."""
        return self.v05_round.guard

    @property
    def v05_state(self) -> Any:
        """The estimator state the round carries across steps (the main process's, broadcast)."""
        return self.v05_round.estimator_state

    @v05_state.setter
    def v05_state(self, state: Any) -> None:
        self.v05_round.estimator_state = state

    def _get_train_sampler(self, dataset: Any = None) -> Sampler:
        """TRL's sampler, or with ``v05_sampler`` a :class:`~v05.adapters.trl_sampler.PoolSampler` drawing by the round.

        Same layout as TRL's ``RepeatSampler`` (each prompt K times in a row, a generation batch R times), so TRL
        reads it unchanged; the pools and the lag: :mod:`v05.adapters.trl_sampler`.
        """
        if self.args.v05_sampler is None:
            return super()._get_train_sampler(dataset)
        dataset = self.train_dataset if dataset is None else dataset
        self._v05_rows = _dataset_keys(dataset)  # (n,) keys, (n,) texts: what the round predicts the candidates by
        allocator = self.v05_round.allocator
        return PoolSampler(len(dataset), batch_size=allocator.batch_size,
                           pool_size=allocator.candidate_pool(allocator.batch_size),
                           mini_repeat_count=self.num_generations,
                           repeat_count=self.num_iterations * self.args.steps_per_generation, seed=self.args.seed,
                           draw=self._v05_draw)  # fmt: skip

    def _v05_draw(self, pool: IntArray, epoch: int, index: int) -> IntArray:
        """(B,) dataset rows of a generation batch: the round's prior of the pool, then its allocator.

        On the main process (its tracker), broadcast to the others. The allocator only chooses (SPO's weighted draw,
        or ``prior_select``'s top-B by the prior): TRL generates the rollouts later, so its one round is told
        placeholder rewards (0), which neither choice reads; statistics computed from them
        (:data:`~v05.adapters.trl_options.SAMPLER_REWARD_STATS`) are left out of the log.
        """
        keys, texts = self._v05_rows

        def draw() -> tuple[IntArray, dict[str, float]]:
            rnd = self.v05_round
            prior = rnd.predict(keys[pool], [texts[i] for i in pool])
            alloc: Allocation = rnd.allocate(lambda ids, counts: np.zeros(int(counts.sum())), n_prompts=len(pool),
                                             rng=np.random.default_rng([self.args.seed, 23, epoch, index]),
                                             prior=prior, keys=keys[pool])  # fmt: skip
            return pool[alloc.kept], {k: v for k, v in alloc.stats.items() if k not in SAMPLER_REWARD_STATS}

        rows, self.v05_draw_stats = self._v05_from_main(draw)
        return rows

    def _calculate_rewards(self, inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any) -> Any:
        """TRL's gathered rewards (unchanged); also records the gathered prompt keys, texts and verifier faults.

        The fault counts (rollouts a guarded reward function gave the range's failure reward) are summed over the
        functions and the processes.
        """
        guarded = [f for f in self.reward_funcs if isinstance(f, _GuardedReward) and f.guarded]
        for f in guarded:
            f.faults.reset()
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        texts = [_prompt_text(p) for p in prompts]
        keys = [_row_key(row, text) for row, text in zip(inputs, texts, strict=True)]
        faults = None
        if guarded:
            local = (sum(f.faults.errors + f.faults.garbage for f in guarded), sum(f.faults.timeouts for f in guarded))
            every = gather_object([local])  # (processes,) of (errors, timeouts)
            faults = (sum(e for e, _ in every), sum(t for _, t in every))
        self._v05_recorded = _Recorded(
            rewards_per_func, gather_object(keys), gather_object(texts), len(prompts), faults
        )
        return rewards_per_func

    def _generate_and_score_completions(self, inputs: Any) -> Any:
        """TRL's generation and scoring, with ``output["advantages"]`` replaced by the v05 estimate (this slice)."""
        self._v05_recorded = None
        output = super()._generate_and_score_completions(inputs)
        recorded = self._v05_recorded
        if recorded is None:
            raise RuntimeError(
                "TRL did not call _calculate_rewards inside _generate_and_score_completions; this TRL version "
                f"is not supported by v05.adapters.trl ({SUPPORTED_TRL})"
            )
        mode = "train" if self.model.training else "eval"
        k = self.num_generations if mode == "train" else self.num_generations_eval
        p = self.accelerator.process_index
        process_slice = slice(p * recorded.n_local, (p + 1) * recorded.n_local)  # TRL's process_slice
        batch = self._v05_estimate(recorded, int(k), mode, process_slice)
        local = output["advantages"]  # (n_local,) TRL's, replaced
        output["advantages"] = torch.as_tensor(batch.advantages[process_slice], dtype=local.dtype, device=local.device)
        self.v05_last_batch = batch
        return output

    def _v05_estimate(self, recorded: _Recorded, k: int, mode: str, process_slice: slice) -> V05Batch:
        """Checks on every process; prior → estimator → prior update on the main one, broadcast; logs ``v05/*``."""
        reward_range = self.args.v05_reward_range
        rewards = _weighted_rewards(recorded.rewards_per_func, self.reward_weights, reward_range)  # (N,) NaN: unscored
        n = len(rewards)
        if k < 1 or n % k:
            raise ValueError(f"{n} rollouts do not split into groups of num_generations={k}")
        group = np.arange(n) // k  # (N,) TRL's contiguous layout
        keys_g, texts_g = _group_keys(recorded.keys, recorded.texts, k)  # (G,), (G,)
        shared = self._v05_from_main(lambda: self._v05_compute(rewards, group, keys_g, texts_g, mode))
        if mode == "train" and self.v05_spec.stateful:
            self.v05_state = shared.estimate.state
        self._v05_log(mode, shared, group, recorded.verifier_faults)
        engine = self._v05_swap_logged_advantages(shared.advantages)
        scored = ~np.isnan(rewards)
        return V05Batch(mode, tuple(keys_g), rewards, group, shared.prior, shared.estimate, shared.advantages,
                        scored, engine, process_slice)  # fmt: skip

    def _v05_compute(
        self, rewards: FloatArray, group: IntArray, keys_g: np.ndarray, texts_g: list[str], mode: str
    ) -> _Shared:
        """Prior → estimator → prior update on the whole batch (the main process's provider and state).

        Unscored rollouts (NaN: every reward function returned None) are left out, as TRL leaves them out of its
        baseline: the estimator sees the scored ones (groups renumbered), the provider predicts and learns the groups
        with at least one, and the unscored rollouts get advantage 0.
        """
        rnd, step = self.v05_round, int(self.state.global_step)
        scored = ~np.isnan(rewards)  # (N,)
        if not scored.any():  # nothing to learn from: advantage 0 everywhere, prior and state unchanged
            est = Estimate(np.zeros(0), np.zeros(0), state=rnd.estimator_state if self.v05_spec.stateful else None)
            errors = rnd.guard.update_errors if rnd.guard is not None else 0
            prior_g = None if rnd.provider is None else np.full(len(keys_g), np.nan)
            return _Shared(prior_g, est, np.zeros(len(rewards)), rnd.calibration(), 0, errors)
        kept, sub_group = np.unique(group[scored], return_inverse=True)  # (G',) groups with a reward; (S,) ids
        keys, texts = [str(keys_g[g]) for g in kept], [texts_g[g] for g in kept]
        prior = rnd.predict(keys, texts)
        est = rnd.advantages(rewards[scored], sub_group, prior=prior, keys=np.asarray(keys), step=step, carry=False)
        if mode == "train":
            rnd.learn(keys, texts, rewards[scored], sub_group, step=step)
        advantages = np.zeros(len(rewards))  # (N,)
        advantages[scored] = est.advantages
        prior_g = None
        if prior is not None:
            prior_g = np.full(len(keys_g), np.nan)  # (G,)
            prior_g[kept] = prior.value
        errors = rnd.guard.update_errors if rnd.guard is not None else 0
        return _Shared(prior_g, est, advantages, rnd.calibration(), 0 if prior is None else prior.fallbacks, errors)

    def _v05_from_main(self, compute: Callable[[], _T]) -> _T:
        """``compute()`` on the main process, broadcast to the others; an error there is raised on every process.

        The other processes would otherwise wait in the broadcast until the process group's timeout.
        """
        if self.accelerator.num_processes == 1:
            return compute()
        payload: list[tuple[bool, Any] | None] = [None]  # (ok, the result or the error's line)
        error: Exception | None = None
        if self.accelerator.is_main_process:
            try:
                payload[0] = (True, compute())
            except Exception as err:  # re-raised below, once the other processes know
                error = err
                payload[0] = (False, f"{type(err).__name__}: {err}")
        broadcast_object_list(payload, from_process=0)
        if error is not None:
            raise error
        ok, value = payload[0] if payload[0] is not None else (False, "nothing received")
        if not ok:
            raise RuntimeError(f"the main process failed in the v05 round: {value}")
        return value

    def _v05_log(self, mode: str, shared: _Shared, group: IntArray, verifier_faults: tuple[int, int] | None) -> None:
        metrics, est = self._metrics[mode], shared.estimate
        moved_g = np.bincount(group, weights=(np.abs(shared.advantages) > 1e-12).astype(np.float64))  # (G,)
        metrics["v05/zero_adv_frac"].append(float(np.mean(moved_g == 0)))
        metrics["v05/adv_abs_mean"].append(float(np.mean(np.abs(shared.advantages))))
        for name, values in (("mean_weight", est.weight), ("reject_rate", est.reject), ("n0", est.n0)):
            if values is not None:
                metrics[f"v05/{name}"].append(float(np.mean(values)))
        if shared.calibration is not None and shared.prior is not None:
            midpoint = float(from_pass_rate(0.5, self.args.v05_reward_range))  # no scored group: the scale's middle
            metrics["v05/prior_mean"].append(
                float(np.nanmean(shared.prior)) if np.isfinite(shared.prior).any() else midpoint
            )
            for name in ("tau2", "auc", "n0", "n"):
                metrics[f"v05/prior_{name}"].append(float(getattr(shared.calibration, name)))
        if shared.prior is not None:
            metrics["v05/prior_fallbacks"].append(float(shared.prior_fallbacks))
            metrics["v05/prior_update_errors"].append(float(shared.prior_update_errors))
        if mode == "train" and self.v05_draw_stats:  # the latest draw of the sampler (a batch ahead: the lag)
            for name, value in self.v05_draw_stats.items():
                metrics[f"v05/sampler_{name}"].append(float(value))
        if verifier_faults is not None:
            metrics["v05/verifier_errors"].append(float(verifier_faults[0]))
            metrics["v05/verifier_timeouts"].append(float(verifier_faults[1]))

    def _v05_swap_logged_advantages(self, advantages: FloatArray) -> FloatArray | None:
        """Put v05's advantages in TRL's completion log; return TRL's (the log's tail) if it held them all."""
        logged = self._logs["advantages"]  # deque(maxlen=generation_batch_size), TRL just extended it by N
        n = len(advantages)
        engine = np.asarray(list(logged)[-n:], np.float64) if len(logged) >= n else None
        for _ in range(min(n, len(logged))):
            logged.pop()
        logged.extend(advantages.tolist())
        return engine

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        """TRL's checkpoint, plus the provider, prior-guard and estimator states in ``v05_state.json`` (main rank)."""
        super()._save_checkpoint(model, trial)
        if not self.args.should_save:
            return
        folder = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        own = self.v05_round.state_dict()
        state = {
            "estimator": self.args.v05_estimator,
            "prior": self.args.v05_prior if self.v05_provider is not None else None,
            "estimator_state": own["estimator"],
            "provider": own["provider"],
            "prior_guard": own["prior_guard"],
        }
        path = os.path.join(folder, STATE_FILE)
        with open(f"{path}.tmp", "w", encoding="utf-8") as fh:
            json.dump(state, fh)
        os.replace(f"{path}.tmp", path)

    def _load_optimizer_and_scheduler(self, checkpoint: Any) -> None:
        """TRL's resume (every process, every backend), plus the v05 states from ``checkpoint``'s ``v05_state.json``."""
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        path = os.path.join(checkpoint, STATE_FILE)
        restores = self.v05_spec.stateful or self.v05_uses_prior
        if not os.path.exists(path):
            if restores:
                warnings.warn(
                    f"{checkpoint} has no {STATE_FILE} (not saved by V05GRPOTrainer): the prior provider and the "
                    "estimator state start afresh",
                    stacklevel=2,
                )
            return
        with open(path, encoding="utf-8") as fh:
            state = json.load(fh)
        carried = self.v05_spec.stateful or state["estimator_state"] is not None
        if carried and state["estimator"] != self.args.v05_estimator:
            raise ValueError(
                f"{path} holds the state of v05_estimator={state['estimator']!r}, not {self.args.v05_estimator!r}: "
                "resume with the estimator it was saved with"
            )
        if self.v05_provider is not None and (state["provider"] is None or state["prior"] != self.args.v05_prior):
            raise ValueError(
                f"{path} holds no state of v05_prior={self.args.v05_prior!r} (found {state['prior']!r}): "
                "resume with the prior it was saved with"
            )
        self.v05_round.load_state_dict({"estimator": state["estimator_state"], "provider": state["provider"],
                                        "prior_guard": state.get("prior_guard")})  # fmt: skip


__all__ = [
    "FIXED_K_MESSAGE",
    "GRPOConfig",
    "GRPOTrainer",
    "SUPPORTED_TRL",
    "V05Batch",
    "V05GRPOConfig",
    "V05GRPOTrainer",
    "check_trl_version",
    "no_checkpointing_args",
]
