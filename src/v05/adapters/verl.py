r"""verl plugin (0.9.1 ≤ verl < 0.10): v05's estimators as verl advantage estimators, and the ``v05`` trainer mode.

How verl loads it (verl 0.9.1 ``verl/__init__.py``, run on every ``import verl``, in the driver and in each Ray
worker): first ``VERL_USE_EXTERNAL_MODULES`` (comma-separated modules, ``utils/import_utils.import_external_libs``;
an import error propagates), then every entry point of the group ``verl.plugins`` (``importlib.metadata``; policy
``VERL_USE_EXTERNAL_PLUGINS``: ``auto`` (default) all, ``none`` none, or a comma-separated list of entry-point names).
verl's ``EntryPoint.load()`` only imports the module and swallows any exception (logged at DEBUG). v05 declares
``v05 = "v05.adapters.verl_plugin"`` in that group (pyproject.toml), a shim that imports this module and logs an
import failure at ERROR; this module calls :func:`register` at import when
verl asks for it: the variable names it, or the ``v05`` entry point is installed and the policy admits it. That is
registration at import, forced by verl's plugin protocol (it calls nothing). Because verl hides plugin exceptions,
a failed registration is logged at ERROR with the traceback before it is re-raised. Any other import registers
nothing (``VERL_USE_EXTERNAL_PLUGINS=none``, or v05 not installed as a distribution): call :func:`register` then.
This module (registration, the guarded scorer), :mod:`v05.adapters.verl_estimators` (the estimators, the bottom)
and :mod:`v05.adapters.verl_trainer` (the trainer mode) are the only modules of v05 built on verl
(``v05.bench`` imports this one only as a timing anchor).

The import circle at run time: plugin shim → this module → verl (whose first import runs the plugin loader) →
plugin shim. It closes harmlessly only if no v05 module is half initialised when verl's loader runs, so this is the
only module of v05 that imports verl at module level (``verl_estimators`` imports none, ``verl_trainer`` only inside
functions). Any import order then registers v05 exactly once, in every process that imports verl:

- ``import verl`` first (a Ray worker): the loader imports the shim, the shim this module, which imports verl's
  submodules from the half-imported verl and registers;
- this module (or the shim, which imports it) first: its ``import verl`` runs the loader, whose shim finds this
  module in ``sys.modules`` and returns; this module registers at its end;
- ``verl_estimators`` or ``verl_trainer`` first: no verl is imported, so nothing runs; the process's first
  ``import verl`` (or of this module) later is one of the cases above.

A lower module that imported verl at module level would be half initialised when the loader imports this module,
which would then fail (``cannot import name ... from partially initialized module``), logged at ERROR by the shim,
and leave v05 unregistered in that process.

verl terms are translated in :mod:`v05.adapters.verl_estimators`: a rollout's outcome reward is
Σ_t ``token_level_rewards[i, t]``; its group is the
dense index of its ``uid`` (``v05.groups.group_index``; an OSLA extra round's uid names its prompt's uid in
``extra_info["v05_group"]``); a prompt's prior is ``extra_info[prior_key]`` (a pass rate p̂ by default, or a ±1 score,
``prior_scale``); its stable key (``dbb``'s history) is ``extra_info["v05_key"]``, else ``extra_info[key_field]``;
rows whose uid starts with ``"pad"`` (verl's ``upsample_batch_to_divisible_size`` padding) are skipped: advantage 0,
not counted in any group, state or prior update. Advantages are broadcast over the response mask, returns = advantages.

Extension points (verl 0.9.1):

- ``core_algos.register_adv_est`` (core_algos.py:116): each v05 estimator that needs only rewards, groups, a prior
  (and its own state) is registered as a :class:`VerlEstimator` under :data:`VERL_ESTIMATORS`: ``v05`` and ``v05_eb``
  keep their names, the others get a ``v05_`` prefix (``v05_grpo`` etc.), so nothing shadows verl's special-cased
  ``gae``/``grpo`` branches (ray_trainer.py:218, :235) or its other registered names.
- ``ray_trainer.compute_advantage`` (ray_trainer.py:187) calls a registered estimator with ``token_level_rewards``,
  ``response_mask``, ``config`` (= ``algorithm``), ``index`` (= ``non_tensor_batch["uid"]``) and, when present,
  ``reward_baselines``; ``non_tensor_batch`` is passed to ``gdpo`` only (ray_trainer.py:261–262). So the prompt rows
  (``extra_info``) reach a :class:`VerlEstimator` in one of two ways: ``non_tensor_batch=`` (the ``gdpo`` contract,
  for callers that pass it), or :meth:`VerlEstimator.bind` around verl's own call — what the ``v05`` trainer mode does.
  Without either, the estimators that need neither prior nor keys (``v05_grpo``, ``v05_drgrpo``, ``v05_rloo``,
  ``v05_reinforce_pp_baseline``, ``v05_reinforce_pp``) work in any verl trainer; ``v05``, ``v05_eb``, ``v05_dbb``
  and ``v05_spo`` raise.
- ``trainer.ppo.v1.register_trainer`` (v1/trainer_base.py:1999): the ``v05`` trainer mode,
  :mod:`v05.adapters.verl_trainer` (priors from a provider, OSLA rounds, ``v05/*`` metrics).
- ``reward.custom_reward_function`` (trainer/ppo/reward.py:50): :func:`guarded_compute_score`, verl's scorer (or
  any other) behind a timeout, so that a verifier that raises, hangs or returns garbage gives a fault reward.

Configuration: Hydra keys under ``+algorithm.v05.*`` (:class:`VerlConfig`); verl passes ``algorithm`` to every
estimator call. Estimator state (``v05_eb``'s τ² window, ``dbb``'s history) lives on the registered object across steps.
Deviations: v05's singleton rule (advantage 0; verl: A = r), and ``v05_reinforce_pp_baseline`` and
``v05_reinforce_pp`` whiten per rollout (verl: per token); see ``v05.estimators.group``.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import math
import os
from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from typing import Any, Literal

import verl
from packaging.version import InvalidVersion, Version
from verl.trainer.ppo import core_algos
from verl.utils.import_utils import load_extern_object
from verl.utils.reward_score import default_compute_score

from v05.adapters.verl_estimators import (
    GROUP_FIELD,
    KEY_FIELD,
    PAD_PREFIX,
    SUPPORTED_VERL,
    TRAINER_MODE,
    VERL_ESTIMATORS,
    PromptRow,
    VerlConfig,
    VerlEstimator,
    VerlStep,
    check_group_filter,
    is_padding,
    prompt_rows,
    trajectory_owner,
    verl_name,
)
from v05.adapters.verl_trainer import estimator_for, register_trainer_mode
from v05.tasks.verify import ScoreFaults, finite_reward

logger = logging.getLogger(__name__)

PLUGIN_GROUP, PLUGIN_NAME, PLUGIN_MODULE = "verl.plugins", "v05", "v05.adapters.verl_plugin"
"""verl's entry-point group, v05's entry in it and the module it names (pyproject.toml
``[project.entry-points."verl.plugins"]``; :mod:`v05.adapters.verl_plugin` imports this module, loudly)."""
VERIFIER_FAULTS = ScoreFaults()
"""This process's counts of :func:`guarded_compute_score` calls that gave the fault reward (errors count garbage)."""


