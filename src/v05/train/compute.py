r"""Compute accounting: token-passes per step, by the model and the pass that spent them.

    token-passes = Σ_passes Σ_models (real input tokens of the pass) · (1 forward, + 2 if it is backpropagated)

A forward of one real (non-padding) token by one model counts 1, its backward 2, so a training forward + backward
over T tokens is 3T. Counted parts (``PARTS``): ``generate`` (the policy sampling: prompt + response tokens of every
rollout), ``policy`` (training forwards and backwards, every PPO epoch; with the shared-prefix forward a group's
prompt counts once), ``recompute`` (no-grad policy passes that recompute old log-probs, or POISE's feature pass),
``reference`` (the KL reference's forwards), ``critic`` (PPO's value passes) and ``probe`` (the ``probe`` prior's
prompt prefills). Equal rollouts is not equal compute: PPO's critic and POISE's extra pass cost token-passes that a
rollout count hides. Not counted: evaluation, and a prior's own encoder (MiniLM for ``v0``/``combined``), which is
another model whose cost shows in ``time/prior``. Token-passes compare runs of one policy; they are not FLOPs across
models of other sizes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PARTS = ("generate", "policy", "recompute", "reference", "critic", "probe")
"""The parts a step's token-passes are split into (metrics ``compute/<part>``)."""

BACKWARD = 2
"""A backward pass costs this many token-passes per token (a forward costs 1)."""


def real_tokens(*masks: Any) -> int:
    """Real tokens (mask ≠ 0) in the given masks, summed (torch tensors or numpy arrays)."""
    return int(sum(int((m != 0).sum()) for m in masks))


@dataclass
class ComputeMeter:
    """One step's token-passes by part; ``forward`` and ``backward`` add a pass over the given masks."""

    parts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PARTS, 0))

    def forward(self, part: str, *masks: Any, backward: bool = False) -> None:
        """Add a forward (and, with ``backward``, its backward) over the real tokens of ``masks`` to ``part``."""
        if part not in self.parts:
            raise ValueError(f"unknown compute part {part!r}; valid: {', '.join(PARTS)}")
        self.parts[part] += real_tokens(*masks) * (1 + (BACKWARD if backward else 0))

    def add(self, part: str, token_passes: int) -> None:
        """Add token-passes counted elsewhere (e.g. by a prior backend) to ``part``."""
        if part not in self.parts:
            raise ValueError(f"unknown compute part {part!r}; valid: {', '.join(PARTS)}")
        self.parts[part] += int(token_passes)

    @property
    def total(self) -> int:
        """The step's token-passes."""
        return sum(self.parts.values())

    def metrics(self) -> dict[str, int]:
        """``compute/<part>`` for every part and ``compute_step`` (the step's total)."""
        return {**{f"compute/{k}": v for k, v in self.parts.items()}, "compute_step": self.total}


__all__ = ["BACKWARD", "PARTS", "ComputeMeter", "real_tokens"]
