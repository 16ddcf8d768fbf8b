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
This module and :mod:`v05.adapters.verl_trainer` (the trainer mode, split off to stay under ~500 lines) are the only
modules of v05 built on verl (``v05.bench`` imports it only as a timing anchor).

verl terms are translated here: a rollout's outcome reward is Σ_t ``token_level_rewards[i, t]``; its group is the
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
  ``v05_reinforce_pp_baseline``, ``v05_reinforce_pp``) work in any verl trainer; ``v05``, ``v05_eb`` and ``v05_dbb``
  raise.
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
import contextlib
import functools
import inspect
import logging
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from importlib.metadata import entry_points
from typing import Any, Literal

import numpy as np
import torch
import verl
from omegaconf import DictConfig, OmegaConf
from packaging.version import InvalidVersion, Version
from verl.trainer.ppo import core_algos
from verl.utils.import_utils import load_extern_object
from verl.utils.reward_score import default_compute_score

from v05._checks import REWARD_RANGES, RewardRange, reward_range_text
from v05._types import FloatArray, IntArray
from v05.estimators import Estimate
from v05.groups import group_index
from v05.priors import PROVIDERS
from v05.registry import CONTEXT_OPTIONS, ESTIMATORS, estimate, get_estimator
from v05.tasks.verify import ScoreFaults, finite_reward

logger = logging.getLogger(__name__)

SUPPORTED_VERL = ">=0.9.1,<0.10"
"""verl versions this adapter supports (it overrides V1-trainer methods; tested on 0.9.1)."""
PAD_PREFIX = "pad"
"""verl's padding rows carry ``uid = "pad" + uuid4().hex`` (trainer/ppo/padding_utils.py:179)."""
KEY_FIELD = "v05_key"
"""``extra_info`` field holding a prompt's stable key, written by the trainer mode (read before ``key_field``)."""
GROUP_FIELD = "v05_group"
"""``extra_info`` field naming the uid whose group an OSLA extra round's rollouts join."""
TRAINER_MODE = "v05"
"""The V1 trainer mode name: ``trainer.v1.trainer_mode=v05``."""
PLUGIN_GROUP, PLUGIN_NAME, PLUGIN_MODULE = "verl.plugins", "v05", "v05.adapters.verl_plugin"
"""verl's entry-point group, v05's entry in it and the module it names (pyproject.toml
``[project.entry-points."verl.plugins"]``; :mod:`v05.adapters.verl_plugin` imports this module, loudly)."""
VERIFIER_FAULTS = ScoreFaults()
"""This process's counts of :func:`guarded_compute_score` calls that gave the fault reward (errors count garbage)."""


def verl_name(estimator: str) -> str:
    """The verl name of a v05 estimator: ``v05``/``v05_eb`` as they are, the others prefixed ``v05_``."""
    return estimator if estimator.startswith("v05") else f"v05_{estimator}"


VERL_ESTIMATORS: dict[str, str] = {
    verl_name(n): n for n, spec in ESTIMATORS.items() if not (spec.needs_truth or spec.needs_values)
}
"""verl name → v05 estimator (``oracle`` is left out: it needs the true pass rates; ``poise``: per-rollout probe
values from the actor's hidden states, which a registered verl estimator does not receive)."""


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


