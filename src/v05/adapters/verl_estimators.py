r"""v05's estimators as verl advantage estimators (0.9.1 ≤ verl < 0.10): the batch translation, config and state.

verl terms are translated here: a rollout's outcome reward is Σ_t ``token_level_rewards[i, t]``; its group is the
dense index of its ``uid`` (``v05.groups.group_index``; an OSLA extra round's uid names its prompt's uid in
``extra_info["v05_group"]``); a prompt's prior is ``extra_info[prior_key]`` (a pass rate p̂ by default, or a ±1 score,
``prior_scale``); its stable key (``dbb``'s history) is ``extra_info["v05_key"]``, else ``extra_info[key_field]``;
rows whose uid starts with ``"pad"`` (verl's ``upsample_batch_to_divisible_size`` padding) are skipped: advantage 0,
not counted in any group, state or prior update. Advantages are broadcast over the response mask, returns = advantages.

This module is the bottom of v05's verl adapter: :mod:`v05.adapters.verl_trainer` (the ``v05`` trainer mode) and
:mod:`v05.adapters.verl` (the plugin: registration with verl, the guarded scorer) both build on it; it imports
neither, and no verl either (verl's conventions reach it as data: uids, ``extra_info``, tensors). That is what keeps
the plugin's import circle closed at run time: the first ``import verl`` of a process runs verl's plugin loader,
which imports :mod:`v05.adapters.verl`, which imports this module; were this module what imported verl, the loader
would find it half initialised (:mod:`v05.adapters.verl` module docstring). Registration, the extension points used
and the configuration keys are described in :mod:`v05.adapters.verl`.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from v05._checks import REWARD_RANGES, RewardRange, reward_range_text
from v05._types import FloatArray, IntArray
from v05.estimators import Estimate
from v05.groups import group_index
from v05.priors import PROVIDERS, provider_spec
from v05.registry import CONTEXT_OPTIONS, ESTIMATORS, get_estimator
from v05.rewards import from_pass_rate, from_pm1
from v05.round import Prior, Round

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


def verl_name(estimator: str) -> str:
    """The verl name of a v05 estimator: ``v05``/``v05_eb`` as they are, the others prefixed ``v05_``."""
    return estimator if estimator.startswith("v05") else f"v05_{estimator}"


VERL_ESTIMATORS: dict[str, str] = {
    verl_name(n): n for n, spec in ESTIMATORS.items() if not (spec.needs_truth or spec.needs_values)
}
"""verl name → v05 estimator (``oracle`` is left out: it needs the true pass rates; ``poise``: per-rollout probe
values from the actor's hidden states, which a registered verl estimator does not receive)."""

DRAWS = ("spo", "prior_select")
"""``algorithm.v05.allocator`` names that draw each step's batch from a candidate pool of prompts inside the replay
buffer's ``sample`` (the trainer mode's ``_v05_draw``): SPO's weighted draw and the prior's selection."""


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
    allocator: Literal["fixed", "osla", "spo", "prior_select"] = "fixed"
    """trainer mode: ``"fixed"`` (``rollout.n`` per prompt), ``"osla"`` (k_init, then extra rounds), ``"spo"``
    (SPO's prioritised sampling: ``data.train_batch_size`` prompts drawn from a candidate pool of
    ``data.gen_batch_size`` by the prior's uncertainty, ``rollout.n`` rollouts each) or ``"prior_select"`` (the
    ``data.train_batch_size`` candidates of the pool whose Thompson draw from the prior's Beta has the largest
    p̃(1 − p̃); the same draw path as ``spo``)."""
    allocator_options: dict[str, Any] = field(default_factory=dict)
    """trainer mode: options of ``v05.allocation.OSLA`` (k_init, k_max, c, schedule, extra_budget, noise, test), of
    ``v05.allocation.spo.SpoSample`` (epsilon; pool_factor, when ``data.gen_batch_size`` is not set) or of
    ``v05.allocation.select.PriorSelect`` (thompson, explore_frac, default_n0, alpha0)."""

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
        if self.provider is not None and PROVIDERS[self.provider].needs_sampler:
            raise ValueError(
                f"algorithm.v05.provider={self.provider!r} is a bound whose extra rollouts of the current policy only "
                "v05 train draws; use a learned prior (running_mean, history, v0, combined)"
            )
        if self.provider is not None and provider_spec(self.provider, self.provider_options).needs_policy:
            raise ValueError(
                f"algorithm.v05.provider={self.provider!r} with options {dict(self.provider_options)} reads the live "
                "policy's hidden states, which only v05 train binds; use a text or key prior (running_mean, history, "
                "v0, combined)"
            )
        if self.allocator not in ("fixed", "osla", *DRAWS):
            raise ValueError(
                f"algorithm.v05.allocator={self.allocator!r} is not available in verl: 'fixed' or 'osla' (per-prompt "
                "budgets), 'spo' (SPO's prioritised sampling) or 'prior_select' (the prior's selection); the other "
                "prompt-selecting allocators (dynamic_sampling, sara, dps) need v05's own trainer — for DAPO's "
                "dynamic sampling use verl's algorithm.filter_groups"
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
    return float(from_pass_rate(v, config.reward_range) if lo == 0.0 else from_pm1(v, config.reward_range))


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
    :meth:`v05.round.Round.advantages` on the real rollouts (the round v05's trainer and the TRL adapter call); this
    class only translates.

    Attributes:
        name: the verl name (``v05``, ``v05_eb``, ``v05_grpo``, ...).
        estimator: the v05 estimator name.
        round: the :class:`~v05.round.Round` whose estimator runs (built from ``algorithm.v05`` on the first call; the
            ``v05`` trainer mode hands in its own, with the provider and OSLA).
        state_: the estimator state the round carries across steps (``v05_eb``: ``PriorErrorState``; ``dbb``:
            ``BetaHistory``).
        last_: the latest call as a :class:`VerlStep` (for metrics), or None.
    """

    def __init__(self, estimator: str) -> None:
        """Wrap the v05 estimator ``estimator`` (a name in ``v05.registry.ESTIMATORS``)."""
        self.spec = get_estimator(estimator)
        self.estimator = estimator
        self.name = verl_name(estimator)
        self.round: Round | None = None
        self.last_: VerlStep | None = None
        self._binding: _Binding | None = None
        self._warned_scale = False

    def __repr__(self) -> str:
        return f"VerlEstimator({self.estimator!r})"

    @property
    def state_(self) -> Any:
        """The estimator state carried across steps (None before the first call, and for stateless estimators)."""
        return None if self.round is None else self.round.estimator_state

    @state_.setter
    def state_(self, state: Any) -> None:
        if self.round is None:
            self.round = Round(self.estimator)
        self.round.estimator_state = state

    def reset(self) -> None:
        """Forget the round (its carried state) and the latest step (a new training run)."""
        self.round, self.last_ = None, None

    def round_for(self, config: VerlConfig) -> Round:
        """The round this call runs on: the current one if ``config`` built it, else a new one (its state kept)."""
        rnd = self.round
        if rnd is None or (rnd.options, rnd.reward_range, rnd.feed_n0) != (config.options, config.reward_range,
                                                                          config.feed_n0):  # fmt: skip
            state = None if rnd is None else rnd.estimator_state
            rnd = Round(self.estimator, options=config.options, reward_range=config.reward_range,
                        feed_n0=config.feed_n0)  # fmt: skip
            rnd.estimator_state = state
            self.round = rnd
        return rnd

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
        rnd = self.round_for(cfg)
        given = None if prior is None else Prior(prior, n0, cfg.reward_range)
        est = rnd.advantages(rewards, group, prior=given, keys=keys, step=step)
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


__all__ = [
    "DRAWS",
    "GROUP_FIELD",
    "KEY_FIELD",
    "PAD_PREFIX",
    "SUPPORTED_VERL",
    "TRAINER_MODE",
    "VERL_ESTIMATORS",
    "PromptRow",
    "VerlConfig",
    "VerlEstimator",
    "VerlStep",
    "check_group_filter",
    "is_padding",
    "prompt_rows",
    "trajectory_owner",
    "verl_name",
]
