r"""The ``v05`` trainer mode for verl's V1 trainer: priors from a provider, OSLA's rounds, SPO's draw, ``v05/*``.

Registered by :func:`v05.adapters.verl.register` (``trainer.v1.trainer_mode=v05``); with :mod:`v05.adapters.verl`
the only modules of v05 built on verl (split off to keep each under ~500 lines; it imports verl and
``transfer_queue`` inside functions only, so it loads without them, and importing it never runs verl's plugin loader
while it or :mod:`v05.adapters.verl_estimators` is half initialised: :mod:`v05.adapters.verl` module docstring). The
trainer needs ``transfer_queue``, as verl's V1 trainer does.

Why a trainer mode (and not a replay-buffer or agent-loop override): a step needs four hooks that only the trainer
holds together — the prompt batch before it is dispatched (attach the prior, set ``__rollout_n__``), the agent loop and
the replay buffer between sampling and the rollout replicas going to sleep (OSLA's extra rounds must run on the
current weights), the advantage call (bind the prompt rows, v05.adapters.verl module docstring) and verl's tracking
logger. A custom replay buffer (``trainer.v1.sampler.custom_sampler``) is built with a refill callback only, and a
custom agent-loop manager never sees rewards or advantages. ``V05Trainer`` = :class:`V05TrainerMixin` on verl's
``PPOTrainerSync`` (colocated, on-policy), assembled by :func:`trainer_class` when registered so that importing this
module needs neither verl nor ``transfer_queue``; it overrides six methods (v1/trainer_base.py):
``_next_train_batch`` (:1479), ``_build_replay_buffer`` (:139; wraps verl's buffer), ``prepare_step`` (:1525; SPO
submits nothing there), ``_compute_advantage`` (:1743; calls verl's, bound), ``_save_checkpoint``/``_load_checkpoint``
(:948/:850; adds ``v05_state.json``).

One step: prior V = provider.predict(keys, problem texts ``extra_info[text_field]``) → ``extra_info[prior_key]`` (and
``__rollout_n__ = k_init`` for OSLA) → verl's agent loop → replay buffer → OSLA rounds (``v05.allocation.allocate``;
each extra round submits the rejected prompts again under new uids, ``extra_info["v05_group"]`` naming the original)
→ verl's advantage step with the rows read back from the rollouts' ``extra_info`` and one rollout per trajectory
(a multi-output agent loop's outputs share their trajectory's advantage) → provider.update(outcomes) → ``v05/*``.

SPO (arXiv 2509.13232; verl's ``recipe/spo``): ``algorithm.adv_estimator=v05_spo`` (the tracker's value as the
baseline, normalised over the batch) with the ``spo`` provider (the per-prompt Beta tracker) and, optionally,
``+algorithm.v05.allocator=spo`` (prioritised sampling). With it, verl's ``prepare_step`` submits nothing; inside the
replay buffer's ``sample`` (replicas awake, as for OSLA's rounds) :meth:`V05TrainerMixin._v05_draw` fetches a
candidate pool of P = ``data.gen_batch_size`` prompts (the recipe's own key; unset: ``pool_factor ×
data.train_batch_size``) through ``_next_train_batch``, attaches the tracker's prior to all P, and lets the round's
``spo`` allocator (:meth:`v05.round.Round.allocate` with :class:`v05.allocation.spo.SpoSample`, the path of v05's
trainer) draw ``data.train_batch_size`` of them by w = √(p̂(1 − p̂)) + 0.05; its one round submits the drawn prompts
(``rollout.n`` sessions each, SPO: 1) through verl's agent loop, and those rollouts are the step's batch.
The issue asked for verl's curriculum-sampler hook (``data.sampler.class_path``, an ``AbstractCurriculumSampler``
with ``update(batch)``): verl 0.9.1 has none (``create_rl_sampler``, trainer/ppo/utils.py, builds only a random or
sequential sampler, and no ``verl.experimental.dataset.sampler`` exists), so the draw lives in this trainer mode, and
a user sets ``+algorithm.v05.allocator=spo`` (and ``data.gen_batch_size``) instead. The tracker's ρ is constant
(``+algorithm.v05.provider_options.rho=constant``): ``rho="kl"`` (the provider's and the recipe's default) is
refused, since its drift — the mean |Δ log π| of each prompt's stored last response between the post-update policies
of its last and current visits — needs two extra actor log-prob passes per step over stored responses (the recipe's
``actor_rollout_wg.compute_log_prob`` on ``prompt2protodata``), which this trainer mode does not run; v05's own
trainer measures it. The offline init (``spo-offline``) is v05 train's only, likewise.

Failed agent-loop sessions (verl marks the prompt ``failure`` and keeps its other sessions): with ``fixed`` the group
trains on the sessions that finished, as in verl; with OSLA a prompt with a failed round-0 session leaves the step
(its group is dropped, ``v05/osla/dropped_prompts``) and a failed extra-round session is drawn again under a new uid
(up to :data:`EXTRA_ROUND_RETRIES` times, ``v05/osla/retried_rollouts``), because OSLA's test needs every rollout
it asked for. A provider whose ``predict`` raises or returns NaN/out-of-range values is replaced, for those prompts and
that step, by the running mean of :class:`v05.priors.guard.PriorGuard` (``v05/prior_fallbacks``), and a raising
``update`` is logged and counted (``v05/prior_update_errors``, cumulative), as in v05's own trainer; a faulty
verifier is guarded on verl's side (:func:`v05.adapters.verl.guarded_compute_score`). Checkpoints: ``v05_state.json``
(estimator, provider and prior-guard states) is written into ``global_step_<n>/`` (and copied to
``default_hdfs_dir``, where verl copies the checkpoint) *before* verl writes its ``latest_checkpointed_iteration.txt``
marker, so a resumable checkpoint always has it; resuming from one without it raises.

verl-forced workarounds: verl switches replay buffer, dataloader chunking and checkpointing on
``trainer_mode == "sync"`` (v1/trainer_base.py:153, :731, :902, :1004, :1499), so a mode named ``v05`` would get the
async paths; :attr:`V05TrainerMixin.trainer_mode` therefore reads ``"sync"``. The actor's mini-batch is
``ppo_mini_batch_size × rollout.n`` rollouts (:1589) while OSLA's batches vary in size: verl pads each batch to a
multiple of it with zero-loss ``pad`` rows, which the estimators skip. OSLA refuses
``trainer.v1.sync.parameter_sync_step`` > 1: verl then samples the step in sub-batches and sleeps the replicas after
each, so the extra rounds of the later sub-batches would have no replicas to run on (SPO's draw likewise). verl's
"epoch" counts ``data.train_batch_size`` prompts (v1/trainer_base.py:765) while SPO's draw reads P from the
dataloader each step, restarting it when it runs out.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from v05._types import FloatArray, IntArray
from v05.adapters.verl_estimators import (
    DRAWS,
    GROUP_FIELD,
    KEY_FIELD,
    TRAINER_MODE,
    VERL_ESTIMATORS,
    VerlConfig,
    VerlEstimator,
    VerlStep,
    check_group_filter,
    prompt_rows,
    trajectory_owner,
)
from v05.allocation import OSLA, Allocation, Allocator
from v05.estimators import PriorErrorState
from v05.groups import segment_count
from v05.priors import Calibration, calibrate, get_provider_spec, provider_spec
from v05.priors.guard import PriorGuard
from v05.registry import get_allocator
from v05.rewards import to_pass_rate, to_pm1
from v05.round import Prior, Round
from v05.tasks.base import prompt_key

if TYPE_CHECKING:
    from omegaconf import DictConfig
    from tensordict import TensorDict
    from transfer_queue import KVBatchMeta

logger = logging.getLogger(__name__)

STATE_FILE = "v05_state.json"
"""Written beside verl's checkpoint in ``global_step_<n>/``: estimator state and provider state (JSON)."""
EXTRA_ROUND_RETRIES = 2
"""How often OSLA redraws the failed sessions of one extra round before the step stops."""


