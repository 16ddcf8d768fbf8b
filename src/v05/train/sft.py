"""Supervised warm-up of a policy until its *sampled* pass rate reaches a target (not for a fixed number of steps).

RL from a random tiny policy has no signal (every group is all-zero), so the trainer first fine-tunes on
(prompt, gold completion) pairs. The step at which a tiny model leaves its plateau depends on the seed
(cpu-setup.md §2a: step 900-1450 for 2-3 digit sums), so training stops on a metric: every ``eval_every`` steps the
caller's ``evaluate(model)`` samples and verifies, and training stops once it returns ≥ ``target_pass_rate``.

Choices: token-mean cross-entropy over completion tokens + EOS (prompt tokens carry no loss); AdamW on every
trainable parameter (norm weights included; a LoRA policy's adapter only) with a linear warm-up to a constant lr;
no gradient clipping.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from v05.engines.hf import prompt_special_tokens
from v05.engines.logprobs import sequence_logprobs

__all__ = ["SFTConfig", "SFTResult", "sft_warmup"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class SFTConfig:
    """Optimiser, batch and stopping rule of the warm-up (defaults: cpu-setup.md §5, 1-2 digit CI variant).

    Example:
        >>> SFTConfig(target_pass_rate=1.5)
        Traceback (most recent call last):
        ...
        ValueError: target_pass_rate=1.5 must be in [0, 1]
    """

    lr: float = 2e-3
    """Peak AdamW learning rate (2e-3 suits the 0.54 M tiny model on 1-2 digit sums; 1e-3 for 2-3 digits)."""
    batch_size: int = 128
    """Examples per step."""
    warmup_steps: int = 50
    """Linear warm-up from lr/warmup_steps to lr, then constant."""
    weight_decay: float = 0.01
    """AdamW decoupled weight decay."""
    betas: tuple[float, float] = (0.9, 0.98)
    """AdamW (β₁, β₂)."""
    target_pass_rate: float = 0.35
    """Stop when ``evaluate(model)`` (sampled at T = 1 on the eval prompts) reaches this."""
    eval_every: int = 100
    """Steps between evaluations (one more runs when training stops between two)."""
    eval_size: int = 256
    """Eval prompts the caller samples inside ``evaluate`` (read by whoever builds ``evaluate``, not here)."""
    max_steps: int = 5000
    """Give up after this many steps (``SFTResult.reached = False``)."""
    max_seconds: float | None = None
    """Give up after this wall time, evaluations included; None: no limit."""
    seed: int = 0
    """Seed of the batch order (``np.random.default_rng``)."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr={self.lr!r} must be a positive number")
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise ValueError(f"weight_decay={self.weight_decay!r} must be ≥ 0")
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            raise ValueError(f"betas={self.betas!r} must be two numbers in [0, 1)")
        if not 0 <= self.target_pass_rate <= 1:
            raise ValueError(f"target_pass_rate={self.target_pass_rate!r} must be in [0, 1]")
        for name, low in (
            ("batch_size", 1),
            ("warmup_steps", 0),
            ("eval_every", 1),
            ("eval_size", 1),
            ("max_steps", 1),
            ("seed", 0),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name}={value!r} must be an integer ≥ {low}")
        if self.max_seconds is not None and not self.max_seconds > 0:
            raise ValueError(f"max_seconds={self.max_seconds!r} must be > 0 or None (no limit)")


@dataclass(frozen=True, kw_only=True, slots=True)
class SFTResult:
    """Outcome of :func:`sft_warmup`."""

    steps: int
    """Optimiser steps taken."""
    seconds: float
    """Wall time, evaluations included."""
    pass_rate: float
    """Pass rate of the last evaluation (always run at the final step)."""
    reached: bool
    """Whether ``pass_rate ≥ target_pass_rate``; False when ``max_steps`` or ``max_seconds`` stopped training."""
    history: tuple[tuple[int, float], ...]
    """(step, pass rate) of every evaluation, in order; the last entry is ``(steps, pass_rate)``."""
    losses: tuple[float, ...]
    """Training loss (token-mean NLL of the batch) at every step."""


