r"""Prior-fusion estimators: V0.5's shrinkage with its hypothesis test, and our empirical-Bayes pseudo-count.

Both fuse a per-prompt prior V (from a value model; reward scale) with the k rollouts of the prompt, compute in ±1
space (0/1 inputs are mapped in and back, see :mod:`v05.rewards`) and default to unscaled advantages A = r − b:
all-equal groups carry signal under a prior while their empirical std is 0.

Deviations: the paper's OSLA and test are as SPEC §3.1–3.3 reconstructs them; ``v05_eb`` is ours (SPEC §3.4).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from v05._checks import RewardRange, check_positive
from v05._types import FloatArray
from v05.advantages import Scale, scale_advantages
from v05.baselines import NoiseModel, Switch, pseudo_count_fusion, v05_shrinkage
from v05.estimators._batch import Estimate, check_scale, prepare, require_prior
from v05.groups import segment_mean, segment_var
from v05.rewards import from_pm1, to_pm1


def v05(
    rewards: object,
    group: object,
    *,
    prior: object = None,
    reward_range: RewardRange = "pm1",
    scale: Scale = "none",
    noise: NoiseModel = "bound",
    switch: Switch = "smooth",
) -> Estimate:
    r"""V0.5: shrink the rollout mean toward the prior; keep the prior when a test accepts it.

        Δ̂² = max(0, (v̄_k − V)² − 1/k),   ŵ = Δ̂²/(Δ̂² + 1/k),   b = ŵ·v̄_k + (1 − ŵ)·V,   A_i = r_i − b

    (±1 space, worst-case noise σ² = 1; ``noise="plugin"`` uses 1 − V², ``switch="hard"`` uses ŵ ∈ {0, 1}.)
    H0 "the prior is exact" is accepted iff |v̄_k − V| ≤ 1/√k: then b = V.
    Bias: b depends on v̄_k through ŵ, so A is biased, but |b − v̄_k| ≤ 1/√k always (the paper's O(1/√k) bound).
    Degenerate cases: all-equal groups get A ≠ 0 whenever b ≠ r (signal from the prior); k = 1, 2 put v̄ on a grid
    coarser than the test radius (2/k > 1/√k), so one flipped outcome rejects the prior — the reason for k ≥ 4.

    References: Zhang et al. (2026) "V0.5: Generalist Value Model as a Prior for Sparse RL Rollouts",
    arXiv:2603.10848.

    >>> v05([-1., -1., -1., 1.], [0, 0, 0, 0], prior=[0.5]).baseline   # v̄ = −0.5: (v̄ − V)² = 1 > 1/4
    array([-0.25, -0.25, -0.25, -0.25])
    """
    check_scale(scale)
    if noise not in ("bound", "plugin"):
        raise ValueError(f"unknown noise {noise!r}; valid: bound, plugin")
    if switch not in ("smooth", "hard"):
        raise ValueError(f"unknown switch {switch!r}; valid: smooth, hard")
    b = prepare(rewards, group, prior=prior, reward_range=reward_range)
    prior_g = to_pm1(require_prior(b, "v05"), reward_range)
    vbar_g = to_pm1(segment_mean(b.rewards, b.group, b.n_groups), reward_range)  # (G,)
    fused = v05_shrinkage(vbar_g, prior_g, b.n_g.astype(np.float64), noise=noise, switch=switch)
    base = from_pm1(fused.baseline, reward_range)[b.group]  # (N,)
    adv = scale_advantages(b.rewards, base, b.group, scale=scale, reward_range=reward_range)
    return Estimate(adv, base, weight=fused.weight, reject=fused.reject)


@dataclass(frozen=True, slots=True)
class PriorErrorState:
    """Running statistics of a prior's error over the last ``window`` steps (±1 space), for ``v05_eb``.

    Per step it keeps (see :func:`prior_error_stats`): Σ (v̄ − V)², Σ s²/k (sampling noise of v̄), Σ s² (s² the
    unbiased within-group variance) and the number of groups.

    Attributes:
        window: number of recent steps kept.
        d2: per-step Σ (v̄_g − V_g)².
        noise: per-step Σ s²_g / k_g.
        var: per-step Σ s²_g.
        count: per-step number of groups.
    """

    window: int = 8
    d2: tuple[float, ...] = ()
    noise: tuple[float, ...] = ()
    var: tuple[float, ...] = ()
    count: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError(f"window must be >= 1, got {self.window}")

    @property
    def n_groups(self) -> int:
        """Groups behind the current estimate."""
        return int(sum(self.count))

    def push(self, d2: float, noise: float, var: float, count: int) -> PriorErrorState:
        """Append one step's sums, dropping steps older than ``window``."""
        w = self.window
        return PriorErrorState(
            w,
            (self.d2 + (d2,))[-w:],
            (self.noise + (noise,))[-w:],
            (self.var + (var,))[-w:],
            (self.count + (count,))[-w:],
        )

    def tau2(self, floor: float = 1e-2) -> float:
        """τ̂² = (Σ (v̄ − V)² − Σ s²/k) / #groups, clipped at ``floor`` (the prior's error variance)."""
        n = self.n_groups
        return floor if n == 0 else max((sum(self.d2) - sum(self.noise)) / n, floor)

    def sigma2(self) -> float:
        """σ̄² = mean s², an unbiased estimate of E[Var(r | prompt)] (= E[1 − μ²] for ±1 rewards); 1 if empty."""
        n = self.n_groups
        return 1.0 if n == 0 else sum(self.var) / n


def prior_error_stats(vbar_g: FloatArray, prior_g: FloatArray, var_g: FloatArray, k_g: FloatArray) -> tuple[float, ...]:
    r"""One step's sums behind the noise-corrected prior error (±1 space): (Σ (v̄ − V)², Σ ŝ²/k, Σ ŝ², G).

        ŝ²_g = s²_g (the unbiased within-group variance) if k_g ≥ 2, else the plug-in 1 − V_g²
        τ̂² = (Σ (v̄ − V)² − Σ ŝ²/k) / G,   σ̄² = Σ ŝ² / G   (:class:`PriorErrorState`)

    E[(v̄ − V)²] = τ² + E[Var r]/k and E[s²] = Var r, so τ̂² and σ̄² are unbiased when every k ≥ 2. A single rollout has
    no variance estimate; its plug-in 1 − V² (the Bernoulli variance at the prior) is biased when V is. This is the
    one implementation of the estimate: ``v05_eb`` and the prior providers' calibration both use it.

    Args:
        vbar_g: (G,) group means v̄.
        prior_g: (G,) priors V.
        var_g: (G,) unbiased within-group variances s² (read only where k ≥ 2).
        k_g: (G,) rollouts per group (≥ 1).
    """
    var_hat = np.where(k_g >= 2, var_g, 1.0 - prior_g * prior_g)  # (G,)
    d = vbar_g - prior_g
    return float(np.sum(d * d)), float(np.sum(var_hat / k_g)), float(np.sum(var_hat)), len(k_g)


def v05_eb(
    rewards: object,
    group: object,
    *,
    prior: object = None,
    reward_range: RewardRange = "pm1",
    scale: Scale = "none",
    n0: object = None,
    tau2: float | None = None,
    state: PriorErrorState | None = None,
    min_groups: int = 16,
    tau2_floor: float = 1e-2,
    guard_z: float | None = 3.0,
    loo: bool = False,
) -> Estimate:
    r"""Empirical-Bayes fusion: the prior counts as n0 extra rollouts, n0 from the prior's measured error.

        b = (n0·V + k·v̄_k)/(n0 + k)            (plain; ``loo=True``: b_i = (n0·V + S_g − r_i)/(n0 + k − 1))
        n0 = σ̄²/τ²,   σ̄² = E[1 − μ²] ≈ mean s²_g,   τ² = mean (v̄ − V)² − mean s²_g/k_g   (floored at tau2_floor)

    With a calibrated prior of error variance τ², this fusion has MSE σ̄²/(k + n0): the prior is worth n0 rollouts
    at every k. Where n0 comes from, in order: ``n0`` (fixed, scalar or per group), ``tau2`` (fixed τ²; σ̄² from
    the batch/state), ``state`` with ≥ ``min_groups`` groups of history (online; this batch is *not* used, so n0
    does not depend on it), otherwise this batch alone (batch-dependent n0). The returned state includes this batch.
    Hallucination guard (``guard_z``): a prompt with |v̄_k − V| > z·√(τ² + σ̄²/k) is treated as a prior failure
    (n0 → 0 for that prompt; ``reject`` marks it). ``guard_z=None`` disables it.
    Bias: the plain form includes r_i in b_i (like the group mean); the LOO form is unbiased when n0 and V do not
    depend on the batch (fixed n0, or the state path). Limits: n0 → 0 gives the (LOO) group mean, n0 → ∞ gives V.
    Degenerate cases: all-equal groups keep signal (b ≠ r unless V = r); a k = 1 group has no variance estimate and
    enters τ² and σ̄² with the plug-in 1 − V² (see :func:`prior_error_stats`; biased when V is); LOO with n0 = 0
    and k = 1 returns b = V.

    References: ours (SPEC §3.4); the pseudo-count view of a Beta prior; the V0.5 test as guard (arXiv:2603.10848).
    """
    check_scale(scale)
    if guard_z is not None:
        check_positive(guard_z, "guard_z")
    check_positive(tau2_floor, "tau2_floor")
    b = prepare(rewards, group, prior=prior, reward_range=reward_range)
    prior_g = to_pm1(require_prior(b, "v05_eb"), reward_range)  # (G,)
    r_pm1 = to_pm1(b.rewards, reward_range)  # (N,)
    k_g = b.n_g.astype(np.float64)
    vbar_g = segment_mean(r_pm1, b.group, b.n_groups)  # (G,)
    var_g = np.nan_to_num(segment_var(r_pm1, b.group, b.n_groups, ddof=1))  # (G,) nan → 0 where k = 1 (unread)
    step_stats = prior_error_stats(vbar_g, prior_g, var_g, k_g)
    state_in = state if state is not None else PriorErrorState()
    basis = state_in if state_in.n_groups >= min_groups else state_in.push(*step_stats)
    if tau2 is not None:
        check_positive(tau2, "tau2")
    tau2_hat = float(tau2) if tau2 is not None else basis.tau2(tau2_floor)
    sigma2_hat = basis.sigma2()
    if n0 is not None:
        n0_g = np.broadcast_to(np.asarray(n0, np.float64), (b.n_groups,)).copy()
        if not np.all(np.isfinite(n0_g)) or np.any(n0_g < 0):
            raise ValueError(f"n0 must be finite and >= 0, got {n0!r}")
    else:
        n0_g = np.full(b.n_groups, sigma2_hat / tau2_hat)
    reject = np.zeros(b.n_groups, bool)
    if guard_z is not None:
        radius = guard_z * np.sqrt(tau2_hat + sigma2_hat / k_g)  # (G,)
        reject = np.abs(vbar_g - prior_g) > radius
        n0_g = np.where(reject, 0.0, n0_g)
    base_pm1 = pseudo_count_fusion(r_pm1, b.group, prior_g, n0_g, leave_one_out=loo)  # (N,)
    base = from_pm1(base_pm1, reward_range)
    adv = scale_advantages(b.rewards, base, b.group, scale=scale, reward_range=reward_range)
    weight = k_g / (k_g + n0_g)
    return Estimate(adv, base, weight=weight, reject=reject, state=state_in.push(*step_stats), n0=n0_g)


__all__ = ["PriorErrorState", "prior_error_stats", "v05", "v05_eb"]
