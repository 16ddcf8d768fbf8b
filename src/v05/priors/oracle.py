r"""The ``oracle`` prior: each prompt's pass rate measured by extra rollouts of the policy (a bound, not a method).

    p̂ = (s + 1/2)/(m + 1)  from m = ``rollouts`` fresh rollouts of the current policy,   V = 2p̂ − 1

A bound available only in ``v05 train``: its trainer draws the extra rollouts (``bind_sampler``; TRL and verl refuse
the prior); they are not trained on and are not counted in the run's rollouts or compute. See :class:`OracleProvider`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from v05._checks import check_int
from v05._types import FloatArray
from v05.priors.compose import BaseProvider
from v05.rewards import from_pass_rate

OracleSampler = Callable[[list[str], int], tuple[FloatArray, FloatArray]]
"""``sampler(prompt_ids, draw) -> (successes, counts)``: extra rollouts of the current policy, ``draw`` seeding them."""


@dataclass(kw_only=True)
class OracleProvider(BaseProvider):
    r"""An upper bound on what any prior can add: each prompt's pass rate measured by extra rollouts of the policy.

        p̂ = (s + 1/2)/(m + 1)  from m = ``rollouts`` fresh rollouts of the current policy,   V = 2p̂ − 1

    The extra rollouts are drawn by the trainer (``bind_sampler``; its registry spec declares ``needs_sampler``,
    :class:`v05.priors.ProviderSpec`) before the step's own, are not trained on and are not counted in the run's
    rollouts or compute (they are counted in ``oracle_rollouts_``): a bound, never a method, and only v05's trainer
    can draw them (TRL and verl refuse it). Its
    error is sampling noise only, E[(V − μ)²] ≈ 4·p(1 − p)/(m + 1) (≈ 0.04 at p = 0.3, m = 16) — far below a learned
    prior's. The Jeffreys-style +1/2 keeps V off ±1 (an all-fail draw of a hard prompt is not certainty).
    Calibration (n0) is the base machinery's, like every provider's.

    Raises:
        RuntimeError: ``predict`` before a sampler is bound (only ``v05 train`` can bind one; TRL and verl cannot).
    """

    name = "oracle"
    rollouts: int = 16
    sampler_: OracleSampler | None = field(default=None, init=False, repr=False)
    oracle_rollouts_: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        BaseProvider.__post_init__(self)
        check_int(self.rollouts, "rollouts", 1)

    def bind_sampler(self, sampler: OracleSampler) -> None:
        """Give the provider the trainer's extra-rollout sampler (:data:`OracleSampler`)."""
        self.sampler_ = sampler

    def _parts(self, ids: list[str], texts: list[str], policy: str) -> tuple[FloatArray, FloatArray]:
        if self.sampler_ is None:
            raise RuntimeError(
                "the oracle prior draws extra rollouts from the policy: only v05 train binds its sampler (an "
                "upper bound, not a method; TRL and verl refuse it)"
            )
        successes, counts = self.sampler_(ids, self.step_)
        successes, counts = np.asarray(successes, np.float64), np.asarray(counts, np.float64)
        if successes.shape != (len(ids),) or counts.shape != (len(ids),) or np.any(counts < 1):
            raise ValueError(f"oracle sampler returned shapes {successes.shape}, {counts.shape} for {len(ids)} prompts")
        self.oracle_rollouts_ += int(counts.sum())
        p_hat = (successes + 0.5) / (counts + 1.0)
        return from_pass_rate(p_hat, "pm1"), np.zeros(len(ids))

    def _learn(self, ids: list[str], texts: list[str], scores: FloatArray, counts: FloatArray, policy: str) -> None:
        """Nothing to learn: every prediction is measured afresh."""

    def state_dict(self) -> dict[str, object]:
        """JSON-serialisable state: the base state and the extra rollouts drawn."""
        return {**BaseProvider.state_dict(self), "oracle_rollouts": self.oracle_rollouts_}

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Restore :meth:`state_dict` output."""
        BaseProvider.load_state_dict(self, state)
        self.oracle_rollouts_ = int(state.get("oracle_rollouts", 0))  # type: ignore[call-overload]


__all__ = ["OracleProvider", "OracleSampler"]
