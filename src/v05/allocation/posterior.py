r"""Beta beliefs over pass rates: per-group posteriors and a discounted per-prompt history.

``BetaPosterior`` is a frozen (G,) array of Beta(α, β) beliefs, read by allocators (SARA's P_eff) and the simulator.
``BetaHistory`` is the discounted Beta–Bernoulli state keyed by stable prompt ids, shared by the ``dbb`` estimator
and the ``history`` prior provider (one implementation of the update):

    α ← λ^Δ·α + (1 − λ^Δ)·α₀ + successes,   β ← λ^Δ·β + (1 − λ^Δ)·β₀ + failures

with Δ = 1 per visit (``decay="visit"``, MoPPS arXiv:2507.04632 / DBB arXiv:2603.18444 style) or Δ = steps since the
prompt's last update (``decay="step"``). Deviation from the papers: DBB's exact discounting is not public; this is
the MoPPS form (discount toward the prior), the variant our notes call "P".

>>> h = BetaHistory.empty().update(np.array([7]), np.array([3.0]), np.array([4.0]), lambda_=0.5)
>>> h.lookup(np.array([7, 8]))[0]   # α for the seen prompt: 0.5·1 + 0.5·1 + 3 = 4; unseen → α₀ = 1
array([4., 1.])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from v05._checks import as_float_1d
from v05._types import FloatArray
from v05.allocation.keyed import find, upsert

Decay = Literal["visit", "step"]


@dataclass(frozen=True, slots=True)
class BetaPosterior:
    """Beta(α, β) beliefs over G pass rates (in [0, 1]).

    Attributes:
        alpha: (G,) α > 0.
        beta: (G,) β > 0.
    """

    alpha: FloatArray
    beta: FloatArray

    def __post_init__(self) -> None:
        a, b = np.asarray(self.alpha, np.float64), np.asarray(self.beta, np.float64)
        if a.shape != b.shape or a.ndim != 1:
            raise ValueError(f"alpha and beta must be 1-D of one shape, got {a.shape} and {b.shape}")
        if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b)) and np.all(a > 0) and np.all(b > 0)):
            raise ValueError("alpha and beta must be finite and > 0")
        object.__setattr__(self, "alpha", a)
        object.__setattr__(self, "beta", b)

    @classmethod
    def from_mean(cls, mean: FloatArray, concentration: float | FloatArray) -> BetaPosterior:
        """Beta with mean p̂ and pseudo-count κ: α = κ·p̂, β = κ·(1 − p̂) (p̂ clipped to [1e-3, 1 − 1e-3]).

        Raises:
            ValueError: p̂ is not a finite (G,) array, κ not a finite positive scalar or (G,) array.
        """
        p = np.clip(as_float_1d(np.atleast_1d(np.asarray(mean, dtype=object)), "mean", allow_empty=True), 1e-3,
                    1 - 1e-3)  # fmt: skip
        kappa = as_float_1d(np.atleast_1d(np.asarray(concentration, dtype=object)), "concentration",
                            allow_empty=True)  # fmt: skip
        if kappa.shape not in ((1,), p.shape) or np.any(kappa <= 0):
            raise ValueError(f"concentration must be > 0, a scalar or of shape {p.shape}, got shape {kappa.shape}")
        kappa = np.broadcast_to(kappa, p.shape)
        return cls(kappa * p, kappa * (1 - p))

    @property
    def mean(self) -> FloatArray:
        """E[p] = α / (α + β), shape (G,)."""
        return self.alpha / (self.alpha + self.beta)

    @property
    def var(self) -> FloatArray:
        """Var[p] = αβ / ((α + β)²(α + β + 1)), shape (G,)."""
        s = self.alpha + self.beta
        return self.alpha * self.beta / (s * s * (s + 1))

    def moment(self, k: int | np.ndarray) -> FloatArray:
        """E[p^k] = Π_{i<k} (α + i)/(α + β + i), computed in log space; k ≥ 0 scalar or (G,)."""
        k_arr = np.broadcast_to(np.asarray(k, np.float64), self.alpha.shape)
        from math import lgamma  # scalar lgamma vectorised below; avoids a scipy dependency in the core

        lg = np.vectorize(lgamma, otypes=[np.float64])
        a, s = self.alpha, self.alpha + self.beta
        return np.exp(lg(a + k_arr) - lg(a) - lg(s + k_arr) + lg(s))

    def update(self, successes: FloatArray, trials: FloatArray) -> BetaPosterior:
        """Conjugate update with (G,) success and trial counts (fractional counts allowed)."""
        return BetaPosterior(self.alpha + successes, self.beta + (trials - successes))


@dataclass(frozen=True, slots=True)
class BetaHistory:
    """Discounted per-prompt Beta–Bernoulli state, keyed by stable prompt ids (a value passed in and returned).

    Attributes:
        keys: (P,) sorted prompt keys (ints or strings) seen so far.
        alpha: (P,) α pseudo-counts.
        beta: (P,) β pseudo-counts.
        last_step: (P,) step of each prompt's last update (used by ``decay="step"``).
        alpha0: prior α₀ for unseen prompts (and the discount target).
        beta0: prior β₀.
    """

    keys: np.ndarray
    alpha: FloatArray
    beta: FloatArray
    last_step: np.ndarray
    alpha0: float = 1.0
    beta0: float = 1.0

    @classmethod
    def empty(cls, alpha0: float = 1.0, beta0: float = 1.0) -> BetaHistory:
        """A history with no prompts and prior Beta(α₀, β₀)."""
        if not (alpha0 > 0 and beta0 > 0):
            raise ValueError(f"alpha0 and beta0 must be > 0, got {alpha0}, {beta0}")
        return cls(np.array([], dtype=np.int64), np.zeros(0), np.zeros(0), np.zeros(0, np.int64), alpha0, beta0)

    def check_prior(self, alpha0: float | None, beta0: float | None) -> None:
        """Refuse a prior (α₀, β₀) that differs from the one this history was built with (None: no claim).

        The history's own α₀, β₀ are the discount target and the belief of unseen prompts; a caller asking for
        another prior would otherwise be ignored silently.
        """
        for name, want, have in (("alpha0", alpha0, self.alpha0), ("beta0", beta0, self.beta0)):
            if want is not None and float(want) != have:
                raise ValueError(
                    f"{name}={want!r} differs from the carried history's {name}={have!r}: a history keeps the prior "
                    f"it was built with; pass {name}={have!r} (or omit it), or start from an empty state"
                )

    def lookup(self, keys: np.ndarray) -> tuple[FloatArray, FloatArray]:
        """(α, β) for each key; unseen keys get (α₀, β₀)."""
        pos, found = find(self.keys, keys)
        alpha = np.where(found, self.alpha[pos] if self.keys.size else 0.0, self.alpha0)
        beta = np.where(found, self.beta[pos] if self.keys.size else 0.0, self.beta0)
        return alpha.astype(np.float64), beta.astype(np.float64)

    def posterior(self, keys: np.ndarray) -> BetaPosterior:
        """The current beliefs for ``keys`` as a ``BetaPosterior``."""
        return BetaPosterior(*self.lookup(keys))

    def update(
        self,
        keys: np.ndarray,
        successes: FloatArray,
        trials: FloatArray,
        *,
        lambda_: float = 0.7,
        decay: Decay = "visit",
        step: int = 0,
    ) -> BetaHistory:
        """Discount the visited prompts' evidence toward (α₀, β₀) and add this step's counts.

        Args:
            keys: (G,) distinct prompt keys of this step.
            successes: (G,) successes per prompt (sum of 0/1 rewards; fractional allowed).
            trials: (G,) rollouts per prompt.
            lambda_: discount λ in (0, 1]; 1 keeps all evidence (a plain Beta posterior).
            decay: ``"visit"`` discounts once per visit; ``"step"`` by λ^(step − last_step).
            step: the current training step (only read by ``decay="step"``).

        Returns:
            The new history (this object is unchanged).
        """
        keys = np.asarray(keys)
        if len(np.unique(keys)) != len(keys):
            raise ValueError("keys must be distinct within one update (one entry per prompt)")
        if not 0.0 < lambda_ <= 1.0:
            raise ValueError(f"lambda_ must lie in (0, 1], got {lambda_}")
        if decay not in ("visit", "step"):
            raise ValueError(f"unknown decay {decay!r}; valid: visit, step")
        pos, found = find(self.keys, keys)
        alpha, beta = self.lookup(keys)
        if decay == "visit":
            lam = np.full(len(keys), lambda_)
        else:
            last = np.where(found, self.last_step[pos] if self.keys.size else step, step)
            if np.any(last > step):
                raise ValueError(
                    f"step={step} is before a prompt's last update (step {int(last.max())}): decay='step' needs the "
                    "current training step, increasing across calls"
                )
            lam = lambda_ ** (step - last).astype(np.float64)
        lam = np.where(found, lam, 1.0)  # an unseen prompt starts at the prior: nothing to discount
        alpha = lam * alpha + (1 - lam) * self.alpha0 + successes
        beta = lam * beta + (1 - lam) * self.beta0 + (trials - successes)
        new_keys, (new_alpha, new_beta, new_step) = upsert(
            self.keys,
            (self.alpha, self.beta, self.last_step),
            keys,
            (alpha, beta, np.full(len(keys), step, np.int64)),
        )
        return BetaHistory(new_keys, new_alpha, new_beta, new_step, self.alpha0, self.beta0)

    def to_dict(self) -> dict[str, object]:
        """JSON-serialisable form (keys as a list; never pickle)."""
        return {
            "keys": self.keys.tolist(),
            "alpha": self.alpha.tolist(),
            "beta": self.beta.tolist(),
            "last_step": self.last_step.tolist(),
            "alpha0": self.alpha0,
            "beta0": self.beta0,
        }

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> BetaHistory:
        """Inverse of :meth:`to_dict`."""
        keys = np.asarray(d["keys"])
        if keys.size == 0:
            keys = np.array([], dtype=np.int64)
        order = np.argsort(keys, kind="stable")
        arr = {n: np.asarray(d[n], dtype=np.float64)[order] for n in ("alpha", "beta")}
        return cls(
            keys[order],
            arr["alpha"],
            arr["beta"],
            np.asarray(d["last_step"], np.int64)[order],
            float(d["alpha0"]),
            float(d["beta0"]),  # type: ignore[arg-type]
        )


__all__ = ["BetaHistory", "BetaPosterior", "Decay"]
