r"""OSLA: the V0.5 one-step-look-ahead rollout budget, run in synchronous rounds over the pool (SPEC §3.3).

Per prompt, with Δ̂²_k from the V0.5 test (:func:`v05.baselines.v05_shrinkage`, ±1 space) after k rollouts and the
noise σ² of the test (1, the paper's bound; or the plug-in 1 − V²):

    MSE_hat(k) = Δ̂²σ²/(σ² + kΔ̂²),   gain(k) = MSE_hat(k) − MSE_hat(k+1) = Δ̂⁴σ² / ((σ² + kΔ̂²)(σ² + (k+1)Δ̂²))
    continue  iff  Δ̂²_k > 0  and  gain(k) > c  and  k < k_max

(σ² = 1 gives the paper's Δ̂⁴/((1 + kΔ̂²)(1 + (k+1)Δ̂²)).) With ``test="eb_guard"`` (ours, for ``v05_eb``) the test is
the empirical-Bayes guard instead: a prompt whose outcomes are improbable under its prior's Beta–Binomial
predictive (:func:`v05.baselines.eb_guard_pvalue` < ``guard_level``; needs the prior's pseudo-count n0)
loses its prior, so its baseline is the group mean, MSE σ²/k, and it continues while σ²/(k(k + 1)) > c.

Deviations from the paper (whose exact rule is not public; SPEC marks it *reconstructed*): the batched round
schedule (``plus_one`` or ``jump`` to the predicted stopping k), the global ``extra_budget`` variant, its
budget-neutral ``fill`` (every step spends exactly batch_size·k_init + extra_budget) and the ``eb_guard`` test (ours).
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from v05._checks import RewardRange, as_float_1d, check_int, check_positive
from v05._types import BoolArray, FloatArray, IntArray
from v05.allocation.driver import Draw, Finish, Pool
from v05.baselines import NoiseModel, eb_guard_pvalue, v05_shrinkage
from v05.rewards import to_pm1

logger = logging.getLogger(__name__)

Schedule = Literal["plus_one", "jump"]
OslaTest = Literal["v05", "eb_guard"]


def osla_gain(delta2: FloatArray, k: IntArray | FloatArray, sigma2: FloatArray | float = 1.0) -> FloatArray:
    """One-step look-ahead gain Δ̂⁴σ² / ((σ² + kΔ̂²)(σ² + (k+1)Δ̂²)) for (P,) Δ̂² ≥ 0, k ≥ 1 and σ² ≥ 0 (broadcast).

    σ² = 1 (default) is the paper's Δ̂⁴/((1 + kΔ̂²)(1 + (k+1)Δ̂²)); Δ̂² → ∞ gives σ²/(k(k + 1)), the gain of the plain
    group mean; σ² = 0 gives 0.
    """
    d = np.asarray(delta2, np.float64)
    k_f = np.asarray(k, np.float64)
    s2 = np.asarray(sigma2, np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        g = d * d * s2 / ((s2 + k_f * d) * (s2 + (k_f + 1.0) * d))
        return np.where(np.isfinite(d), np.nan_to_num(g), s2 / (k_f * (k_f + 1.0)))


def osla_stop_k(delta2: object, k: object = 4, *, c: float = 0.0039, k_max: int = 16) -> IntArray:
    r"""Predicted stopping k when Δ̂² stays fixed: the first k' ≥ k at which OSLA stops.

        k* = min{k' ≥ k : Δ̂² = 0  or  gain(k') ≤ c  or  k' ≥ k_max}

    gain(k) decreases in k, so k* is where the look-ahead gain first drops to c. With the paper's c = 0.0039,
    k = 4, k_max = 16: Δ̂² = 0.01 → 4, 0.05 → 4, 0.1 → 6, 0.25 → 12, 0.5 → 14, 1 → 15, ≥ 2 → 16. A useless prior
    (Δ̂² → ∞) has gain → 1/(k(k+1)), which crosses c = 0.0039 between 15 and 16. Used by the ``jump`` schedule.

    Args:
        delta2: (P,) or scalar Δ̂² ≥ 0.
        k: (P,) or scalar rollouts drawn so far (≥ 1 integers).
        c: cost per rollout (> 0).
        k_max: rollout cap per prompt; k ≥ k_max returns k unchanged.

    Returns:
        (P,) int64 stopping k (≥ k).

    Raises:
        ValueError: negative or non-finite Δ̂², k < 1 or non-integer, c ≤ 0, k_max < 1.

    >>> osla_stop_k([0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 0.0])
    array([ 4,  4,  6, 12, 14, 15, 16,  4])
    """
    d = as_float_1d(np.atleast_1d(np.asarray(delta2)), "delta2")
    if np.any(d < 0):
        raise ValueError(f"delta2 must be >= 0, got {d[d < 0][:3]}")
    k_raw = np.broadcast_to(np.asarray(k), d.shape)
    if k_raw.dtype.kind not in "iuf" or (k_raw.dtype.kind == "f" and np.any(k_raw != np.round(k_raw))):
        raise ValueError(f"k must hold integers, got {k_raw[:3]}")
    k_arr = k_raw.astype(np.int64)
    if np.any(k_arr < 1):
        raise ValueError(f"k must be >= 1, got {int(k_arr.min())}")
    check_positive(c, "c")
    check_int(k_max, "k_max", 1)
    return _stop_k(d, k_arr, c, k_max)


def _stop_k(delta2: FloatArray, k: IntArray, c: float, k_max: int, sigma2: FloatArray | float = 1.0) -> IntArray:
    """Vectorised k* (trusted inputs) by bisection on k' ∈ [k, k_max]: ⌈log₂ k_max⌉ + 1 gain evaluations at most.

    The computed gain is non-increasing in k' in floating point too (each factor of its denominator is a monotone
    product and sum), so the first k' with gain ≤ c found by bisection is the one a scan k, k + 1, … would stop at,
    and a huge k_max costs a few more halvings rather than a loop to k_max.
    """
    lo = k.copy()
    hi = np.where((delta2 > 0) & (k < k_max), k_max, k).astype(np.int64)  # the answer lies in [lo, hi]
    while np.any(lo < hi):
        mid = lo + (hi - lo) // 2
        above = osla_gain(delta2, mid, sigma2) > c  # (P,) gain(mid) > c: the scan passes mid
        searching = lo < hi
        lo = np.where(searching & above, mid + 1, lo)
        hi = np.where(searching & ~above, mid, hi)
    return lo


@dataclass(frozen=True, slots=True)
class _OslaRound:
    """OSLA round state (all (P,) arrays are ±1-space statistics of the prompts sampled so far)."""

    prior: FloatArray  # (P,) V in ±1 space
    n0: FloatArray | None  # (P,) the prior's pseudo-count (eb_guard test)
    active: BoolArray  # (P,) prompts this step samples
    k: IntArray  # (P,) rollouts drawn
    s: FloatArray  # (P,) sum of ±1 rewards
    ask: IntArray  # (P,) the next draw (all zero: done)
    extra_left: int | None  # remaining global extra budget
    reward_range: RewardRange
    first_reject: BoolArray | None = None  # (P,) the test's verdict after round 0
    filled: int = 0  # rollouts granted by ``fill`` so far


@dataclass(frozen=True, kw_only=True, slots=True)
class OSLA:
    r"""V0.5 OSLA allocation: k_init rollouts per prompt, then more while the look-ahead gain beats the cost c.

    Round 0 draws ``k_init`` for each of the first ``batch_size`` pool prompts. After every round each prompt is
    re-tested with Δ̂² = max(0, (v̄_k − V)² − σ²/k) (±1 space, :func:`v05.baselines.v05_shrinkage`) and continues
    iff Δ̂² > 0, gain(k) > c and k < k_max. A continuing prompt gets +1 (``schedule="plus_one"``) or jumps to
    :func:`osla_stop_k` under its current Δ̂², capped by k_max (``"jump"``, fewer rounds). With ``extra_budget``
    (ours, the global budget variant), the extras after round 0 are capped at that many rollouts per step and go
    to the continuing prompts with the largest gain first (ties: lower pool index); set ``c=0`` to spend the whole
    budget on any rejected prior. All rollouts of every sampled prompt enter the loss. Keeps no state across steps.

        rollouts ≤ batch_size · k_max   (and ≤ batch_size · k_init + extra_budget)

    Budget-neutral OSLA (``fill=True``, with ``extra_budget``; ours): once the rule stops asking, whatever it left
    of ``extra_budget`` is drawn in one more round, one rollout at a time to the sampled prompt with the largest
    group-mean gain σ²/(k(k + 1)) at σ² = 1 — the least-sampled prompt first, ties by lower pool index — capped at
    k_max per prompt (the rule is then re-tested; it has no budget left unless every prompt is at k_max). So OSLA
    never buys depth by sampling fewer prompts, and it compares with fixed k at equal rollouts per step:

        rollouts = min(batch_size · k_init + extra_budget, batch_size · k_max)   (fill=True)

    The total falls below batch_size · k_init + extra_budget only when every sampled prompt reached k_max (the
    fill stops early); ``filled_rollouts`` in the stats counts what the fill drew.

    With ``test="eb_guard"`` the prior is tested by ``v05_eb``'s guard instead (see the module docstring; needs
    ``allocate(..., n0=...)``): prompts it flags receive extras while σ²/(k(k + 1)) > c, the others stop at k_init.

    Needs a prior (``allocate(..., prior=...)``, on the reward scale; mapped to ±1 with ``to_pm1``).
    Degenerate cases: an accepted prior (Δ̂² = 0) stops at k_init; a useless prior goes to k_max.
    ``k_init < 4`` warns: below 4 a single flipped outcome can reject an exact prior (SPEC §3.2).
    Statistics returned per step (``Allocation.stats``, SPEC §3.3): ``reject_rate`` (the test's rejections after
    round 0), ``continued_frac``, ``extra_rollouts``, ``mean_k``, ``k_hist`` (counts of k = 0, 1, ...),
    ``mean_weight`` (ŵ at the final k; ``eb_guard``: k/(k + n0) with n0 = 0 where flagged), ``mean_abs_shift``
    (|b − v̄| at the final k) and, with ``fill``, ``filled_rollouts``.

    References: Zhang et al. (2026) "V0.5: Generalist Value Model as a Prior for Sparse RL Rollouts",
    arXiv:2603.10848 (OSLA, c = 0.0039, k_init = 4, k_max = 16; the rule's exact form is reconstructed).
    """

    k_init: int = 4
    """rollouts every prompt gets in round 0 (the base group size; the paper's 4; < 4 warns)."""
    k_max: int = 16
    """rollout cap per prompt (the paper's 16)."""
    c: float = 0.0039
    """cost per rollout in the risk MSE_hat(k) + c·k (≈ 1/256, which makes a useless prior stop at 16)."""
    schedule: Schedule = "plus_one"
    """``"plus_one"``: +1 per continuing prompt per round; ``"jump"``: draw up to the predicted stopping k."""
    batch_size: int | None = None
    """prompts to sample, the first ones of the pool (None: the whole pool)."""
    extra_budget: int | None = None
    """global cap on rollouts beyond round 0 per step, spent greedily by gain (None: no cap, the paper's rule)."""
    noise: NoiseModel = "bound"
    """noise model of the test and the gain: ``"bound"`` σ² = 1 (paper) or ``"plugin"`` σ² = 1 − V² (ablation;
    ``eb_guard``: 1 − v̄², the prior being rejected)."""
    test: OslaTest = "v05"
    """``"v05"``: the paper's test (Δ̂² > 0); ``"eb_guard"``: ``v05_eb``'s Beta–Binomial guard (needs n0)."""
    guard_level: float = 0.01
    """level of the ``eb_guard`` test (a prompt is flagged when its p-value is below it)."""
    fill: bool = False
    """spend exactly batch_size·k_init + extra_budget rollouts per step: what the rule leaves of ``extra_budget``
    goes to the least-sampled prompts (up to k_max); needs ``extra_budget``. False: the rule alone (≤ that total)."""

    def candidate_pool(self, batch_size: int) -> int:
        """Prompts a step's candidates come from: the batch itself (every sampled prompt is trained on)."""
        return batch_size

    def __post_init__(self) -> None:
        check_int(self.k_init, "k_init", 1)
        check_int(self.k_max, "k_max", 1)
        if self.k_max < self.k_init:
            raise ValueError(f"k_max ({self.k_max}) must be >= k_init ({self.k_init}); raise k_max or lower k_init")
        check_positive(self.c, "c", strict=False)
        if self.schedule not in ("plus_one", "jump"):
            raise ValueError(f"unknown schedule {self.schedule!r}; valid: plus_one, jump")
        if self.noise not in ("bound", "plugin"):
            raise ValueError(f"unknown noise {self.noise!r}; valid: bound, plugin")
        if self.test not in ("v05", "eb_guard"):
            raise ValueError(f"unknown test {self.test!r}; valid: v05, eb_guard")
        if not 0.0 < self.guard_level < 1.0:
            raise ValueError(f"guard_level must lie in (0, 1), got {self.guard_level!r}")
        if self.batch_size is not None:
            check_int(self.batch_size, "batch_size", 1, hint=" (or None for the whole pool)")
        if self.extra_budget is not None:
            check_int(self.extra_budget, "extra_budget", 0, hint=" (or None for no global cap)")
        if not isinstance(self.fill, (bool, np.bool_)):
            raise ValueError(f"fill must be True or False, got {self.fill!r}")
        if self.fill and self.extra_budget is None:
            raise ValueError("fill=True needs extra_budget (the rollouts to spend beyond k_init per step); set it")
        if self.k_init < 4:
            warnings.warn(
                f"OSLA with k_init={self.k_init} < 4: one flipped outcome can reject an exact prior (SPEC §3.2); "
                "the paper uses k_init=4",
                UserWarning,
                stacklevel=3,
            )

    def init(self, pool: Pool, state: Any) -> _OslaRound:  # noqa: D102
        if pool.prior is None:
            raise ValueError("osla needs a prior: pass allocate(..., prior=...) with one value per pool prompt")
        if self.test == "eb_guard" and pool.n0 is None:
            raise ValueError(
                "osla with test='eb_guard' needs the prior's pseudo-count: pass allocate(..., n0=...) "
                "(e.g. PriorErrorState.n0() of v05_eb's state, or a provider's calibrated n0)"
            )
        n = pool.n_prompts
        active = np.zeros(n, bool)
        active[: min(self.batch_size or n, n)] = True
        return _OslaRound(
            prior=to_pm1(pool.prior, pool.reward_range),
            n0=pool.n0,
            active=active,
            k=np.zeros(n, np.int64),
            s=np.zeros(n),
            ask=np.where(active, self.k_init, 0).astype(np.int64),
            extra_left=self.extra_budget,
            reward_range=pool.reward_range,
        )

    def ask(self, s: _OslaRound) -> IntArray:  # noqa: D102
        return s.ask

    def tell(self, s: _OslaRound, draw: Draw) -> _OslaRound:  # noqa: D102
        n = len(s.k)
        r_pm1 = to_pm1(draw.rewards, s.reward_range)
        k = s.k + np.bincount(draw.prompt, minlength=n)  # (P,)
        total = s.s + np.bincount(draw.prompt, weights=r_pm1, minlength=n)
        if self.test == "eb_guard" and np.any((r_pm1 != 1.0) & (r_pm1 != -1.0)):
            raise ValueError("osla with test='eb_guard' needs binary rewards (the top or bottom of the reward range)")
        reject, delta2, sigma2 = self._test(total, k, s.prior, s.n0)
        gain = osla_gain(delta2, k, sigma2)
        go = s.active & reject & (gain > self.c) & (k < self.k_max)  # (P,) the per-prompt rule
        if self.schedule == "plus_one":
            want = go.astype(np.int64)
        else:
            want = np.where(go, _stop_k(delta2, k, self.c, self.k_max, sigma2) - k, 0)
        extra_left, filled = s.extra_left, s.filled
        if extra_left is not None:
            want, extra_left = _greedy(want, gain, extra_left)
            if self.fill and extra_left > 0 and not want.any():  # the rule stopped with budget left
                want = _fill(k, s.active, extra_left, self.k_max)
                extra_left, filled = extra_left - int(want.sum()), filled + int(want.sum())
        first = s.first_reject if s.first_reject is not None else s.active & reject
        return _OslaRound(s.prior, s.n0, s.active, k, total, want, extra_left, s.reward_range, first, filled)

    def finish(self, s: _OslaRound) -> Finish:  # noqa: D102
        act = np.flatnonzero(s.active)
        if act.size == 0:
            return Finish(s.active.copy())
        k = s.k[act]
        k_f = k.astype(np.float64)
        vbar = s.s[act] / k_f
        reject, _, _ = self._test(s.s[act], k, s.prior[act], None if s.n0 is None else s.n0[act])
        if self.test == "v05":
            fused = v05_shrinkage(vbar, s.prior[act], k_f, noise=self.noise)
            weight, base = fused.weight, fused.baseline
        else:
            n0 = np.where(reject, 0.0, s.n0[act])  # type: ignore[index]
            weight = k_f / (k_f + n0)
            base = weight * vbar + (1.0 - weight) * s.prior[act]
        first = s.first_reject[act] if s.first_reject is not None else np.zeros(act.size, bool)
        stats = {
            "reject_rate": float(first.mean()),
            "continued_frac": float(np.mean(k > self.k_init)),
            "extra_rollouts": int((k - self.k_init).sum()),
            "mean_k": float(k_f.mean()),
            "k_hist": np.bincount(k).tolist(),
            "mean_weight": float(weight.mean()),
            "mean_abs_shift": float(np.mean(np.abs(base - vbar))),
        }
        if self.fill:
            stats["filled_rollouts"] = s.filled
        return Finish(s.active.copy(), None, stats)

    def _test(
        self, sum_pm1: FloatArray, k: IntArray, prior_pm1: FloatArray, n0: FloatArray | None
    ) -> tuple[BoolArray, FloatArray, FloatArray]:
        """(reject, Δ̂², σ²) per prompt (reject False and Δ̂² = 0 where k = 0).

        ``eb_guard`` reports Δ̂² = ∞ for a rejected prior (the gain of the plain group mean) and 0 otherwise.
        """
        k_safe = np.maximum(k, 1).astype(np.float64)
        vbar = sum_pm1 / k_safe
        if self.test == "v05":
            d2 = np.where(k > 0, v05_shrinkage(vbar, prior_pm1, k_safe, noise=self.noise).delta2, 0.0)
            sigma2 = 1.0 if self.noise == "bound" else np.maximum(1.0 - prior_pm1 * prior_pm1, 0.0)
            return d2 > 0, d2, np.broadcast_to(np.asarray(sigma2, np.float64), d2.shape)
        successes = (sum_pm1 + k) / 2.0  # (P,) ±1 sums → success counts
        reject = (k > 0) & (eb_guard_pvalue(successes, k.astype(np.float64), prior_pm1, n0) < self.guard_level)
        sigma2 = np.ones_like(vbar) if self.noise == "bound" else np.maximum(1.0 - vbar * vbar, 0.0)
        return reject, np.where(reject, np.inf, 0.0), sigma2


def _greedy(want: IntArray, gain: FloatArray, budget: int) -> tuple[IntArray, int]:
    """Grant the requested extras to the largest gains first until ``budget`` rollouts are used (last one partial)."""
    order = np.lexsort((np.arange(len(want)), -gain))  # gain descending, ties by pool index
    req = want[order]  # (P,) requests in priority order
    before = np.cumsum(req) - req  # budget used by higher-priority prompts
    grant = np.clip(budget - before, 0, req)
    out = np.zeros_like(want)
    out[order] = grant
    return out, budget - int(grant.sum())


def _fill(k: IntArray, active: BoolArray, budget: int, k_max: int) -> IntArray:
    """Water-fill ``budget`` rollouts over the active prompts: each to the smallest k + grant, never past k_max.

    The smallest k has the largest group-mean gain σ²/(k(k + 1)); ties go to the lower pool index. Fewer than
    ``budget`` are granted only when every active prompt is at k_max.
    """
    grant = np.zeros_like(k)
    while budget > 0:
        level = np.where(active & (k + grant < k_max), k + grant, np.iinfo(np.int64).max)  # (P,)
        low = int(level.min())
        if low == np.iinfo(np.int64).max:
            break  # every active prompt is at k_max
        at_low = np.flatnonzero(level == low)[:budget]  # in pool index order
        grant[at_low] += 1
        budget -= len(at_low)
    return grant


__all__ = ["OSLA", "OslaTest", "Schedule", "osla_gain", "osla_stop_k"]
