"""One training step's trainer-side parts: the sampler, reward shaping, the policy update, what the prior learns.

The prior, the allocation and the advantages of a step are :class:`v05.round.Round`'s (shared with the TRL and verl
adapters); these are the pieces only the trainer has: generating and verifying rollouts (:class:`Sampler`, the
``sample`` the round's allocator calls), DAPO's overlong shaping, the PPO update over micro-batches, and which of the
step's prompts the prior learns from. :mod:`v05.train.loop` reads them top to bottom.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from v05._checks import error_line
from v05.allocation import Allocation
from v05.engines.hf import Rollouts
from v05.engines.logprobs import sequence_logprobs
from v05.groups import group_index
from v05.rewards import to_pm1
from v05.round import Round
from v05.timing import Phases
from v05.train.compute import ComputeMeter
from v05.train.config import OverlongConfig, TrainConfig
from v05.train.forward import prefix_rows, shared_prefix_logprobs
from v05.train.loss import loss_norm, overlong_shaping, policy_loss
from v05.train.schedule import LRSchedule

logger = logging.getLogger(__name__)


class RolloutFailure(RuntimeError):
    """The rollout engine raised on every try of one call (the loop stops the run cleanly)."""


@dataclass
class Sampler:
    """The allocators' ``sample(ids, counts)`` for one step: generate, verify, keep the rollouts and scores.

    A rollout-engine call that raises is retried ``retries`` times, after ``backoff_s``, 2·``backoff_s``, ... seconds
    (a transient fault: a dropped inference server, a CUDA hiccup); then :class:`RolloutFailure`. Verifier faults
    never reach here: :func:`v05.tasks.verify.score_batch` turns them into reward 0 with a flag.
    """

    engine: Any
    task: Any
    pool: list
    texts: list[str]
    idx: np.ndarray  # (P,) train-pool index of each candidate prompt
    phases: Phases  # the step's wall time by phase (generate, verify)
    reward_range: str  # the scale the rewards are returned on (task rewards are in [0, 1])
    retries: int = 0
    backoff_s: float = 0.0
    draws: list[Any] = field(default_factory=list)
    scores: list[Any] = field(default_factory=list)
    retried: int = 0  # engine calls retried this step

    def __call__(self, ids: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Sample ``counts`` rollouts of candidate prompts ``ids``; return their rewards on the run's scale."""
        with self.phases("generate"):
            ro = self._generate([self.texts[self.idx[i]] for i in ids], counts)
        with self.phases("verify"):
            sc = self.task.score([self.pool[self.idx[ids[j]]] for j in ro.prompt_index], list(ro.texts))
        self.draws.append(ro)
        self.scores.append(sc)
        return to_pm1(sc.rewards, "01") if self.reward_range == "pm1" else sc.rewards

    def _generate(self, prompts: list[str], counts: np.ndarray) -> Any:
        """``engine.generate`` with retries and exponential backoff; RolloutFailure once every try raised."""
        for attempt in range(self.retries + 1):
            try:
                return self.engine.generate(prompts, counts)
            except Exception as err:  # noqa: BLE001 - retried, then re-raised as RolloutFailure (never swallowed)
                if attempt == self.retries:
                    raise RolloutFailure(
                        f"the rollout engine failed {attempt + 1} time(s) in a row ({error_line(err)})"
                    ) from err
                wait = self.backoff_s * 2**attempt
                logger.warning("rollout engine raised (%s); retry %d of %d in %.1f s", error_line(err), attempt + 1,
                               self.retries, wait)  # fmt: skip
                self.retried += 1
                time.sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover


def shape_rewards(
    overlong: OverlongConfig, rewards: np.ndarray, lengths: Any, *, max_len: int, reward_range: str
) -> np.ndarray:
    """DAPO's soft overlong punishment added to the rewards, clipped to the reward range (when enabled).

    Args:
        overlong: ``train.overlong``.
        rewards: (N,) rewards on the run's scale.
        lengths: (N,) response lengths in tokens.
        max_len: ``generation.max_new_tokens``.
        reward_range: the rewards' scale.
    """
    if not overlong.enabled or not len(rewards):
        return rewards
    shaped = rewards + overlong_shaping(lengths, max_len=max_len, buffer=overlong.buffer, penalty=overlong.penalty)
    return np.clip(shaped, -1.0 if reward_range == "pm1" else 0.0, 1.0)


def check_overlong_buffer(cfg: TrainConfig, task: Any, pool: list, tokenizer: Any) -> None:
    """Refuse a DAPO overlong buffer that penalises correct answers: the penalty must start after the longest gold.

    The penalty starts at L > max_new_tokens − buffer; a gold answer of L_gold tokens (EOS included) is then
    penalised whenever L_gold exceeds that, so a correct rollout would lose reward for being correct.

    Raises:
        ValueError: max_new_tokens − buffer < the longest gold answer of the train pool (names both fixes).
    """
    o = cfg.train.overlong
    if not o.enabled or not pool:
        return
    gold = tokenizer([task.sft_target(p) for p in pool], add_special_tokens=False)["input_ids"]
    longest = max(len(ids) for ids in gold) + 1  # + EOS
    start = cfg.generation.max_new_tokens - o.buffer
    if start < longest:
        raise ValueError(
            f"train.overlong.buffer={o.buffer} penalises correct answers: the penalty starts after "
            f"generation.max_new_tokens − buffer = {start} tokens, but the task's longest gold answer is {longest} "
            f"tokens (EOS included); set train.overlong.buffer <= {cfg.generation.max_new_tokens - longest} or raise "
            f"generation.max_new_tokens to >= {longest + o.buffer}"
        )