@dataclass(frozen=True, kw_only=True, slots=True)
class VerlConfig:
    """The v05 settings of a verl run, read from ``algorithm.v05`` (Hydra: ``+algorithm.v05.<field>=...``).

    >>> VerlConfig.from_algorithm({"v05": {"reward_range": "pm1"}}).prior_scale
    'pass_rate'
    >>> VerlConfig.from_algorithm({"v05": {"reward_range": 1}}).reward_range  # +algorithm.v05.reward_range=01
    '01'
    """

    reward_range: RewardRange = "01"
    """scale of the outcome reward Σ_t token_level_rewards: ``"01"`` (e.g. GSM8K) or ``"pm1"`` (verl's DAPO math
    scorer returns ±1); rewards outside it raise."""
    prior_key: str = "v05_prior"
    """``extra_info`` field holding the prompt's prior (its pseudo-count, if any, under ``<prior_key>_n0``)."""
    prior_scale: Literal["pass_rate", "pm1"] = "pass_rate"
    """the stored prior is a pass rate p̂ ∈ [0, 1] (V0's output) or a ±1 score V = 2p̂ − 1."""
    key_field: str = "index"
    """``extra_info`` field with a stable prompt key (verl's data scripts write ``index``); the trainer mode falls back
    to a sha1 of the prompt text."""
    text_field: str = "question"
    """trainer mode: ``extra_info`` field with the prompt's bare problem text, which a text-reading provider (``v0``,
    ``combined``) embeds: V0 was trained on problem texts, not on the chat template around them (verl's gsm8k and
    geo3k scripts write ``question``; ``examples/verl/add_problem_text.py`` adds it to DAPO-Math-17k)."""
    options: dict[str, Any] = field(default_factory=dict)
    """keyword options of the estimator (e.g. ``{"noise": "plugin"}``, ``{"lambda_": 0.7}``)."""
    feed_n0: bool = True
    """give the prior's pseudo-count (``<prior_key>_n0``) to estimators with an ``n0`` option, unless set in options."""
    provider: str | None = None
    """trainer mode: a prior provider in ``v05.priors.PROVIDERS`` (None: the dataset's ``extra_info`` prior)."""
    provider_options: dict[str, Any] = field(default_factory=dict)
    """trainer mode: keyword options of the provider."""
    allocator: Literal["fixed", "osla"] = "fixed"
    """trainer mode: ``"fixed"`` (``rollout.n`` per prompt) or ``"osla"`` (k_init, then extra rounds)."""
    allocator_options: dict[str, Any] = field(default_factory=dict)
    """trainer mode: options of ``v05.allocation.OSLA`` (k_init, k_max, c, schedule, extra_budget, noise, test)."""

    def __post_init__(self) -> None:
        if self.reward_range not in REWARD_RANGES:
            raise ValueError(
                f"algorithm.v05.reward_range must be one of {', '.join(REWARD_RANGES)}, got {self.reward_range!r}"
            )
        if self.prior_scale not in ("pass_rate", "pm1"):
            raise ValueError(f"algorithm.v05.prior_scale must be 'pass_rate' or 'pm1', got {self.prior_scale!r}")
        reserved = sorted(set(self.options) & set(CONTEXT_OPTIONS))
        if reserved:
            raise ValueError(f"algorithm.v05.options may not set {', '.join(reserved)}: the adapter fills it")
        if self.provider is not None and self.provider not in PROVIDERS:
            raise ValueError(
                f"unknown algorithm.v05.provider {self.provider!r}; valid: {', '.join(PROVIDERS)}, or null"
            )
        if self.provider is not None and getattr(PROVIDERS[self.provider], "needs_sampler", False):
            raise ValueError(
                f"algorithm.v05.provider={self.provider!r} is a simulation-only bound whose extra rollouts only v05 "
                "train draws; use a learned prior (running_mean, history, v0, combined)"
            )
        if self.allocator not in ("fixed", "osla"):
            raise ValueError(
                f"algorithm.v05.allocator={self.allocator!r} is not available in verl: 'fixed' or 'osla' (per-prompt "
                "budgets); prompt-selecting allocators (dynamic_sampling, sara, dps) need v05's own trainer — for "
                "DAPO's dynamic sampling use verl's algorithm.filter_groups"
            )
        if "batch_size" in self.allocator_options:
            raise ValueError("algorithm.v05.allocator_options.batch_size is fixed by data.train_batch_size; remove it")

    @classmethod
    def from_algorithm(cls, algorithm: object) -> VerlConfig:
        """Read the ``v05`` node of verl's ``algorithm`` config (a DictConfig, dict or None); unknown keys raise."""
        node = None if algorithm is None else algorithm.get("v05", None)  # type: ignore[attr-defined]
        raw = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node or {})
        valid = [f.name for f in fields(cls)]
        unknown = sorted(set(raw) - set(valid))  # type: ignore[arg-type]
        if unknown:
            raise ValueError(f"unknown key(s) algorithm.v05.{', '.join(unknown)}; valid: {', '.join(valid)}")
        if "reward_range" in raw:  # Hydra reads ``01`` as the integer 1
            raw["reward_range"] = reward_range_text(raw["reward_range"])
        return cls(**raw)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class PromptRow:
    """What a rollout's ``extra_info`` says about its prompt.

    Attributes:
        group: the uid whose rollouts form this prompt's group (the row's own uid unless ``v05_group`` names another).
        key: stable prompt key, or None.
        prior: the prior on the reward scale (``reward_range``), or None.
        n0: the prior's pseudo-count in rollouts, or None.
    """

    group: str
    key: str | None = None
    prior: float | None = None
    n0: float | None = None


