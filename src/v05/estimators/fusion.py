r"""Prior-fusion estimators: V0.5's shrinkage with its hypothesis test, and our empirical-Bayes pseudo-count.

Both fuse a per-prompt prior V (from a value model; reward scale) with the k rollouts of the prompt, compute in ±1
space (0/1 inputs are mapped in and back, see :mod:`v05.rewards`) and default to unscaled advantages A = r − b:
all-equal groups carry signal under a prior while their empirical std is 0.

Deviations: the paper's OSLA and test are as SPEC §3.1–3.3 reconstructs them; ``v05_eb`` is ours (SPEC §3.4).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from v05._checks import RewardRange, as_real, check_int, check_positive
from v05._types import FloatArray
from v05.advantages import Scale, scale_advantages
from v05.baselines import NoiseModel, Switch, eb_guard_pvalue, pseudo_count_fusion, v05_shrinkage
from v05.estimators._batch import Estimate, check_binary_successes, check_prior_scale, prepare, require_prior
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
    check_prior_scale(scale, "v05")
    if noise not in ("bound", "plugin"):
        raise ValueError(f"unknown noise {noise!r}; valid: bound, plugin")
    if switch not in ("smooth", "hard"):
        raise ValueError(f"unknown switch {switch!r}; valid: smooth, hard")
    b = prepare(rewards, group, prior=prior, reward_range=reward_range)
    prior_g = to_pm1(require_prior(b, "v05"), reward_range)
    vbar_g = to_pm1(segment_mean(b.rewards, b.group, n_g=b.n_g), reward_range)  # (G,)
    fused = v05_shrinkage(vbar_g, prior_g, b.n_g.astype(np.float64), noise=noise, switch=switch)
    base = from_pm1(fused.baseline, reward_range)[b.group]  # (N,)
    adv = scale_advantages(b.rewards, base, b.group, scale=scale, reward_range=reward_range)
    return Estimate(adv, base, weight=fused.weight, reject=fused.reject)


TAU2_FLOOR = 1e-2
"""Smallest prior error variance τ̂² any estimate reports (``v05_eb`` and provider calibration alike): with the
default window of 256 groups at k = 4 the standard error of τ̂² is ≈ 0.01, so smaller values are not resolved."""

REVISIT_WINDOW = 1024
"""Revisit pairs :class:`RevisitPairs` keeps (the most recent): the standard error of τ̂² from 1,024 pairs of ±1
residuals is ≈ 0.03 at pass rates near 50 %."""

REVISIT_MIN_PAIRS = 256
"""Pairs :class:`RevisitPairs` needs before it replaces the within-group estimate."""

REVISIT_PROMPTS = 65536
"""Prompts whose last visit :class:`RevisitPairs` remembers (the least recently visited are forgotten)."""


@dataclass(frozen=True, slots=True)
class RevisitPairs:
    r"""The prior's error and the pass rate's second moment from prompts seen at two steps (±1 space).

    A prompt visited at steps s < t, with group means v̄_s, v̄_t and priors V_s, V_t, gives one pair:

        τ̂² = mean (v̄_s − V_s)(v̄_t − V_t),   σ̄² = 1 − mean v̄_s·v̄_t

    Given the prompt's pass rate μ, the two visits' sampling noises are independent with mean 0, so the products are
    unbiased for E[(μ − V)²] = τ² and E[μ²] = 1 − σ̄² at *every* k, k = 1 included, where the within-group estimate
    (:func:`prior_error_stats`) has no variance estimate and its plug-in 1 − V² cancels the error it should measure:
    E[(r − V)² − (1 − V²)] = 2·E[V(V − μ)], which is 0 for a calibrated prior whatever τ² is.
    Bias: μ and V move between the visits (the policy trains, a learned prior refits); the pairs measure the error's
    covariance across that gap, below τ² when the policy's change is not what the prior tracks (so n0 is too large).
    Degenerate cases: a pool seen once (a fresh pool) gives no pairs and :meth:`ready` stays False; prompt keys must
    be stable across steps (the trainer's and adapters' ``prompt_ids``).

    Attributes:
        window: pairs kept (the most recent).
        min_pairs: pairs needed before :meth:`ready`.
        last: per remembered prompt key, (v̄, V) at its last visit, least recent first (at most REVISIT_PROMPTS).
        err: per pair, (v̄_s − V_s)(v̄_t − V_t).
        sq: per pair, v̄_s·v̄_t.
    """

    window: int = REVISIT_WINDOW
    min_pairs: int = REVISIT_MIN_PAIRS
    last: tuple[tuple[int | str, float, float], ...] = ()
    err: tuple[float, ...] = ()
    sq: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        check_int(self.window, "RevisitPairs.window", 1)
        check_int(self.min_pairs, "RevisitPairs.min_pairs", 1)
        if len(self.err) != len(self.sq):
            raise ValueError(f"RevisitPairs.err and .sq must pair up, got {len(self.err)} and {len(self.sq)} entries")

    @property
    def n_pairs(self) -> int:
        """Pairs behind the current estimate."""
        return len(self.err)

    def ready(self) -> bool:
        """At least ``min_pairs`` pairs."""
        return self.n_pairs >= self.min_pairs

    def tau2(self) -> float:
        """τ̂² = mean (v̄_s − V_s)(v̄_t − V_t) (may be negative by noise; the caller floors it)."""
        return float(np.mean(self.err)) if self.err else float("nan")

    def sigma2(self) -> float:
        """σ̄² = 1 − mean v̄_s·v̄_t, clipped to [0, 1]."""
        return min(max(1.0 - float(np.mean(self.sq)), 0.0), 1.0) if self.sq else float("nan")

    def push(self, prompt_ids: object, vbar_g: FloatArray, prior_g: FloatArray) -> RevisitPairs:
        """Pair this step's groups with their prompts' previous visits, then remember this visit.

        A prompt that appears in several groups of one step pairs each with the previous step's visit only.
        """
        keys = [_key(k) for k in np.asarray(prompt_ids, dtype=object).reshape(-1)]
        if len(keys) != len(vbar_g):
            raise ValueError(f"prompt_ids must hold one key per group ({len(vbar_g)}), got {len(keys)}")
        last = {k: (m, v) for k, m, v in self.last}
        err, sq = list(self.err), list(self.sq)
        for key, m, v in zip(keys, vbar_g.tolist(), prior_g.tolist(), strict=True):
            if key in last:
                m0, v0 = last[key]
                err.append((m0 - v0) * (m - v))
                sq.append(m0 * m)
        for key, m, v in zip(keys, vbar_g.tolist(), prior_g.tolist(), strict=True):
            last.pop(key, None)  # re-inserted: the dict's order is the visits' recency
            last[key] = (float(m), float(v))
        kept = list(last.items())[-REVISIT_PROMPTS:]
        return RevisitPairs(
            self.window, self.min_pairs, tuple((k, m, v) for k, (m, v) in kept),
            tuple(err[-self.window:]), tuple(sq[-self.window:]),
        )  # fmt: skip

    def to_dict(self) -> dict[str, object]:
        """JSON-serialisable form (keys keep their type: integers stay integers)."""
        return {"window": self.window, "min_pairs": self.min_pairs, "last": [list(t) for t in self.last],
                "err": self.err, "sq": self.sq}  # fmt: skip

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> RevisitPairs:
        """Inverse of :meth:`to_dict`.

        Raises:
            ValueError: a missing key or a value :meth:`to_dict` cannot have written.
        """
        try:
            last = tuple((_key(k), float(m), float(v)) for k, m, v in d["last"])  # type: ignore[attr-defined]
            err = tuple(float(x) for x in d["err"])  # type: ignore[attr-defined]
            sq = tuple(float(x) for x in d["sq"])  # type: ignore[attr-defined]
        except (KeyError, TypeError, OverflowError) as exc:
            raise ValueError(f"not a RevisitPairs dict ({type(exc).__name__}: {exc})") from None
        # checked here, not at every push: a restored checkpoint is the one source push() did not compute itself
        for name, values, bound in (
            ("err", err, 4.0),
            ("sq", sq, 1.0),
            ("last", [x for _, m, v in last for x in (m, v)], 1.0),
        ):
            if not np.all(np.abs(np.asarray(values, np.float64)) <= bound + 1e-9):  # NaN fails too
                raise ValueError(f"RevisitPairs.{name} must hold ±1-space values within ±{bound:g}")
        return cls(int(d["window"]), int(d["min_pairs"]), last, err, sq)  # type: ignore[call-overload]


def _key(k: object) -> int | str:
    """A prompt key as stored: an integer stays an integer (numpy's too), anything else is its string."""
    if isinstance(k, (int, np.integer)) and not isinstance(k, bool):
        return int(k)
    return str(k)


@dataclass(frozen=True, slots=True)
class PriorErrorState:
    """Running sums of a prior's error over the most recent groups (±1 space), for ``v05_eb``.

    The window is sized in *groups*: it keeps the most recent steps that together hold at least ``window`` groups
    (a step is never split), so the estimate rests on the same evidence whatever the batch size. Per step it keeps
    (see :func:`prior_error_stats`): Σ (v̄ − V)², Σ s²/k (sampling noise of v̄), Σ s² (s² the unbiased within-group
    variance) and the number of groups.

    Attributes:
        window: groups kept (at least; ≥ 1).
        d2: per-step Σ (v̄_g − V_g)².
        noise: per-step Σ s²_g / k_g.
        var: per-step Σ s²_g.
        count: per-step number of groups.
        revisits: prompts seen at two steps (``v05_eb(tau2_from="revisits")``); once :meth:`RevisitPairs.ready`,
            :meth:`tau2` and :meth:`sigma2` read them instead of the within-group sums. None: not kept.
    """

    window: int = 256
    d2: tuple[float, ...] = ()
    noise: tuple[float, ...] = ()
    var: tuple[float, ...] = ()
    count: tuple[int, ...] = ()
    revisits: RevisitPairs | None = None

    def __post_init__(self) -> None:
        if isinstance(self.window, bool) or not isinstance(self.window, (int, np.integer)) or self.window < 1:
            raise ValueError(f"window must be an integer >= 1 (groups), got {self.window!r}")
        # a state restored from a checkpoint must be the sums push() wrote: one entry per step, finite and >= 0
        sums = {"d2": self.d2, "noise": self.noise, "var": self.var, "count": self.count}
        if not all(isinstance(v, tuple) for v in sums.values()) or len({len(v) for v in sums.values()}) != 1:
            shapes = {k: len(v) if isinstance(v, tuple) else type(v).__name__ for k, v in sums.items()}
            raise ValueError(f"d2, noise, var and count must be tuples with one entry per step, got {shapes}")
        for name, values in sums.items():
            for v in values:
                kinds = (int, np.integer) if name == "count" else (int, float, np.integer, np.floating)
                ok = not isinstance(v, bool) and isinstance(v, kinds)
                if not (ok and v >= 0 and (name == "count" or np.isfinite(float(v)))):
                    raise ValueError(f"PriorErrorState.{name} must hold finite numbers >= 0, got {v!r}")
        if self.revisits is not None and not isinstance(self.revisits, RevisitPairs):
            kind = type(self.revisits).__name__
            raise ValueError(f"PriorErrorState.revisits must be RevisitPairs or None, got {kind}")

    @property
    def n_groups(self) -> int:
        """Groups behind the current estimate."""
        return int(sum(self.count))

    def push(self, d2: float, noise: float, var: float, count: int) -> PriorErrorState:
        """Append one step's sums, then drop the oldest steps not needed to hold ``window`` groups."""
        counts = (*self.count, int(count))
        held = np.cumsum(counts[::-1])  # groups held by the newest 1, 2, ... steps
        keep = int(np.searchsorted(held, self.window)) + 1  # fewest newest steps holding ≥ window groups
        return PriorErrorState(
            self.window,
            (*self.d2, float(d2))[-keep:],
            (*self.noise, float(noise))[-keep:],
            (*self.var, float(var))[-keep:],
            counts[-keep:],
            self.revisits,
        )

    def tau2(self, floor: float = TAU2_FLOOR) -> float:
        """τ̂² = (Σ (v̄ − V)² − Σ s²/k) / #groups, clipped at ``floor`` (the prior's error variance).

        From the revisit pairs instead once they are ready (:class:`RevisitPairs`, the same floor).
        """
        if self.revisits is not None and self.revisits.ready():
            return max(self.revisits.tau2(), floor)
        n = self.n_groups
        return floor if n == 0 else max((sum(self.d2) - sum(self.noise)) / n, floor)

    def sigma2(self) -> float:
        """σ̄² = mean s², an unbiased estimate of E[Var(r | prompt)] (= E[1 − μ²] for ±1 rewards); 1 if empty.

        From the revisit pairs instead once they are ready (σ̄² = 1 − mean v̄_s·v̄_t, :class:`RevisitPairs`).
        """
        if self.revisits is not None and self.revisits.ready():
            return self.revisits.sigma2()
        n = self.n_groups
        return 1.0 if n == 0 else sum(self.var) / n

    def n0(self, floor: float = TAU2_FLOOR) -> float:
        """The prior's worth in rollouts, σ̄²/τ̂² (what ``v05_eb`` and OSLA's ``eb_guard`` rule read)."""
        return self.sigma2() / self.tau2(floor)

    def to_dict(self) -> dict[str, object]:
        """JSON-serialisable form (for checkpoints; ``revisits`` only when kept, so older checkpoints read back)."""
        out: dict[str, object] = {"window": self.window, "d2": self.d2, "noise": self.noise, "var": self.var,
                                  "count": self.count}  # fmt: skip
        if self.revisits is not None:
            out["revisits"] = self.revisits.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> PriorErrorState:
        """Inverse of :meth:`to_dict`.

        Raises:
            ValueError: a missing key, or a value :meth:`to_dict` cannot have written (e.g. NaN, None, negative).
        """
        try:
            return cls(
                int(d["window"]),  # type: ignore[call-overload]
                tuple(float(x) for x in d["d2"]),  # type: ignore[attr-defined]
                tuple(float(x) for x in d["noise"]),  # type: ignore[attr-defined]
                tuple(float(x) for x in d["var"]),  # type: ignore[attr-defined]
                tuple(_whole(x) for x in d["count"]),  # type: ignore[attr-defined]
                None if d.get("revisits") is None else RevisitPairs.from_dict(d["revisits"]),  # type: ignore[arg-type]
            )
        except (KeyError, TypeError, OverflowError) as err:
            raise ValueError(f"not a PriorErrorState dict ({type(err).__name__}: {err})") from None


def _whole(x: object) -> int:
    """A group count read back from JSON: an integer (a float must be whole)."""
    if isinstance(x, float) and not x.is_integer():
        raise ValueError(f"PriorErrorState.count must hold whole numbers, got {x!r}")
    return int(x)  # type: ignore[call-overload]


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
    tau2_floor: float = TAU2_FLOOR,
    guard_level: float | None = None,
    loo: bool = False,
    tau2_from: str = "groups",
    prompt_ids: object = None,
) -> Estimate:
    r"""Empirical-Bayes fusion: the prior counts as n0 extra rollouts, n0 from the prior's measured error.

        b = (n0·V + k·v̄_k)/(n0 + k)            (plain; ``loo=True``: b_i = (n0·V + S_g − r_i)/(n0 + k − 1))
        n0 = σ̄²/τ²,   σ̄² = E[1 − μ²] ≈ mean s²_g,   τ² = mean (v̄ − V)² − mean s²_g/k_g   (floored at tau2_floor)

    With a calibrated prior of error variance τ², this fusion has MSE σ̄²/(k + n0): the prior is worth n0 rollouts
    at every k. Where n0 comes from, in order: ``n0`` (fixed, scalar or per group), ``tau2`` (fixed τ²; σ̄² from
    the state, else from the batch — LOO: the plug-in mean 1 − V², blind to the rewards), ``state`` with ≥
    ``min_groups`` groups of history (online; this batch is *not* used, so n0 does not depend on it), otherwise
    this batch alone (plain form; batch-dependent n0) or n0 = 0 (LOO form: RLOO until the history exists, so the
    LOO form never depends on r_i). The returned state includes this batch (window: :class:`PriorErrorState`).

    Hallucination guard (``guard_level``, off by default): a prompt whose successes are improbable under the prior's
    own Beta–Binomial predictive (:func:`v05.baselines.eb_guard_pvalue` < level) is treated as a prior failure —
    n0 → 0 for that prompt, ``reject`` marks it, and OSLA's ``eb_guard`` rule buys it extra rollouts. Rewards must
    be binary then.
    In the LOO form every decision for rollout i uses the other k − 1 rollouts only (so a k = 1 group is never
    flagged and its baseline is never a prior just flagged).

    Bias: the plain form includes r_i in b_i (like the group mean); the LOO form is unbiased when n0 and V do not
    depend on the batch (fixed n0, the state path, or the RLOO fallback) — with the guard on too. Limits: n0 → 0
    gives the (LOO) group mean, n0 → ∞ gives V. Degenerate cases: all-equal groups keep signal (b ≠ r unless
    V = r); a k = 1 group has no variance estimate and enters τ² and σ̄² with the plug-in 1 − V² (see
    :func:`prior_error_stats`; biased when V is); LOO with n0 = 0 and k = 1 gives b = r_i (A = 0).
    Scaling: ``scale="group_std"`` is refused (an all-equal group, which the prior gives signal, has std 0).

    Where τ² and σ̄² come from (``tau2_from``): ``"groups"`` (default) the within-group sums above; ``"revisits"``
    pairs of visits to the same prompt at two steps (:class:`RevisitPairs`; needs ``prompt_ids`` (G,), stable keys),
    unbiased at k = 1 too, where the within-group estimate floors τ̂² and n0 is σ̄²/floor by construction rather
    than by evidence. Until ``REVISIT_MIN_PAIRS`` pairs exist the within-group sums are used; a fresh pool never
    gets there. This batch's pairs enter the returned state only, so n0 never depends on this batch's rewards.

    References: ours (SPEC §3.4); the pseudo-count view of a Beta prior; the V0.5 test as guard (arXiv:2603.10848).
    """
    check_prior_scale(scale, "v05_eb")
    if guard_level is not None and not (0.0 < as_real(guard_level, "guard_level") < 1.0):
        raise ValueError(f"guard_level must lie in (0, 1) or be None (guard off), got {guard_level!r}")
    check_positive(tau2_floor, "tau2_floor")
    if tau2 is not None:
        check_positive(tau2, "tau2")
    check_int(min_groups, "min_groups", 0)
    if tau2_from not in ("groups", "revisits"):
        raise ValueError(f"unknown tau2_from {tau2_from!r}; valid: groups, revisits")
    if tau2_from == "revisits" and prompt_ids is None:
        raise ValueError("v05_eb(tau2_from='revisits') pairs visits to one prompt: pass prompt_ids=(G,) stable keys")
    if state is not None and not isinstance(state, PriorErrorState):
        raise ValueError(f"v05_eb state must be the PriorErrorState it returned (or None), got {type(state).__name__}")
    b = prepare(rewards, group, prior=prior, reward_range=reward_range)
    prior_g = to_pm1(require_prior(b, "v05_eb"), reward_range)  # (G,)
    r_pm1 = to_pm1(b.rewards, reward_range)  # (N,)
    k_g = b.n_g.astype(np.float64)
    vbar_g = segment_mean(r_pm1, b.group, n_g=b.n_g)  # (G,)
    var_g = np.nan_to_num(segment_var(r_pm1, b.group, ddof=1, n_g=b.n_g, mean_g=vbar_g))  # (G,) nan → 0 at k = 1
    step_stats = prior_error_stats(vbar_g, prior_g, var_g, k_g)
    state_in = state if state is not None else PriorErrorState()
    if tau2_from == "revisits" and state_in.revisits is None:
        state_in = dataclasses.replace(state_in, revisits=RevisitPairs())
    ready = state_in.n_groups >= min_groups
    if n0 is not None:
        try:
            n0_g = np.broadcast_to(np.asarray(n0, np.float64), (b.n_groups,)).copy()
        except (TypeError, ValueError, OverflowError):
            raise ValueError(f"n0 must be a number or one per group ({b.n_groups}), got {n0!r}") from None
        if not np.all(np.isfinite(n0_g)) or np.any(n0_g < 0):
            raise ValueError(f"n0 must be finite and >= 0, got {n0!r}")
    elif tau2 is not None:
        if ready:
            sigma2_hat = state_in.sigma2()
        elif loo:
            sigma2_hat = float(np.mean(1.0 - prior_g * prior_g))
        else:
            sigma2_hat = state_in.push(*step_stats).sigma2()
        n0_g = np.full(b.n_groups, sigma2_hat / float(tau2))
    elif ready:
        n0_g = np.full(b.n_groups, state_in.n0(tau2_floor))
    elif loo:
        n0_g = np.zeros(b.n_groups)  # no history yet: RLOO, never an n0 that depends on r_i
    else:
        n0_g = np.full(b.n_groups, state_in.push(*step_stats).n0(tau2_floor))
    if not np.all(np.isfinite(n0_g)):  # σ̄²/τ² overflows for a τ² (or floor) near the smallest double
        raise ValueError(
            f"n0 = σ̄²/τ² overflows (tau2={tau2!r}, tau2_floor={tau2_floor!r}): use a τ² of at least ~1e-300"
        )
    reject = np.zeros(b.n_groups, bool)
    n0_i = None
    if guard_level is not None:
        succ_g = check_binary_successes(r_pm1, b, "v05_eb's guard")  # (G,)
        reject = eb_guard_pvalue(succ_g, k_g, prior_g, n0_g) < guard_level
        if loo:
            # rollout i is judged on the other k − 1: its own success leaves succ_g − 1 of them
            own = (r_pm1 > 0).astype(np.float64)  # (N,)
            p_i = eb_guard_pvalue(succ_g[b.group] - own, k_g[b.group] - 1.0, prior_g[b.group], n0_g[b.group])
            n0_i = np.where(p_i < guard_level, 0.0, n0_g[b.group])  # (N,)
        n0_g = np.where(reject, 0.0, n0_g)
    base_pm1 = pseudo_count_fusion(r_pm1, b.group, prior_g, n0_g, leave_one_out=loo, n0_i=n0_i, n_g=b.n_g)  # (N,)
    base = from_pm1(base_pm1, reward_range)
    adv = scale_advantages(b.rewards, base, b.group, scale=scale, reward_range=reward_range)
    k_eff = k_g - 1.0 if loo else k_g  # the LOO baseline of a rollout rests on k − 1 rollouts
    with np.errstate(invalid="ignore", divide="ignore"):
        weight = np.where(k_eff + n0_g > 0, k_eff / (k_eff + n0_g), 1.0)
    state_out = state_in.push(*step_stats)
    if tau2_from == "revisits":
        state_out = dataclasses.replace(state_out, revisits=state_in.revisits.push(prompt_ids, vbar_g, prior_g))  # type: ignore[union-attr]
    return Estimate(adv, base, weight=weight, reject=reject, state=state_out, n0=n0_g)


__all__ = [
    "REVISIT_MIN_PAIRS",
    "REVISIT_WINDOW",
    "TAU2_FLOOR",
    "PriorErrorState",
    "RevisitPairs",
    "prior_error_stats",
    "v05",
    "v05_eb",
]
