r"""Learned priors fitted in context on prompt features: ``v0`` (the paper's generalist value model) and ``probe``.

``v0`` (arXiv:2602.03584): a support buffer of the latest C (prompt, score) pairs of the current policy (C = 256);
each time the buffer changes, a head is fitted on the buffer's embeddings and predicts new prompts. Heads that
output V0's label P(s ≥ 0) (``logistic_hard``, ``tabpfn``, the official checkpoint) are mapped to E[s] with an
isotonic map fitted on the buffer's out-of-fold predictions, as the V0 output is not a score.

``probe`` (ours): the same in-context fit with the live policy's own hidden states as the prompt features and the
``pca_ridge`` head (:mod:`v05.value_probe`), so the prior is the policy's self-estimate, refitted every step.

:class:`EmbeddingProvider` holds what both share with ``combined`` (:mod:`v05.priors.combined`): the per-policy
support buffers, the embedder and the head construction; the composition and calibration are
:class:`v05.priors.compose.BaseProvider`'s.

Deviations from V0: the head is refitted on CPU from cached embeddings; the official adapter+TabPFN stack runs only
when its checkpoints are local (``v0_checkpoint``). Buffers smaller than ``min_context`` fall back to the running
mean with a logged warning.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from v05._checks import check_int
from v05._types import FloatArray
from v05.priors.backends import backend_requires, make_backend
from v05.priors.compose import BaseProvider, CalibrationRows
from v05.priors.embeddings import Embedder
from v05.priors.head_registry import make_head
from v05.priors.heads import Head, cross_val_fit

log = logging.getLogger(__name__)


@dataclass(slots=True)
class SupportBuffer:
    """The latest ``capacity`` distinct prompts of one policy with their last observed score and rollout count."""

    capacity: int
    ids: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    counts: list[float] = field(default_factory=list)
    version: int = 0

    def add(self, ids: list[str], texts: list[str], scores: FloatArray, counts: FloatArray) -> None:
        """Append (a re-seen prompt moves to the end with its new outcome) and drop the oldest beyond capacity."""
        last = {pid: i for i, pid in enumerate(ids)}  # a prompt listed twice in one step keeps its last outcome
        fresh = sorted(last.values())
        keep = [i for i, pid in enumerate(self.ids) if pid not in last]
        self.ids = [self.ids[i] for i in keep] + [ids[i] for i in fresh]
        self.texts = [self.texts[i] for i in keep] + [texts[i] for i in fresh]
        self.scores = [self.scores[i] for i in keep] + [float(scores[i]) for i in fresh]
        self.counts = [self.counts[i] for i in keep] + [float(counts[i]) for i in fresh]
        for name in ("ids", "texts", "scores", "counts"):
            setattr(self, name, getattr(self, name)[-self.capacity :])
        self.version += 1

    def __len__(self) -> int:
        return len(self.ids)

    def mean(self) -> float:
        """Rollout-weighted mean score (0 when empty)."""
        k = np.asarray(self.counts)
        return float(np.sum(np.asarray(self.scores) * k) / np.sum(k)) if len(k) else 0.0

    def to_dict(self) -> dict[str, object]:
        """JSON-serialisable form."""
        return {
            "capacity": self.capacity,
            "ids": self.ids,
            "texts": self.texts,
            "scores": self.scores,
            "counts": self.counts,
        }

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> SupportBuffer:
        """Inverse of ``to_dict``."""
        return cls(int(d["capacity"]), list(d["ids"]), list(d["texts"]), list(d["scores"]), list(d["counts"]))  # type: ignore[arg-type,call-overload]


@dataclass(kw_only=True)
class EmbeddingProvider(BaseProvider):
    """Shared buffers, embedder and head construction for ``v0`` and ``combined``.

    Attributes:
        backend: embedding backend (``minilm`` default; ``tfidf``, ``hf``, ``sentence_transformers``, ``v0_adapter``).
        backend_options: options of the backend (e.g. ``{"path": ...}`` for ``hf``).
        head: head name (``krr`` default; ``gp``, ``knn``, ``logistic``, ``logistic_hard``, ``tabpfn``).
        head_options: options of the head (e.g. ``{"alpha": 0.3, "gamma": 2.0}``).
        context_size: buffer capacity C per policy.
        min_context: smallest buffer the head is fitted on; smaller buffers fall back to the buffer mean.
        folds: cross-validation folds on the buffer (error estimate and residual weight).
        cache_dir: embedding cache root (None: default; False: memory only).
        embedder: an existing embedder to share (overrides backend/cache_dir).
    """

    backend: str = "minilm"
    backend_options: dict[str, object] = field(default_factory=dict)
    head: str = "krr"
    head_options: dict[str, object] = field(default_factory=dict)
    context_size: int = 256
    min_context: int = 32
    folds: int = 5
    seed: int = 0
    cache_dir: object = None
    embedder: Embedder | None = None
    buffers_: dict[str, SupportBuffer] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        BaseProvider.__post_init__(self)
        for name, minimum in (("context_size", 1), ("min_context", 2), ("folds", 2), ("seed", 0)):
            check_int(getattr(self, name), name, minimum)
        if self.context_size < 1 or self.min_context < 2 or self.folds < 2:
            raise ValueError(
                "need context_size >= 1, min_context >= 2, folds >= 2; "
                f"got {self.context_size}, {self.min_context}, {self.folds}"
            )
        make_head(self.head, **self.head_options)  # type: ignore[arg-type]  # fail fast on bad names/options

    def requires(self) -> tuple[str, ...]:
        """Top-level modules it imports on use: scikit-learn, SciPy, the backend's and the head's.

        scikit-learn and SciPy fit the calibration map and the stacking; an ``embedder`` passed in brings its own
        backend.
        """
        backend = () if self.embedder is not None else backend_requires(self.backend, self.backend_options)
        return ("sklearn", "scipy", *backend, *self._new_head().requires)

    def _embedder(self) -> Embedder:
        if self.embedder is None:
            self.embedder = Embedder(
                backend=make_backend(self.backend, **self.backend_options), cache_dir=self.cache_dir
            )  # type: ignore[arg-type]
        return self.embedder

    def _new_head(self) -> Head:
        return make_head(self.head, **self.head_options)  # type: ignore[arg-type]

    def _feature_embedders(self) -> list[Embedder]:
        """Every embedder the provider reads (``combined`` adds its stack)."""
        return [self._embedder()]

    def prefetch(self, texts: Sequence[str]) -> None:
        """Embed a whole prompt pool once, up front (cached in memory and on disk), so steps only look it up."""
        for emb in self._feature_embedders():
            emb.embed(list(texts))

    def encoder_work(self, texts: Sequence[str]) -> int:
        """Every feature embedder's forward work over the distinct ``texts`` (:meth:`Embedder.work`).

        What :meth:`prefetch` costs on a cold cache, the runner's to count (``v05 train``: ``compute/encoder``).
        """
        return sum(e.work(texts) for e in self._feature_embedders())

    def _learn(self, ids: list[str], texts: list[str], scores: FloatArray, counts: FloatArray, policy: str) -> None:
        buf = self.buffers_.setdefault(policy, SupportBuffer(self.context_size))
        buf.add(ids, texts, scores, counts)

    def _folds(self, groups: np.ndarray) -> np.ndarray:
        """(R,) fold of each row; rows of one prompt share a fold (seeded shuffle of the distinct prompts)."""
        uniq, inv = np.unique(groups, return_inverse=True)
        perm = np.random.default_rng(self.seed).permutation(len(uniq))
        return (perm % self.folds)[inv]

    def metrics(self, policy: str = "default") -> dict[str, float]:
        """Training-log metrics for ``policy``."""
        out = BaseProvider.metrics(self, policy)
        if self.embedder is not None:
            out.update({k: float(v) for k, v in self.embedder.metrics().items()})
        out["prior/context_rows"] = float(len(self.buffers_.get(policy, ())))
        return out

    def state_dict(self) -> dict[str, object]:
        """JSON-serialisable state (never pickled)."""
        state = BaseProvider.state_dict(self)
        state["buffers"] = {p: b.to_dict() for p, b in self.buffers_.items()}
        return state

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Restore what ``state_dict`` returned."""
        BaseProvider.load_state_dict(self, state)
        self.buffers_ = {p: SupportBuffer.from_dict(b) for p, b in state["buffers"].items()}  # type: ignore[attr-defined]
        getattr(self, "fits_", {}).clear()  # fitted heads belong to the old buffers


