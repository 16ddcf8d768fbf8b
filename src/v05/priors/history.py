r"""The history priors: ``running_mean``, ``domain_mean`` (one mean per domain) and ``history`` (per-prompt).

``running_mean`` predicts the rollout-weighted mean score m of the last ``steps`` updates for every prompt;
``domain_mean`` the same mean over the prompts of the prompt's own domain (key prefix, e.g. a mixture's ``mix{i}.``);
``history`` adds per-prompt discounted Beta evidence (E_n rollouts with ±1 sum E_sum) shrunk toward m with m's
measured worth n_m:

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


@dataclass(kw_only=True)
class DomainMeanProvider(RunningMeanProvider):
    r"""A running mean per domain: the mean score of the last ``steps`` updates over the prompts of the same domain.

        V(x) = Σ_{t ∈ W} Σ_{g ∈ B_t : d(g) = d(x)} k_g v̄_g  /  Σ_{t ∈ W} Σ_{g ∈ B_t : d(g) = d(x)} k_g

    W: the last ``steps`` updates of the policy; B_t: the groups of update t (mean score v̄_g over k_g rollouts);
    d(x): prompt x's key up to the first ``separator`` (``"mix2.arithmetic:…"`` → ``"mix2"``, the component of a
    ``mixture`` task), or the one shared domain ``""`` for a key without it. Rollout-weighted, like ``running_mean``.

    Bias: with E[(r − V)²] = E[1 − μ²] + E[(μ − V)²] and Var(μ) = E[Var(μ | d)] + Var(E[μ | d]), the running mean
    leaves E[(μ − m)²] ≈ Var(μ) + lag, this prior E[(μ − V)²] ≈ E[Var(μ | d)] + lag: it removes the between-domain
    part of Var(μ) only, never the spread of pass rates within a domain (``history``, ``v0``, ``combined`` and
    ``probe`` aim there). The lag (the policy improves within the window) is the running mean's, and a domain with
    few rollouts in the window adds the noise of its own mean (≈ σ̄² / Σ k_g).

    Degenerate cases: keys without the separator (every single-domain task: ``arithmetic:…``, ``math:…``) form one
    domain, and the prior equals ``running_mean`` exactly (predictions and calibration); a domain with no outcomes
    in the window falls back to the policy-level running mean (and that, before any outcome, to 0 with
    ``running_mean``'s warning). Calibration before online rows: leave-one-out means within the domain,
    m₋ᵢ = (S_d − kᵢv̄ᵢ)/(K_d − kᵢ), or over the whole window for a row alone in its domain.

    References: the history baselines of MoPPS (arXiv:2507.04632) and DBB (arXiv:2603.18444) at the granularity of a
    domain; per-dataset baselines are standard practice in multi-task RL; this provider is ours.
    """

    name = "domain_mean"
    separator: str = "."
    domains_: dict[str, list[dict[str, tuple[float, float]]]] = field(default_factory=dict, init=False)
    row_domains_: dict[str, list[list[str]]] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        RunningMeanProvider.__post_init__(self)
        if not isinstance(self.separator, str) or not self.separator:
            raise ValueError(f"separator must be a non-empty string, got {self.separator!r}")

    def domain_of(self, prompt_id: str) -> str:
        """The key up to the first ``separator``; ``""`` (the shared domain) for a key without one."""
        head, found, _ = prompt_id.partition(self.separator)
        return head if found else ""

    def domain_means(self, policy: str) -> dict[str, float]:
        """Rollout-weighted mean score of each domain seen in the window (domains without outcomes are absent)."""
        window = self.domains_.get(policy, [])
        names = dict.fromkeys(d for step in window for d in step)
        out = {}
        for d in names:
            total = sum(step[d][1] for step in window if d in step)
            out[d] = sum(step[d][0] for step in window if d in step) / total
        return out

    def _parts(self, ids: list[str], texts: list[str], policy: str) -> tuple[FloatArray, FloatArray]:
        means = self.domain_means(policy)
        domains = [self.domain_of(pid) for pid in ids]
        if any(d not in means for d in domains):  # an unseen domain: the policy mean (warns when nothing was seen)
            fallback = self.policy_mean(policy)
            return np.array([means.get(d, fallback) for d in domains], np.float64), np.zeros(len(ids))
        return np.array([means[d] for d in domains], np.float64), np.zeros(len(ids))

    def _learn(self, ids: list[str], texts: list[str], scores: FloatArray, counts: FloatArray, policy: str) -> None:
        RunningMeanProvider._learn(self, ids, texts, scores, counts, policy)
        labels = [self.domain_of(pid) for pid in ids]
        label = np.asarray(labels, dtype=object)
        weighted = scores * counts  # (G,) the same products the policy mean sums
        step = {}
        for d in dict.fromkeys(labels):
            mask = label == d
            step[d] = (float(np.sum(weighted[mask])), float(np.sum(counts[mask])))
        window = self.domains_.setdefault(policy, [])
        window.append(step)
        del window[: -self.steps]
        blocks = self.row_domains_.setdefault(policy, [])  # the domains of RunningMeanProvider's calibration blocks
        blocks.append(labels)
        del blocks[: -self.steps]

    def _cv_rows(self, policy: str) -> CalibrationRows:
        rows, labels = CalibrationRows(), []
        for block, doms in zip(self.rows_.get(policy, []), self.row_domains_.get(policy, []), strict=True):
            rows = rows.append(block, window=1 << 30)
            labels += doms
        if len(rows) < 2:
            return CalibrationRows()
        label = np.asarray(labels, dtype=object)
        weighted = rows.vbar * rows.k  # (R,)
        total, n = float(np.sum(weighted)), float(np.sum(rows.k))
        loo = (total - weighted) / (n - rows.k)  # (R,) mean of the other rows: a row alone in its domain keeps it
        for d in dict.fromkeys(labels):
            mask = label == d
            if np.count_nonzero(mask) >= 2:
                total_d, n_d = float(np.sum(weighted[mask])), float(np.sum(rows.k[mask]))
                loo[mask] = (total_d - weighted[mask]) / (n_d - rows.k[mask])  # mean of the domain's other rows
        return CalibrationRows(loo, np.zeros(len(rows)), loo, rows.vbar, rows.k)

    def state_dict(self) -> dict[str, object]:
        """JSON-serialisable state (never pickled)."""
        state = RunningMeanProvider.state_dict(self)
        state["domains"] = {p: [{d: list(x) for d, x in step.items()} for step in w] for p, w in self.domains_.items()}
        state["row_domains"] = {p: [list(b) for b in blocks] for p, blocks in self.row_domains_.items()}
        return state

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Restore what ``state_dict`` returned."""
        RunningMeanProvider.load_state_dict(self, state)
        self.domains_ = {
            p: [{str(d): (float(a), float(b)) for d, (a, b) in step.items()} for step in w]
            for p, w in state["domains"].items()  # type: ignore[attr-defined]
        }
        self.row_domains_ = {p: [[str(d) for d in b] for b in blocks] for p, blocks in state["row_domains"].items()}  # type: ignore[attr-defined]


__all__ = ["DomainMeanProvider", "HistoryProvider", "RunningMeanProvider"]
