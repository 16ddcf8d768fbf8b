r"""The trainer's value methods: where a step's baselines come from, behind the one protocol the loop calls.

The loop knows a :class:`ValueMethod` only through its hooks, in this order per step:

    out = method.estimate(batch, compute)             advantages of the kept rollouts, value per group, metrics
    terms, opt = method.joint_loss(out, compute)      a value loss the policy's loss carries (PPO's value head), or none
    θ ← update_policy(out.rollouts, out.advantages)   the policy update (its old log-probs recomputed unless
                                                      ``method.recomputes_old_logp``: the method's pass already did)
    method.after_update(out, compute)                 the method learns the step: a critic update, a probe refit
    method.save(tensors, state) / method.load(...)    its state in the checkpoint

:func:`make_value_method` picks the method from the estimator's spec, never from a class or a name list:

- :class:`EstimatorMethod` — any estimator of :mod:`v05.registry` on outcome rewards: the group baselines (grpo,
  rloo, ...) and the prior-based ones (v05, v05_eb; dbb's per-prompt history) alike, through the run's
  :class:`v05.round.Round` (the same call the TRL and verl adapters make): it binds the step's context the estimator
  takes (prior, pseudo-count n0, state, prompt keys, step) and carries its state (v05_eb's prior-error window, dbb's
  history) from step to step, checkpointed with the round's. Its value per group is the prior's, if any.
- :class:`PoiseMethod` — an estimator that ``needs_values`` (``poise``, arXiv 2605.07579, SPEC §6): one no-grad
  pass over the step's rollouts gives the loss's old log-probs and the probe's features (layer-L hidden states of
  the last prompt and response tokens + 3 entropy summaries, :func:`v05.train.features.recompute_pass`); the probe
  of the *previous* steps predicts every rollout, ``poise`` turns the siblings' predictions into each rollout's
  baseline, the step's rows (features, cross-rollout targets) join the FIFO buffer of whole groups, and after the
  policy update the probe is refit — strictly predict → advantages → append → refit, so no step's data reaches its
  own baselines. The first ``bootstrap_steps`` use RLOO while rows accumulate.
- :class:`CriticMethod` — a trainer-only estimator whose value model is the critic
  (:data:`v05.registry.TRAINER_ESTIMATORS`: ``gae``, PPO, the "coupled critic" comparator; verl's
  ``compute_gae_advantage_return`` and ``compute_value_loss``): a critic values every response position before the
  update, GAE turns the outcome reward (on each response's last token) into per-token advantages and returns,
  advantages are whitened, the policy update uses them per token, and the critic is trained on the returns with the
  clipped value loss — a separate critic after the policy update with its own optimizer, or a value head on the
  policy trunk inside the policy's loss.

Deviations: POISE's probe is one probe (the release keeps one per data domain); the prompt and response features are
those of ``recompute_pass`` (see its docstring for the entropy-span fallback on tag-free answers).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from v05.estimators import Estimate, cross_rollout_targets
from v05.groups import segment_mean
from v05.registry import TRAINER_ESTIMATORS, estimate, get_estimator
from v05.rewards import from_pass_rate, to_pass_rate
from v05.round import Prior, Round
from v05.train.compute import ComputeMeter
from v05.train.config import TrainConfig
from v05.train.critic import Critic, gae, outcome_token_rewards, value_loss, whiten
from v05.train.features import recompute_pass
from v05.train.forward import prefix_rows
from v05.train.loss import loss_norm
from v05.value_probe import GroupBuffer, PoiseProbe


@dataclass(frozen=True, slots=True)
class StepBatch:
    """What a value method is given of one step: the kept rollouts and their context.

    Attributes:
        step: the current step (1-based).
        rollouts: (N) the kept rollouts.
        rewards: (N,) their rewards on the run's scale (shaped).
        group: (N,) group ids in [0, G).
        keys: (G,) stable prompt keys of the groups.
        prior: the groups' prior (:class:`v05.round.Prior`: value on the reward scale, n0), None without a provider.
    """

    step: int
    rollouts: Any
    rewards: np.ndarray
    group: np.ndarray
    keys: np.ndarray
    prior: Prior | None = None


@dataclass(frozen=True, slots=True)
class StepAdvantages:
    """What a value method returns for one step (:meth:`ValueMethod.estimate`).

    Attributes:
        estimate: per-rollout advantages and baselines (the metrics' view; a critic's is a per-token summary).
        advantages: (N,) or (N, R) what the policy update uses (a critic's GAE is per token).
        rollouts: (N) the rollouts the update uses (POISE's carry old log-probs from its feature pass).
        value_g: (G,) the method's value of each prompt as a pass rate (value-quality metrics), or None.
        metrics: the method's own metrics for the row.
        targets: what the method's own update needs after the policy's (the critic's returns and old values).
    """

    estimate: Estimate
    advantages: Any
    rollouts: Any
    value_g: np.ndarray | None
    metrics: dict[str, float] = field(default_factory=dict)
    targets: Any = None


ValueTerms = Callable[[np.ndarray, Any], Any]
"""(micro-batch rows, LossNorm) → a value loss added to the policy's loss (PPO's ``head`` mode)."""


class ValueMethod(Protocol):
    """Where a step's baselines come from, as the loop sees it (module docstring: the order of the hooks).

    Attributes:
        recomputes_old_logp: ``estimate`` already recomputes the old log-probs with the training forward, so a
            non-float32 policy needs no recompute in the update (``train.recompute_old_logp=auto``).
    """

    recomputes_old_logp: bool

    def estimate(self, batch: StepBatch, compute: ComputeMeter) -> StepAdvantages:
        """The step's advantages (its passes counted in ``compute``)."""

    def joint_loss(self, out: StepAdvantages, compute: ComputeMeter) -> tuple[ValueTerms | None, Any]:
        """A value loss for the policy's loss and the optimizer stepped with the policy's, or ``(None, None)``."""

    def after_update(self, out: StepAdvantages, compute: ComputeMeter) -> dict[str, float]:
        """Learn from the step after the policy update; its metrics for the row."""

    def save(self, tensors: dict[str, Any], state: dict[str, Any]) -> None:
        """Write the method's state into a checkpoint's tensors (torch) or state (JSON)."""

    def load(self, tensors: dict[str, Any], state: dict[str, Any]) -> None:
        """Restore what :meth:`save` wrote."""


class EstimatorMethod:
    """A registered outcome estimator in the loop: the round's (:meth:`v05.round.Round.advantages`)."""

    recomputes_old_logp = False

    def __init__(self, rnd: Round) -> None:
        self.round = rnd  # its estimator state is checkpointed with the round's

    def estimate(self, batch: StepBatch, compute: ComputeMeter) -> StepAdvantages:
        """The estimator's advantages; the prior (and its n0, when the round feeds it) reach it when it uses one."""
        est = self.round.advantages(batch.rewards, batch.group, prior=batch.prior, keys=batch.keys, step=batch.step)
        value_g = None if batch.prior is None else batch.prior.pass_rate  # the prior's value per group
        return StepAdvantages(est, est.advantages, batch.rollouts, value_g)

    def joint_loss(self, out: StepAdvantages, compute: ComputeMeter) -> tuple[ValueTerms | None, Any]:
        """None: no value model."""
        return None, None

    def after_update(self, out: StepAdvantages, compute: ComputeMeter) -> dict[str, float]:
        """Nothing to learn (a stateful estimator's state moved on in :meth:`estimate`)."""
        return {}

    def save(self, tensors: dict[str, Any], state: dict[str, Any]) -> None:
        """Nothing: the estimator's state is the round's (``state["estimator"]``, ``Round.state_dict``)."""

    def load(self, tensors: dict[str, Any], state: dict[str, Any]) -> None:
        """Nothing (see :meth:`save`)."""


class PoiseMethod:
    """POISE in the loop: the probe, its buffer of whole groups, and the bootstrap (see the module docstring)."""

    recomputes_old_logp = True  # the feature pass is the training forward: it gives the old log-probs

    def __init__(self, cfg: TrainConfig, model: Any, tokenizer: Any) -> None:
        p = cfg.poise
        self.cfg, self.config = cfg, p
        self.model, self.tokenizer = model, tokenizer  # the live policy: features and old log-probs come from it
        self.probe = PoiseProbe(pca_prompt=p.pca_prompt, pca_response=p.pca_response, alpha=p.alpha, seed=p.seed,
                                clip=(0.0, 1.0))  # fmt: skip
        self.buffer = GroupBuffer(max_rows=p.buffer_rows)

    def estimate(self, batch: StepBatch, compute: ComputeMeter) -> StepAdvantages:
        """Advantages from the previous steps' probe (RLOO while bootstrapping); the step's rows join the buffer.

        One no-grad policy pass (counted in ``compute`` as ``recompute``) gives the features and the rollouts' old
        log-probs; the value per group is the probe's (None while bootstrapping).
        """
        cfg, rr, group = self.cfg, self.cfg.train.reward_range, batch.group
        shared = group if cfg.train.share_prompt_prefix else None
        old_logp, feats = recompute_pass(self.model, batch.rollouts, group=shared, config=self.config.features,
                                         temperature=cfg.generation.temperature, tokenizer=self.tokenizer,
                                         batch_size=cfg.train.micro_batch_size)  # fmt: skip
        rollouts = dataclasses.replace(batch.rollouts, old_logp=old_logp.detach().float().cpu())
        _count_pass(compute, "recompute", rollouts, shared)
        value_g = None
        bootstrap = batch.step <= self.config.bootstrap_steps or not self.probe.fitted_
        if bootstrap:
            est = estimate("rloo", batch.rewards, group, reward_range=rr)
        else:
            v01 = self.probe.predict(feats.prompt, feats.response, feats.scalars)  # (N,) pass rates
            est = estimate(cfg.estimator.name, batch.rewards, group, values=from_pass_rate(v01, rr), reward_range=rr,
                           **dict(cfg.estimator.options))  # fmt: skip
            value_g = segment_mean(v01, group)  # (G,) the probe's value of each prompt
        targets = cross_rollout_targets(to_pass_rate(batch.rewards, rr), group)  # (N,) pass rates; NaN: singletons
        self.buffer.append(np.asarray(batch.keys)[group], feats.prompt, feats.response, feats.scalars, targets)
        metrics = {"poise/bootstrap": float(bootstrap), "poise/buffer_rows": float(len(self.buffer))}
        return StepAdvantages(est, est.advantages, rollouts, value_g, metrics)

    def joint_loss(self, out: StepAdvantages, compute: ComputeMeter) -> tuple[ValueTerms | None, Any]:
        """None: the probe is not trained by the policy's loss."""
        return None, None

    def after_update(self, out: StepAdvantages, compute: ComputeMeter) -> dict[str, float]:
        """Refit the probe on the buffer, this step's rows included (after its advantages: never its own baselines)."""
        if len(self.buffer) >= 2:
            self.probe.fit(*self.buffer.arrays())
        return {}

    def save(self, tensors: dict[str, Any], state: dict[str, Any]) -> None:
        """Probe parameters and buffer rows, JSON, as ``state["method"]``."""
        state["method"] = {"probe": self.probe.state_dict(), "buffer": self.buffer.state_dict()}

    def load(self, tensors: dict[str, Any], state: dict[str, Any]) -> None:
        """Restore :meth:`save`."""
        self.probe.load_state_dict(state["method"]["probe"])
        self.buffer.load_state_dict(state["method"]["buffer"])


class CriticMethod:
    """PPO's critic in the loop: values before the update, GAE advantages, the value update (module docstring)."""

    recomputes_old_logp = False

    def __init__(self, cfg: TrainConfig, model: Any) -> None:
        self.cfg, self.config = cfg, cfg.critic
        self.critic = Critic.build(model, cfg.critic)

    def _chunks(self, n: int) -> list[np.ndarray]:
        mb = self.cfg.train.micro_batch_size
        return [np.arange(i, min(i + mb, n)) for i in range(0, n, mb)]

    def _values(self, rollouts: Any, ch: np.ndarray) -> Any:
        ro = rollouts.select(ch)
        return self.critic.values(ro.prompt_ids, ro.prompt_mask, ro.response_ids, ro.response_mask)

    def estimate(self, batch: StepBatch, compute: ComputeMeter) -> StepAdvantages:
        """Per-token advantages (N, R), a per-rollout summary estimate, per-group values, the value targets.

        The advantages are whitened over the response tokens when ``critic.whiten``; the targets are what the value
        update needs (``returns``, ``old_values``); the critic's no-grad value pass is counted in ``compute``.
        """
        rollouts, rewards = batch.rollouts, batch.rewards
        mask = rollouts.response_mask.float()  # (N, R)
        self.critic.train(False)
        with torch.no_grad():
            old_values = torch.cat(
                [self._values(rollouts, ch).float().cpu() for ch in self._chunks(len(rollouts))]
            )  # fmt: skip  (N, R)
        self.critic.train(True)
        compute.forward("critic", rollouts.prompt_mask, rollouts.response_mask)
        token_rewards = outcome_token_rewards(torch.as_tensor(rewards, dtype=torch.float32), mask)  # (N, R)
        adv, returns = gae(token_rewards, old_values, mask, gamma=self.config.gamma, lam=self.config.lam)
        if self.config.whiten and int(mask.sum()) >= 2:
            adv = whiten(adv, mask)
        per_rollout = ((adv * mask).sum(1) / mask.sum(1).clamp(min=1)).numpy().astype(np.float64)  # (N,) summary
        est = Estimate(per_rollout, rewards - per_rollout)
        v_first = old_values[:, 0].numpy().astype(np.float64)  # (N,) V at the first response position
        value_g = segment_mean(np.clip(to_pass_rate(v_first, self.cfg.train.reward_range), 0.0, 1.0), batch.group)
        return StepAdvantages(est, adv, rollouts, value_g, targets={"returns": returns, "old_values": old_values})

    def joint_loss(self, out: StepAdvantages, compute: ComputeMeter) -> tuple[ValueTerms | None, Any]:
        """``head`` mode: (micro-batch rows, LossNorm) → vf_coef · value loss, and the critic's optimizer.

        The shared trunk learns from it through the policy optimizer (its own trunk forward + backward is counted in
        ``compute``); ``(None, None)`` in ``separate`` mode.
        """
        if self.config.mode != "head":
            return None, None
        cfg, rollouts, targets = self.cfg, out.rollouts, out.targets

        def terms(ch: np.ndarray, norm: Any) -> Any:
            v = self._values(rollouts, ch)
            compute.forward("critic", rollouts.prompt_mask[ch], rollouts.response_mask[ch], backward=True)
            loss, _ = value_loss(v, targets["old_values"][ch], targets["returns"][ch], rollouts.response_mask[ch],
                                 clip_range=self.config.clip_range, agg=cfg.loss.agg, norm=norm)  # fmt: skip
            return self.config.vf_coef * loss

        return terms, self.critic.optimizer

    def after_update(self, out: StepAdvantages, compute: ComputeMeter) -> dict[str, float]:
        """``separate`` mode: train the critic on the returns (clipped value loss, its own AdamW; ppo_epochs passes)."""
        if self.config.mode != "separate":
            return {}
        cfg, rollouts, targets = self.cfg, out.rollouts, out.targets
        chunks = self._chunks(len(rollouts))
        masks = [rollouts.response_mask[ch] for ch in chunks]
        norm = loss_norm(masks, max_len=cfg.generation.max_new_tokens)
        losses, clips, norms = [], [], []
        for _ in range(cfg.train.ppo_epochs):
            self.critic.optimizer.zero_grad(set_to_none=True)
            for ch, mask in zip(chunks, masks, strict=True):
                v = self._values(rollouts, ch)
                loss, clip = value_loss(v, targets["old_values"][ch], targets["returns"][ch], mask,
                                        clip_range=self.config.clip_range, agg=cfg.loss.agg, norm=norm)  # fmt: skip
                loss.backward()
                compute.forward("critic", rollouts.prompt_mask[ch], mask, backward=True)
                losses.append(float(loss.detach()))
                clips.append(float(clip) * len(ch) / len(rollouts))
            gn = torch.nn.utils.clip_grad_norm_(list(self.critic.parameters()), cfg.optim.grad_clip or float("inf"))
            norms.append(float(gn))
            self.critic.optimizer.step()
        epochs = cfg.train.ppo_epochs
        return {"critic/loss": sum(losses) / epochs, "critic/clip_frac": sum(clips) / epochs,
                "critic/grad_norm": float(np.mean(norms))}  # fmt: skip

    def save(self, tensors: dict[str, Any], state: dict[str, Any]) -> None:
        """The critic's tensors, as ``tensors["method"]`` (its optimizer state included)."""
        tensors["method"] = self.critic.state_dict()

    def load(self, tensors: dict[str, Any], state: dict[str, Any]) -> None:
        """Restore :meth:`save`."""
        self.critic.load_state_dict(tensors["method"])


def _count_pass(compute: ComputeMeter, part: str, rollouts: Any, group: np.ndarray | None) -> None:
    """Count a no-grad policy pass over ``rollouts``; with ``group`` each group's prompt runs once (shared prefix)."""
    if group is None:
        compute.forward(part, rollouts.prompt_mask, rollouts.response_mask)
        return
    first, rows = prefix_rows(group)
    compute.forward(part, rollouts.prompt_mask[torch.as_tensor(first)], rollouts.response_mask, rows=rows)


def make_value_method(cfg: TrainConfig, model: Any, tokenizer: Any, rnd: Round) -> ValueMethod:
    """The value method the estimator's spec asks for (module docstring).

    A trainer-only estimator (``TRAINER_ESTIMATORS``: ``gae``) gets its critic; a registered one that
    ``needs_values`` (``poise``) the probe that supplies them; any other registered one is the round's.
    """
    if cfg.estimator.name in TRAINER_ESTIMATORS:
        return CriticMethod(cfg, model)
    if get_estimator(cfg.estimator.name).needs_values:
        return PoiseMethod(cfg, model, tokenizer)
    return EstimatorMethod(rnd)


__all__ = [
    "CriticMethod",
    "EstimatorMethod",
    "PoiseMethod",
    "StepAdvantages",
    "StepBatch",
    "ValueMethod",
    "ValueTerms",
    "make_value_method",
]