def check_verl_version(version: str | None = None) -> None:
    """Raise ``ValueError`` unless ``version`` (default: the installed ``verl.__version__``) is supported."""
    found = str(verl.__version__ if version is None else version)
    try:
        release = Version(found).release
    except InvalidVersion:
        release = ()
    if not (0, 9, 1) <= tuple(release[:3]) < (0, 10):
        raise ValueError(
            f"v05.adapters.verl supports verl{SUPPORTED_VERL} (tested on 0.9.1), found verl {found!r}; "
            "install one (pip install 'v05[verl]' resolves one) or a v05 release that supports it"
        )


def register(*, trainer: bool = True) -> tuple[str, ...]:
    """Register the v05 estimators (and the ``v05`` trainer mode) with verl; idempotent.

    Args:
        trainer: also register the V1 trainer mode ``v05`` (needs ``transfer_queue``, as verl's V1 trainer does;
            without it a warning is logged and only the estimators are registered).

    Returns:
        The registered estimator names (:data:`VERL_ESTIMATORS`).

    Raises:
        ValueError: an unsupported verl version (the message names ``SUPPORTED_VERL``), or a name already taken by
            another estimator.
    """
    check_verl_version()
    for name, estimator in VERL_ESTIMATORS.items():
        existing = core_algos.ADV_ESTIMATOR_REGISTRY.get(name)
        if isinstance(existing, VerlEstimator) and existing.estimator == estimator:
            continue
        core_algos.register_adv_est(name)(VerlEstimator(estimator))
    if trainer:
        try:
            register_trainer_mode()
        except ModuleNotFoundError as err:  # verl's V1 trainer needs transfer_queue
            logger.warning("v05 trainer mode not registered (%s); the v05 estimators are", err)
    return tuple(VERL_ESTIMATORS)


