r"""The machinery every prior provider shares: composition of its parts, online calibration, history, state.

Every provider composes its prediction from three parts, each weighted by its measured error (SPEC §4.4):

    b   = m + w·r                       policy mean m, cross-prompt residual r (0 without a model), weight w ∈ [0, 1]
    n_b = σ̄² / τ²_b                     τ²_b: the calibrated error variance of b (online if measured, else context CV)
    V   = (E_sum + n_b·b) / (E_n + n_b)   per-prompt history: E_n discounted rollouts with ±1 sum E_sum
    n0  = n_b + E_n,   τ² = σ̄² / n0

w = clip(Σ r·(v̄ − m) / Σ r², 0, 1) is the least-squares weight of the residual model on the calibration rows, so a
model whose features carry no signal on recent outcomes is switched off (w → 0) and the provider falls back to m.
Calibration rows come from the online tracker (predictions made before the outcomes, last ``window`` groups) once it
holds ``min_online`` groups, else from the provider's own cross-validation on its context.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from v05._checks import as_real, check_int, check_positive
from v05._types import FloatArray
from v05.allocation.posterior import BetaHistory, Decay
from v05.priors.base import TAU2_FLOOR, Calibration, PriorPrediction, calibrate
from v05.rewards import to_pass_rate

DEFAULT_N0 = 1.0
"""Pseudo-count assumed before anything was measured (≈ the worth of a policy mean on V0 data)."""
PENDING_LIMIT = 65536
"""Predictions kept while waiting for their outcomes (older ones are dropped)."""
MAX_COUNT = 2.0**53
"""Largest rollout count ``update`` accepts: the largest integer a float64 holds exactly (sums stay finite)."""
DEFAULT_SIGMA2 = 0.8
"""E[1 − μ²] assumed before anything was measured (V0 context: 0.80)."""


@dataclass(slots=True)
class CalibrationRows:
    """Rows (one per observed group) a provider calibrates on: its parts' predictions and the outcomes (±1)."""

    m: FloatArray = field(default_factory=lambda: np.zeros(0))
    r: FloatArray = field(default_factory=lambda: np.zeros(0))
    final: FloatArray = field(default_factory=lambda: np.zeros(0))
    vbar: FloatArray = field(default_factory=lambda: np.zeros(0))
    k: FloatArray = field(default_factory=lambda: np.zeros(0))

    def __len__(self) -> int:
        return len(self.vbar)

    def append(self, other: CalibrationRows, window: int) -> CalibrationRows:
        """These rows followed by ``other``, keeping the last ``window``."""
        return CalibrationRows(
            *(np.concatenate([a, b])[-window:] for a, b in zip(self.arrays(), other.arrays(), strict=False))
        )

    def arrays(self) -> tuple[FloatArray, ...]:
        """The five arrays in field order."""
        return self.m, self.r, self.final, self.vbar, self.k

    def residual_weight(self) -> float:
        """Least-squares weight of the residual part, w = clip(Σ r(v̄ − m) / Σ r², 0, 1) (1 if r ≡ 0)."""
        ss = float(np.sum(self.r**2))
        return 1.0 if ss <= 1e-12 else float(np.clip(np.sum(self.r * (self.vbar - self.m)) / ss, 0.0, 1.0))

    def to_dict(self) -> dict[str, list[float]]:
        """JSON-serialisable form."""
        return {n: a.tolist() for n, a in zip(("m", "r", "final", "vbar", "k"), self.arrays(), strict=False)}

    @classmethod
    def from_dict(cls, d: dict[str, list[float]]) -> CalibrationRows:
        """Inverse of ``to_dict``."""
        return cls(*(np.asarray(d[n], np.float64) for n in ("m", "r", "final", "vbar", "k")))


