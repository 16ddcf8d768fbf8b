"""The training prompt queue: epochs over a finite pool, with unsampled prompts handed back (numpy only).

Each step takes a candidate pool of prompts; the allocator may sample only some of them (DAPO's dynamic sampling,
SARA, DPS). The rest go back to the front of the queue, so every prompt is offered once per epoch. The order is a
pure function of ``(seed, epoch)``, so the queue's state is three small values (epoch, position, handed-back keys)
and a resumed run continues exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

Order = Literal["epochs", "random"]


@dataclass(kw_only=True)
class PromptQueue:
    """Indices into a pool of ``n`` prompts, served in per-epoch permutations (or i.i.d. with ``order="random"``).

    Attributes:
        n: pool size.
        seed: seed of the permutations.
        order: ``"epochs"`` (each prompt once per epoch) or ``"random"`` (uniform with replacement).
        epoch: the current epoch (0-based).
        position: prompts of the current epoch's permutation already served.
        returned: indices handed back, served first.
        draws: calls of ``take`` so far (the ``random`` order's stream position).
    """

    n: int
    seed: int
    order: Order = "epochs"
    epoch: int = 0
    position: int = 0
    returned: list[int] = field(default_factory=list)
    draws: int = 0

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"the training pool is empty (n = {self.n})")
        if self.order not in ("epochs", "random"):
            raise ValueError(f"unknown prompt order {self.order!r}; valid: epochs, random")

    def _perm(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.seed, 17, epoch]).permutation(self.n)

    def take(self, k: int) -> np.ndarray:
        """The next ``k`` pool indices (distinct when k ≤ n): handed-back ones first, then the epoch order."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        out: list[int] = []
        while self.returned and len(out) < k:
            out.append(self.returned.pop(0))
        if self.order == "random":
            rng = np.random.default_rng([self.seed, 19, self.draws])
            self.draws += 1
            pick = rng.choice(self.n, size=min(k, self.n), replace=False)
            out.extend(int(i) for i in pick if int(i) not in out)
            return np.asarray(out[:k], np.int64)
        while len(out) < min(k, self.n):
            if self.position >= self.n:
                self.epoch += 1
                self.position = 0
            i = int(self._perm(self.epoch)[self.position])
            self.position += 1
            if i not in out:
                out.append(i)
        return np.asarray(out, np.int64)

    def give_back(self, indices: Sequence[int] | np.ndarray) -> None:
        """Return unsampled prompts to the front of the queue (served first, in the given order)."""
        self.returned = [int(i) for i in indices] + self.returned

    def state_dict(self) -> dict[str, object]:
        """JSON-serialisable state."""
        return {"epoch": self.epoch, "position": self.position, "returned": list(self.returned), "draws": self.draws}

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Restore :meth:`state_dict`."""
        self.epoch = int(state["epoch"])  # type: ignore[call-overload]
        self.position = int(state["position"])  # type: ignore[call-overload]
        self.returned = [int(i) for i in state["returned"]]  # type: ignore[attr-defined]
        self.draws = int(state["draws"])  # type: ignore[call-overload]


__all__ = ["Order", "PromptQueue"]
