r"""The history priors: ``running_mean`` (one policy-level mean) and ``history`` (per-prompt, DBB/MoPPS-style).

``running_mean`` predicts the rollout-weighted mean score m of the last ``steps`` updates for every prompt; ``history``
adds per-prompt discounted Beta evidence (E_n rollouts with ±1 sum E_sum) shrunk toward m with m's measured worth n_m:

    V = (E_sum + n_m·m) / (E_n + n_m),   n0 = n_m + E_n        (an unseen prompt: V = m, n0 = n_m)

The shrinkage, calibration and state are :class:`v05.priors.compose.BaseProvider`'s; these classes supply the policy
mean (``_parts``) and its leave-one-out calibration rows before online rows exist.
References: MoPPS (arXiv:2507.04632), DBB (arXiv:2603.18444).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from v05._checks import check_int
from v05._types import FloatArray
from v05.priors.compose import BaseProvider, CalibrationRows

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class RunningMeanProvider(BaseProvider):
    """The policy-level mean score of the last ``steps`` updates (rollout-weighted); the same V for every prompt.

    Calibration before online rows: leave-one-out means over the window, m₋ᵢ = (S − kᵢv̄ᵢ)/(K − kᵢ).
    """

    name = "running_mean"
    steps: int = 4
    stats_: dict[str, list[tuple[float, float]]] = field(default_factory=dict, init=False)
    rows_: dict[str, list[CalibrationRows]] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        BaseProvider.__post_init__(self)
        check_int(self.steps, "steps", 1)

    def policy_mean(self, policy: str) -> float:
        """Rollout-weighted mean score of the window (0, i.e. p = 0.5, with a warning when nothing was seen)."""
        stats = self.stats_.get(policy, [])
        total = sum(n for _, n in stats)
        if total <= 0:
            log.warning("prior for policy %r has no outcomes yet: predicting 0 (pass rate 0.5)", policy)
            return 0.0
        return sum(s for s, _ in stats) / total

    def _parts(self, ids: list[str], texts: list[str], policy: str) -> tuple[FloatArray, FloatArray]:
        return np.full(len(ids), self.policy_mean(policy)), np.zeros(len(ids))

    def _learn(self, ids: list[str], texts: list[str], scores: FloatArray, counts: FloatArray, policy: str) -> None:
        stats = self.stats_.setdefault(policy, [])
        stats.append((float(np.sum(scores * counts)), float(np.sum(counts))))
        del stats[: -self.steps]
        blocks = self.rows_.setdefault(policy, [])  # one block of groups per step, the same window as the mean
        blocks.append(
            CalibrationRows(np.zeros_like(scores), np.zeros_like(scores), np.zeros_like(scores), scores, counts)
        )
        del blocks[: -self.steps]

    def _cv_rows(self, policy: str) -> CalibrationRows:
        rows = CalibrationRows()
        for block in self.rows_.get(policy, []):
            rows = rows.append(block, window=1 << 30)
        if len(rows) < 2:
            return CalibrationRows()
        total, n = float(np.sum(rows.vbar * rows.k)), float(np.sum(rows.k))
        loo = (total - rows.vbar * rows.k) / (n - rows.k)  # (R,) mean of the other rows
        return CalibrationRows(loo, np.zeros(len(rows)), loo, rows.vbar, rows.k)

    def state_dict(self) -> dict[str, object]:
        """JSON-serialisable state (never pickled)."""
        state = BaseProvider.state_dict(self)
        state["stats"] = {p: [list(x) for x in s] for p, s in self.stats_.items()}
        state["rows"] = {p: [r.to_dict() for r in blocks] for p, blocks in self.rows_.items()}
        return state

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Restore what ``state_dict`` returned."""
        BaseProvider.load_state_dict(self, state)
        self.stats_ = {p: [(float(a), float(b)) for a, b in s] for p, s in state["stats"].items()}  # type: ignore[attr-defined]
        self.rows_ = {p: [CalibrationRows.from_dict(r) for r in blocks] for p, blocks in state["rows"].items()}  # type: ignore[attr-defined]


@dataclass(kw_only=True)
class HistoryProvider(RunningMeanProvider):
    """Per-prompt discounted Beta history (``BetaHistory``) shrunk toward the policy mean with its measured n0.

    A prompt seen before gets V = (E_sum + n_m·m)/(E_n + n_m); an unseen prompt gets the policy mean m.
    References: MoPPS (arXiv:2507.04632), DBB (arXiv:2603.18444).
    """

    name = "history"
    use_history: bool = True


__all__ = ["HistoryProvider", "RunningMeanProvider"]
