r"""The learning-rate schedule of the policy's optimizer, with its horizon derived from the rollout budget.

    lr_s = lr · w(s) · d(x),   w(s) = min(1, (s + 1)/W),   d(x) = 1 (constant) or ½(1 + cos πx) (cosine)

s counts optimizer steps (``ppo_epochs`` per training step), W = ``optim.warmup_steps``. The decay reads the run's
progress x ∈ [0, 1] at the optimizer step:

    budget (train.max_rollouts = B):   x = (R_before + (e/E)·r_step) / B
    no budget:                         x = (t + e/E) / train.steps

R_before is the rollouts consumed before training step t (0-based), r_step the step's own, e the PPO epoch of E.
With a budget, every method at equal budget sees the same decay *in rollouts consumed*, however many rollouts a step
draws (OSLA's, DAPO's and SARA's vary), and the run ends where the schedule ends; with a constant rollouts per step
it is the usual cosine over E·T optimizer steps. The warm-up counts optimizer steps (verl's ``lr_warmup_steps``): it
protects AdamW's first moment estimates, which is a matter of updates, not of rollouts.

Deviation from the trainer's earlier ``LambdaLR``: its horizon was ``train.steps`` while it stepped once per PPO
epoch, and a budgeted run stopped long before it, so the cosine never decayed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

Schedule = Literal["constant", "cosine"]


@dataclass
class LRSchedule:
    """Sets the optimizer's learning rate before every optimizer step (module docstring); checkpointed.

    Attributes:
        optimizer: the torch optimizer whose param groups get the rate.
        lr: the peak rate.
        warmup_steps: W, optimizer steps of linear warm-up (0: none).
        schedule: ``constant`` or ``cosine``.
        horizon: B rollouts (budget) or ``train.steps`` (no budget): the unit of ``begin_step``'s arguments.
        steps: optimizer steps taken (the warm-up's s).
    """

    optimizer: Any
    lr: float
    warmup_steps: int
    schedule: Schedule
    horizon: float
    steps: int = 0
    last_lr: float = 0.0
    _start: float = field(default=0.0, repr=False)
    _length: float = field(default=0.0, repr=False)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.horizon) and self.horizon > 0):
            raise ValueError(f"LRSchedule.horizon must be > 0, got {self.horizon!r}")
        if self.schedule not in ("constant", "cosine"):
            raise ValueError(f"LRSchedule.schedule must be constant or cosine, got {self.schedule!r}")
        self.last_lr = self.rate(0.0)

    def rate(self, x: float) -> float:
        """The rate lr · w(s) · d(x) at the current optimizer step s and progress x (clipped to [0, 1])."""
        warm = min(1.0, (self.steps + 1) / self.warmup_steps) if self.warmup_steps > 0 else 1.0
        decay = 0.5 * (1.0 + math.cos(math.pi * min(max(x, 0.0), 1.0))) if self.schedule == "cosine" else 1.0
        return self.lr * warm * decay

    def begin_step(self, start: float, length: float) -> None:
        """Declare the training step's place in the horizon: it starts at ``start`` and covers ``length`` units."""
        self._start, self._length = float(start), float(length)

    def apply(self, epoch: int, epochs: int) -> float:
        """Set the rate of the next optimizer step (PPO epoch ``epoch`` of ``epochs``); returns it."""
        x = (self._start + self._length * epoch / epochs) / self.horizon
        self.last_lr = self.rate(x)
        for group in self.optimizer.param_groups:
            group["lr"] = self.last_lr
        return self.last_lr

    def step(self) -> None:
        """Count one optimizer step (call after ``optimizer.step()``)."""
        self.steps += 1

    def get_last_lr(self) -> list[float]:
        """The rate of the last optimizer step (one per param group, as torch's schedulers)."""
        return [self.last_lr] * len(self.optimizer.param_groups)

    def state_dict(self) -> dict[str, Any]:
        """Optimizer steps taken, the last rate and the settings (checked on load)."""
        return {"steps": self.steps, "last_lr": self.last_lr, "lr": self.lr, "warmup_steps": self.warmup_steps,
                "schedule": self.schedule, "horizon": self.horizon}  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; a state saved with other settings is refused.

        Raises:
            ValueError: the saved settings differ, or the state is not this schedule's (an older checkpoint).
        """
        want = {"lr": self.lr, "warmup_steps": self.warmup_steps, "schedule": self.schedule, "horizon": self.horizon}
        got = {k: state.get(k) for k in want}
        if "steps" not in state or got != want:
            raise ValueError(f"scheduler state {got} does not match this run's schedule {want}")
        self.steps, self.last_lr = int(state["steps"]), float(state["last_lr"])


__all__ = ["LRSchedule", "Schedule"]