@dataclass(frozen=True, slots=True)
class _Prompt:
    """A prompt of the current step: its dataset row (to resubmit), stable key, text and prior (reward scale)."""

    uid: str
    key: str
    text: str
    prior: float | None
    n0: float | None
    row: dict[str, Any]
    step: int


class _RoundsBuffer:
    """verl's replay buffer, followed (OSLA) or replaced (SPO's draw) on the training partition by the trainer's rounds.

    ``sample_first``: OSLA's round 0 is the batch verl submitted and its buffer samples, which ``rounds`` extends;
    SPO's draw submits its own prompts (verl's ``prepare_step`` submits none), so ``rounds`` gets None.
    """

    def __init__(
        self, inner: Any, rounds: Callable[[KVBatchMeta | None, int], KVBatchMeta], *, sample_first: bool = True
    ) -> None:
        self.inner = inner
        self._rounds = rounds
        self._sample_first = sample_first

    def sample(self, global_steps: int, partition_id: str, batch_size: int) -> tuple[KVBatchMeta, dict]:
        """Sample as verl does; on ``"train"`` OSLA's rounds extend the batch (SPO: the draw's rollouts are it)."""
        if partition_id == "train" and not self._sample_first:
            return self._rounds(None, global_steps), {}
        batch, metrics = self.inner.sample(global_steps=global_steps, partition_id=partition_id, batch_size=batch_size)
        if partition_id != "train":
            return batch, metrics
        return self._rounds(batch, global_steps), metrics

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class V05TrainerMixin:
    """verl's synchronous V1 trainer with v05's prior provider, OSLA rounds, SPO's draw and metrics (module docstring).

    :func:`trainer_class` combines it with verl's ``PPOTrainerSync`` into ``V05Trainer``; its methods call verl's
    through ``super()``.

    Configured by ``+algorithm.v05.*`` (:class:`v05.adapters.verl.VerlConfig`); ``algorithm.adv_estimator`` must be
    one of v05's (``v05``, ``v05_eb``, ``v05_dbb``, ``v05_spo``, ``v05_grpo``, ...). Metrics per step (verl's logger):
    :func:`step_metrics` (realised k distribution ``v05/k/*`` and ``v05/k_hist/<k>``, rejection rate,
    mean ŵ, n0, the prior's τ²/AUC/n0 from the provider's calibration), OSLA's ``v05/osla/*`` statistics, SPO's
    ``v05/spo/*`` (``candidates`` P, ``drawn``, ``pool_weight_mean`` and ``selected_weight_mean``: the mean draw
    probability of the pool and of the drawn prompts, ``retried_rollouts``), ``prior_select``'s ``v05/prior_select/*``
    (``candidates``, ``drawn``, ``predicted_signal``, ``realised_signal``, ``explored`` ...) and, with a provider,
    ``v05/prior_fallbacks`` (this step's prompts, or SPO's candidates, predicted by the guard's running mean) and
    ``v05/prior_update_errors`` (failed provider updates so far).

    Attributes:
        v05_config: the parsed ``algorithm.v05`` node.
        v05_estimator: the registered estimator (its ``state_`` is carried across steps and checkpointed).
        v05_round: the :class:`~v05.round.Round` of the run (shared with ``v05_estimator``): the provider, its guard,
            the allocator (OSLA or SPO's, built once) and the estimator state.
        v05_provider: the round's prior provider, or None (then priors come from the dataset's ``extra_info``).
        v05_prior_guard: the :class:`~v05.priors.guard.PriorGuard` around ``v05_provider`` (None without one).
        v05_allocator: the round's OSLA or ``SpoSample``, or None for ``allocator: fixed``.
        v05_pool_size: a pool draw's candidates P (``allocator: spo`` or ``prior_select``), else None.
        v05_last_allocation: the latest step's ``v05.allocation.Allocation`` (OSLA, SPO), or None.
    """

    def __init__(self, config: DictConfig) -> None:
        """Check the v05 settings against verl's, then build verl's trainer.

        Raises:
            ValueError: a setting v05 cannot honour (the message says which and how to fix it).
        """
        self.v05_config = VerlConfig.from_algorithm(config.algorithm)
        self.v05_estimator: VerlEstimator = estimator_for(config.algorithm.adv_estimator)
        cfg = self.v05_config
        allocator = _allocator_of(config, cfg)
        _check_config(config, allocator, self.v05_estimator)  # type: ignore[arg-type]
        self.v05_round = Round(self.v05_estimator.estimator, options=cfg.options, reward_range=cfg.reward_range,
                               prior=cfg.provider, prior_options=cfg.provider_options, feed_n0=cfg.feed_n0,
                               allocator=allocator)  # fmt: skip
        _check_provider(cfg, self.v05_round)
        self.v05_pool_size: int | None = None if cfg.allocator not in DRAWS else _candidate_pool(config, allocator)
        self._v05_prior_fallbacks = 0  # prompts of this step the guard's running mean predicted
        self.v05_last_allocation: Allocation | None = None
        self._v05_prompts: dict[str, _Prompt] = {}
        self._v05_counts = {"dropped_prompts": 0, "retried_rollouts": 0}  # OSLA's failure handling, this step
        self.v05_estimator.reset()
        self.v05_estimator.round = self.v05_round  # one round: the advantage step's estimator state is the run's
        super().__init__(config)  # type: ignore[call-arg]

    @property
    def v05_provider(self) -> Any:
        """The round's prior provider (None without one)."""
        return self.v05_round.provider

    @property
    def v05_prior_guard(self) -> PriorGuard | None:
        """The round's guard around the provider (None without one)."""
        return self.v05_round.guard

    @property
    def v05_allocator(self) -> Allocator | None:
        """The round's allocator: OSLA or SPO's ``SpoSample`` (None for ``allocator: fixed``)."""
        return self.v05_round.allocator

    @property
    def trainer_mode(self) -> str:
        """``"sync"``: verl branches on this name (module docstring); the class is found under ``v05``."""
        return "sync"

    @trainer_mode.setter
    def trainer_mode(self, value: str) -> None:
        pass  # verl's __init__ assigns config.trainer.v1.trainer_mode ("v05"); the behaviour stays sync's

    def _build_replay_buffer(self) -> Any:
        inner = super()._build_replay_buffer()  # type: ignore[misc]
        if self.v05_allocator is None:
            return inner
        if self.v05_config.allocator in DRAWS:
            return _RoundsBuffer(inner, self._v05_draw, sample_first=False)
        return _RoundsBuffer(inner, self._v05_rounds)

    def prepare_step(self) -> dict:
        """Submit the step's prompt batch, as verl does; with ``spo`` or ``prior_select`` nothing (the draw submits)."""
        if self.v05_config.allocator in DRAWS:
            return {}
        return super().prepare_step()  # type: ignore[misc]

    def _next_train_batch(self, num_prompts: int | None = None) -> TensorDict:
        """Fetch verl's prompt batch, with each prompt's stable key, prior (and OSLA's ``__rollout_n__``)."""
        return self._v05_attach(super()._next_train_batch(num_prompts))  # type: ignore[misc]

    def _v05_attach(self, batch: TensorDict) -> TensorDict:
        from verl.utils import tensordict_utils as tu  # noqa: PLC0415

        cfg = self.v05_config
        rows = _rows_of(batch)
        chats = [_prompt_text(r.get("raw_prompt")) for r in rows]
        infos = [dict(r.get("extra_info") or {}) for r in rows]
        for info, chat in zip(infos, chats, strict=True):
            own = info.get(cfg.key_field)
            info[KEY_FIELD] = prompt_key("sha1", chat) if own is None else str(own)
        texts = _problem_texts(infos, chats, cfg)
        prior = self.v05_round.predict([i[KEY_FIELD] for i in infos], texts)
        if prior is not None and prior.score is not None:  # extra_info stores the provider's V (dataset format)
            self._v05_prior_fallbacks += prior.fallbacks
            for info, v, n0 in zip(infos, prior.score, prior.n0, strict=True):
                info[cfg.prior_key] = float(to_pass_rate(v, "pm1")) if cfg.prior_scale == "pass_rate" else float(v)
                info[f"{cfg.prior_key}_n0"] = float(n0)
        tu.assign_non_tensor_stack(batch, "extra_info", infos)
        if isinstance(self.v05_allocator, OSLA):  # spo sets it per submitted row (_v05_submit)
            tu.assign_non_tensor_stack(batch, "__rollout_n__", [self.v05_allocator.k_init] * len(rows))
        parsed = prompt_rows([r["uid"] for r in rows], infos, config=cfg)
        for r, info, text in zip(rows, infos, texts, strict=True):
            uid, p = str(r["uid"]), parsed[str(r["uid"])]
            row = {**r, "extra_info": info}
            self._v05_prompts[uid] = _Prompt(uid, info[KEY_FIELD], text, p.prior, p.n0, row, self.global_steps)
        return batch

    def _v05_rounds(self, batch: KVBatchMeta, global_steps: int) -> KVBatchMeta:
        """OSLA over the sampled prompts: round 0 is the sampled batch; extra rounds go through verl's agent loop.

        Prompts with a failed round-0 session are dropped first (module docstring); extra rounds redraw failed
        sessions. Returns the kept round-0 rollouts and every extra round's, as one batch.
        """
        batch, by_uid = self._v05_drop_failed(batch, global_steps)
        pool = [self._v05_prompts[u] for u in by_uid]
        prior = self._v05_pool_prior(pool)
        metas: list[KVBatchMeta] = []

        def sample(ids: IntArray, counts: IntArray) -> FloatArray:
            if not metas:
                meta, got = batch, {int(i): by_uid[pool[int(i)].uid] for i in ids}
            else:
                meta, got = self._v05_extra_round(pool, ids, counts, global_steps)
            metas.append(meta)
            for i, c in zip(ids, counts, strict=True):
                if len(got[int(i)]) != c:  # round 0 holds k_init complete sessions per kept prompt
                    raise RuntimeError(f"osla asked {c} rollouts of prompt {pool[i].key!r}, got {len(got[int(i)])}")
            return np.concatenate([np.asarray(got[int(i)], np.float64) for i in ids])

        self.v05_last_allocation = self.v05_round.allocate(
            sample, n_prompts=len(pool), rng=np.random.default_rng(global_steps), prior=prior,
            keys=[p.key for p in pool],
        )  # fmt: skip
        return _concat_metas(metas, batch)

    def _v05_pool_prior(self, pool: list[_Prompt]) -> Prior:
        """(P,) the pool's prior as its rows' ``extra_info`` carries it (reward scale); ValueError if one lacks it."""
        missing = sum(p.prior is None for p in pool)
        if missing:
            raise ValueError(
                f"{self.v05_config.allocator} needs a prior for every prompt; {missing} of {len(pool)} have no "
                f"extra_info[{self.v05_config.prior_key!r}] (set +algorithm.v05.provider or add it to the dataset)"
            )
        n0 = None if any(p.n0 is None for p in pool) else np.asarray([p.n0 for p in pool], np.float64)
        value = np.asarray([p.prior for p in pool], np.float64)  # (P,) as the rollouts' extra_info carries it
        return Prior(value, n0, self.v05_config.reward_range)

    def _v05_draw(self, _: None, global_steps: int) -> KVBatchMeta:
        """A pool draw (SPO's or the prior's selection): ``v05_pool_size`` candidates, ``train_batch_size`` drawn.

        The candidates are verl's next ``v05_pool_size`` dataset prompts (``_next_train_batch``: whole
        ``data.gen_batch_size`` fetches), each with its key and prior attached; the round's allocator draws the batch
        from them by the prior's uncertainty (:class:`v05.allocation.spo.SpoSample` or
        :class:`v05.allocation.select.PriorSelect`, through
        :meth:`v05.round.Round.allocate` as in v05's trainer), and its one round submits the drawn prompts through
        verl's agent loop (``rollout.n`` sessions each under a new uid, ``extra_info["v05_group"]`` naming the
        candidate's; a failed session is drawn again, :meth:`_v05_extra_round`). Candidates not drawn leave the step.
        """
        try:
            candidates = self._next_train_batch(self.v05_pool_size)
        except StopIteration:  # verl's dataloader drops the last incomplete gen_batch_size fetch
            raise ValueError(
                f"{self.v05_config.allocator}'s candidate pool of {self.v05_pool_size} prompts (data.gen_batch_size) "
                "is larger than the "
                "training set: lower data.gen_batch_size (or allocator_options.pool_factor)"
            ) from None
        pool = [self._v05_prompts[str(r["uid"])] for r in _rows_of(candidates)]
        prior = self._v05_pool_prior(pool)
        metas: list[KVBatchMeta] = []
        self._v05_counts = {"retried_rollouts": 0}

        def sample(ids: IntArray, counts: IntArray) -> FloatArray:
            meta, got = self._v05_extra_round(pool, ids, counts, global_steps)
            metas.append(meta)
            return np.concatenate([np.asarray(got[int(i)], np.float64) for i in ids])

        alloc = self.v05_round.allocate(
            sample, n_prompts=len(pool), rng=np.random.default_rng(global_steps), prior=prior,
            keys=[p.key for p in pool],
        )  # fmt: skip
        for i in np.flatnonzero(alloc.counts == 0):  # not drawn: reaches neither the loss nor the provider
            del self._v05_prompts[pool[i].uid]
        self.v05_last_allocation = alloc
        return _concat_metas(metas, metas[0])

    def _v05_drop_failed(self, batch: KVBatchMeta, global_steps: int) -> tuple[KVBatchMeta, dict[str, list[float]]]:
        """Drop the prompts whose round-0 sessions did not all finish; the kept batch and uid → session rewards."""
        import transfer_queue as tq  # noqa: PLC0415

        k_init = self.v05_allocator.k_init  # type: ignore[union-attr]
        by_uid = _session_rewards(batch)
        failed = {u for u, r in by_uid.items() if len(r) != k_init}
        failed |= {u for u, p in self._v05_prompts.items() if p.step == global_steps and u not in by_uid}
        self._v05_counts = {"dropped_prompts": len(failed), "retried_rollouts": 0}
        if not failed:
            return batch, by_uid
        logger.warning(
            "step %d: %d prompt(s) had failed agent-loop sessions; osla drops their groups", global_steps, len(failed)
        )
        drop = [_prompt_uid(k) in failed for k in batch.keys]
        tq.kv_clear(keys=[k for k, d in zip(batch.keys, drop, strict=True) if d], partition_id=batch.partition_id)
        for uid in failed:
            self._v05_prompts.pop(uid, None)
            by_uid.pop(uid, None)
        if not by_uid:
            raise RuntimeError(f"step {global_steps}: every prompt had a failed agent-loop session (see verl's log)")
        return batch.select_keys([k for k, d in zip(batch.keys, drop, strict=True) if not d]), by_uid

    def _v05_extra_round(
        self, pool: list[_Prompt], ids: IntArray, counts: IntArray, global_steps: int
    ) -> tuple[KVBatchMeta, dict[int, list[float]]]:
        """Draw ``counts[j]`` more rollouts of pool prompt ``ids[j]``, redrawing failed sessions; batch and rewards."""
        need = {int(i): int(c) for i, c in zip(ids, counts, strict=True)}
        got: dict[int, list[float]] = {i: [] for i in need}
        metas = []
        for attempt in range(1 + EXTRA_ROUND_RETRIES):
            todo = {i: c - len(got[i]) for i, c in need.items() if len(got[i]) < c}
            if not todo:
                break
            if attempt:
                self._v05_counts["retried_rollouts"] += sum(todo.values())
            meta, rewards = self._v05_submit(pool, todo, global_steps)
            metas.append(meta)
            for i, r in rewards.items():
                got[i].extend(r)
        short = {pool[i].key: (len(got[i]), c) for i, c in need.items() if len(got[i]) < c}
        if short:
            raise RuntimeError(
                f"{self.v05_config.allocator} round of step {global_steps}: sessions of prompt(s) {short} (got, asked) "
                f"failed "
                f"{1 + EXTRA_ROUND_RETRIES} times in a row; see verl's agent-loop log"
            )
        return _concat_metas(metas, metas[0]), got

    def _v05_submit(
        self, pool: list[_Prompt], todo: dict[int, int], global_steps: int
    ) -> tuple[KVBatchMeta, dict[int, list[float]]]:
        """Submit ``todo[i]`` sessions of pool prompt i (a new uid each) through verl's agent loop and wait for them."""
        import transfer_queue as tq  # noqa: PLC0415
        from transfer_queue import KVBatchMeta  # noqa: PLC0415
        from verl.utils import tensordict_utils as tu  # noqa: PLC0415

        rows, uid_of = [], {}
        for i, c in todo.items():
            p, uid = pool[i], str(uuid.uuid4())
            info = {**p.row["extra_info"], GROUP_FIELD: p.uid}
            rows.append({**p.row, "uid": uid, "extra_info": info, "__rollout_n__": c})
            uid_of[i] = uid
        extra = _tensordict_of(rows)
        tu.assign_non_tensor_data(extra, "global_steps", global_steps)
        self._submit_batch_to_rollout(extra)  # type: ignore[attr-defined]
        buffer = self.replay_buffer.inner  # type: ignore[attr-defined]
        try:
            meta, _ = buffer.sample(global_steps=global_steps, partition_id="train", batch_size=len(rows))
        except RuntimeError as err:  # verl's sync buffer refuses a batch in which every session failed
            if "no materializable trajectories" not in str(err):
                raise
            tq.kv_clear(keys=list(uid_of.values()), partition_id="train")  # their failed prompt entries
            meta = KVBatchMeta(keys=[], tags=[], partition_id="train")
        by_uid = _session_rewards(meta)
        return meta, {i: by_uid.get(uid, []) for i, uid in uid_of.items()}

    def _compute_advantage(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        """Run verl's advantage step with the rollouts' prompt rows bound; then the provider update and ``v05/*``."""
        import transfer_queue as tq  # noqa: PLC0415

        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["uid", "extra_info"])
        infos = list(data["extra_info"]) if "extra_info" in data.keys() else None
        rows = prompt_rows(list(data["uid"]), infos, config=self.v05_config)
        # verl's compute_advantage sees the rows in batch.keys order; one trajectory (session) is one rollout
        with self.v05_estimator.bind(rows, step=self.global_steps, trajectory_keys=list(batch.keys)):
            batch = super()._compute_advantage(batch, metrics)  # type: ignore[misc]
        step = self.v05_estimator.last_
        if step is None:
            raise RuntimeError(f"verl did not call the v05 estimator {self.v05_estimator.name!r} in _compute_advantage")
        calibration = self._v05_update_provider(step)
        metrics.update(step_metrics(step, calibration))
        if self.v05_prior_guard is not None:
            metrics["v05/prior_fallbacks"] = float(self._v05_prior_fallbacks)
            metrics["v05/prior_update_errors"] = float(self.v05_prior_guard.update_errors)
            self._v05_prior_fallbacks = 0
        if self.v05_last_allocation is not None:
            alloc, name = self.v05_last_allocation, self.v05_config.allocator
            metrics.update({f"v05/{name}/{k}": float(v) for k, v in alloc.stats.items() if isinstance(v, int | float)})
            metrics.update({f"v05/{name}/{k}": float(v) for k, v in self._v05_counts.items()})
            if name in DRAWS:
                metrics[f"v05/{name}/candidates"] = float(len(alloc.counts))
                metrics[f"v05/{name}/drawn"] = float(np.sum(alloc.counts > 0))
            self.v05_last_allocation = None
        return batch

    def _v05_update_provider(self, step: VerlStep) -> Calibration | None:
        """Feed the step's outcomes to the provider through the guard (it calibrates on its own predictions first).

        Returns the provider's calibration; a raising ``update`` is counted by the guard and the step goes on.
        """
        prompts = [self._v05_prompts.pop(str(u), None) for u in step.group_uids]
        for uid in [u for u, p in self._v05_prompts.items() if p.step < self.global_steps]:
            del self._v05_prompts[uid]  # prompts of earlier steps that never reached the loss (e.g. DAPO-evicted)
        if self.v05_provider is None:
            return None
        if any(p is None for p in prompts):
            raise RuntimeError("a prompt of this step was not attached by the v05 trainer (no text for the provider)")
        keys, texts = [p.key for p in prompts], [p.text for p in prompts]  # type: ignore[union-attr]
        self.v05_round.learn(keys, texts, step.rewards, step.group, step=int(self.global_steps))
        return self.v05_round.calibration()

    def _save_checkpoint(self) -> None:
        """Write ``v05_state.json`` (and its copy under ``default_hdfs_dir``), then verl's checkpoint and marker.

        verl's ``_save_checkpoint`` ends by writing ``latest_checkpointed_iteration.txt`` (v1/trainer_base.py:1021)
        and calling ``trainer.checkpoint_callback_class``; the state is on disk before either, so a crash at any
        point leaves no resumable checkpoint without it, and a callback that uploads the folder takes it along.
        """
        from verl.utils import hdfs_io  # noqa: PLC0415

        name = f"global_step_{self.global_steps}"
        folder = os.path.join(self.config.trainer.default_local_dir, name)
        own = self.v05_round.state_dict()
        state = {
            "estimator": self.v05_estimator.name,
            "state": own["estimator"],
            "provider": own["provider"],
            "prior_guard": own["prior_guard"],
        }
        path = _write_json_atomic(folder, STATE_FILE, state)
        remote = self.config.trainer.get("default_hdfs_dir")
        if remote:  # verl's workers copy actor/critic to <default_hdfs_dir>/global_step_<n>/ (v1/trainer_base.py:976)
            hdfs_io.makedirs(os.path.join(remote, name), exist_ok=True)
            hdfs_io.copy(src=path, dst=os.path.join(remote, name, STATE_FILE))
        super()._save_checkpoint()  # type: ignore[misc]

    def _load_checkpoint(self) -> None:
        """Resume as verl does, then the v05 state of the same ``global_step_<n>`` folder.

        Raises:
            ValueError: the checkpoint has no ``v05_state.json`` (not written by this trainer mode).
        """
        super()._load_checkpoint()  # type: ignore[misc]
        if self.global_steps == 0:
            return
        trainer = self.config.trainer
        folder = (
            trainer.resume_from_path
            if trainer.resume_mode == "resume_path"
            else os.path.join(trainer.default_local_dir, f"global_step_{self.global_steps}")
        )
        path = os.path.join(os.path.abspath(folder), STATE_FILE)
        if not os.path.exists(path):
            raise ValueError(
                f"no {STATE_FILE} in {folder}: the checkpoint was not written by trainer_mode={TRAINER_MODE}, so the "
                "v05 estimator and prior states cannot resume; resume from a v05 checkpoint, or start afresh with "
                "trainer.resume_mode=disable"
            )
        with open(path) as fh:
            state = json.load(fh)
        self.v05_round.load_state_dict({"estimator": state["state"], "provider": state["provider"],
                                        "prior_guard": state.get("prior_guard")})  # fmt: skip