def is_padding(uid: object) -> bool:
    """True for verl's padding rows (uid prefixed ``"pad"``)."""
    return str(uid).startswith(PAD_PREFIX)


def _prior_on_reward_scale(value: object, uid: str, config: VerlConfig) -> float:
    """A stored prior (pass rate or ±1 score) mapped to the reward scale; ValueError if not a number in range."""
    lo = 0.0 if config.prior_scale == "pass_rate" else -1.0
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        v = math.nan
    if not lo <= v <= 1.0:
        raise ValueError(
            f"extra_info[{config.prior_key!r}] = {value!r} of prompt uid {uid!r} is not a number in [{lo:g}, 1] "
            f"(algorithm.v05.prior_scale={config.prior_scale!r}: a pass rate in [0, 1], or 'pm1' for a ±1 score)"
        )
    p = v if config.prior_scale == "pass_rate" else (v + 1.0) / 2.0
    return p if config.reward_range == "01" else 2.0 * p - 1.0


def prompt_rows(
    uids: Sequence[object], extra_info: Sequence[object] | None, *, config: VerlConfig
) -> dict[str, PromptRow]:
    """Per-prompt rows (uid → :class:`PromptRow`) from a batch's ``uid`` and ``extra_info`` columns (padding skipped).

    Args:
        uids: (N,) ``non_tensor_batch["uid"]``.
        extra_info: (N,) ``non_tensor_batch["extra_info"]`` (dicts, or None for rows without one), or None.
        config: the run's :class:`VerlConfig` (prior field, its scale, the reward range, the key field).

    Raises:
        ValueError: lengths differ, a prior is not a number on its scale, or rollouts of one uid disagree.

    >>> prompt_rows(["a", "pad0"], [{"v05_prior": 0.25, "index": 7}, None], config=VerlConfig())
    {'a': PromptRow(group='a', key='7', prior=0.25, n0=None)}
    """
    infos: Sequence[object] = [None] * len(uids) if extra_info is None else extra_info
    if len(infos) != len(uids):
        raise ValueError(f"length mismatch (uid: {len(uids)}, extra_info: {len(infos)})")
    rows: dict[str, PromptRow] = {}
    for raw_uid, info in zip(uids, infos, strict=True):
        uid = str(raw_uid)
        if is_padding(uid):
            continue
        d: Mapping[str, Any] = info if isinstance(info, Mapping) else {}
        key = d.get(KEY_FIELD, d.get(config.key_field))
        prior = d.get(config.prior_key)
        n0 = d.get(f"{config.prior_key}_n0")
        row = PromptRow(
            str(d.get(GROUP_FIELD, uid)),
            None if key is None else str(key),
            None if prior is None else _prior_on_reward_scale(prior, uid, config),
            None if n0 is None else float(n0),
        )
        if rows.setdefault(uid, row) != row:
            raise ValueError(f"rollouts of prompt uid {uid!r} disagree on their extra_info ({rows[uid]} vs {row})")
    return rows


@dataclass(frozen=True, slots=True)
class VerlStep:
    """One call of a :class:`VerlEstimator` (the real rollouts only; padding rows removed).

    Attributes:
        rewards: (N,) outcome rewards on the reward scale.
        group: (N,) group ids in [0, G).
        group_uids: (G,) the uid naming each group.
        keys: (G,) stable prompt keys, or None if a row had none.
        prior: (G,) priors on the reward scale, or None.
        estimate: the v05 estimate (advantages (N,), baseline, weight, reject, n0, state).
        reward_range: the scale of ``rewards`` and ``prior``.
        n_padding: padding rows skipped.
        n_outputs: rows folded into the trajectory whose final output they precede (multi-output agent loops: one
            trajectory is one rollout; its advantage is broadcast to all its outputs).
    """

    rewards: FloatArray
    group: IntArray
    group_uids: np.ndarray
    keys: np.ndarray | None
    prior: FloatArray | None
    estimate: Estimate
    reward_range: RewardRange
    n_padding: int
    n_outputs: int = 0


