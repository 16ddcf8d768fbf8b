r"""TRL adapter: v05's advantage estimators and prior providers inside ``trl.GRPOTrainer`` (TRL 1.16 ≤ version < 2).

The only module of v05 that imports ``trl``. TRL terms are translated here: ``num_generations`` → K, a completion →
a rollout, the contiguous block of K completions of one prompt → a group (``group = arange(N) // K``).

Override point. TRL 1.16 computes advantages inline, in the middle of the ~600-line private
``GRPOTrainer._generate_and_score_completions`` (after the rewards are gathered, before the process slice); there is
no narrower method to replace. ``V05GRPOTrainer`` therefore wraps two private methods and keeps all of TRL's code:
``_calculate_rewards`` (unchanged result; it records the gathered rewards and this process's prompt keys and texts)
and ``_generate_and_score_completions`` (calls TRL, then replaces ``output["advantages"]`` with the v05 estimate on the
recorded rewards, sliced as TRL slices). TRL's own advantages are computed and discarded; they stay visible in
``V05GRPOTrainer.v05_last_batch.engine_advantages`` (a differential check in the tests).

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

- Rewards are TRL's weighted sum Σ_f w_f·r_f per rollout, on v05's 0/1 scale (``reward_range="01"``); a sum outside
  [0, 1] or a rollout every reward function scored ``None`` (TRL zeroes its advantage) raises ``ValueError``.
- ``scale_rewards`` describes the v05 estimator's scaling ("group" ↔ ``scale="group_std"``, "none" otherwise); the
  prior-fusion estimators force "none" (see :class:`V05GRPOConfig`). ``multi_objective_aggregation`` must be
  ``"sum_then_normalize"``. With ``v05_estimator="grpo"`` the advantages differ from TRL's by the ε in
  (r − r̄)/(std + ε): v05 (as verl) uses 1e-6, TRL 1e-4 (``v05_estimator_options={"eps": 1e-4}`` matches TRL).
- Fixed K only: TRL samples ``num_generations`` rollouts for every prompt, so OSLA's per-prompt extra rollouts
  (and any allocator but ``fixed``) are refused; use v05's trainer or the verl plugin for ragged budgets.
- Evaluation batches use the prior but do not update it or the estimator state. A checkpoint without
  ``v05_state.json`` (e.g. saved by plain TRL) resumes with a fresh provider and estimator state, with a warning.

Faults, as in v05's trainer: a prior provider whose ``predict`` raises or returns NaN/out-of-range values is
replaced, for those prompts and that batch, by the running mean of :class:`v05.priors.guard.PriorGuard` (its
``update`` raising is logged and the step goes on); ``v05/prior_fallbacks`` counts the batch's replaced prompts and
``v05/prior_update_errors`` the failed updates so far; the guard's state is checkpointed beside the provider's.
With ``v05_reward_timeout_s`` set (the default), each synchronous reward function runs behind
:func:`v05.tasks.verify.call_with_timeout`: a call that raises or times out scores its whole batch 0.0, an element
that is neither None nor a finite number scores 0.0, and ``v05/verifier_errors`` / ``v05/verifier_timeouts`` count
the rollouts so scored (garbage counts as an error, as in v05's trainer). None stays TRL's "not applicable".

TRL workarounds (TRL 1.16 + transformers 5): TRL defaults ``gradient_checkpointing=True``, a deprecated alias that
warns and recomputes activations — pass :func:`no_checkpointing_args` on small models. A tokenizer without a
chat template (the char-level tiny model) takes plain-string prompts (a ``"prompt"`` column of str). TRL seeds the
global RNGs in its constructor (``set_seed(args.seed)``); :func:`trl_grpo_rollouts_per_s` restores the caller's.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import json
import logging
import math
import os
import random
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import trl
from accelerate.utils import broadcast_object_list, gather_object
from packaging.version import InvalidVersion, Version
from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback, ProgressCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl.trainer.utils import get_callable_name, is_async_callable

from v05._checks import REWARD_RANGES, check_reward_range, error_line, reward_range_text
from v05._types import FloatArray, IntArray
from v05.estimators import Estimate
from v05.names import check_options
from v05.priors import PROVIDERS, Calibration, check_provider_options, group_outcomes, make_provider
from v05.priors.guard import PriorGuard
from v05.registry import ALLOCATORS, CONTEXT_OPTIONS, ESTIMATORS, EstimatorSpec, estimate, get_estimator
from v05.rewards import from_pass_rate, score_to_reward_scale
from v05.tasks.base import prompt_key
from v05.tasks.verify import ScoreFault, ScoreFaults, call_with_timeout, finite_reward
from v05.train.state import state_from_json, state_to_json

logger = logging.getLogger(__name__)

SUPPORTED_TRL = ">=1.16,<2"
"""TRL versions this adapter supports (it wraps private ``GRPOTrainer`` methods; tested on 1.16.0)."""

FIXED_K_MESSAGE = (
    "TRL's GRPOTrainer samples a fixed num_generations per prompt in contiguous blocks; per-prompt extra rollouts "
    "(OSLA) need v05's trainer or the verl plugin"
)
_TRL_SCALE = {"group_std": "group", "none": "none"}  # v05 scale → TRL's scale_rewards name (others: "none")
STATE_FILE = "v05_state.json"
"""The file in each TRL checkpoint folder that holds the provider and estimator states (written by the main process)."""


def no_checkpointing_args() -> dict[str, bool]:
    """Keyword arguments that turn off TRL's default activation checkpointing, for this transformers version.

    ``activation_checkpointing`` on transformers ≥ 5.11, ``gradient_checkpointing`` before (the field was renamed).
    """
    from transformers import TrainingArguments  # noqa: PLC0415

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


def _refuses_group_std(spec: EstimatorSpec) -> bool:
    """Estimators whose baseline is not the group mean (a prior or a history): all-equal groups keep signal."""
    return spec.uses_prior or spec.keyed


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
        v05_estimator: a name in ``v05.registry.ESTIMATORS`` (``oracle`` is refused: it needs the true pass rates).
        v05_estimator_options: keyword options of the estimator (e.g. ``{"noise": "plugin"}``; ``state``,
            ``prompt_ids``, ``step`` and ``prior`` are filled by the adapter).
        v05_prior: a name in ``v05.priors.PROVIDERS``; required by prior-fusion estimators (``v05``, ``v05_eb``),
            ignored by the others.
        v05_prior_options: keyword options of the provider.
        v05_feed_n0: give the provider's pseudo-count n0 to estimators with an ``n0`` option (``v05_eb``) unless
            ``v05_estimator_options`` fixes ``n0``.
        v05_allocator: only ``"fixed"``: TRL samples K = ``num_generations`` rollouts for every prompt.
        v05_reward_range: the scale of TRL's weighted reward sum Σ_f w_f·r_f: ``"01"`` ([0, 1], e.g. 0/1
            correctness) or ``"pm1"`` ([−1, 1], e.g. ±1 as verl's DAPO scorer). The estimator and the prior work on
            it (at ``scale="none"`` a ±1 reward gives twice the advantage of a 0/1 one).
        v05_reward_timeout_s: opt-in fault tolerance (module docstring, "Rewards"): seconds each call of a
            synchronous reward function may take; a call that raises or times out, and an element that is not a
            finite number or None, then score the range's failure reward (0 on ``01``, −1 on ``pm1``), counted.
            None (the default): a reward function that raises stops the run, as in TRL.
        scale_rewards: TRL's name for the estimator's scaling, ``"group"`` for ``scale="group_std"`` and ``"none"``
            otherwise. Unset (``None``) takes that value; a value that contradicts the estimator raises. Prior-fusion
            and history estimators (``v05``, ``v05_eb``, ``dbb``) are never group-std scaled, so they get ``"none"``.

    Raises:
        ValueError: an unsupported TRL, an allocator other than ``fixed``, unknown estimator/prior/option names (the
            valid ones are listed), a prior-fusion estimator without a prior, ``scale_rewards`` that contradicts
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
            raise ValueError(f"v05_allocator={self.v05_allocator!r} is not available{known}: {FIXED_K_MESSAGE}")
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
        self._check_options(spec)
        if self.v05_prior is not None and self.v05_prior not in PROVIDERS:
            raise ValueError(f"unknown v05_prior {self.v05_prior!r}; valid: {', '.join(PROVIDERS)}, or None")
        if self.v05_prior is not None and getattr(PROVIDERS[self.v05_prior], "needs_sampler", False):
            raise ValueError(f"v05_prior={self.v05_prior!r} is a simulation-only bound whose extra rollouts only "
                             "v05 train draws; use a learned prior (running_mean, history, v0, combined)")  # fmt: skip
        if spec.uses_prior and self.v05_prior is None:
            raise ValueError(
                f"v05_estimator={self.v05_estimator!r} fuses a prior: set v05_prior to one of {', '.join(PROVIDERS)}"
            )
        if spec.uses_prior and self.v05_prior is not None:  # bad options or a missing extra fail here, not mid-run
            check_provider_options(self.v05_prior, dict(self.v05_prior_options or {}))
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
        self._resolve_scale(spec)
        timeout = self.v05_reward_timeout_s
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < math.inf
        ):
            raise ValueError(f"v05_reward_timeout_s must be a positive number of seconds or None, got {timeout!r}")

    def _check_options(self, spec: EstimatorSpec) -> None:
        options = dict(self.v05_estimator_options or {})
        reserved = sorted(set(options) & set(CONTEXT_OPTIONS))
        if reserved:
            raise ValueError(
                f"v05_estimator_options may not set {', '.join(reserved)}: the adapter fills it; remove it"
            )
        check_options(options, [o for o in spec.options if o not in CONTEXT_OPTIONS], "estimator", self.v05_estimator)
        self.v05_estimator_options = options

    def _resolve_scale(self, spec: EstimatorSpec) -> None:
        """Set or check ``scale_rewards`` against the estimator's scaling (rule in the class docstring)."""
        param = inspect.signature(spec.fn).parameters.get("scale")
        scale = self.v05_estimator_options.get("scale", "none" if param is None else param.default)
        expected = _TRL_SCALE.get(str(scale), "none")
        if self.scale_rewards is None:
            self.scale_rewards = expected
            return
        if self.scale_rewards == expected:
            return
        if _refuses_group_std(spec) and self.scale_rewards == "group":
            raise ValueError(
                f"scale_rewards={self.scale_rewards!r} with v05_estimator={self.v05_estimator!r}: its baseline comes "
                "from a prior or a history, which gives all-equal groups a non-zero advantage although their std is "
                "0; set scale_rewards='none' (or leave it unset), and v05_estimator_options={'scale': 'model_std'} "
                "for a Bernoulli-std scaling"
            )
        raise ValueError(
            f"scale_rewards={self.scale_rewards!r} contradicts v05_estimator={self.v05_estimator!r} with "
            f"scale={scale!r} (TRL's name for it: {expected!r}); leave scale_rewards unset, or choose the scaling "
            "through v05_estimator_options={'scale': ...} ('group_std' ↔ 'group', 'none' ↔ 'none')"
        )