def _write_json_atomic(folder: str, name: str, payload: object) -> str:
    """Write ``payload`` as ``folder/name`` through a temporary file and a rename (never a half-written file)."""
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.")
    with os.fdopen(fd, "w") as fh:
        json.dump(payload, fh)
    path = os.path.join(folder, name)
    os.replace(tmp, path)
    return path


def step_metrics(step: VerlStep, calibration: Calibration | None = None) -> dict[str, float]:
    r"""The ``v05/*`` metrics of one step (plain floats, for verl's tracking logger).

    Rollouts (trajectories) per prompt (``v05/k/mean|min|max`` and ``v05/k_hist/<k>``, the number of prompts that got
    k; ``v05/folded_outputs``: the extra outputs of multi-output trajectories, counted once), the fraction
    of groups with all-zero advantages, mean |A|, and when defined the estimator's mean weight ŵ on the rollouts,
    rejection rate, mean n0, its τ̂² window (``v05_eb``), and the prior's calibration (τ², AUC, n0, n): the given
    ``calibration`` (a provider's), else this step's groups (``v05.priors.calibrate``, ±1 space).
    """
    est = step.estimate
    n_g = segment_count(step.group)  # (G,)
    moved_g = np.bincount(step.group, weights=(np.abs(est.advantages) > 1e-12).astype(np.float64))  # (G,)
    out: dict[str, float] = {
        "v05/rollouts": float(len(step.rewards)),
        "v05/prompts": float(len(n_g)),
        "v05/padding_rows": float(step.n_padding),
        "v05/folded_outputs": float(step.n_outputs),
        "v05/k/mean": float(n_g.mean()),
        "v05/k/min": float(n_g.min()),
        "v05/k/max": float(n_g.max()),
        "v05/zero_adv_frac": float(np.mean(moved_g == 0)),
        "v05/adv_abs_mean": float(np.mean(np.abs(est.advantages))),
    }
    out.update({f"v05/k_hist/{k}": float(c) for k, c in enumerate(np.bincount(n_g)) if c})
    for name, values in (("mean_weight", est.weight), ("reject_rate", est.reject), ("n0", est.n0)):
        if values is not None:
            out[f"v05/{name}"] = float(np.mean(values))
    if isinstance(est.state, PriorErrorState):
        out["v05/eb_tau2"], out["v05/eb_n0"] = est.state.tau2(), est.state.n0()
    if step.prior is not None:
        out["v05/prior_mean"] = float(np.mean(step.prior))
        if calibration is None:
            vbar = to_pm1(np.bincount(step.group, weights=step.rewards) / n_g, step.reward_range)  # (G,)
            calibration = calibrate(to_pm1(step.prior, step.reward_range), vbar, n_g.astype(np.float64))
    if calibration is not None:
        out.update({f"v05/prior_{k}": float(getattr(calibration, k)) for k in ("tau2", "auc", "n0", "n")})
    return out