def learn_prior(rnd: Round, alloc: Allocation, keys: np.ndarray, texts: Sequence[str], step: int) -> None:
    """The prior learns every sampled prompt's outcomes, kept in the loss or not (:meth:`v05.round.Round.learn`).

    Args:
        rnd: the run's round.
        alloc: the step's allocation over the candidate pool.
        keys: (P,) the candidates' stable keys.
        texts: (P,) what the prior reads of each candidate.
        step: the step.
    """
    mask = alloc.counts[alloc.prompt] > 0  # (N,) every drawn rollout
    group, uniq = group_index(alloc.prompt[mask])  # (N',), (G,) candidate index of each group
    sel = uniq.astype(np.int64)
    rnd.learn(keys[sel], [texts[i] for i in sel], alloc.rewards[mask], group, step=step)


def concat_rollouts(draws: list[Any], tokenizer: Any) -> Any:
    """The step's draws as one ``Rollouts`` (draw order, padded with the tokenizer's pad id)."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    return Rollouts.concat(draws, pad_id=pad)


def update_policy(
    cfg: TrainConfig,
    model: Any,
    reference: Any,
    optimizer: Any,
    scheduler: LRSchedule,
    rollouts: Rollouts,
    group: np.ndarray,
    advantages: Any,
    *,
    compute: ComputeMeter,
    recompute_old_logp: bool = False,
    value_terms: Callable[[np.ndarray, Any], Any] | None = None,
    value_optimizer: Any = None,
) -> dict[str, float]:
    """ppo_epochs optimizer steps over the kept rollouts, each accumulating micro-batch gradients.

    The loss normaliser is global over the step's micro-batches (``loss_norm``), with ``seq-mean-token-sum-norm``'s
    horizon the configured ``generation.max_new_tokens`` (verl divides by its padded response length, which is the
    configured maximum), so the normaliser of Dr. GRPO is a constant, not the step's longest response. Before the
    first epoch, ``recompute_old_logp`` replaces the engine's old log-probs by this very training forward under
    ``no_grad`` (the same micro-batches, the same shared-prefix path), so the first epoch's ratio is 1 exactly.

    Args:
        cfg: the run's config.
        model: the policy.
        reference: the frozen reference model for the KL term, or None.
        optimizer: the policy's AdamW.
        scheduler: its learning-rate schedule (``begin_step`` already called for this step).
        rollouts: (N) the kept rollouts (old log-probs included).
        group: (N,) group of each rollout (the shared-prefix forward runs each group's prompt once).
        advantages: (N,) per-rollout or (N, R) per-token advantages (a critic's GAE).
        compute: the step's token-pass meter (policy forwards and backwards, recompute and reference passes).
        recompute_old_logp: recompute the old log-probs with the training forward first (see above).
        value_terms: a value-head loss (rows, LossNorm) → scalar added to the policy's loss (PPO ``head`` mode).
        value_optimizer: steps the value head after each policy step (``head`` mode).
    """
    n = len(rollouts)
    adv = torch.as_tensor(advantages, dtype=torch.float32)  # (N,) or (N, R)
    mb = cfg.train.micro_batch_size
    chunks = [np.arange(i, min(i + mb, n)) for i in range(0, n, mb)]
    parts = [MicroBatch.of(rollouts, ch, group, share=cfg.train.share_prompt_prefix) for ch in chunks]
    norm = loss_norm([p.response_mask for p in parts], max_len=cfg.generation.max_new_tokens)
    temp = cfg.generation.temperature
    if recompute_old_logp:
        parts = [p.with_old_logp(model, temp, compute) for p in parts]
    stats: dict[str, list[float]] = {key: [] for key in STAT_KEYS}
    model.train()
    for epoch in range(cfg.train.ppo_epochs):
        optimizer.zero_grad(set_to_none=True)
        if value_optimizer is not None:
            value_optimizer.zero_grad(set_to_none=True)
        for ch, part in zip(chunks, parts, strict=True):
            logp, entropy = part.logprobs(model, temp, with_entropy=True)
            compute.forward("policy", part.prompt_mask, part.response_mask, backward=True, rows=part.rows)
            ref_logp = None
            if reference is not None:
                with torch.no_grad():
                    ref_logp, _ = part.logprobs(reference, temp, with_entropy=False)
                compute.forward("reference", part.prompt_mask, part.response_mask, rows=part.rows)
            adv_ch = adv[ch] if adv.ndim == 1 else adv[ch][:, : part.response_ids.shape[1]]  # (n,) or (n, R')
            dev = logp.device  # rollouts live on the CPU; the policy may not
            terms = policy_loss(logp, part.old_logp.to(dev), adv_ch.to(dev), part.response_mask.to(dev),
                                config=cfg.loss, ref_logp=ref_logp, entropy=entropy, norm=norm)  # fmt: skip
            total = terms.loss if value_terms is None else terms.loss + value_terms(ch, norm)
            total.backward()
            _record(stats, terms, int((part.response_mask != 0).sum()) / max(norm.n_tokens, 1))
        clip = cfg.optim.grad_clip if cfg.optim.grad_clip is not None else float("inf")
        stats["grad_norm"].append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), clip)))
        scheduler.apply(epoch, cfg.train.ppo_epochs)
        optimizer.step()
        scheduler.step()
        if value_optimizer is not None:
            value_optimizer.step()
        if epoch == 0:  # the first epoch's ratio and clipping: 1 and 0 when the old log-probs are this forward's
            first = {k: v[:] for k, v in stats.items()}
    out = _summarise(stats, cfg.train.ppo_epochs)
    out |= {f"{k}_first_epoch": v for k, v in _summarise(first, 1).items()
            if k in ("ratio", "clip_frac", "ratio_max_dev")}  # fmt: skip
    out["lr"] = float(scheduler.get_last_lr()[0])
    return out


STAT_KEYS = ("loss", "pg_loss", "entropy", "clip_frac", "kl", "approx_kl", "grad_norm", "ratio", "ratio_max_dev")
"""The update's diagnostics: token-means per epoch (``loss`` summed over micro-batches, ``ratio_max_dev`` a max,
``grad_norm`` per optimizer step), averaged over the PPO epochs."""


def _record(stats: dict[str, list[float]], terms: Any, weight: float) -> None:
    """Add one micro-batch's diagnostics; ``weight`` = its share of the step's response tokens.

    The diagnostics are token-means over the micro-batch, so weighting them by tokens makes their sum the token-mean
    of the whole batch, whatever ``micro_batch_size`` (weighting by rollouts did not).
    """
    for key, value in (("loss", terms.loss), ("pg_loss", terms.pg_loss), ("entropy", terms.entropy),
                       ("clip_frac", terms.clip_frac), ("kl", terms.kl), ("approx_kl", terms.approx_kl_old),
                       ("ratio", terms.ratio_mean)):  # fmt: skip
        stats[key].append(float(value.detach()) * (1.0 if key == "loss" else weight))
    stats["ratio_max_dev"].append(float(terms.ratio_max_dev))


def _summarise(stats: dict[str, list[float]], epochs: int) -> dict[str, float]:
    """Per-epoch sums averaged over ``epochs``; ``ratio_max_dev`` the max, ``grad_norm`` the mean per step."""
    out = {k: sum(v) / epochs for k, v in stats.items() if v and k not in ("grad_norm", "ratio_max_dev")}
    if stats["grad_norm"]:
        out["grad_norm"] = sum(stats["grad_norm"]) / len(stats["grad_norm"])
    if stats["ratio_max_dev"]:
        out["ratio_max_dev"] = max(stats["ratio_max_dev"])
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

    def with_old_logp(self, model: Any, temperature: float, compute: ComputeMeter) -> MicroBatch:
        """This micro-batch with ``old_logp`` recomputed by :meth:`logprobs` under ``no_grad`` in train mode.

        The same forward, on the same rows, as the first epoch's: its ratio is then 1 exactly, whatever the dtype
        (in bf16, ``generate``'s KV-cached logits differ from a full forward by ~1e-2 per token, so without this the
        first epoch's ratio is not 1 and clipping fires spuriously; verl recomputes them for the same reason).
        """
        was_training = model.training
        model.train()  # the mode of the update's forward
        try:
            with torch.no_grad():
                logp, _ = self.logprobs(model, temperature, with_entropy=False)
        finally:
            model.train(was_training)
        compute.forward("recompute", self.prompt_mask, self.response_mask, rows=self.rows)
        return dataclasses.replace(self, old_logp=logp.detach().float().cpu())

    def logprobs(self, model: Any, temperature: float, *, with_entropy: bool) -> tuple[Any, Any]:
        """(N, R) log-probs (and entropies) of the responses under ``model``."""
        if self.rows is None:
            return sequence_logprobs(model, self.prompt_ids, self.prompt_mask, self.response_ids, self.response_mask,
                                     temperature=temperature, with_entropy=with_entropy)  # fmt: skip
        return shared_prefix_logprobs(model, self.prompt_ids, self.prompt_mask, self.response_ids, self.response_mask,
                                      self.rows, temperature=temperature, with_entropy=with_entropy)  # fmt: skip


__all__ = [
    "MicroBatch",
    "RolloutFailure",
    "Sampler",
    "check_overlong_buffer",
    "concat_rollouts",
    "learn_prior",
    "shape_rewards",
    "update_policy",
]