@dataclass(frozen=True, slots=True)
class _Binding:
    rows: Mapping[str, PromptRow]
    step: int | None
    owner: IntArray | None  # (bs,) the row holding each row's trajectory outcome, or None: one row per rollout


def trajectory_owner(trajectory_keys: Sequence[object]) -> IntArray:
    """(bs,) for each row of a verl V1 batch, the row holding the final output of its trajectory.

    verl's TransferQueue key of an agent-loop output is ``{uid}_{session}_{index}`` (v1/agent_loop_tq.py): a session
    (trajectory) of a multi-output agent loop writes outputs 0, 1, …, and its reward sits on the last one. verl's
    ``compute_advantage_for_multi_trajectories`` (v1/utils.py) keeps the final output per session for ``grpo`` only and
    hands every row to other estimators; v05 counts trajectories, as verl's grpo does.

    Raises:
        ValueError: a key not of the form ``{uid}_{session}_{index}``.

    >>> trajectory_owner(["a_0_0", "a_0_1", "a_1_0", "pad9_0_0"]).tolist()
    [1, 1, 2, 3]
    """
    last: dict[str, tuple[int, int]] = {}
    sessions = []
    for row, key in enumerate(trajectory_keys):
        parts = str(key).rsplit("_", 2)
        if len(parts) != 3 or not parts[2].isdigit():
            raise ValueError(f"trajectory key {key!r} is not verl's {{uid}}_{{session}}_{{index}}")
        session, index = f"{parts[0]}_{parts[1]}", int(parts[2])
        sessions.append(session)
        if session not in last or last[session][0] < index:
            last[session] = (index, row)
    return np.asarray([last[s][1] for s in sessions], dtype=np.int64)