def _allocator_of(config: DictConfig, cfg: VerlConfig) -> Allocator | None:
    """The run's allocator: OSLA, a pool draw (``SpoSample``, ``PriorSelect``; B = train_batch_size, k = rollout.n).

    None for ``allocator: fixed``.

    Raises:
        ValueError: an allocator option that verl's own keys set (``batch_size``: VerlConfig; ``k`` unequal to
            ``rollout.n``), or the allocator's own refusals.
    """
    if cfg.allocator == "osla":
        return get_allocator("osla", **cfg.allocator_options)
    if cfg.allocator not in DRAWS:
        return None
    n = int(config.actor_rollout_ref.rollout.n)
    options = {"k": n, **cfg.allocator_options}
    if options["k"] != n:
        raise ValueError(
            f"algorithm.v05.allocator_options.k={options['k']} differs from actor_rollout_ref.rollout.n={n}: "
            f"{cfg.allocator} draws rollout.n rollouts per drawn prompt (verl sizes mini-batches by it); set "
            "rollout.n (SPO: 1)"
        )
    return get_allocator(cfg.allocator, batch_size=int(config.data.train_batch_size), **options)


def _candidate_pool(config: DictConfig, sample: Any) -> int:
    """P, the candidates a pool draw picks a step's batch from.

    ``data.gen_batch_size`` (the recipe's key) if set, else the allocator's ``candidate_pool`` of
    ``data.train_batch_size`` (SPO: ``pool_factor`` × it; ``prior_select``: 4 × it).
    """
    gen = config.data.get("gen_batch_size", None)
    return int(gen) if gen else int(sample.candidate_pool(int(config.data.train_batch_size)))