@dataclass(frozen=True, slots=True)
class V05Batch:
    """What the adapter computed for the latest generation batch (all processes' rollouts, in TRL's order).

    Attributes:
        mode: ``"train"`` or ``"eval"``.
        prompt_ids: (G,) stable prompt keys (``prompt_id`` column, else ``"sha1:" + sha1(prompt text)[:12]``).
        rewards: (N,) TRL's weighted reward sums on ``v05_reward_range``'s scale; NaN where every reward function
            returned None (unscored).
        group: (N,) group ids, ``arange(N) // K``.
        prior: (G,) the provider's prediction on the reward scale (NaN for a group with no scored rollout), or None.
        estimate: the v05 estimate on the scored rollouts (``scored``), groups renumbered in order.
        advantages: (N,) what TRL's loss uses (sliced per process): the estimate's, 0 for the unscored rollouts.
        scored: (N,) bool, the rollouts with a reward.
        engine_advantages: (N,) TRL's own advantages for the same batch (discarded), or None if TRL's completion
            log could not hold them.
        process_slice: the rollouts of this process.
    """

    mode: str
    prompt_ids: tuple[str, ...]
    rewards: FloatArray
    group: IntArray
    prior: FloatArray | None
    estimate: Estimate
    advantages: FloatArray
    scored: np.ndarray
    engine_advantages: FloatArray | None
    process_slice: slice