@dataclass(kw_only=True)
class BaseProvider:
    """Shared state and composition (module docstring). Subclasses implement ``_parts``, ``_learn`` and state.

    Attributes:
        window: calibration rows kept by the online tracker.
        min_online: online rows needed before they replace the context cross-validation for τ².
        prior_rows: how many online rows the context CV counts as when fitting the residual weight w.
        lambda_: history discount λ per visit/step (``history``, ``combined``); 1 keeps all evidence.
        decay: ``"visit"`` or ``"step"`` discounting of the history.
        use_history: fuse per-prompt history evidence into the prediction.
    """

    name = "base"
    window: int = 1024
    min_online: int = 24
    prior_rows: float = 16.0
    lambda_: float = 0.7
    decay: Decay = "visit"
    use_history: bool = False
    online_: CalibrationRows = field(default_factory=CalibrationRows, init=False)
    cv_: dict[str, CalibrationRows] = field(default_factory=dict, init=False)
    history_: dict[str, BetaHistory] = field(default_factory=dict, init=False)
    pending_: dict[tuple[str, str], tuple[float, float, float]] = field(default_factory=dict, init=False)
    step_: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        check_int(self.window, "window", 1)  # a row count: 2.5 would reach a slice as a TypeError
        check_int(self.min_online, "min_online", 1)
        check_positive(self.prior_rows, "prior_rows", strict=False)  # NaN here made every prediction NaN
        if not 0.0 < as_real(self.lambda_, "lambda_") <= 1.0:
            raise ValueError(f"lambda_ must lie in (0, 1], got {self.lambda_}")
        if self.decay not in ("visit", "step"):
            raise ValueError(f"unknown decay {self.decay!r}; valid: visit, step")

    # -- the interface -------------------------------------------------------------------------------------------
    def requires(self) -> tuple[str, ...]:
        """Top-level modules this provider imports on use (none here; embedding providers override it).

        :func:`v05.priors.make_provider` checks them when the provider is built, so a missing optional package
        fails the run at its start with the extra that installs it, instead of every later prediction falling back.
        """
        return ()

    def predict(self, prompt_ids: Sequence[str], texts: Sequence[str], *, policy: str = "default") -> PriorPrediction:
        """Predict scores of ``prompt_ids`` under ``policy`` (see the module docstring for the composition)."""
        ids = _ids(prompt_ids)
        texts = _texts(texts, len(ids))
        m, r = self._parts(ids, texts, policy)
        rows = self._calibration_rows(policy)
        w = self.residual_weight(policy)
        base = np.clip(m + w * r, -1.0, 1.0)
        cal = self._calibration_of(rows, w)
        n_b = np.full(len(ids), cal.n0)
        e_sum, e_n = self._evidence(ids, policy)
        mean = np.clip(
            base + (e_sum - e_n * base) / (e_n + n_b), -1.0, 1.0
        )  # = (E_sum + n_b·b)/(E_n + n_b), exact b when E_n = 0
        n0 = n_b + e_n
        for i, pid in enumerate(ids):  # remembered so the outcomes of this step calibrate the provider
            self.pending_[(policy, pid)] = (float(m[i]), float(r[i]), float(mean[i]))
        excess = len(self.pending_) - PENDING_LIMIT
        for key in list(self.pending_)[: max(excess, 0)]:  # predictions never followed by outcomes: drop the oldest
            del self.pending_[key]
        return PriorPrediction(mean, cal.sigma2 / n0, n0)

    def prefetch(self, texts: Sequence[str]) -> None:
        """Compute what can be computed before training for these prompt texts (embeddings); no-op here."""

    def record(
        self, prompt_ids: Sequence[str], scores: FloatArray, counts: FloatArray, *, policy: str = "default"
    ) -> None:
        """Calibrate only: compare the outcomes with the predictions made for these prompts, learn nothing else."""
        ids = _ids(prompt_ids)
        scores, counts = _outcomes(ids, scores, counts)
        hit = [i for i, pid in enumerate(ids) if (policy, pid) in self.pending_]
        if not hit:
            return
        # a prompt listed twice (two groups of it this step) meets its one prediction twice: read, then drop
        parts = np.array([self.pending_[(policy, ids[i])] for i in hit])  # (H, 3): m, r, final
        for i in hit:
            self.pending_.pop((policy, ids[i]), None)
        new = CalibrationRows(parts[:, 0], parts[:, 1], parts[:, 2], scores[hit], counts[hit])
        self.online_ = self.online_.append(new, self.window)

    def update(
        self,
        prompt_ids: Sequence[str],
        texts: Sequence[str],
        scores: FloatArray,
        counts: FloatArray,
        *,
        policy: str = "default",
        step: int | None = None,
    ) -> None:
        """Record one step's group means (±1) and rollout counts: calibrate, then learn (means, history, buffers)."""
        ids = _ids(prompt_ids)
        texts = _texts(texts, len(ids))
        scores, counts = _outcomes(ids, scores, counts)
        self.record(ids, scores, counts, policy=policy)
        self.step_ = self.step_ + 1 if step is None else int(step)
        if self.use_history:
            self._update_history(ids, scores, counts, policy)
        self._learn(ids, list(texts), scores, counts, policy)

    def calibration(self, policy: str = "default") -> Calibration:
        """Calibration of the final predictions: online rows once there are ``min_online``, else context CV."""
        if len(self.online_) >= self.min_online:
            o = self.online_
            return calibrate(o.final, o.vbar, o.k)
        rows = self._calibration_rows(policy)
        return self._calibration_of(rows, self.residual_weight(policy))

    def metrics(self, policy: str = "default") -> dict[str, float]:
        """Training-log metrics: calibration and the residual weight."""
        out: dict[str, float] = dict(self.calibration(policy).to_dict())
        out["prior/residual_weight"] = self.residual_weight(policy)
        return out

    # -- state ---------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, object]:
        """JSON-serialisable state (never pickled)."""
        return {
            "provider": self.name,
            "step": self.step_,
            "online": self.online_.to_dict(),
            "history": {p: h.to_dict() for p, h in self.history_.items()},
        }

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Restore :meth:`state_dict` output (derived fits are recomputed lazily)."""
        if state.get("provider") != self.name:
            raise ValueError(f"state is for provider {state.get('provider')!r}, not {self.name!r}")
        self.step_ = int(state["step"])  # type: ignore[arg-type]
        self.online_ = CalibrationRows.from_dict(state["online"])  # type: ignore[arg-type]
        self.history_ = {p: BetaHistory.from_dict(h) for p, h in state["history"].items()}  # type: ignore[attr-defined]
        self.cv_ = {}
        self.pending_ = {}

    # -- parts for subclasses ------------------------------------------------------------------------------------
    def _parts(self, ids: list[str], texts: list[str], policy: str) -> tuple[FloatArray, FloatArray]:
        raise NotImplementedError

    def _learn(self, ids: list[str], texts: list[str], scores: FloatArray, counts: FloatArray, policy: str) -> None:
        raise NotImplementedError

    def _cv_rows(self, policy: str) -> CalibrationRows:
        """Out-of-fold predictions on the provider's own context for ``policy`` (empty: nothing measured)."""
        return CalibrationRows()

    def _calibration_rows(self, policy: str) -> CalibrationRows:
        if len(self.online_) >= self.min_online:
            return self.online_
        return self._cv_rows(policy)

    def _weight_rows(self, policy: str) -> CalibrationRows:
        """Context CV rows the residual weight starts from (the policy's own unless a subclass pools them)."""
        return self._cv_rows(policy)

    def residual_weight(self, policy: str = "default") -> float:
        r"""W = clip((ρ·Σ_cv r(y − m) + Σ_on r(v̄ − m)) / (ρ·Σ_cv r² + Σ_on r²), 0, 1), ρ = prior_rows / #cv rows.

        The context CV counts as ``prior_rows`` online rows, so a few online groups can switch off a residual model
        that CV trusted. 1 when there is no residual part.
        """
        cv, on = self._weight_rows(policy), self.online_
        rho = self.prior_rows / len(cv) if len(cv) else 0.0
        sxy = rho * float(np.sum(cv.r * (cv.vbar - cv.m))) + float(np.sum(on.r * (on.vbar - on.m)))
        sxx = rho * float(np.sum(cv.r**2)) + float(np.sum(on.r**2))
        return 1.0 if sxx <= 1e-12 else float(np.clip(sxy / sxx, 0.0, 1.0))

    @staticmethod
    def _calibration_of(rows: CalibrationRows, w: float) -> Calibration:
        if len(rows) == 0:
            return Calibration(DEFAULT_SIGMA2 / DEFAULT_N0, float("nan"), DEFAULT_N0, 0, sigma2=DEFAULT_SIGMA2)
        return calibrate(np.clip(rows.m + w * rows.r, -1, 1), rows.vbar, rows.k, floor=TAU2_FLOOR)

    def _evidence(self, ids: list[str], policy: str) -> tuple[FloatArray, FloatArray]:
        """Discounted ±1 reward sum and rollout count of each prompt's own history (zeros without history)."""
        hist = self.history_.get(policy)
        if not self.use_history or hist is None:
            return np.zeros(len(ids)), np.zeros(len(ids))
        alpha, beta = hist.lookup(np.asarray(ids))
        successes = alpha - hist.alpha0  # discounting pulls toward α₀, so α − α₀ is the discounted success count
        trials = alpha + beta - hist.alpha0 - hist.beta0
        return 2 * successes - trials, trials

    def _update_history(self, ids: list[str], scores: FloatArray, counts: FloatArray, policy: str) -> None:
        hist = self.history_.get(policy, BetaHistory.empty())
        successes = to_pass_rate(scores, "pm1") * counts
        uniq, first = np.unique(np.asarray(ids), return_index=True)
        if len(uniq) != len(ids):  # several groups of one prompt in a step: pool them
            inv = np.unique(np.asarray(ids), return_inverse=True)[1]
            successes = np.bincount(inv, successes)
            counts = np.bincount(inv, counts)
        else:
            successes, counts = successes[first], counts[first]
        self.history_[policy] = hist.update(
            uniq, successes, counts, lambda_=self.lambda_, decay=self.decay, step=self.step_
        )


