r"""A guard that keeps a training run going when its prior provider fails: the running mean stands in.

A prior is advice, not ground truth: V0.5 and ``v05_eb`` weigh it by its measured worth, and a run must never die
of it. :class:`PriorGuard` wraps a provider's two calls:

    predict:  V_i = provider's V_i            where it returned and V_i, n0_i are finite
              V_i = running mean of the last ``steps`` steps' scores (n0 from its own calibration)   otherwise
    update:   the fallback always learns the outcomes; an exception in ``provider.update`` is logged and counted,
              the step goes on (the provider keeps whatever state it had).

The fallback is :class:`v05.priors.history.RunningMeanProvider` — the same policy-level mean the ``running_mean``
prior gives — fed the same outcomes every step, so it is ready the moment it is needed; its state is checkpointed
beside the provider's. Degenerate cases: before any outcome the fallback predicts V = 0 (p = 0.5); a provider that
fails every step turns the run into one with the ``running_mean`` prior, and the counters say so. Numpy only.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from v05._checks import error_line
from v05._types import FloatArray
from v05.priors.base import PriorPrediction
from v05.priors.history import RunningMeanProvider

log = logging.getLogger(__name__)


@dataclass
class PriorGuard:
    """Fallback bookkeeping for one provider (module docstring).

    Attributes:
        fallback: the running mean that stands in for a failed prediction.
        fallbacks: prompts predicted by the fallback so far (a raised ``predict`` counts every prompt of the call).
        predict_errors: ``predict`` calls that raised.
        update_errors: ``update`` calls that raised.
    """

    fallback: RunningMeanProvider = field(default_factory=RunningMeanProvider)
    fallbacks: int = 0
    predict_errors: int = 0
    update_errors: int = 0

    def predict(
        self, provider: Any, prompt_ids: Sequence[str], texts: Sequence[str], *, policy: str = "default"
    ) -> tuple[PriorPrediction, int]:
        """The provider's prediction with failed rows replaced by the fallback's; and how many rows were replaced.

        A row fails when the provider raised (all rows), or its mean or n0 is NaN/±inf or its mean lies outside
        [−1, 1] by more than rounding (the provider contract: ±1 space).
        """
        try:
            pred = provider.predict(prompt_ids, texts, policy=policy)
            mean, n0 = np.asarray(pred.mean, np.float64), np.asarray(pred.n0, np.float64)
            tau2 = np.asarray(pred.tau2, np.float64)
            if mean.shape != (len(prompt_ids),) or n0.shape != mean.shape or tau2.shape != mean.shape:
                raise ValueError(f"prediction of shape {mean.shape} for {len(prompt_ids)} prompts")
        except Exception as err:  # noqa: BLE001 - any provider fault: logged, counted, the running mean stands in
            self.predict_errors += 1
            log.warning("prior %s failed to predict (%s): the running mean stands in this step",
                        getattr(provider, "name", type(provider).__name__), error_line(err))  # fmt: skip
            mean = n0 = tau2 = np.full(len(prompt_ids), np.nan)
        bad = ~(np.isfinite(mean) & np.isfinite(n0) & (n0 >= 0) & (np.abs(mean) <= 1.0 + 1e-9))  # (Q,)
        n_bad = int(bad.sum())
        if n_bad:
            back = self.fallback.predict(prompt_ids, texts, policy=policy)
            mean, n0, tau2 = (np.where(bad, b, a) for a, b in ((mean, back.mean), (n0, back.n0), (tau2, back.tau2)))
            self.fallbacks += n_bad
            if n_bad < len(bad):
                log.warning("prior returned %d non-finite or out-of-range prediction(s): the running mean stands in "
                            "for them", n_bad)  # fmt: skip
        return PriorPrediction(np.clip(mean, -1.0, 1.0), tau2, n0), n_bad

    def update(
        self,
        provider: Any,
        prompt_ids: Sequence[str],
        texts: Sequence[str],
        scores: FloatArray,
        counts: FloatArray,
        *,
        policy: str = "default",
        step: int | None = None,
    ) -> bool:
        """Feed the outcomes to the fallback and the provider; False (logged, counted) if the provider raised."""
        self.fallback.update(prompt_ids, texts, scores, counts, policy=policy, step=step)
        try:
            provider.update(prompt_ids, texts, scores, counts, policy=policy, step=step)
        except Exception as err:  # noqa: BLE001 - the step's outcomes are lost to this provider, not the run
            self.update_errors += 1
            log.warning("prior %s failed to learn this step's outcomes (%s); training goes on",
                        getattr(provider, "name", type(provider).__name__), error_line(err))  # fmt: skip
            return False
        return True

    def state_dict(self) -> dict[str, object]:
        """JSON-serialisable state: the fallback's and the counters."""
        return {"fallback": self.fallback.state_dict(), "fallbacks": self.fallbacks,
                "predict_errors": self.predict_errors, "update_errors": self.update_errors}  # fmt: skip

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Restore :meth:`state_dict` output."""
        self.fallback.load_state_dict(state["fallback"])  # type: ignore[arg-type]
        self.fallbacks = int(state["fallbacks"])  # type: ignore[arg-type]
        self.predict_errors = int(state["predict_errors"])  # type: ignore[arg-type]
        self.update_errors = int(state["update_errors"])  # type: ignore[arg-type]


__all__ = ["PriorGuard"]
