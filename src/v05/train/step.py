"""One training step's parts, in the order the loop calls them.

Prior → allocation (generate + verify) → advantages → policy update → the prior learns. Each is a thin translation
to the library's registry, allocators, prior providers and loss; :mod:`v05.train.loop` reads them top to bottom.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from v05.rewards import from_pm1, to_pm1
from v05.train.config import TrainConfig


@dataclass
class Sampler:
    """The allocators' ``sample(ids, counts)`` for one step: generate, verify, keep the rollouts and scores."""

    engine: Any
    task: Any
    pool: list
    texts: list[str]
    idx: np.ndarray  # (P,) train-pool index of each candidate prompt
    timing: dict[str, float]
    reward_range: str  # the scale the rewards are returned on (task rewards are in [0, 1])
    draws: list[Any] = field(default_factory=list)
    scores: list[Any] = field(default_factory=list)

    def __call__(self, ids: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Sample ``counts`` rollouts of candidate prompts ``ids``; return their rewards on the run's scale."""
        t = time.perf_counter()
        ro = self.engine.generate([self.texts[self.idx[i]] for i in ids], counts)
        self.timing["generate"] += time.perf_counter() - t
        t = time.perf_counter()
        sc = self.task.score([self.pool[self.idx[ids[j]]] for j in ro.prompt_index], list(ro.texts))
        self.timing["verify"] += time.perf_counter() - t
        self.draws.append(ro)
        self.scores.append(sc)
        return to_pm1(sc.rewards, "01") if self.reward_range == "pm1" else sc.rewards


def predict_prior(
    cfg: TrainConfig, provider: Any, keys: np.ndarray, texts: list[str]
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The prior on the run's reward scale and its pseudo-count per candidate prompt (None without a provider)."""
    if provider is None:
        return None, None
    pred = provider.predict([str(k) for k in keys], texts)
    v = np.clip(np.asarray(pred.mean, np.float64), -1.0, 1.0)  # providers predict in ±1 space
    return from_pm1(v, cfg.train.reward_range), np.asarray(pred.n0, np.float64)


def run_allocation(
    cfg: TrainConfig,
    step: int,
    idx: np.ndarray,
    keys: np.ndarray,
    prior_v: np.ndarray | None,
    n0: np.ndarray | None,
    state: Any,
    sample: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> Any:
    """One step's allocation: the configured allocator's rounds over the candidate prompts (``allocate``)."""
    from v05.allocation import allocate  # noqa: PLC0415
    from v05.registry import get_allocator  # noqa: PLC0415

    allocator = get_allocator(cfg.allocator.name, batch_size=cfg.train.batch_size, **cfg.allocator.options)
    feed = cfg.prior.feed_n0 and n0 is not None
    return allocate(
        allocator,
        sample,
        n_prompts=len(idx),
        rng=np.random.default_rng([cfg.seed, 23, step]),
        prior=prior_v,
        n0=n0 if feed else None,
        keys=keys[idx],
        reward_range=cfg.train.reward_range,
        state=state,
    )


def shape_rewards(cfg: TrainConfig, rewards: np.ndarray, rollouts: Any) -> np.ndarray:
    """DAPO's soft overlong punishment added to the rewards, clipped to the reward range (when enabled)."""
    if not cfg.train.overlong.enabled or not len(rewards):
        return rewards
    from v05.train.loss import overlong_shaping  # noqa: PLC0415

    o = cfg.train.overlong
    shaped = rewards + overlong_shaping(
        rollouts.lengths, max_len=cfg.generation.max_new_tokens, buffer=o.buffer, penalty=o.penalty
    )
    return np.clip(shaped, -1.0 if cfg.train.reward_range == "pm1" else 0.0, 1.0)


def estimate_advantages(
    cfg: TrainConfig,
    step: int,
    rewards: np.ndarray,
    group: np.ndarray,
    kept_pool: np.ndarray,
    idx: np.ndarray,
    keys: np.ndarray,
    prior_v: np.ndarray | None,
    n0: np.ndarray | None,
    state: Any,
) -> tuple[Any, Any]:
    """Advantages of the kept rollouts from the registered estimator; returns (estimate, its next state)."""
    from v05.registry import estimate, get_estimator  # noqa: PLC0415

    spec = get_estimator(cfg.estimator.name)
    kw: dict[str, Any] = dict(cfg.estimator.options)
    if spec.stateful:
        kw["state"] = state
    if spec.keyed:
        kw["prompt_ids"] = keys[idx[kept_pool]]
    if "step" in spec.options:
        kw["step"] = step
    prior = None
    if spec.uses_prior and prior_v is not None:
        prior = prior_v[kept_pool]
        if "n0" in spec.options and cfg.prior.feed_n0 and n0 is not None and "n0" not in kw:
            kw["n0"] = n0[kept_pool]
    est = estimate(cfg.estimator.name, rewards, group, prior=prior, reward_range=cfg.train.reward_range, **kw)
    return est, est.state if spec.stateful else state


def update_prior(
    cfg: TrainConfig, provider: Any, alloc: Any, idx: np.ndarray, keys: np.ndarray, texts: list[str], step: int
) -> None:
    """Feed every sampled prompt's ±1 mean score and rollout count to the provider."""
    from v05.priors import group_outcomes  # noqa: PLC0415

    mask = alloc.counts[alloc.prompt] > 0
    group, pool_index = _group_index(alloc.prompt[mask])
    scores, counts = group_outcomes(alloc.rewards[mask], group, reward_range=cfg.train.reward_range)
    sel = idx[pool_index]
    provider.update([str(k) for k in keys[sel]], [texts[i] for i in sel], scores, counts, step=step)


def _group_index(prompt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    from v05.groups import group_index  # noqa: PLC0415

    group, uniq = group_index(prompt)
    return group, uniq.astype(np.int64)


def concat_rollouts(draws: list[Any], tokenizer: Any) -> Any:
    """The step's draws as one ``Rollouts`` (draw order, padded with the tokenizer's pad id)."""
    from v05.engines.hf import Rollouts  # noqa: PLC0415

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    return Rollouts.concat(draws, pad_id=pad)


def update_policy(
    cfg: TrainConfig,
    model: Any,
    reference: Any,
    optimizer: Any,
    scheduler: Any,
    rollouts: Any,
    group: np.ndarray,
    advantages: Any,
    *,
    value_terms: Callable[[np.ndarray, Any], Any] | None = None,
    value_optimizer: Any = None,
) -> dict[str, float]:
    """ppo_epochs optimizer steps over the kept rollouts, each accumulating micro-batch gradients.

    Args:
        cfg: the run's config.
        model: the policy.
        reference: the frozen reference model for the KL term, or None.
        optimizer: the policy's AdamW.
        scheduler: its learning-rate schedule.
        rollouts: (N) the kept rollouts (old log-probs included).
        group: (N,) group of each rollout (the shared-prefix forward runs each group's prompt once).
        advantages: (N,) per-rollout or (N, R) per-token advantages (a critic's GAE).
        value_terms: a value-head loss (rows, LossNorm) → scalar added to the policy's loss (PPO ``head`` mode).
        value_optimizer: steps the value head after each policy step (``head`` mode).
    """
    import torch  # noqa: PLC0415

    from v05.train.loss import loss_norm, policy_loss  # noqa: PLC0415

    n = len(rollouts)
    adv = torch.as_tensor(advantages, dtype=torch.float32)  # (N,) or (N, R)
    mb = cfg.train.micro_batch_size
    chunks = [np.arange(i, min(i + mb, n)) for i in range(0, n, mb)]
    parts = [MicroBatch.of(rollouts, ch, group, share=cfg.train.share_prompt_prefix) for ch in chunks]
    norm = loss_norm([p.response_mask for p in parts])
    temp = cfg.generation.temperature
    stats: dict[str, list[float]] = {"loss": [], "pg_loss": [], "entropy": [], "clip_frac": [], "kl": [],
                                     "approx_kl": [], "grad_norm": [], "ratio": []}  # fmt: skip
    model.train()
    for _ in range(cfg.train.ppo_epochs):
        optimizer.zero_grad(set_to_none=True)
        if value_optimizer is not None:
            value_optimizer.zero_grad(set_to_none=True)
        for ch, part in zip(chunks, parts, strict=True):
            logp, entropy = part.logprobs(model, temp, with_entropy=True)
            ref_logp = None
            if reference is not None:
                with torch.no_grad():
                    ref_logp, _ = part.logprobs(reference, temp, with_entropy=False)
            adv_ch = adv[ch] if adv.ndim == 1 else adv[ch][:, : part.response_ids.shape[1]]  # (n,) or (n, R')
            terms = policy_loss(logp, part.old_logp, adv_ch, part.response_mask, config=cfg.loss, ref_logp=ref_logp,
                                entropy=entropy, norm=norm)  # fmt: skip
            total = terms.loss if value_terms is None else terms.loss + value_terms(ch, norm)
            total.backward()
            w = len(ch) / n
            for key, value in (("loss", terms.loss), ("pg_loss", terms.pg_loss), ("entropy", terms.entropy),
                               ("clip_frac", terms.clip_frac), ("kl", terms.kl), ("approx_kl", terms.approx_kl_old),
                               ("ratio", terms.ratio_mean)):  # fmt: skip
                stats[key].append(float(value.detach()) * (1.0 if key == "loss" else w))
        clip = cfg.optim.grad_clip if cfg.optim.grad_clip is not None else float("inf")
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        stats["grad_norm"].append(float(grad_norm))
        optimizer.step()
        scheduler.step()
        if value_optimizer is not None:
            value_optimizer.step()
    epochs = cfg.train.ppo_epochs
    out = {k: sum(v) / (epochs if k != "grad_norm" else len(v)) for k, v in stats.items() if v}
    out["lr"] = float(scheduler.get_last_lr()[0])
    return out


@dataclass(frozen=True)
class MicroBatch:
    """One micro-batch without all-padding columns; with ``rows`` set, its prompts are the distinct ones only."""

    prompt_ids: Any  # (N, P) or (G', P) with rows
    prompt_mask: Any
    response_ids: Any  # (N, R)
    response_mask: Any
    old_logp: Any  # (N, R)
    rows: np.ndarray | None  # (N,) prompt row of each rollout (shared-prefix forward), or None

    @classmethod
    def of(cls, rollouts: Any, ch: np.ndarray, group: np.ndarray, *, share: bool) -> MicroBatch:
        """Rollouts ``ch`` of ``rollouts`` (groups ``group[ch]``), trimmed; distinct prompts only with ``share``."""
        from v05.train.forward import prefix_rows  # noqa: PLC0415

        ro = rollouts.select(ch)
        r_len = int(ro.response_mask.sum(1).max()) if len(ro) else 0
        rows = None
        p_ids, p_mask = ro.prompt_ids, ro.prompt_mask
        if share:
            first, rows = prefix_rows(group[ch])
            p_ids, p_mask = p_ids[first], p_mask[first]
        keep = p_mask.bool().any(0)
        start = int(keep.float().argmax()) if bool(keep.any()) else p_mask.shape[1]  # first non-padding column
        return cls(p_ids[:, start:], p_mask[:, start:], ro.response_ids[:, :r_len], ro.response_mask[:, :r_len],
                   ro.old_logp[:, :r_len], rows)  # fmt: skip

    def logprobs(self, model: Any, temperature: float, *, with_entropy: bool) -> tuple[Any, Any]:
        """(N, R) log-probs (and entropies) of the responses under ``model``."""
        from v05.train.forward import sequence_logprobs, shared_prefix_logprobs  # noqa: PLC0415

        if self.rows is None:
            return sequence_logprobs(model, self.prompt_ids, self.prompt_mask, self.response_ids, self.response_mask,
                                     temperature=temperature, with_entropy=with_entropy)  # fmt: skip
        return shared_prefix_logprobs(model, self.prompt_ids, self.prompt_mask, self.response_ids, self.response_mask,
                                      self.rows, temperature=temperature, with_entropy=with_entropy)  # fmt: skip


__all__ = [
    "MicroBatch",
    "Sampler",
    "concat_rollouts",
    "estimate_advantages",
    "predict_prior",
    "run_allocation",
    "shape_rewards",
    "update_policy",
    "update_prior",
]