def _fit_map(raw: FloatArray, y: FloatArray) -> object:
    """Isotonic map from P(s ≥ 0) to E[s], fitted on out-of-fold predictions."""
    from sklearn.isotonic import IsotonicRegression

    return IsotonicRegression(y_min=-1.0, y_max=1.0, out_of_bounds="clip").fit(raw, y)


@dataclass(kw_only=True)
class V0Provider(EmbeddingProvider):
    """The in-context generalist value model: one head per policy, fitted on that policy's support buffer."""

    name = "v0"
    fits_: dict[str, tuple[int, Head, object, float, CalibrationRows]] = field(default_factory=dict, init=False)

    def _fit(self, policy: str) -> tuple[int, Head, object, float, CalibrationRows] | None:
        buf = self.buffers_.get(policy)
        if buf is None or len(buf) < self.min_context:
            return None
        cached = self.fits_.get(policy)
        if cached is not None and cached[0] == buf.version:
            return cached
        x, y, k = self._embedder().embed(buf.texts), np.asarray(buf.scores), np.asarray(buf.counts)
        fold = self._folds(np.asarray(buf.ids))
        raw_oof, head = cross_val_fit(self._new_head, x, fold, self.folds, lambda rows: y[rows])
        m_oof = np.zeros(len(y))
        for f in range(self.folds):
            tr, te = fold != f, fold == f
            if te.any() and tr.sum() >= 2:
                m_oof[te] = np.average(y[tr], weights=k[tr])
        mapping = _fit_map(raw_oof, y) if self._new_head().output == "prob_nonneg" else None
        score_oof = raw_oof if mapping is None else mapping.predict(raw_oof)  # type: ignore[attr-defined]
        rows = CalibrationRows(m_oof, score_oof - m_oof, score_oof, y, k)
        fit = (buf.version, head, mapping, buf.mean(), rows)
        self.fits_[policy] = fit
        return fit

    def _parts(self, ids: list[str], texts: list[str], policy: str) -> tuple[FloatArray, FloatArray]:
        fit = self._fit(policy)
        if fit is None:
            n = len(self.buffers_.get(policy, ()))
            log.warning(
                "v0 prior: support buffer of policy %r has %d < %d rows; falling back to its running mean",
                policy,
                n,
                self.min_context,
            )
            m = self.buffers_[policy].mean() if policy in self.buffers_ else 0.0
            return np.full(len(ids), m), np.zeros(len(ids))
        _, head, mapping, m, _ = fit
        raw = head.predict(self._embedder().embed(texts))
        score = raw if mapping is None else mapping.predict(raw)  # type: ignore[attr-defined]
        return np.full(len(ids), m), np.clip(score, -1, 1) - m

    def _cv_rows(self, policy: str) -> CalibrationRows:
        fit = self._fit(policy)
        return CalibrationRows() if fit is None else fit[4]