def _check_provider(cfg: VerlConfig, rnd: Round) -> None:
    """Refuse a provider setting that needs what only v05's trainer supplies (its spec says which, not its name).

    ``needs_drift`` with ``rho="kl"``: the discount reads the policy's drift on each prompt's last response since its
    last visit (SPO's tracker), which v05's trainer measures with its own policy (:mod:`v05.train.spo_drift`); verl's
    recipe recomputes it with two extra actor log-prob passes per step over stored responses, which this trainer mode
    does not run. ``offline_init`` with ``offline``: v05's trainer draws the offline rollouts before step 1.
    """
    if cfg.provider is None:
        return
    spec, provider = get_provider_spec(cfg.provider), rnd.provider
    if spec.needs_drift and getattr(provider, "rho", None) == "kl":
        raise ValueError(
            f"algorithm.v05.provider={cfg.provider!r} with rho='kl' (its default) discounts by the policy's drift "
            "since each prompt's last visit, which only v05 train measures; set "
            "+algorithm.v05.provider_options.rho=constant (and rho_value, the recipe's trainer.spo.rho.value)"
        )
    if spec.offline_init and getattr(provider, "offline", False):
        raise ValueError(
            f"algorithm.v05.provider={cfg.provider!r} with offline=true starts from offline rollouts of the starting "
            "policy that only v05 train draws (config spo-offline); in verl remove provider_options.offline "
            "(the tracker then starts at Beta(1/2, 1/2), the recipe's trainer.spo.offline_N=0)"
        )


