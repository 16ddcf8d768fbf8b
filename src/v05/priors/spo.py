r"""SPO's per-prompt tracker as a prior provider (``spo``): a discounted Beta posterior of each prompt's pass rate.

Per prompt (stable key) a Beta(α, β); its value and worth are

    p̂ = α/(α + β),   V = 2p̂ − 1 (±1 space),   n0 = α + β

After a visit with k rollouts of which s succeed (k = 1 in SPO), with a discount ρ:

    α ← ρ·α + s,   β ← ρ·β + (k − s)

ρ is ``rho_value`` (``rho="constant"``) or, from the policy's drift since the prompt's last visit (``rho="kl"``):

    D = mean_t |log π_then(y_t) − log π_now(y_t)|   over the tokens of the prompt's last stored response
    ρ = clip(2^(−D / d_half), clip_lower, clip_upper)        first visit: D = 0, so ρ = clip_upper

D comes from the runner (:meth:`SpoProvider.observe_drift`; the trainer computes it, see
:mod:`v05.train.spo_drift`), since only the runner holds the policy. Initial state: Beta(½, ½) for every prompt
(the recipe's ``offline_N = 0``), or from n offline rollouts per prompt of the starting policy
(:meth:`SpoProvider.init_offline`, the recipe's offline values):

    α₀ = N_init·(s + ½)/(n + 1),   β₀ = N_init·(n − s + ½)/(n + 1),   N_init = 1/(1 − clip_lower)

Or, without offline rollouts, from another provider's prediction (``start_from``: ``combined``, ``v0``, ``probe``,
``history`` ...; issue 42's cold start): a prompt the tracker has not seen starts, when it is first predicted, at
the prior's pass rate p_V and worth n0 (:func:`v05.allocation.select.prior_belief`, α₀ = ½):

    α₀ = p_V·n0 + ½,   β₀ = (1 − p_V)·n0 + ½

fixed from then on (later visits move it by the rule above); the start provider learns from every update (so a
prompt first seen later starts from a better prior) and is checkpointed inside the tracker's state. Its cost (an
encoder's forward, the policy's for ``probe``) is the runner's to count, as for that provider alone.

Follows verl's ``recipe/spo/spo_ray_trainer.py`` (commit 4b2b364) where it and the paper differ: D is the mean
absolute per-token log-ratio of the prompt's last response (the recipe's "KL"), compared between the post-update
policies of the last and the current visit; the constants d_half = 0.06 and clip_upper = 0.96 are the recipe's
hard-coded ones. Deviations: a prompt without an offline value starts at Beta(½, ½) (the recipe never samples it);
k > 1 rollouts of a prompt in one step all count (the recipe keeps the last write only); the state is checkpointed
(the recipe re-reads its offline file on resume).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from v05._checks import as_float_1d, check_int, check_positive
from v05._types import FloatArray
from v05.allocation.select import prior_belief
from v05.priors.base import PriorPrediction
from v05.priors.compose import BaseProvider, _ids, _outcomes, _texts
from v05.rewards import to_pass_rate

Rho = Literal["constant", "kl"]


def rho_from_drift(drift: object, *, d_half: float = 0.06, clip_lower: float = 0.875, clip_upper: float = 0.96):  # noqa: ANN201
    r"""SPO's KL-adaptive discount: ρ = clip(2^(−D/d_half), clip_lower, clip_upper), elementwise.

    Args:
        drift: (G,) D ≥ 0, the mean |Δ log π| per token of each prompt's last response since its last visit.
        d_half: the drift at which ρ halves (before clipping).
        clip_lower: the smallest ρ (also sets the offline init's N_init = 1/(1 − clip_lower)).
        clip_upper: the largest ρ (a first visit, D = 0, gets it).

    >>> rho_from_drift([0.0, 0.06, 1.0]).round(4).tolist()
    [0.96, 0.875, 0.875]
    """
    d = as_float_1d(drift, "drift", allow_empty=True)
    if np.any(d < 0):
        raise ValueError(f"drift must be >= 0, got {float(d.min())!r}")
    return np.clip(np.power(2.0, -d / d_half), clip_lower, clip_upper)


@dataclass(kw_only=True)
class SpoProvider(BaseProvider):
    """SPO's per-prompt Beta tracker (module docstring): V = 2α/(α + β) − 1, n0 = α + β.

    Raises:
        ValueError: a bad option; ``start`` together with ``offline`` (two starts).
    """

    name = "spo"
    rho: Rho = "kl"
    """how the discount is set: ``"kl"`` (from the policy's drift, the recipe's default) or ``"constant"``."""
    rho_value: float = 0.875
    """ρ for ``rho="constant"`` (the recipe's ``rho.value``)."""
    clip_lower: float = 0.875
    """the smallest ρ of ``rho="kl"``, and N_init = 1/(1 − clip_lower) of the offline init (recipe default)."""
    clip_upper: float = 0.96
    """the largest ρ of ``rho="kl"`` (the recipe's hard-coded 0.96)."""
    d_half: float = 0.06
    """the drift that halves ρ before clipping (the recipe's hard-coded 0.06)."""
    offline_n: int = 8
    """offline rollouts per prompt the init expects (the recipe's ``offline_N``)."""
    offline: bool = False
    """start every train prompt from ``offline_n`` rollouts of the starting policy (``spo-offline``): v05's trainer
    draws them before step 1 and counts them in the run's rollouts and compute (``init_rollouts``)."""
    offline_prompts: int | None = None
    """start only the pool's first N prompts from offline rollouts (None: every prompt, as the recipe does); the
    rest start at Beta(½, ½). ``--quick`` sets it so the init takes half of a smoke run's budget."""
    start: BaseProvider | None = None
    """the provider a prompt's Beta starts from at first sight (``prior.options.start_from``, built by
    :func:`v05.priors.make_provider`), or None: Beta(½, ½) or the offline init."""
    tracker_: dict[str, dict[str, list[float]]] = field(default_factory=dict, init=False)  # key → [α, β, visits]
    drift_: dict[str, float] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        BaseProvider.__post_init__(self)
        if self.rho not in ("constant", "kl"):
            raise ValueError(f"unknown rho {self.rho!r}; valid: constant, kl")
        for name in ("rho_value", "clip_lower", "clip_upper"):
            value = getattr(self, name)
            if isinstance(value, bool) or not 0.0 < float(value) <= 1.0:
                raise ValueError(f"{name} must lie in (0, 1], got {value!r}")
        if self.clip_lower > self.clip_upper:
            raise ValueError(f"clip_lower={self.clip_lower} must be <= clip_upper={self.clip_upper}")
        if self.clip_lower >= 1.0:
            raise ValueError("clip_lower must be < 1 (the offline init's N_init = 1/(1 − clip_lower))")
        check_positive(self.d_half, "d_half")
        check_int(self.offline_n, "offline_n", 1)
        if self.offline_prompts is not None:
            check_int(self.offline_prompts, "offline_prompts", 1)
        if self.start is not None and self.offline:
            raise ValueError("spo: start_from and offline are two ways to start the tracker; choose one")
        if self.start is not None and not isinstance(self.start, BaseProvider):
            raise ValueError(f"spo: start must be a prior provider, got {type(self.start).__name__}")

    # -- the start provider (the runner binds and counts it through these) -----------------------------------------
    def requires(self) -> tuple[str, ...]:
        """The start provider's modules (none without one)."""
        return () if self.start is None else self.start.requires()

    def prefetch(self, texts: Sequence[str]) -> None:
        """The start provider's :meth:`prefetch` (its embeddings, once before training)."""
        if self.start is not None:
            self.start.prefetch(texts)

    def encoder_work(self, texts: Sequence[str]) -> int:
        """The start provider's encoder work over ``texts`` (0 without one that encodes)."""
        work = getattr(self.start, "encoder_work", None)
        return 0 if work is None else int(work(texts))

    def bind_policy(self, backend: object) -> None:
        """Give the start provider the policy (``probe``)."""
        self.start.bind_policy(backend)  # type: ignore[union-attr]

    def _start_unseen(self, ids: list[str], texts: list[str], policy: str) -> None:
        """Start the prompts the tracker has not seen from the start provider (module docstring's α₀, β₀)."""
        table = self.tracker_.setdefault(policy, {})
        new = [i for i, pid in enumerate(ids) if pid not in table]
        if self.start is None or not new:
            return
        pred = self.start.predict([ids[i] for i in new], [texts[i] for i in new], policy=policy)
        belief = prior_belief(to_pass_rate(pred.mean, "pm1"), pred.n0, alpha0=0.5)
        for j, i in enumerate(new):
            table[ids[i]] = [float(belief.alpha[j]), float(belief.beta[j]), 0]  # a start is not a visit

    # -- the tracker ----------------------------------------------------------------------------------------------
    def beta_of(self, prompt_ids: Sequence[str], *, policy: str = "default") -> tuple[FloatArray, FloatArray]:
        """(α, β) of each prompt; Beta(½, ½) for a prompt never seen nor initialised."""
        table = self.tracker_.get(policy, {})
        ab = np.array([table.get(pid, (0.5, 0.5, 0))[:2] for pid in _ids(prompt_ids)], np.float64).reshape(-1, 2)
        return ab[:, 0], ab[:, 1]

    def init_offline(
        self, prompt_ids: Sequence[str], successes: FloatArray, trials: FloatArray, *, policy: str = "default"
    ) -> None:
        """Start each prompt's Beta from its offline rollouts (module docstring's α₀, β₀).

        Raises:
            ValueError: more trials than ``offline_n`` (the recipe subsamples them; draw exactly ``offline_n``), or
                successes outside [0, trials].
        """
        ids = _ids(prompt_ids)
        s, n = as_float_1d(successes, "successes"), as_float_1d(trials, "trials")
        if not len(ids) == len(s) == len(n):
            raise ValueError(f"lengths differ: {len(ids)} prompts, {len(s)} successes, {len(n)} trials")
        if np.any(n > self.offline_n) or np.any((s < 0) | (s > n)):
            raise ValueError(f"need 0 <= successes <= trials <= offline_n={self.offline_n}")
        n_init = 1.0 / (1.0 - self.clip_lower)
        # divided by the configured offline_n, not the trials (the recipe's formula: missing scores count as failures)
        alpha = n_init * (s + 0.5) / (self.offline_n + 1)
        beta = n_init * (self.offline_n - s + 0.5) / (self.offline_n + 1)
        table = self.tracker_.setdefault(policy, {})
        for pid, a, b in zip(ids, alpha, beta, strict=True):
            table[pid] = [float(a), float(b), 0]  # α, β, visits (an offline init is not a visit)

    def observe_drift(self, prompt_ids: Sequence[str], drift: FloatArray) -> None:
        """Record each prompt's drift D since its last visit, read by the next :meth:`update` (``rho="kl"``)."""
        d = as_float_1d(drift, "drift", allow_empty=True)
        ids = _ids(prompt_ids)
        if len(d) != len(ids):
            raise ValueError(f"{len(ids)} prompts but {len(d)} drifts")
        self.drift_.update({pid: float(x) for pid, x in zip(ids, d, strict=True)})

    def discount(self, prompt_ids: Sequence[str], *, policy: str = "default") -> FloatArray:
        """(G,) the ρ the next update applies to each prompt.

        Raises:
            ValueError: ``rho="kl"`` and a prompt seen before has no drift observed (the runner must supply it).
        """
        ids = _ids(prompt_ids)
        if self.rho == "constant":
            return np.full(len(ids), float(self.rho_value))
        seen = self.tracker_.get(policy, {})
        missing = [pid for pid in ids if pid not in self.drift_ and seen.get(pid, (0, 0, 0))[2] > 0]
        if missing:
            raise ValueError(
                f"spo prior with rho='kl' needs the policy's drift of every revisited prompt ({len(missing)} missing, "
                f"e.g. {missing[0]!r}): v05 train computes it; elsewhere use prior.options.rho=constant"
            )
        return rho_from_drift([self.drift_.get(pid, 0.0) for pid in ids], d_half=self.d_half,
                              clip_lower=self.clip_lower, clip_upper=self.clip_upper)  # fmt: skip

    # -- the provider interface ----------------------------------------------------------------------------------
    def predict(self, prompt_ids: Sequence[str], texts: Sequence[str], *, policy: str = "default") -> PriorPrediction:
        """V = 2α/(α + β) − 1 and n0 = α + β per prompt (the tracker before this step's outcomes)."""
        ids = _ids(prompt_ids)
        self._start_unseen(ids, _texts(texts, len(ids)), policy)
        alpha, beta = self.beta_of(ids, policy=policy)
        n0 = alpha + beta  # (G,)
        p_hat = alpha / n0  # (G,)
        mean = 2.0 * p_hat - 1.0  # (G,) ±1 space
        tau2 = 4.0 * alpha * beta / (n0 * n0 * (n0 + 1.0))  # (G,) Var of 2p − 1 under Beta(α, β)
        for i, pid in enumerate(ids):  # the outcomes of this step calibrate the provider (BaseProvider.record)
            self.pending_[(policy, pid)] = (float(mean[i]), 0.0, float(mean[i]))
        return PriorPrediction(mean, tau2, n0)

    def _parts(self, ids: list[str], texts: list[str], policy: str) -> tuple[FloatArray, FloatArray]:
        self._start_unseen(ids, texts, policy)
        alpha, beta = self.beta_of(ids, policy=policy)
        return 2.0 * alpha / (alpha + beta) - 1.0, np.zeros(len(ids))

    def _learn(self, ids: list[str], texts: list[str], scores: FloatArray, counts: FloatArray, policy: str) -> None:
        scores, counts = _outcomes(ids, scores, counts)
        if self.start is not None:  # the start learns every outcome, for the prompts it will start later
            self.start.update(ids, texts, scores, counts, policy=policy, step=self.step_)
        self._start_unseen(ids, texts, policy)  # a prompt updated before it was ever predicted starts first
        rho = self.discount(ids, policy=policy)  # (G,)
        alpha, beta = self.beta_of(ids, policy=policy)
        s = to_pass_rate(scores, "pm1") * counts  # (G,) successes
        table = self.tracker_.setdefault(policy, {})
        for i, pid in enumerate(ids):
            visits = table.get(pid, (0, 0, 0))[2] + 1
            table[pid] = [float(rho[i] * alpha[i] + s[i]), float(rho[i] * beta[i] + counts[i] - s[i]), visits]
            self.drift_.pop(pid, None)

    def state_dict(self) -> dict[str, object]:
        """JSON state: the base provider's, the tracker and the observed drifts."""
        start = None if self.start is None else self.start.state_dict()
        return {**BaseProvider.state_dict(self), "tracker": self.tracker_, "drift": self.drift_, "start": start}

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Restore :meth:`state_dict`."""
        BaseProvider.load_state_dict(self, state)
        self.tracker_ = {p: {k: [float(a), float(b), int(v)] for k, (a, b, v) in t.items()}
                         for p, t in state["tracker"].items()}  # type: ignore[attr-defined]  # fmt: skip
        self.drift_ = {k: float(v) for k, v in state["drift"].items()}  # type: ignore[attr-defined]
        start = state.get("start")
        if (start is None) != (self.start is None):
            raise ValueError("spo state: saved with and loaded without a start provider (or the reverse)")
        if self.start is not None:
            self.start.load_state_dict(start)  # type: ignore[arg-type]


__all__ = ["Rho", "SpoProvider", "rho_from_drift"]