@dataclass(frozen=True, slots=True)
class _Recorded:
    rewards_per_func: torch.Tensor  # (N, F) gathered over processes
    keys: list[str]  # (N,) gathered
    texts: list[str]  # (N,) gathered
    n_local: int
    verifier_faults: tuple[int, int] | None = None  # (errors incl. garbage, timeouts) summed over processes


class _GuardedReward:
    """A synchronous TRL reward function behind v05's reward rule (module docstring, "Rewards").

    ``fn(prompts, completions, **kwargs) -> list[float | None]``. Unguarded (``timeout_s`` None): an exception
    propagates (TRL's behaviour) and a result that is not one finite number or None per rollout raises
    ``ValueError`` naming the function and the rollout (TRL would read NaN as None and go on). Guarded: the call runs
    behind ``call_with_timeout`` (the main thread, where TRL calls reward functions); a raise, a timeout or a result
    that is not a list of one value per rollout gives every rollout ``fault_score``, and each element that is neither
    None nor a finite number gives ``fault_score`` (garbage). ``faults`` counts rollouts; the first fault of each kind
    is logged at WARNING.
    """

    def __init__(self, fn: Callable[..., Any], timeout_s: float | None, fault_score: float = 0.0) -> None:
        functools.update_wrapper(self, fn)
        self.__name__ = get_callable_name(fn)  # TRL names the reward's metrics after it
        self.fn, self.timeout_s, self.fault_score, self.faults = fn, timeout_s, fault_score, ScoreFaults()
        self._warned: set[str] = set()

    @property
    def guarded(self) -> bool:
        """True when faults score ``fault_score`` (a timeout is set) rather than stop the run."""
        return self.timeout_s is not None

    def __call__(self, prompts: Any, completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        n = len(completions)
        call = functools.partial(self.fn, prompts=prompts, completions=completions, **kwargs)
        if not self.guarded:
            return self._checked(call(), n)
        try:
            out = call_with_timeout(call, timeout_s=self.timeout_s)
        except TimeoutError:
            return self._faulted("timeout", n, f"ran past its {self.timeout_s} s timeout")
        except Exception as err:  # guarded: any reward-function bug is a fault reward, never a crashed run
            return self._faulted("error", n, f"raised {error_line(err)}")
        if isinstance(out, str | bytes) or not isinstance(out, Sequence | np.ndarray) or len(out) != n:
            return self._faulted("garbage", n, f"returned {type(out).__name__}, not a list of {n} rewards")
        rewards: list[float | None] = []
        for value in out:
            reward = None if value is None else finite_reward(value)
            if value is not None and reward is None:
                self._fault("garbage", 1, f"returned {value!r}, not a finite number or None")
            rewards.append(None if value is None else (self.fault_score if reward is None else reward))
        return rewards

    def _checked(self, out: Any, n: int) -> list[float | None]:
        """The unguarded rule: one finite number or None per rollout, else ``ValueError``."""
        if isinstance(out, str | bytes) or not isinstance(out, Sequence | np.ndarray) or len(out) != n:
            raise ValueError(
                f"reward function {self.__name__} returned {type(out).__name__}"
                f"{f' of length {len(out)}' if hasattr(out, '__len__') else ''}, not a list of {n} rewards"
            )
        rewards: list[float | None] = []
        for i, value in enumerate(out):
            reward = None if value is None else finite_reward(value)
            if value is not None and reward is None:
                raise ValueError(
                    f"reward function {self.__name__} returned {value!r} for rollout {i}: return a finite number, or "
                    "None where the function does not apply (set v05_reward_timeout_s to score faults instead)"
                )
            rewards.append(reward)
        return rewards

    def _faulted(self, fault: ScoreFault, n: int, what: str) -> list[float | None]:
        self._fault(fault, n, what)
        return [self.fault_score] * n

    def _fault(self, fault: ScoreFault, n: int, what: str) -> None:
        self.faults.add(fault, n)
        level = logging.DEBUG if fault in self._warned else logging.WARNING
        self._warned.add(fault)
        logger.log(level, "reward function %s %s: reward %s, counted in v05/verifier_*", self.__name__, what,
                   self.fault_score)  # fmt: skip


def _guard_rewards(reward_funcs: Any, timeout_s: float | None, reward_range: str) -> Any:
    """``reward_funcs`` with each synchronous callable wrapped in :class:`_GuardedReward`.

    A guarded fault scores the range's failure reward, its lower end.

    Reward models (``nn.Module``, model ids) and async functions are left as they are: the SIGALRM timeout cannot
    reach TRL's async event-loop thread.
    """
    if reward_funcs is None:
        return reward_funcs
    fault_score = check_reward_range(reward_range)[0]
    funcs = reward_funcs if isinstance(reward_funcs, list) else [reward_funcs]
    return [
        _GuardedReward(f, timeout_s, fault_score)
        if callable(f) and not isinstance(f, torch.nn.Module | _GuardedReward) and not is_async_callable(f)
        else f
        for f in funcs
    ]


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

    Per generation batch, on the main process: V = provider.predict(keys, texts) → A = estimate(estimator, rewards,
    group, prior=V) → provider.update(keys, texts, group means, counts) (training batches only); V, A and the
    estimator state are broadcast to the other processes. ``v05/*`` metrics go to TRL's own
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
            reward_funcs: as ``trl.GRPOTrainer``; their weighted sum must lie in [0, 1]. With
                ``args.v05_reward_timeout_s`` set, the synchronous callables are guarded (module docstring).
            args: a :class:`V05GRPOConfig` (required).
            **kwargs: passed to ``trl.GRPOTrainer`` (``train_dataset``, ``processing_class``, ``callbacks``, ...).

        Raises:
            ValueError: an unsupported TRL, ``args`` not a ``V05GRPOConfig``, or bad prior options.
        """
        check_trl_version()
        if not isinstance(args, V05GRPOConfig):
            raise ValueError(f"V05GRPOTrainer needs args=V05GRPOConfig(...), got {type(args).__name__}")
        self.v05_spec = get_estimator(args.v05_estimator)
        self.v05_provider = None
        self.v05_prior_guard: PriorGuard | None = None
        if self.v05_spec.uses_prior and args.v05_prior is not None and args.process_index == 0:
            self.v05_provider = make_provider(args.v05_prior, **args.v05_prior_options)  # main process only
            self.v05_prior_guard = PriorGuard()
        self.v05_state: object | None = None
        self.v05_last_batch: V05Batch | None = None
        self._v05_recorded: _Recorded | None = None
        funcs = _guard_rewards(reward_funcs, args.v05_reward_timeout_s, args.v05_reward_range)
        super().__init__(model, funcs, args, **kwargs)

    def _calculate_rewards(self, inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any) -> Any:
        """TRL's gathered rewards (unchanged); also records the gathered prompt keys, texts and verifier faults.

        The fault counts (rollouts scored 0.0 by the guarded reward functions) are summed over processes.
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
        spec, args = self.v05_spec, self.args
        reward_range = args.v05_reward_range
        fed = None
        scored = ~np.isnan(rewards)  # (N,)
        if not scored.any():  # nothing to learn from: advantage 0 everywhere, prior and state unchanged
            est = Estimate(np.zeros(0), np.zeros(0), state=self.v05_state if spec.stateful else None)
            calibration = self.v05_provider.calibration() if self.v05_provider is not None else None
            errors = self.v05_prior_guard.update_errors if self.v05_prior_guard is not None else 0
            prior_g = None if self.v05_provider is None else np.full(len(keys_g), np.nan)
            return _Shared(prior_g, est, np.zeros(len(rewards)), calibration, 0, errors)
        kept, sub_group = np.unique(group[scored], return_inverse=True)  # (G',) groups with a reward; (S,) ids
        keys, texts = [str(keys_g[g]) for g in kept], [texts_g[g] for g in kept]
        prior, guard, n_fallback = None, self.v05_prior_guard, 0
        if self.v05_provider is not None and guard is not None:
            pred, n_fallback = guard.predict(self.v05_provider, keys, texts)
            prior = score_to_reward_scale(pred.mean, reward_range)  # (G',) ±1 score → reward scale
            fed = np.asarray(pred.n0, np.float64) if args.v05_feed_n0 else None
        options = spec.bind(args.v05_estimator_options, prior=prior, n0=fed, state=self.v05_state,
                            prompt_ids=np.asarray(keys), step=int(self.state.global_step))  # fmt: skip
        est = estimate(args.v05_estimator, rewards[scored], sub_group, reward_range=reward_range, **options)
        if mode == "train" and self.v05_provider is not None and guard is not None:
            scores, counts = group_outcomes(rewards[scored], sub_group, reward_range=reward_range)
            step = int(self.state.global_step)
            guard.update(self.v05_provider, keys, texts, scores, counts, step=step)
        calibration = self.v05_provider.calibration() if self.v05_provider is not None else None
        update_errors = guard.update_errors if guard is not None else 0
        advantages = np.zeros(len(rewards))  # (N,)
        advantages[scored] = est.advantages
        prior_g = None
        if prior is not None:
            prior_g = np.full(len(keys_g), np.nan)  # (G,)
            prior_g[kept] = prior
        return _Shared(prior_g, est, advantages, calibration, n_fallback, update_errors)

    def _v05_from_main(self, compute: Callable[[], _Shared]) -> _Shared:
        """``compute()`` on the main process, broadcast to the others; an error there is raised on every process.

        The other processes would otherwise wait in the broadcast until the process group's timeout.
        """
        if self.accelerator.num_processes == 1:
            return compute()
        payload: list[_Shared | str | None] = [None]
        error: Exception | None = None
        if self.accelerator.is_main_process:
            try:
                payload[0] = compute()
            except Exception as err:  # re-raised below, once the other processes know
                error = err
                payload[0] = f"{type(err).__name__}: {err}"
        broadcast_object_list(payload, from_process=0)
        if error is not None:
            raise error
        if not isinstance(payload[0], _Shared):
            raise RuntimeError(f"the main process failed to compute the v05 advantages: {payload[0]}")
        return payload[0]

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
        state = {
            "estimator": self.args.v05_estimator,
            "prior": self.args.v05_prior if self.v05_provider is not None else None,
            "estimator_state": state_to_json(self.v05_state),
            "provider": self.v05_provider.state_dict() if self.v05_provider is not None else None,
            "prior_guard": self.v05_prior_guard.state_dict() if self.v05_prior_guard is not None else None,
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
        restores = self.v05_spec.stateful or (self.v05_spec.uses_prior and self.args.v05_prior is not None)
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
        self.v05_state = state_from_json(state["estimator_state"])
        if self.v05_provider is not None:
            if state["provider"] is None or state["prior"] != self.args.v05_prior:
                raise ValueError(
                    f"{path} holds no state of v05_prior={self.args.v05_prior!r} (found {state['prior']!r}): "
                    "resume with the prior it was saved with"
                )
            self.v05_provider.load_state_dict(state["provider"])
            self.v05_prior_guard = PriorGuard()  # a checkpoint from before the guard resumes with a fresh one
            if state.get("prior_guard") is not None:
                self.v05_prior_guard.load_state_dict(state["prior_guard"])


def _weighted_rewards(rewards_per_func: torch.Tensor, weights: torch.Tensor, reward_range: str) -> FloatArray:
    """(N,) Σ_f w_f·r_f as TRL sums them, checked to lie in ``reward_range``.

    A ``None`` reward counts 0, as in TRL's sum; a rollout every function scored ``None`` is NaN (unscored).
    """
    r = rewards_per_func.detach().to("cpu", torch.float64)  # (N, F), NaN for None
    rewards = (r * weights.to(torch.float64).unsqueeze(0)).nansum(dim=1).numpy()  # (N,)
    rewards[torch.isnan(r).all(dim=1).numpy()] = np.nan  # unscored: TRL leaves them out of its baseline
    lo, hi = check_reward_range(reward_range)
    bad = np.flatnonzero(~np.isnan(rewards) & ~((rewards >= lo) & (rewards <= hi)))
    if bad.size:
        i = int(bad[0])
        other = "pm1" if reward_range == "01" and rewards[i] >= -1.0 and rewards[i] <= 1.0 else None
        hint = f"set v05_reward_range={other!r} for rewards in [-1, 1], or make" if other else "make"
        raise ValueError(
            f"reward {float(rewards[i])!r} of rollout {i} lies outside v05_reward_range={reward_range!r} "
            f"[{lo:g}, {hi:g}] (TRL's weighted sum of the reward functions); {hint} the reward functions and "
            "reward_weights keep the sum in range"
        )
    return rewards


def _group_keys(keys: Sequence[str], texts: Sequence[str], k: int) -> tuple[np.ndarray, list[str]]:
    """(G,) keys and texts of the contiguous K-blocks; ValueError if a block mixes prompts (layout assumption)."""
    block = np.asarray(keys, dtype=object).reshape(-1, k)  # (G, K)
    mixed = np.flatnonzero((block != block[:, :1]).any(axis=1))
    if mixed.size:
        g = int(mixed[0])
        raise ValueError(
            f"rollouts {g * k}..{g * k + k - 1} are not one prompt's group (keys {sorted(set(block[g]))}): "
            "v05.adapters.trl assumes TRL's layout of num_generations contiguous rollouts per prompt"
        )
    return block[:, 0].astype(str), [str(t) for t in texts[::k]]


def _prompt_text(prompt: object) -> str:
    """The text of a TRL prompt: a plain string, or the text parts of a conversation's messages joined by newlines."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        parts = []
        for message in prompt:
            content = message.get("content", "") if isinstance(message, dict) else message
            if isinstance(content, list):  # content blocks: keep the text ones
                content = " ".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
            parts.append(str(content))
        return "\n".join(parts)
    return json.dumps(prompt, sort_keys=True, default=str)


def _row_key(row: dict[str, Any], text: str) -> str:
    """A stable prompt key: the dataset's ``prompt_id`` column when present, else a sha1 of the prompt text."""
    if "prompt_id" in row and row["prompt_id"] is not None:
        return str(row["prompt_id"])
    return prompt_key("sha1", text)


class _StepTimer(TrainerCallback):
    """Wall time of optimizer steps ``skip + 1 .. N`` (``on_step_begin`` → ``on_step_end``), generation included.

    With ``window_s``, training stops at the end of the first timed step that brings the total to ``window_s``.
    """

    def __init__(self, skip: int, window_s: float | None = None) -> None:
        self.skip = skip
        self.window_s = window_s
        self.seconds = 0.0
        self.steps = 0
        self._start: float | None = None

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._start = time.perf_counter() if state.global_step >= self.skip else None

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._start is not None:
            self.seconds += time.perf_counter() - self._start
            self.steps += 1
            self._start = None
            if self.window_s is not None and self.seconds >= self.window_s:
                control.should_training_stop = True


@contextlib.contextmanager
def _restore_global_rngs() -> Iterator[None]:
    """TRL seeds Python's, numpy's and torch's global RNGs; put the caller's states back afterwards."""
    py, np_state = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        try:
            yield
        finally:
            random.setstate(py)
            np.random.set_state(np_state)


def trl_grpo_rollouts_per_s(
    model: Any,
    tokenizer: Any,
    prompts: list[str],
    reward_fn: Callable[..., list[float]],
    *,
    num_generations: int,
    batch_prompts: int,
    max_new_tokens: int,
    steps: int,
    seed: int = 0,
    output_dir: str,
    window_s: float | None = None,
    warmup_steps: int = 1,
) -> dict[str, float]:
    """Throughput of plain ``trl.GRPOTrainer`` (no v05) on CPU: rollouts per second over training steps.

    Each optimizer step generates K = ``num_generations`` rollouts for each of ``batch_prompts`` prompts with TRL's
    HF ``generate`` path (no vLLM; ``temperature=1``, ``max_completion_length=max_new_tokens``), scores them and takes
    one AdamW step (lr 1e-4 constant, ``beta=0``: no reference model, ``num_iterations=1``, one generation per step,
    no activation checkpointing, no eval, no saving, no logging or printing, ``report_to=[]``). The clock runs from
    ``on_step_begin`` to ``on_step_end`` of the steps after the first ``warmup_steps`` (a ``TrainerCallback``), so
    setup and the warm-up are excluded; with ``steps <= warmup_steps`` every step is timed. With ``window_s`` the
    run is a fixed wall-clock window: it stops once the timed steps sum to ``window_s`` seconds (``steps`` is then
    only a cap). The model is deep-copied (the caller's weights are not trained) and the caller's global RNG states
    are restored after TRL's ``set_seed``.

    Args:
        model: a causal LM (``PreTrainedModel``) on CPU.
        tokenizer: its tokenizer (``processing_class``); prompts are plain strings, no chat template is applied.
        prompts: rendered prompt texts (at least ``batch_prompts``).
        reward_fn: a TRL reward function ``reward_fn(prompts, completions, **kwargs) -> list[float]`` (a named
            function: TRL logs it under ``__name__``).
        num_generations: K, rollouts per prompt (≥ 2, TRL's minimum).
        batch_prompts: prompts per step; the per-device batch is ``batch_prompts × num_generations`` rollouts.
        max_new_tokens: ``max_completion_length``.
        steps: optimizer steps (≥ 1).
        seed: TRL's ``seed`` (sampling and data order).
        output_dir: TRL's ``output_dir`` (nothing is saved there).
        window_s: stop once the timed steps have taken this many seconds (None: run all ``steps``).
        warmup_steps: first optimizer steps left out of the clock (≥ 0).

    Returns:
        ``{"rollouts", "seconds", "rollouts_per_s", "steps"}`` over the timed steps, plus ``"warmup_steps"``.

    Raises:
        ValueError: an unsupported TRL, or a non-positive / inconsistent size.
    """
    check_trl_version()
    for name, value, low in (
        ("num_generations", num_generations, 2),
        ("batch_prompts", batch_prompts, 1),
        ("max_new_tokens", max_new_tokens, 1),
        ("steps", steps, 1),
        ("warmup_steps", warmup_steps, 0),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    if window_s is not None and not window_s > 0:
        raise ValueError(f"window_s must be > 0 seconds or None, got {window_s!r}")
    if len(prompts) < batch_prompts:
        raise ValueError(f"need at least batch_prompts={batch_prompts} prompts, got {len(prompts)}")
    from datasets import Dataset  # noqa: PLC0415

    args = trl.GRPOConfig(
        output_dir=output_dir,
        use_cpu=True,
        bf16=False,
        report_to=[],
        save_strategy="no",
        eval_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        **no_checkpointing_args(),
        per_device_train_batch_size=batch_prompts * num_generations,
        num_generations=num_generations,
        max_completion_length=max_new_tokens,
        max_steps=steps,
        learning_rate=1e-4,
        lr_scheduler_type="constant",
        beta=0.0,
        num_iterations=1,
        temperature=1.0,
        seed=seed,
    )
    skip = warmup_steps if steps > warmup_steps else 0
    timer = _StepTimer(skip, window_s)
    with _restore_global_rngs():
        trainer = trl.GRPOTrainer(
            model=copy.deepcopy(model),
            reward_funcs=reward_fn,
            args=args,
            train_dataset=Dataset.from_dict({"prompt": list(prompts)}),
            processing_class=tokenizer,
            callbacks=[timer],
        )
        for printer in (PrinterCallback, ProgressCallback):  # the end-of-training summary would go to stdout
            trainer.remove_callback(printer)
        trainer.train()
    rollouts = timer.steps * batch_prompts * num_generations
    seconds = timer.seconds
    return {
        "rollouts": rollouts,
        "seconds": seconds,
        "rollouts_per_s": rollouts / seconds if seconds > 0 else float("nan"),
        "steps": timer.steps,
        "warmup_steps": skip,
    }


def trl_trainer(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    keys: Sequence[str],
    reward_fn: Callable[..., list[float | None]],
    *,
    v05: dict[str, Any] | None,
    callbacks: Sequence[Any] = (),
    **config: Any,
) -> Any:
    """A TRL trainer on plain-string prompts with a ``prompt_id`` column, quiet (no printing callbacks, no reports).

    Args:
        model: a causal LM; trained in place.
        tokenizer: its tokenizer (``processing_class``).
        prompts: (P,) rendered prompt texts.
        keys: (P,) their stable keys (the ``prompt_id`` column: the prior's per-prompt history).
        reward_fn: ``reward_fn(prompts, completions, prompt_id, **kwargs) -> list[float | None]``.
        v05: None for TRL's own ``GRPOTrainer`` (``trl.GRPOConfig``); else the ``v05_*`` fields of a
            :class:`V05GRPOConfig` for a :class:`V05GRPOTrainer`.
        callbacks: ``TrainerCallback`` s (evaluation, timing).
        **config: the other ``GRPOConfig`` fields (``output_dir``, ``num_generations``, ``learning_rate``, ...).

    Returns:
        The trainer, not yet trained.
    """
    check_trl_version()
    from datasets import Dataset  # noqa: PLC0415 (TRL's own dependency)

    base = {"use_cpu": True, "bf16": False, "report_to": [], "disable_tqdm": True, **no_checkpointing_args()}
    dataset = Dataset.from_dict({"prompt": list(prompts), "prompt_id": [str(k) for k in keys]})
    if v05 is None:
        args: Any = trl.GRPOConfig(**(base | config))
        trainer = trl.GRPOTrainer(model=model, reward_funcs=reward_fn, args=args, train_dataset=dataset,
                                  processing_class=tokenizer, callbacks=list(callbacks))  # fmt: skip
    else:
        args = V05GRPOConfig(**(base | config | v05))
        trainer = V05GRPOTrainer(model=model, reward_funcs=reward_fn, args=args, train_dataset=dataset,
                                 processing_class=tokenizer, callbacks=list(callbacks))  # fmt: skip
    for printer in (PrinterCallback, ProgressCallback):  # TRL prints its log and a progress bar to stdout
        trainer.remove_callback(printer)
    return trainer


__all__ = [
    "FIXED_K_MESSAGE",
    "SUPPORTED_TRL",
    "V05Batch",
    "V05GRPOConfig",
    "V05GRPOTrainer",
    "check_trl_version",
    "no_checkpointing_args",
    "trl_grpo_rollouts_per_s",
    "trl_trainer",
]