def _check_config(config: DictConfig, allocator: Allocator | None, estimator: VerlEstimator) -> None:
    """Refuse verl settings that contradict v05's inputs (messages say how to fix them).

    A group filter (DAPO's ``algorithm.filter_groups``) with an estimator whose baseline comes from outside the group
    (a prior or a per-prompt history: ``v05``, ``v05_eb``, ``v05_dbb``, ``v05_spo``) is refused: it drops the
    all-correct and all-wrong groups, which such a baseline gives a non-zero advantage, and hides them from the prior
    and the estimator state (measured: the history prior stayed at 0.5 and v05_eb's n0 rose to 200). OSLA and SPO's
    draw sample inside the replay buffer's ``sample`` (verl's rollout replicas awake, rewards arriving with the
    rollouts), hence their own refusals.
    """
    algorithm = config.algorithm
    if algorithm.get("use_kl_in_reward", False):
        raise ValueError("trainer_mode=v05 needs the verifier's outcome reward: set algorithm.use_kl_in_reward=False")
    check_group_filter(algorithm, estimator)
    if allocator is None:
        return
    name = "osla" if isinstance(allocator, OSLA) else config.algorithm.v05.allocator
    what = "decides per-prompt budgets" if name == "osla" else "draws each step's prompts"
    if (algorithm.get("filter_groups") or {}).get("enable", False):
        raise ValueError(f"algorithm.v05.allocator={name} {what}; disable algorithm.filter_groups")
    if config.trainer.v1.sampler.get("sync_refill_failed_groups", False):
        raise ValueError(f"{name} keeps each step's prompts: set trainer.v1.sampler.sync_refill_failed_groups=False")
    sync_step = (config.trainer.v1.get("sync") or {}).get("parameter_sync_step", 1)
    if sync_step != 1:
        rounds = "extra rounds" if name == "osla" else "drawn prompts"
        raise ValueError(
            f"{name} runs its {rounds} on the rollout replicas, which verl puts to sleep after each of the "
            f"trainer.v1.sync.parameter_sync_step={sync_step} sub-batches: set it to 1 (or use allocator=fixed)"
        )
    rm = config.reward.reward_model
    if rm.get("enable", False) and not rm.get("enable_resource_pool", False):
        raise ValueError(f"{name} reads rewards between rounds: use a rule-based or resource-pool reward model")
    if name in DRAWS:
        _check_pool(config, name)
        return
    if config.actor_rollout_ref.rollout.n != allocator.k_init:  # type: ignore[attr-defined]
        logger.warning(
            "actor_rollout_ref.rollout.n=%s but osla k_init=%s: verl sizes mini-batches as ppo_mini_batch_size × "
            "rollout.n rollouts; set rollout.n=%s",
            config.actor_rollout_ref.rollout.n,
            allocator.k_init,  # type: ignore[attr-defined]
            allocator.k_init,  # type: ignore[attr-defined]
        )


