"""Saving and restoring a run's full training state.

Weights, optimizer, scheduler, RNGs, queue, counters, the round's and the value method's states.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import safetensors.torch
import torch

from v05._checks import error_line
from v05.round import Round
from v05.train import policy
from v05.train.compute import ComputeMeter
from v05.train.config import TrainConfig
from v05.train.rundir import latest_checkpoint, save_checkpoint

COMPUTE_TOTALS = ("compute_user", "prefill_total", "decode_total", "update_total", "prefill_user_total",
                  "update_user_total")  # fmt: skip
"""The run's compute totals beside ``compute_total`` (:mod:`v05.train.compute`), each a metrics-row key."""


@dataclass
class Counters:
    """A run's running totals (checkpointed, so a resumed run continues them).

    ``compute_total`` is this trainer's token-passes, ``compute_user`` what a TRL/verl user pays for the same
    rollouts, and the ``*_total`` splits are their prefill/decode/update parts (:mod:`v05.train.compute`). A
    checkpoint written before the latter existed restores them as None (not counted from the start: unknown).
    """

    step: int = 0
    rollouts_total: int = 0
    tokens_total: int = 0
    compute_total: int = 0
    prompts_total: int = 0
    wall_time: float = 0.0
    last_eval: float = float("nan")
    train_last: float = float("nan")
    verifier_failures: int = 0
    compute_user: int | None = 0
    prefill_total: int | None = 0
    decode_total: int | None = 0
    update_total: int | None = 0
    prefill_user_total: int | None = 0
    update_user_total: int | None = 0

    @classmethod
    def from_state(cls, counters: dict[str, Any]) -> Counters:
        """The counters of a checkpoint's ``state["counters"]`` (the totals it lacks: None, see above)."""
        return cls(**{**dict.fromkeys(COMPUTE_TOTALS), **counters})

    def add_compute(self, meter: ComputeMeter) -> None:
        """Add a meter's token-passes to ``compute_total`` and to every compute total that is known."""
        self.compute_total += meter.total
        step = {"compute_user": meter.user_total, "prefill_total": meter.prefill, "decode_total": meter.decode,
                "update_total": meter.update, "prefill_user_total": meter.user_prefill,
                "update_user_total": meter.user_update}  # fmt: skip
        for name in COMPUTE_TOTALS:
            if getattr(self, name) is not None:
                setattr(self, name, getattr(self, name) + step[name])

    def compute_totals(self) -> dict[str, int | None]:
        """The compute totals beside ``compute_total``, as metrics-row fields (None: unknown, see above)."""
        return {name: getattr(self, name) for name in COMPUTE_TOTALS}


def save_state(
    cfg: TrainConfig,
    run_dir: Path,
    c: Counters,
    model: Any,
    optimizer: Any,
    scheduler: Any,
    engine: Any,
    queue: Any,
    method: Any,
    rnd: Round,
    extra: dict[str, Any] | None = None,
) -> None:
    """Write a checkpoint of the full training state after step ``c.step`` (atomic; see :mod:`v05.train.rundir`).

    state.json holds the counters, the queue and the round's states (:meth:`v05.round.Round.state_dict`: allocator,
    provider, prior guard, estimator); the value method (:class:`v05.train.value.ValueMethod`) writes its own: with
    the tensors when it holds tensors (PPO's critic), else into state.json (POISE's probe and buffer).

    Raises:
        OSError: the checkpoint could not be written (the previous one is left as it was).
    """

    def write_policy(folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        with policy.disk_errors(folder / "model.safetensors"):
            safetensors.torch.save_model(model, str(folder / "model.safetensors"))

    tensors = {
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "engine": engine.state_dict(),
        "torch_rng": torch.get_rng_state(),
    }
    state = {
        "counters": dataclasses.asdict(c),
        "queue": queue.state_dict(),
        **rnd.state_dict(),
        **(extra or {}),
    }
    method.save(tensors, state)
    save_checkpoint(run_dir, c.step, write_policy=write_policy, tensors=tensors, state=state,
                    keep=cfg.run.keep_checkpoints)  # fmt: skip


def restore_state(
    ckpt: Path, tensors: dict, state: dict, model: Any, optimizer: Any, scheduler: Any, engine: Any
) -> None:
    """Load a checkpoint's weights, optimizer, scheduler, engine RNG and torch RNG into the live objects.

    Raises:
        ValueError: ``policy/model.safetensors`` is missing or not a safetensors file (nothing else is tried).
    """
    weights = ckpt / "policy" / "model.safetensors"
    try:
        safetensors.torch.load_model(model, str(weights))
    except Exception as err:  # noqa: BLE001 - SafetensorError, OSError, missing/unexpected keys: report the file
        raise ValueError(f"{weights}: cannot restore the policy ({error_line(err)})") from None
    optimizer.load_state_dict(tensors["optimizer"])
    scheduler.load_state_dict(tensors["scheduler"])
    engine.load_state_dict(tensors["engine"])
    torch.set_rng_state(tensors["torch_rng"])


def checkpoint_step(run_dir: Path) -> int:
    """The step of the newest complete checkpoint (−1 when there is none)."""
    path = latest_checkpoint(run_dir)
    return -1 if path is None else int(path.name.split("_")[-1])


def export_policy(run_dir: Path, model: Any, tokenizer: Any) -> None:
    """The final policy as a Hugging Face folder (``from_pretrained`` reads it; a LoRA adapter merged in)."""
    policy.save_policy(policy.merged_policy(model), tokenizer, run_dir / "final")


__all__ = ["COMPUTE_TOTALS", "Counters", "checkpoint_step", "export_policy", "restore_state", "save_state"]