class VerlEstimator:
    """A v05 estimator in verl's advantage-estimator registry (what :func:`register` registers).

    verl calls it as ``fn(token_level_rewards=(bs, L), response_mask=(bs, L), index=(bs,) uids, config=algorithm,
    ...)`` and gets ``(advantages, returns)``, both ``A_i · response_mask`` in the rewards' dtype. The math is
    ``v05.registry.estimate`` on the real rollouts; this class only translates.

    Attributes:
        name: the verl name (``v05``, ``v05_eb``, ``v05_grpo``, ...).
        estimator: the v05 estimator name.
        state_: the estimator state carried across steps (``v05_eb``: ``PriorErrorState``; ``dbb``: ``BetaHistory``).
        last_: the latest call as a :class:`VerlStep` (for metrics), or None.
    """

    def __init__(self, estimator: str) -> None:
        """Wrap the v05 estimator ``estimator`` (a name in ``v05.registry.ESTIMATORS``)."""
        self.spec = get_estimator(estimator)
        self.estimator = estimator
        self.name = verl_name(estimator)
        self.state_: object | None = None
        self.last_: VerlStep | None = None
        self._binding: _Binding | None = None
        self._warned_scale = False

    def __repr__(self) -> str:
        return f"VerlEstimator({self.estimator!r})"

    def reset(self) -> None:
        """Forget the carried state and the latest step (a new training run)."""
        self.state_, self.last_ = None, None

    @contextlib.contextmanager
    def bind(
        self,
        rows: Mapping[str, PromptRow],
        *,
        step: int | None = None,
        trajectory_keys: Sequence[object] | None = None,
    ) -> Iterator[None]:
        """Within the block, calls read their prompts from ``rows`` (uid → :class:`PromptRow`) and ``step``.

        This is how the prompt rows reach the estimator through verl's ``compute_advantage``, which passes no
        ``non_tensor_batch`` to registered estimators (module docstring).

        Args:
            rows: uid → the prompt's row.
            step: the training step (``dbb``'s history).
            trajectory_keys: (bs,) verl V1's TransferQueue key of each batch row, in row order: rows of one
                trajectory (multi-output agent loops) then count as one rollout (:func:`trajectory_owner`).
        """
        owner = None if trajectory_keys is None else trajectory_owner(trajectory_keys)
        self._binding, self.last_ = _Binding(rows, step, owner), None
        try:
            yield
        finally:
            self._binding = None

    def __call__(
        self,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Sequence[object] | None = None,
        config: object = None,
        non_tensor_batch: Mapping[str, Any] | None = None,
        **verl_inputs: object,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Advantages and returns (both (bs, L)) for one verl batch.

        Args:
            token_level_rewards: (bs, L) verl's rewards; the outcome reward of rollout i is Σ_t.
            response_mask: (bs, L) 1 on response tokens.
            index: (bs,) uids (verl passes ``non_tensor_batch["uid"]``).
            config: verl's ``algorithm`` config (its ``v05`` node is read, :class:`VerlConfig`).
            non_tensor_batch: the batch's non-tensor columns (``uid``, ``extra_info``), when the caller passes them.
            **verl_inputs: other inputs verl may pass (``reward_baselines``); unused.

        Raises:
            ValueError: no uids, rewards outside ``reward_range``, KL folded into the rewards, or a prior/key the
                estimator needs is missing (with how to provide it).
        """
        cfg = VerlConfig.from_algorithm(config)
        check_group_filter(config, self)
        if config is not None and bool(config.get("use_kl_in_reward", False)):  # type: ignore[attr-defined]
            raise ValueError(
                f"{self.name} reads the verifier's outcome reward, but algorithm.use_kl_in_reward=True subtracts a "
                "per-token KL penalty from it first; set it False (use actor_rollout_ref.actor.use_kl_loss for KL)"
            )
        if index is None and non_tensor_batch is not None:
            index = non_tensor_batch.get("uid")
        if index is None:
            raise ValueError(f"{self.name} groups rollouts by uid; verl passed no index (non_tensor_batch['uid'])")
        uids = np.asarray([str(u) for u in index], dtype=object)  # (bs,)
        owner = np.arange(len(uids))  # (bs,) one row, one rollout
        if self._binding is not None:
            rows, step = self._binding.rows, self._binding.step
            if self._binding.owner is not None:
                if len(self._binding.owner) != len(uids):
                    raise ValueError(
                        f"{self.name} was bound to {len(self._binding.owner)} trajectory keys for {len(uids)} rows"
                    )
                owner = self._binding.owner
        elif non_tensor_batch is not None:
            rows, step = prompt_rows(uids, non_tensor_batch.get("extra_info"), config=cfg), None
        else:
            rows, step = {}, None
        scores = token_level_rewards.detach().sum(dim=-1).to("cpu", torch.float64).numpy()  # (bs,)
        real = np.array([not is_padding(u) for u in uids], dtype=bool)  # (bs,)
        final = owner == np.arange(len(uids))  # (bs,) the row carrying its trajectory's outcome
        use = real & final
        adv = np.zeros(len(uids))
        if use.any():
            result = self._estimate(scores[use], uids[use], rows, cfg, step)
            adv[use] = result.estimate.advantages
            adv = adv[owner]  # (bs,) each output gets its trajectory's advantage
            self.last_ = replace(result, n_padding=int((~real).sum()), n_outputs=int((real & ~final).sum()))
        out = torch.as_tensor(adv, dtype=token_level_rewards.dtype, device=token_level_rewards.device)
        advantages = out.unsqueeze(-1) * response_mask  # (bs, L)
        return advantages, advantages

    def _estimate(
        self, rewards: FloatArray, uids: np.ndarray, rows: Mapping[str, PromptRow], cfg: VerlConfig, step: int | None
    ) -> VerlStep:
        """Translate the real rollouts to a flat batch, run ``v05.registry.estimate`` and carry the state."""
        self._check_rewards(rewards, cfg.reward_range)
        per_rollout = [rows.get(u) or PromptRow(u) for u in uids]
        group, group_uids = group_index(np.asarray([r.group for r in per_rollout], dtype=object))  # (N,), (G,)
        first = np.unique(group, return_index=True)[1]  # (G,) the first rollout of each group
        rows_g = [per_rollout[i] for i in first]
        for r, g in zip(per_rollout, group, strict=True):
            if (r.prior, r.key) != (rows_g[g].prior, rows_g[g].key):
                raise ValueError(f"rollouts of prompt {group_uids[g]!r} carry different priors or keys in extra_info")
        prior = _column([r.prior for r in rows_g])
        keys = None if any(r.key is None for r in rows_g) else np.asarray([r.key for r in rows_g])
        n0 = _column([r.n0 for r in rows_g])
        if self.spec.uses_prior and prior is None:
            raise ValueError(
                f"{self.name} fuses a prior, but {sum(r.prior is None for r in rows_g)} of {len(rows_g)} prompts have "
                f"no extra_info[{cfg.prior_key!r}]: run trainer.v1.trainer_mode={TRAINER_MODE} (with "
                "+algorithm.v05.provider=...), write the prior into the dataset's extra_info, or pass non_tensor_batch"
            )
        if self.spec.keyed:
            if keys is None:
                raise ValueError(
                    f"{self.name} keeps a per-prompt history: every prompt needs a stable key in extra_info "
                    f"({KEY_FIELD!r} or {cfg.key_field!r}); trainer.v1.trainer_mode={TRAINER_MODE} writes one"
                )
        options = self.spec.bind(cfg.options, prior=prior, n0=n0 if cfg.feed_n0 else None, state=self.state_,
                                 prompt_ids=keys, step=step)  # fmt: skip
        est = estimate(self.estimator, rewards, group, reward_range=cfg.reward_range, **options)
        if self.spec.stateful:
            self.state_ = est.state
        return VerlStep(rewards, group, group_uids, keys, prior, est, cfg.reward_range, 0)

    def _check_rewards(self, rewards: FloatArray, reward_range: RewardRange) -> None:
        lo, hi = REWARD_RANGES[reward_range]
        bad = np.flatnonzero(~((rewards >= lo) & (rewards <= hi)))
        if bad.size:
            i = int(bad[0])
            hint = "reward_range=pm1 (verl's DAPO math scorer returns ±1)" if reward_range == "01" else "the scorer"
            raise ValueError(
                f"outcome reward Σ_t token_level_rewards = {float(rewards[i])!r} (rollout {i}) lies outside "
                f"+algorithm.v05.reward_range={reward_range!r} [{lo:g}, {hi:g}]; check +algorithm.v05.{hint}"
            )
        binary01 = np.isin(rewards, (0.0, 1.0)).all() and (rewards == 0.0).any() and (rewards == 1.0).any()
        if reward_range == "pm1" and binary01 and not self._warned_scale:
            self._warned_scale = True
            logger.warning(
                "%s: rewards look 0/1 but algorithm.v05.reward_range='pm1' reads 0 as a half success; "
                "set +algorithm.v05.reward_range=01 if the scorer returns 0/1",
                self.name,
            )


def _column(values: Sequence[float | None]) -> FloatArray | None:
    """(G,) float array, or None if any value is missing."""
    return None if any(v is None for v in values) else np.asarray(values, np.float64)


def check_group_filter(algorithm: object, estimator: VerlEstimator) -> None:
    """Refuse DAPO's group filter (``algorithm.filter_groups``) for an estimator whose baseline is not the group's.

    The filter drops all-correct and all-wrong groups before the advantage step. For ``v05``, ``v05_eb`` and
    ``v05_dbb`` those groups carry signal (r − V ≠ 0 against a prior or a history) and are what the prior and the
    estimator state learn from: measured in verl's fit loop, the history prior stayed at 0.5 and v05_eb's n0 rose
    to 200. Group-only estimators (``v05_grpo``, ``v05_rloo``, ...) give those groups A = 0, so filtering them is
    DAPO's dynamic sampling and stays allowed.
    """
    node = algorithm.get("filter_groups", None) if algorithm is not None else None  # type: ignore[attr-defined]
    spec = estimator.spec
    if node is not None and bool(node.get("enable", False)) and (spec.uses_prior or spec.keyed):
        raise ValueError(
            f"algorithm.filter_groups drops all-correct and all-wrong groups, which {estimator.name}'s baseline from "
            "outside the group gives a non-zero advantage, and hides them from the prior and its error estimate: "
            "set algorithm.filter_groups.enable=False"
        )


def estimator_for(name: str) -> VerlEstimator:
    """The :class:`VerlEstimator` registered in verl under ``name``; ValueError if ``name`` is not one of v05's."""
    fn = core_algos.ADV_ESTIMATOR_REGISTRY.get(str(name))
    if not isinstance(fn, VerlEstimator):
        raise ValueError(
            f"algorithm.adv_estimator={name!r} is not a v05 estimator; valid: {', '.join(VERL_ESTIMATORS)} "
            "(registered by v05.adapters.verl.register(); verl loads the plugin through v05's verl.plugins entry "
            "point, or VERL_USE_EXTERNAL_MODULES=v05.adapters.verl)"
        )
    return fn


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
        from v05.adapters.verl_trainer import register_trainer_mode  # noqa: PLC0415 (imports this module)

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