def _ids(prompt_ids: Sequence[str]) -> list[str]:
    """Prompt keys as strings; a non-sequence (None, a number, one string) or a nested array is a ValueError."""
    if isinstance(prompt_ids, str | bytes) or not isinstance(prompt_ids, Sequence | np.ndarray):
        raise ValueError(f"prompt_ids must be a sequence of prompt keys, got {type(prompt_ids).__name__}")
    if isinstance(prompt_ids, np.ndarray) and prompt_ids.ndim != 1:
        raise ValueError(f"prompt_ids must be 1-D, got shape {prompt_ids.shape}")
    return [str(p) for p in prompt_ids]


def _texts(texts: Sequence[str], n: int) -> list[str]:
    """Prompt texts as a list of n strings (ValueError otherwise)."""
    if isinstance(texts, str | bytes) or not isinstance(texts, Sequence | np.ndarray):
        raise ValueError(f"texts must be a sequence of prompt texts, got {type(texts).__name__}")
    if len(texts) != n:
        raise ValueError(f"length mismatch (prompt_ids: {n}, texts: {len(texts)})")
    bad = [t for t in texts if not isinstance(t, str)]
    if bad:
        raise ValueError(f"texts must be strings, got {type(bad[0]).__name__} {bad[0]!r}")
    return list(texts)