@dataclass(kw_only=True)
class ProbeProvider(V0Provider):
    """The policy's own value estimate (ours): a PCA → ridge probe on its prompt representation, refit each step.

    The "embedding" of a prompt is the live policy's hidden state (layer L, mean of the last prompt tokens; one
    prefill, :class:`v05.train.features.PolicyFeatureBackend`), so it changes with every update and is never cached.
    Like ``v0`` it keeps the latest (prompt, score) pairs of the current policy, fits the head on them (re-embedded
    with the current weights), predicts before any rollout, and reports its online calibration (τ², AUC, n0), so
    ``v05_eb`` and OSLA can use the policy's self-estimate as prior. The trainer binds the policy with
    :meth:`bind_policy` (``prior.name=probe``; its registry spec declares ``needs_policy``,
    :class:`v05.priors.ProviderSpec`); the provider cannot embed before that.
    """

    name = "probe"
    backend: str = "policy"
    head: str = "pca_ridge"

    def requires(self) -> tuple[str, ...]:
        """Top-level modules it imports on use: the head's, scikit-learn and SciPy (features come from the policy)."""
        return ("sklearn", "scipy", *self._new_head().requires)

    def bind_policy(self, backend: object) -> None:
        """Use ``backend`` (a volatile policy-feature backend) as the embedder."""
        self.embedder = Embedder(backend=backend, cache_dir=False)  # type: ignore[arg-type]

    def _embedder(self) -> Embedder:
        if self.embedder is None:
            raise ValueError(
                "the probe prior reads the policy's hidden states: it is bound by the trainer (v05 train prior.name="
                "probe); elsewhere call bind_policy(PolicyFeatureBackend(model=..., tokenizer=...)) first"
            )
        return self.embedder

    def prefetch(self, texts: Sequence[str]) -> None:
        """Nothing to precompute: the features change with every update."""


__all__ = ["EmbeddingProvider", "ProbeProvider", "SupportBuffer", "V0Provider"]