def sft_warmup(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    examples: Sequence[tuple[str, str]],
    *,
    evaluate: Callable[[PreTrainedModel], float],
    config: SFTConfig,
    progress: bool = True,
) -> SFTResult:
    r"""Fine-tune ``model`` in place on (prompt, completion) pairs until ``evaluate(model) ≥ target_pass_rate``.

        loss = −Σᵢ Σₜ mᵢₜ log π_θ(yᵢₜ | xᵢ, yᵢ₍<ₜ₎) / Σᵢ Σₜ mᵢₜ,   y = completion + EOS,   m = 1 on y only

    Prompts are encoded as the rollout engine encodes them (``prompt_special_tokens``), so the model learns exactly
    the context it will be sampled from.

    Args:
        model: the policy; trained in place and left in train mode.
        tokenizer: its tokenizer (EOS set).
        examples: (n,) pairs of (prompt text, gold completion text); the completion gets EOS appended.
        evaluate: called every ``eval_every`` steps (and at the last step) with the model; samples the eval prompts,
            verifies them and returns the pass rate in [0, 1].
        config: optimiser and stopping rule.
        progress: show a tqdm bar with step, loss and the last pass rate.

    Returns:
        Steps, wall time, last pass rate, whether the target was reached, evaluation history and losses.

    Raises:
        ValueError: if ``examples`` is empty, an example is longer than the model's positions, or ``evaluate``
            returns a value outside [0, 1].
    """
    data = _encode_examples(tokenizer, examples, getattr(model.config, "max_position_embeddings", None))
    trainable = [p for p in model.parameters() if p.requires_grad]  # every weight, or a LoRA adapter's
    optimizer = torch.optim.AdamW(trainable, lr=config.lr, betas=config.betas, weight_decay=config.weight_decay)
    warmup = max(config.warmup_steps, 1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup))
    batches = _batch_order(len(examples), config.batch_size, np.random.default_rng(config.seed))
    history: list[tuple[int, float]] = []
    losses: list[float] = []
    pass_rate, reached, step = float("nan"), False, 0
    start = time.perf_counter()
    model.train()
    bar = tqdm(total=config.max_steps, desc="sft", disable=not progress, dynamic_ncols=True)
    try:
        while step < config.max_steps:
            loss = _sft_loss(model, data, next(batches))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1
            losses.append(loss.item())
            out_of_time = config.max_seconds is not None and time.perf_counter() - start >= config.max_seconds
            if step % config.eval_every == 0 or step == config.max_steps or out_of_time:
                pass_rate = _checked_pass_rate(evaluate, model)
                history.append((step, pass_rate))
                reached = pass_rate >= config.target_pass_rate
            bar.update(1)
            shown = {"loss": f"{losses[-1]:.3f}"} | ({"pass_rate": f"{pass_rate:.3f}"} if history else {})
            bar.set_postfix(shown, refresh=False)  # no pass rate shown before the first check
            if reached or out_of_time:
                break
    finally:
        bar.close()
    seconds = time.perf_counter() - start
    if reached:
        logger.info(
            "sft reached pass rate %.3f ≥ %.3f at step %d (%.1f s)", pass_rate, config.target_pass_rate, step, seconds
        )
    else:
        logger.warning(
            "sft stopped at step %d (%.1f s) with pass rate %.3f < target %.3f",
            step,
            seconds,
            pass_rate,
            config.target_pass_rate,
        )
    return SFTResult(
        steps=step, seconds=seconds, pass_rate=pass_rate, reached=reached, history=tuple(history), losses=tuple(losses)
    )


@dataclass(frozen=True, slots=True)
class _Encoded:
    prompt_ids: npt.NDArray[np.int64]  # (n, P) left-padded
    prompt_mask: npt.NDArray[np.int64]  # (n, P)
    target_ids: npt.NDArray[np.int64]  # (n, R) right-padded completion + EOS
    target_mask: npt.NDArray[np.int64]  # (n, R)


def _encode_examples(
    tokenizer: PreTrainedTokenizerBase, examples: Sequence[tuple[str, str]], max_positions: int | None
) -> _Encoded:
    if len(examples) == 0:
        raise ValueError("examples is empty: the warm-up needs (prompt, completion) pairs")
    prompts = tokenizer([p for p, _ in examples], add_special_tokens=prompt_special_tokens(tokenizer))["input_ids"]
    targets = tokenizer([c for _, c in examples], add_special_tokens=False)["input_ids"]
    targets = [ids + [tokenizer.eos_token_id] for ids in targets]
    lengths = np.array([len(p) + len(t) for p, t in zip(prompts, targets, strict=True)])  # (n,)
    if max_positions is not None and lengths.max() > max_positions:
        i = int(lengths.argmax())
        raise ValueError(
            f"examples[{i}] is {int(lengths[i])} tokens (prompt + completion + EOS), "
            f"over the model's max_position_embeddings={max_positions}"
        )
    if min(len(p) for p in prompts) == 0:
        raise ValueError("a prompt encodes to no tokens: the first completion token needs context")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    p, r = max(map(len, prompts)), max(map(len, targets))
    out = _Encoded(
        prompt_ids=np.full((len(examples), p), pad, dtype=np.int64),
        prompt_mask=np.zeros((len(examples), p), dtype=np.int64),
        target_ids=np.full((len(examples), r), pad, dtype=np.int64),
        target_mask=np.zeros((len(examples), r), dtype=np.int64),
    )
    for i, (prompt, target) in enumerate(zip(prompts, targets, strict=True)):
        out.prompt_ids[i, p - len(prompt) :], out.prompt_mask[i, p - len(prompt) :] = prompt, 1
        out.target_ids[i, : len(target)], out.target_mask[i, : len(target)] = target, 1
    return out


def _batch_order(n: int, batch_size: int, rng: np.random.Generator) -> Iterator[npt.NDArray[np.int64]]:
    """Endless (B,) batches: epochs of fresh permutations, a batch may straddle two epochs."""
    buffer = np.empty(0, dtype=np.int64)
    while True:
        while len(buffer) < batch_size:
            buffer = np.concatenate([buffer, rng.permutation(n)])
        yield buffer[:batch_size]
        buffer = buffer[batch_size:]


def _sft_loss(model: PreTrainedModel, data: _Encoded, idx: npt.NDArray[np.int64]) -> torch.Tensor:
    prompt_mask, target_mask = data.prompt_mask[idx], data.target_mask[idx]  # (B, P), (B, R)
    p0 = int(prompt_mask.any(0).argmax())  # first column that is not padding in every row
    r1 = int(target_mask.any(0).sum())  # right padding starts here
    logp, _ = sequence_logprobs(
        model,
        torch.from_numpy(data.prompt_ids[idx, p0:]),
        torch.from_numpy(prompt_mask[:, p0:]),
        torch.from_numpy(data.target_ids[idx, :r1]),
        torch.from_numpy(target_mask[:, :r1]),
    )
    mask = torch.from_numpy(target_mask[:, :r1]).to(logp.device)  # (B, R)
    return -(logp * mask).sum() / mask.sum()


def _checked_pass_rate(evaluate: Callable[[PreTrainedModel], float], model: PreTrainedModel) -> float:
    value = float(evaluate(model))
    model.train()  # evaluate may switch modes; training continues in train mode
    if not 0 <= value <= 1:
        raise ValueError(f"evaluate(model) returned {value!r}; a pass rate must be in [0, 1]")
    return value
