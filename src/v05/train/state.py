"""Run counters, and estimator and allocator state as JSON (type-tagged), for checkpoints: no pickle, exact.

The states are the values the core returns (``Estimate.state``, ``Allocation.state``): ``PriorErrorState``
(``v05_eb``), ``BetaHistory`` (``dbb``, SARA), ``DpsState`` (DPS) and ``GresoState`` (GRESO). A state of another type
is refused with the list of supported ones, so a new stateful method cannot be silently dropped from a checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from v05.allocation.dps import DpsState
from v05.allocation.greso import GresoState
from v05.allocation.posterior import BetaHistory
from v05.estimators.fusion import PriorErrorState


@dataclass
class Counters:
    """A run's running totals (checkpointed, so a resumed run continues them)."""

    step: int = 0
    rollouts_total: int = 0
    tokens_total: int = 0
    compute_total: int = 0
    prompts_total: int = 0
    wall_time: float = 0.0
    last_eval: float = float("nan")
    train_last: float = float("nan")
    verifier_failures: int = 0


STATE_TYPES: dict[str, type] = {
    "PriorErrorState": PriorErrorState,
    "BetaHistory": BetaHistory,
    "DpsState": DpsState,
    "GresoState": GresoState,
}


def state_to_json(state: Any) -> dict[str, Any] | None:
    """``{"type": name, "data": state.to_dict()}`` (None stays None)."""
    if state is None:
        return None
    name = type(state).__name__
    if name not in STATE_TYPES:
        raise ValueError(f"cannot checkpoint a state of type {name}; supported: {', '.join(STATE_TYPES)}")
    return {"type": name, "data": state.to_dict()}


def state_from_json(data: dict[str, Any] | None) -> Any:
    """Inverse of :func:`state_to_json`."""
    if data is None:
        return None
    if data.get("type") not in STATE_TYPES:
        raise ValueError(f"unknown state type {data.get('type')!r} in checkpoint; supported: {', '.join(STATE_TYPES)}")
    return STATE_TYPES[data["type"]].from_dict(data["data"])


__all__ = ["STATE_TYPES", "Counters", "state_from_json", "state_to_json"]
