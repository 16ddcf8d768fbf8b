r"""Value from the policy itself: POISE's probe and PPO's learned critic, as trainer methods.

``estimator.name=poise`` (arXiv 2605.07579, SPEC §6): one no-grad pass over the step's rollouts gives the loss's old
log-probs and the probe's features (layer-L hidden states of the last prompt and response tokens + 3 entropy
summaries, :func:`v05.train.features.recompute_pass`); the probe of the *previous* steps predicts every rollout,
``poise`` turns the siblings' predictions into each rollout's baseline, then the step's rows (features, cross-rollout
targets) join the FIFO buffer of whole groups and the probe is refit — strictly predict → advantages → append →
refit, so no step's data reaches its own baselines. The first ``bootstrap_steps`` use RLOO while rows accumulate.

``estimator.name=gae`` (PPO, the "coupled critic" comparator; verl's ``compute_gae_advantage_return`` and
``compute_value_loss``): a critic values every response position before the update, GAE turns the outcome reward
(on each response's last token) into per-token advantages and returns, advantages are whitened, the policy update
uses them per token, and the critic is trained on the returns with the clipped value loss — a separate critic after
the policy update with its own optimizer, or a value head on the policy trunk inside the policy's loss.

Deviations: POISE's probe is one probe (the release keeps one per data domain); the prompt and response features are
those of ``recompute_pass`` (see its docstring for the entropy-span fallback on tag-free answers).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

from v05.estimators import Estimate, cross_rollout_targets
from v05.groups import segment_mean
from v05.registry import estimate
from v05.rewards import from_pm1, to_pass_rate
from v05.train.compute import ComputeMeter
from v05.train.config import TrainConfig
from v05.train.critic import Critic, gae, outcome_token_rewards, value_loss, whiten
from v05.train.features import recompute_pass
from v05.train.forward import prefix_rows
from v05.train.loss import loss_norm
from v05.value.probe import GroupBuffer, PoiseProbe


class PoiseMethod:
    """POISE in the loop: the probe, its buffer of whole groups, and the bootstrap (see the module docstring)."""

    def __init__(self, cfg: TrainConfig) -> None:
        p = cfg.poise
        self.config = p
        self.probe = PoiseProbe(pca_prompt=p.pca_prompt, pca_response=p.pca_response, alpha=p.alpha, seed=p.seed,
                                clip=(0.0, 1.0))  # fmt: skip
        self.buffer = GroupBuffer(max_rows=p.buffer_rows)

    def estimate(
        self, cfg: TrainConfig, step: int, model: Any, tokenizer: Any, rollouts: Any, rewards: np.ndarray,
        group: np.ndarray, keys: np.ndarray, compute: ComputeMeter,
    ) -> tuple[Any, Any, np.ndarray | None, dict[str, float]]:  # fmt: skip
        """Advantages of the kept rollouts, the rollouts with recomputed old log-probs, the per-group value, metrics.

        Args:
            cfg: the run's config.
            step: the current step (1-based).
            model: the policy (features and old log-probs come from one no-grad pass).
            tokenizer: its tokenizer (entropy spans).
            rollouts: (N) kept rollouts.
            rewards: (N,) rewards on the run's scale.
            group: (N,) group ids in [0, G).
            keys: (G,) stable prompt keys of the groups (the buffer evicts whole groups).
            compute: the step's token-pass meter (the feature pass is a no-grad policy forward).
        """
        rr = cfg.train.reward_range
        old_logp, feats = recompute_pass(model, rollouts, group=group if cfg.train.share_prompt_prefix else None,
                                         config=self.config.features, temperature=cfg.generation.temperature,
                                         tokenizer=tokenizer, batch_size=cfg.train.micro_batch_size)  # fmt: skip
        rollouts = dataclasses.replace(rollouts, old_logp=old_logp.detach().float().cpu())
        _count_pass(compute, "recompute", rollouts, group if cfg.train.share_prompt_prefix else None)
        options = dict(cfg.estimator.options)
        value_g = None
        bootstrap = step <= self.config.bootstrap_steps or not self.probe.fitted_
        if bootstrap:
            est = estimate("rloo", rewards, group, reward_range=rr)
        else:
            v01 = self.probe.predict(feats.prompt, feats.response, feats.scalars)  # (N,) pass rates
            est = estimate("poise", rewards, group, values=from_pm1(2.0 * v01 - 1.0, rr), reward_range=rr, **options)
            value_g = segment_mean(v01, group)  # (G,) the probe's value of each prompt
        targets = cross_rollout_targets(to_pass_rate(rewards, rr), group)  # (N,) pass rates; NaN: singletons
        self.buffer.append(np.asarray(keys)[group], feats.prompt, feats.response, feats.scalars, targets)
        if len(self.buffer) >= 2:
            self.probe.fit(*self.buffer.arrays())  # after this step's advantages: never its own baselines
        metrics = {"poise/bootstrap": float(bootstrap), "poise/buffer_rows": float(len(self.buffer))}
        return est, rollouts, value_g, metrics

    def state_dict(self) -> dict[str, Any]:
        """JSON state (probe parameters and buffer rows)."""
        return {"probe": self.probe.state_dict(), "buffer": self.buffer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.probe.load_state_dict(state["probe"])
        self.buffer.load_state_dict(state["buffer"])


class CriticMethod:
    """PPO's critic in the loop: values before the update, GAE advantages, the value update (module docstring)."""

    def __init__(self, cfg: TrainConfig, model: Any) -> None:
        self.config = cfg.critic
        self.critic = Critic.build(model, cfg.critic)

    def _chunks(self, cfg: TrainConfig, n: int) -> list[np.ndarray]:
        mb = cfg.train.micro_batch_size
        return [np.arange(i, min(i + mb, n)) for i in range(0, n, mb)]

    def _values(self, cfg: TrainConfig, rollouts: Any, ch: np.ndarray) -> Any:
        ro = rollouts.select(ch)
        return self.critic.values(ro.prompt_ids, ro.prompt_mask, ro.response_ids, ro.response_mask)

    def estimate(
        self, cfg: TrainConfig, rollouts: Any, rewards: np.ndarray, group: np.ndarray, compute: ComputeMeter
    ) -> tuple[Any, Any, np.ndarray, dict[str, Any]]:
        """Per-token advantages (N, R), a per-rollout summary estimate, per-group values, the value targets.

        The advantages are whitened over the response tokens when ``critic.whiten``; the targets are what the value
        update needs (``returns``, ``old_values``); the critic's no-grad value pass is counted in ``compute``.
        """
        mask = rollouts.response_mask.float()  # (N, R)
        self.critic.train(False)
        with torch.no_grad():
            old_values = torch.cat(
                [self._values(cfg, rollouts, ch).float().cpu() for ch in self._chunks(cfg, len(rollouts))]
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
        value_g = segment_mean(np.clip(to_pass_rate(v_first, cfg.train.reward_range), 0.0, 1.0), group)
        return adv, est, value_g, {"returns": returns, "old_values": old_values}

    def update(
        self, cfg: TrainConfig, rollouts: Any, targets: dict[str, Any], compute: ComputeMeter
    ) -> dict[str, float]:
        """Train a separate critic on the returns (clipped value loss, its own AdamW; ppo_epochs passes)."""
        if self.config.mode != "separate":
            return {}
        chunks = self._chunks(cfg, len(rollouts))
        masks = [rollouts.response_mask[ch] for ch in chunks]
        norm = loss_norm(masks, max_len=cfg.generation.max_new_tokens)
        losses, clips, norms = [], [], []
        for _ in range(cfg.train.ppo_epochs):
            self.critic.optimizer.zero_grad(set_to_none=True)
            for ch, mask in zip(chunks, masks, strict=True):
                v = self._values(cfg, rollouts, ch)
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

    def head_terms(self, cfg: TrainConfig, rollouts: Any, targets: dict[str, Any], compute: ComputeMeter) -> Any:
        """For ``head`` mode: (micro-batch rows, LossNorm) → vf_coef · value loss, added to the policy's loss.

        The shared trunk learns from it through the policy optimizer (its own trunk forward + backward is counted in
        ``compute``); None in ``separate`` mode.
        """
        if self.config.mode != "head":
            return None

        def terms(ch: np.ndarray, norm: Any) -> Any:
            v = self._values(cfg, rollouts, ch)
            compute.forward("critic", rollouts.prompt_mask[ch], rollouts.response_mask[ch], backward=True)
            loss, _ = value_loss(v, targets["old_values"][ch], targets["returns"][ch], rollouts.response_mask[ch],
                                 clip_range=self.config.clip_range, agg=cfg.loss.agg, norm=norm)  # fmt: skip
            return self.config.vf_coef * loss

        return terms

    def state_dict(self) -> dict[str, Any]:
        """The critic's tensors (saved with the optimizer states in the checkpoint)."""
        return self.critic.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.critic.load_state_dict(state)


def _count_pass(compute: ComputeMeter, part: str, rollouts: Any, group: np.ndarray | None) -> None:
    """Count a no-grad policy pass over ``rollouts``; with ``group`` each group's prompt runs once (shared prefix)."""
    if group is None:
        compute.forward(part, rollouts.prompt_mask, rollouts.response_mask)
        return
    first, _ = prefix_rows(group)
    compute.forward(part, rollouts.prompt_mask[torch.as_tensor(first)], rollouts.response_mask)


def make_value_method(cfg: TrainConfig, model: Any) -> PoiseMethod | CriticMethod | None:
    """The value method the estimator asks for (``poise``, ``gae``), or None for the registry's outcome estimators."""
    if cfg.estimator.name == "poise":
        return PoiseMethod(cfg)
    if cfg.estimator.name == "gae":
        return CriticMethod(cfg, model)
    return None


__all__ = ["CriticMethod", "PoiseMethod", "make_value_method"]