def _check_pool(config: DictConfig, name: str) -> None:
    """A pool draw's candidates: ``data.gen_batch_size`` (if set) at least the batch, and not set twice (SPO)."""
    gen, batch = config.data.get("gen_batch_size", None), int(config.data.train_batch_size)
    options = config.algorithm.v05.get("allocator_options") or {}
    if gen and "pool_factor" in options:
        raise ValueError(
            f"{name}'s candidate pool is data.gen_batch_size={gen}: remove algorithm.v05.allocator_options.pool_factor "
            "(or data.gen_batch_size, for pool_factor × data.train_batch_size)"
        )
    if gen and int(gen) < batch:
        raise ValueError(
            f"{name} draws data.train_batch_size={batch} prompts from data.gen_batch_size={gen} candidates: set "
            "data.gen_batch_size >= data.train_batch_size (the recipe: 14000 for 1024)"
        )


def _rows_of(batch: TensorDict) -> list[dict[str, Any]]:
    """Per-prompt dicts of a prompt batch, as verl's agent-loop worker reads them (batch-level data left out)."""
    import torch  # noqa: PLC0415
    from tensordict import NonTensorData, NonTensorStack  # noqa: PLC0415

    cols: dict[str, list[Any]] = {}
    for k, v in batch.items():
        if isinstance(v, torch.Tensor):
            cols[k] = list(v.unbind(0))
        elif isinstance(v, NonTensorStack):
            cols[k] = v.tolist()
        elif not isinstance(v, NonTensorData):
            raise ValueError(f"unsupported prompt-batch field {k!r} of type {type(v).__name__}")
    return [{k: col[i] for k, col in cols.items()} for i in range(batch.batch_size[0])]