async def guarded_compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: object,
    extra_info: dict[str, Any] | None = None,
    *,
    score_fn: str | None = None,
    timeout_s: float | None = 30.0,
    fault_score: float = 0.0,
    **kwargs: Any,
) -> dict[str, Any]:
    """A verl ``compute_score`` that never raises or hangs: a fault gives ``fault_score``, flagged and counted.

        result = {"score": s, "acc": s} ∪ flags        if score_fn returned a finite number s in time
               = score_fn's dict ∪ flags               if it returned a dict whose "score" is a finite number
               = {"score": fault_score, ...} ∪ flags    if it raised, ran past ``timeout_s`` or returned anything else

    flags are ``v05_verifier_error`` (raised or garbage, as v05's trainer counts them) and ``v05_verifier_timeout``,
    0.0 or 1.0; verl keeps the dict's items as the rollout's ``reward_extra_info`` (generation dumps, validation
    metrics ``val-aux/<source>/v05_verifier_error/mean@k``), and :data:`VERIFIER_FAULTS` counts the faults of the
    process. A fault's dict has the keys of this process's latest good result (values None, ``acc`` = the fault
    score), so every rollout reports the same keys (``acc``, as verl's reward managers report a plain score).
    This is :func:`v05.tasks.verify.guard_score`'s contract with an asyncio deadline instead of SIGALRM: verl's
    reward managers await a coroutine function directly but run a plain one in a worker thread, where no signal
    can stop it. A timed-out synchronous scorer keeps its executor thread until it returns (Python cannot kill a
    thread): many hung calls fill the executor and later calls then time out while they queue.

    Enable it with verl's custom reward function (reward managers ``naive``, ``dapo``, ``limited``)::

        reward.custom_reward_function.path=pkg://v05.adapters.verl
        reward.custom_reward_function.name=guarded_compute_score
        +reward.custom_reward_function.reward_kwargs.timeout_s=30                # optional; null: no deadline
        +reward.custom_reward_function.reward_kwargs.fault_score=-1.0            # e.g. for DAPO's ±1 scorer
        +reward.custom_reward_function.reward_kwargs.score_fn=/path/to/my_reward.py:compute_score   # optional

    Args:
        data_source: verl's ``data_source`` of the rollout's prompt.
        solution_str: the decoded rollout.
        ground_truth: the prompt's ``reward_model.ground_truth``.
        extra_info: the prompt's ``extra_info``.
        score_fn: ``"<module path>:<name>"`` of the scorer, in verl's module-path form (``pkg://pkg.module`` or a
            file path); None: verl's ``default_compute_score``. Sync or async; called with the four arguments above
            as keywords plus ``kwargs``.
        timeout_s: seconds allowed per call (> 0), or None for no deadline.
        fault_score: the reward of a fault: 0.0 (a failure on a 0/1 scale); use -1.0 with ±1 scorers.
        **kwargs: passed on to the scorer (verl adds ``reward_router_address`` etc. when it has a reward model).

    Returns:
        The reward dict verl's reward managers read (``"score"`` is the reward).

    Raises:
        ValueError: ``timeout_s`` not positive, or ``score_fn`` not of the form ``"<module path>:<name>"``.
    """
    if timeout_s is not None and (isinstance(timeout_s, bool) or not 0 < timeout_s < math.inf):
        raise ValueError(f"timeout_s must be a positive number of seconds or null, got {timeout_s!r}")
    fn = _load_score_fn(score_fn)
    call = functools.partial(fn, data_source=data_source, solution_str=solution_str, ground_truth=ground_truth,
                             extra_info=extra_info, **kwargs)  # fmt: skip
    try:
        if inspect.iscoroutinefunction(fn):
            result = await asyncio.wait_for(call(), timeout_s)
        else:  # as verl's reward managers run a plain scorer: in the loop's executor
            result = await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, call), timeout_s)
    except TimeoutError:  # asyncio.TimeoutError is TimeoutError on Python ≥ 3.11
        logger.debug("scorer %s timed out after %s s on data_source %s", score_fn, timeout_s, data_source)
        return _fault_dict("timeout", score_fn, fault_score)
    except Exception as err:  # any scorer bug is a fault reward, never a crashed run
        logger.debug("scorer %s raised on data_source %s: %r", score_fn, data_source, err)
        return _fault_dict("error", score_fn, fault_score)
    score = finite_reward(result.get("score") if isinstance(result, Mapping) else result)
    if score is None:  # garbage, counted as an error (v05's trainer)
        logger.debug("scorer %s returned %r on data_source %s, not a finite score", score_fn, result, data_source)
        return _fault_dict("error", score_fn, fault_score)
    out = {**result, "score": score} if isinstance(result, Mapping) else {"score": score, "acc": score}
    _LAST_KEYS[score_fn] = tuple(k for k in out if k not in _FLAGS.values())
    return out | dict.fromkeys(_FLAGS.values(), 0.0)


