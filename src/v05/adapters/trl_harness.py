"""TRL trainers built for the benches, not for users: quiet CPU trainers on plain-string prompts.

:func:`trl_grpo_rollouts_per_s` times plain ``GRPOTrainer`` (``v05 bench train``, :mod:`v05.adapters.trl_bench`);
:func:`trl_trainer` builds TRL's ``GRPOTrainer`` or a :class:`~v05.adapters.trl.V05GRPOTrainer` for
``v05 bench trl-parity`` (:mod:`v05.adapters.trl_parity`). Both start from the same quiet config (CPU, fp32, no
reports, no progress bar, no activation checkpointing; ``trl_trainer``'s ``**config`` may override it) and remove TRL's
printing callbacks. TRL itself is reached only through :mod:`v05.adapters.trl` (its ``GRPOConfig`` and
``GRPOTrainer`` exports), the one module that imports it.
"""

from __future__ import annotations

import contextlib
import copy
import random
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback, ProgressCallback

from datasets import Dataset
from v05.adapters.trl import (
    GRPOConfig,
    GRPOTrainer,
    V05GRPOConfig,
    V05GRPOTrainer,
    check_trl_version,
    no_checkpointing_args,
)


def _quiet_args() -> dict[str, Any]:
    """The ``GRPOConfig`` fields both harnesses set: CPU, fp32, no reports, no progress bar, no checkpointing."""
    return {"use_cpu": True, "bf16": False, "report_to": [], "disable_tqdm": True, **no_checkpointing_args()}


def _silence(trainer: Any) -> Any:
    """``trainer`` without the callbacks that print its log, progress and end-of-training summary to stdout."""
    for printer in (PrinterCallback, ProgressCallback):
        trainer.remove_callback(printer)
    return trainer


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
        ``{"rollouts", "seconds", "rollouts_per_s", "steps"}`` over the timed steps (``rollouts_per_s`` NaN if they
        took no measurable time), plus ``"warmup_steps"``: the steps left out (0 when ``steps <= warmup_steps``).

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
    args = GRPOConfig(
        output_dir=output_dir,
        **_quiet_args(),
        save_strategy="no",
        eval_strategy="no",
        logging_strategy="no",
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
        trainer = GRPOTrainer(
            model=copy.deepcopy(model),
            reward_funcs=reward_fn,
            args=args,
            train_dataset=Dataset.from_dict({"prompt": list(prompts)}),
            processing_class=tokenizer,
            callbacks=[timer],
        )
        _silence(trainer).train()
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
    """A TRL trainer on plain-string prompts with a ``prompt_id`` column, quiet (:func:`_quiet_args`, no printing).

    Unlike :func:`trl_grpo_rollouts_per_s`, it does not restore the global RNGs that TRL's constructor seeds.

    Args:
        model: a causal LM; trained in place.
        tokenizer: its tokenizer (``processing_class``).
        prompts: (P,) rendered prompt texts.
        keys: (P,) their stable keys (the ``prompt_id`` column: the prior's per-prompt history).
        reward_fn: ``reward_fn(prompts, completions, prompt_id, **kwargs) -> list[float | None]``.
        v05: None for TRL's own ``GRPOTrainer`` (``GRPOConfig``); else the ``v05_*`` fields of a
            :class:`~v05.adapters.trl.V05GRPOConfig` for a :class:`~v05.adapters.trl.V05GRPOTrainer`.
        callbacks: ``TrainerCallback`` s (evaluation, timing).
        **config: the other ``GRPOConfig`` fields (``output_dir``, ``num_generations``, ``learning_rate``, ...); they
            override the quiet defaults.

    Returns:
        The trainer, not yet trained.

    Raises:
        ValueError: an unsupported TRL, or what the config's own checks raise.
    """
    check_trl_version()
    base = _quiet_args()
    dataset = Dataset.from_dict({"prompt": list(prompts), "prompt_id": [str(k) for k in keys]})
    if v05 is None:
        args: Any = GRPOConfig(**(base | config))
        trainer = GRPOTrainer(model=model, reward_funcs=reward_fn, args=args, train_dataset=dataset,
                              processing_class=tokenizer, callbacks=list(callbacks))  # fmt: skip
    else:
        args = V05GRPOConfig(**(base | config | v05))
        trainer = V05GRPOTrainer(model=model, reward_funcs=reward_fn, args=args, train_dataset=dataset,
                                 processing_class=tokenizer, callbacks=list(callbacks))  # fmt: skip
    return _silence(trainer)


__all__ = ["trl_grpo_rollouts_per_s", "trl_trainer"]