def _tensordict_of(rows: list[dict[str, Any]]) -> TensorDict:
    """Inverse of :func:`_rows_of` (tensors stacked, everything else a NonTensorStack)."""
    import torch  # noqa: PLC0415
    from verl.utils import tensordict_utils as tu  # noqa: PLC0415

    cols = {k: [r[k] for r in rows] for k in rows[0]}
    return tu.get_tensordict(
        {k: torch.stack(v) if isinstance(v[0], torch.Tensor) else v for k, v in cols.items()}  # type: ignore[misc]
    )


def _concat_metas(metas: list[KVBatchMeta], template: KVBatchMeta) -> KVBatchMeta:
    """One batch of the rollouts of ``metas``, in order (partition and batch-level info from ``template``)."""
    from transfer_queue import KVBatchMeta  # noqa: PLC0415

    return KVBatchMeta(
        keys=[k for m in metas for k in m.keys],
        tags=[t for m in metas for t in m.tags],
        partition_id=template.partition_id,
        extra_info=template.extra_info,
    )


def _prompt_uid(trajectory_key: str) -> str:
    """The prompt uid of a trajectory key ``{uid}_{session_id}_{index}`` (verl's TransferQueue layout)."""
    return trajectory_key.split("_", 1)[0]


def _session_rewards(meta: KVBatchMeta) -> dict[str, list[float]]:
    """Map uid → the outcome reward of each session (trajectory), in session order.

    A session's final output carries its reward (:func:`v05.adapters.verl.trajectory_owner`).
    """
    import transfer_queue as tq  # noqa: PLC0415

    if not meta.keys:
        return {}
    data = tq.kv_batch_get(keys=meta.keys, partition_id=meta.partition_id, select_fields=["rm_scores"])
    scores = [float(t.sum()) for t in data["rm_scores"].unbind()]
    owner = trajectory_owner(meta.keys)  # (bs,)
    final = sorted(
        (meta.keys[row].rsplit("_", 2)[0], int(meta.keys[row].rsplit("_", 2)[1]), row)
        for row in np.flatnonzero(owner == np.arange(len(owner)))
    )
    out: dict[str, list[float]] = {}
    for uid, _, row in final:
        out.setdefault(uid, []).append(scores[row])
    return out


def _problem_texts(infos: list[dict[str, Any]], chats: list[str], config: VerlConfig) -> list[str]:
    """Each prompt's bare problem text ``extra_info[text_field]`` for the provider (module docstring).

    Rows without one get their chat text, unless the provider reads texts (its spec's ``reads_text``: ``v0``,
    ``combined``; or ``needs_policy``): then it raises, since V0 embeds problem texts and the chat template around
    them would shift every prediction. Providers that read prompt keys only (``running_mean``, ...) never raise.
    """
    field = config.text_field
    texts = [info.get(field) if isinstance(info.get(field), str) else None for info in infos]
    missing = sum(t is None for t in texts)
    spec = None if config.provider is None else provider_spec(config.provider, config.provider_options)
    if missing and spec is not None and (spec.reads_text or spec.needs_policy):  # not an id-only provider
        raise ValueError(
            f"the {config.provider!r} prior reads each prompt's bare problem text, but {missing} of {len(infos)} "
            f"prompts have no extra_info[{field!r}]: add it to the dataset (examples/verl/add_problem_text.py for "
            "DAPO-Math-17k), or set +algorithm.v05.text_field to the extra_info field that holds it"
        )
    return [chat if t is None else t for t, chat in zip(texts, chats, strict=True)]


def _prompt_text(raw_prompt: object) -> str:
    """A prompt's text: a string, or the contents of its chat messages joined by newlines."""
    if isinstance(raw_prompt, str):
        return raw_prompt
    if isinstance(raw_prompt, list | tuple | np.ndarray):
        parts = [str(m.get("content", "")) if isinstance(m, dict) else str(m) for m in raw_prompt]
        return "\n".join(parts)
    return json.dumps(raw_prompt, sort_keys=True, default=str)


def estimator_for(name: str) -> VerlEstimator:
    """The :class:`VerlEstimator` registered in verl under ``name``; ValueError if ``name`` is not one of v05's."""
    from verl.trainer.ppo import core_algos  # noqa: PLC0415

    fn = core_algos.ADV_ESTIMATOR_REGISTRY.get(str(name))
    if not isinstance(fn, VerlEstimator):
        raise ValueError(
            f"algorithm.adv_estimator={name!r} is not a v05 estimator; valid: {', '.join(VERL_ESTIMATORS)} "
            "(registered by v05.adapters.verl.register(); verl loads the plugin through v05's verl.plugins entry "
            "point, or VERL_USE_EXTERNAL_MODULES=v05.adapters.verl)"
        )
    return fn


@functools.cache
def trainer_class() -> type:
    """Build ``V05Trainer``: :class:`V05TrainerMixin` on verl's ``PPOTrainerSync`` (built once, then cached).

    Imports verl's V1 trainer, which needs ``transfer_queue``; the module itself imports neither.
    """
    from verl.trainer.ppo.v1 import PPOTrainerSync  # noqa: PLC0415

    namespace = {"__module__": __name__, "__doc__": V05TrainerMixin.__doc__}
    return type("V05Trainer", (V05TrainerMixin, PPOTrainerSync), namespace)


def register_trainer_mode() -> None:
    """Register ``V05Trainer`` as verl's V1 trainer mode ``v05`` (idempotent).

    Raises:
        ModuleNotFoundError: verl's V1 trainer cannot be imported (``transfer_queue`` missing).
    """
    from verl.trainer.ppo.v1 import register_trainer  # noqa: PLC0415
    from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY  # noqa: PLC0415

    cls = trainer_class()
    if TRAINER_REGISTRY.get(TRAINER_MODE) is not cls:
        register_trainer(TRAINER_MODE)(cls)


__all__ = ["STATE_FILE", "V05TrainerMixin", "estimator_for", "register_trainer_mode", "step_metrics", "trainer_class"]