_FLAGS = {"error": "v05_verifier_error", "timeout": "v05_verifier_timeout"}  # fault → its reward_extra_info flag
_LAST_KEYS: dict[str | None, tuple[str, ...]] = {}  # score_fn → the keys of its latest good result (this process)


def _fault_dict(fault: Literal["error", "timeout"], score_fn: str | None, fault_score: float) -> dict[str, Any]:
    """Count the fault; the reward dict of a fault (the keys of the latest good result: see guarded_compute_score)."""
    VERIFIER_FAULTS.add(fault)
    out: dict[str, Any] = dict.fromkeys(_LAST_KEYS.get(score_fn, ("score", "acc")))
    if "acc" in out:
        out["acc"] = float(fault_score)
    flags = {flag: float(kind == fault) for kind, flag in _FLAGS.items()}
    return out | {"score": float(fault_score)} | flags


@functools.cache
def _load_score_fn(score_fn: str | None) -> Callable[..., Any]:
    """The scorer named ``"<module path>:<name>"`` (verl's loader; loaded once per process), or verl's default."""
    if score_fn is None:
        return default_compute_score
    path, sep, name = str(score_fn).rpartition(":")
    if not sep or not path or not name.isidentifier():
        raise ValueError(f"score_fn must be '<module path>:<function name>', got {score_fn!r}")
    return load_extern_object(module_path=path, object_name=name)  # type: ignore[return-value]


def _requested_by_verl() -> bool:
    """True when verl loads this module as a plugin (module docstring).

    ``VERL_USE_EXTERNAL_MODULES`` names it, or v05's ``verl.plugins`` entry point is installed and
    ``VERL_USE_EXTERNAL_PLUGINS`` (verl's policy: ``auto`` by default, ``none``, or entry-point names) admits it.
    """
    if __name__ in [m.strip() for m in os.environ.get("VERL_USE_EXTERNAL_MODULES", "").split(",")]:
        return True
    policy = os.environ.get("VERL_USE_EXTERNAL_PLUGINS", "auto").strip().lower()
    if policy == "none" or (policy != "auto" and PLUGIN_NAME not in {p.strip() for p in policy.split(",")}):
        return False
    ours = (PLUGIN_MODULE, __name__)
    return any(ep.name == PLUGIN_NAME and ep.value in ours for ep in entry_points(group=PLUGIN_GROUP))


def _register_for_verl() -> None:
    """:func:`register`, logging a failure at ERROR first: verl's entry-point loader swallows plugin exceptions."""
    try:
        register()
    except Exception:
        logger.error(
            "the v05 verl plugin (%s) failed to register: v05's estimators and trainer mode are NOT available in "
            "this process (verl hides plugin errors; the cause follows)",
            __name__,
            exc_info=True,
        )
        raise


if _requested_by_verl():
    _register_for_verl()


__all__ = [
    "GROUP_FIELD",
    "KEY_FIELD",
    "PAD_PREFIX",
    "PLUGIN_GROUP",
    "PLUGIN_MODULE",
    "PLUGIN_NAME",
    "SUPPORTED_VERL",
    "TRAINER_MODE",
    "VERIFIER_FAULTS",
    "VERL_ESTIMATORS",
    "PromptRow",
    "VerlConfig",
    "VerlEstimator",
    "VerlStep",
    "check_group_filter",
    "check_verl_version",
    "estimator_for",
    "guarded_compute_score",
    "is_padding",
    "prompt_rows",
    "register",
    "trajectory_owner",
    "verl_name",
]