def _outcomes(ids: list[str], scores: FloatArray, counts: FloatArray) -> tuple[FloatArray, FloatArray]:
    try:
        s = np.asarray(scores, np.float64).reshape(-1)
        k = np.broadcast_to(np.asarray(counts, np.float64), s.shape).copy()
    except (TypeError, ValueError, OverflowError):
        raise ValueError(
            "scores must be (G,) numbers and counts a number or (G,) numbers of a matching shape, got "
            f"{type(scores).__name__} and {type(counts).__name__}"
        ) from None
    if len(s) != len(ids):
        raise ValueError(f"length mismatch (prompt_ids: {len(ids)}, scores: {len(s)})")
    if not np.all(np.isfinite(s)) or np.any(np.abs(s) > 1):
        raise ValueError("scores must be finite group means in [-1, 1] (±1 reward space)")
    # NaN passed `k < 1` and made τ² and n0 NaN; counts near 1e308 overflowed the running sums to inf/inf
    ok = np.isfinite(k) & (k >= 1) & (k <= MAX_COUNT)
    if not ok.all():
        raise ValueError(f"counts must be rollout counts in [1, 2**53], got {k[~ok][:3]}")
    return s, k


__all__ = ["DEFAULT_N0", "DEFAULT_SIGMA2", "MAX_COUNT", "PENDING_LIMIT", "BaseProvider", "CalibrationRows"]
