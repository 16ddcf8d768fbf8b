r"""In-context priors over prompt embeddings: ``v0`` (the paper's generalist value model) and ``combined`` (ours).

``v0`` (arXiv:2602.03584): a support buffer of the latest C (prompt, score) pairs of the current policy (C = 256);
each time the buffer changes, a head is fitted on the buffer's embeddings and predicts new prompts. Heads that
output V0's label P(s ≥ 0) (``logistic_hard``, ``tabpfn``, the official checkpoint) are mapped to E[s] with an
isotonic map fitted on the buffer's out-of-fold predictions, as the V0 output is not a score.

``combined``: policy mean + per-prompt history + one cross-prompt residual model fitted on the residuals
s − m_policy of *all* policies' buffers (pooling contexts across policies/snapshots), composed as in
``v05.priors.providers`` with each part weighted by its measured error. Cross-validation groups rows by prompt id, so
a held-out prompt is hidden from every policy's pool.

Deviations from V0: the head is refitted on CPU from cached embeddings; the official adapter+TabPFN stack runs only
when its checkpoints are local (``v0_checkpoint``). Buffers smaller than ``min_context`` fall back to the running
mean with a logged warning. ``combined``'s kernel-ridge refits keep the kernel entries of prompts still in the
buffers (:mod:`v05.priors.kernel_cache`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from v05._checks import check_int
from v05._types import FloatArray
from v05.priors.backends import backend_requires, make_backend
from v05.priors.embeddings import Embedder
from v05.priors.head_registry import make_head
from v05.priors.heads import Head, KernelRidgeHead, cross_val_fit, kernel_ridge_cross_val
from v05.priors.kernel_cache import PoolKernel, RBFKernelCache
from v05.priors.providers import BaseProvider, CalibrationRows

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
    :meth:`bind_policy` (``prior.name=probe``); the provider cannot embed before that.
    """

    name = "probe"
    needs_policy = True  # offline evaluation on V0 data cannot run it (no policy to read)
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


@dataclass(slots=True)
class _CombinedFit:
    """A fitted residual model: a predictor (texts → residual) per feature set, their stacking weights β, the CV rows.

    ``caches`` are the kernel caches its kernel-ridge heads were fitted from; the next refit of the same buffers
    refreshes and reuses them (empty for other heads).
    """

    key: tuple[int, ...]
    predictors: list[Callable[[list[str]], FloatArray]]
    beta: FloatArray
    rows: CalibrationRows
    masks: dict[str, np.ndarray]
    caches: list[RBFKernelCache]
    learned: int = 0  # the provider's update count when this fit was made
    sources: dict[str, dict[str, object]] = field(default_factory=dict)  # the buffers it was fitted on (to_dict)


@dataclass(kw_only=True)
class CombinedProvider(EmbeddingProvider):
    """Policy mean + per-prompt history + a residual model pooled over every policy's buffer (SPEC §4.4).

    The residual model stacks one head per feature set (``backend`` plus each of ``stack``):
    r(x) = Σ_j β_j·head_j(x), β ≥ 0 by non-negative least squares of the out-of-fold residuals (on V0 data
    MiniLM + TF-IDF cut the pooled context CV MSE 0.457 → 0.449 against either alone).

    Every update refits the heads and their 5-fold CV on the whole pool. With the ``krr`` head (and features that do
    not change over time) the refit reuses what the last one computed: the kernel entries of prompts still in the
    buffers and the kernel rows ``predict`` computed for the new ones (:class:`RBFKernelCache`), and the folds share
    one Cholesky factor (:func:`kernel_ridge_cross_val`). The kernel is then the fixed-point one, exact in its inner
    products, so a fit depends on the buffers only, never on the order of earlier refits (a restored provider
    predicts bit for bit as the live one). Its predictions agree with a refit on ``rbf_gram``'s float32 kernel to
    ~1e-6, the spread of that refit itself across BLAS builds and thread counts.

    ``refit_every`` = N > 1 amortises the refit: the heads, β and the CV rows are refitted only once at least N
    updates have passed since the last fit; in between, predictions combine the last fit's residual model with the
    current policy mean and per-prompt history (both updated every step). The buffers of a stale fit are kept in the
    state, so a restored provider rebuilds the same fit and predicts bit for bit as the live one.

    Attributes:
        pool: fit the residual model on every policy's buffer (else on the predicted policy's only).
        stack: extra embedding backends whose residual heads are stacked with ``backend``'s (``()``: none).
        stack_embedders: existing embedders for ``stack`` to share (by backend name).
        refit_every: refit the residual model at most once every this many updates (1: after every update).
        max_pool_kernel: the largest prefetched pool whose kernel is precomputed (:meth:`prefetch`).
    """

    name = "combined"
    use_history: bool = True
    context_size: int = 512
    pool: bool = True
    stack: tuple[str, ...] = ("tfidf",)
    stack_embedders: dict[str, Embedder] | None = None
    refit_every: int = 1
    max_pool_kernel: int = 4096
    fits_: dict[tuple[str, ...], _CombinedFit] = field(default_factory=dict, init=False)
    learned_: int = field(default=0, init=False)
    pool_texts_: list[str] = field(default_factory=list, init=False)
    pool_kernels_: dict[tuple[int, float], PoolKernel] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        EmbeddingProvider.__post_init__(self)
        check_int(self.refit_every, "refit_every", 1)
        check_int(self.max_pool_kernel, "max_pool_kernel", 0)
        if self._new_head().output != "score" or self.head.startswith("logistic"):
            raise ValueError(f"combined needs a regression head for residuals (krr, gp, knn), got {self.head!r}")
        if isinstance(self.stack, str):  # from a CLI/spec string: "tfidf", "tfidf+hf" or "none"
            self.stack = tuple(n for n in self.stack.split("+") if n and n != "none")
        self.stack = tuple(self.stack)
        for name in self.stack:
            make_backend(name)  # fail fast on unknown names

    def requires(self) -> tuple[str, ...]:
        """Top-level modules it imports on use: :meth:`EmbeddingProvider.requires` plus each ``stack`` backend's."""
        shared = self.stack_embedders or {}
        stack = (m for name in self.stack if name not in shared for m in backend_requires(name))
        return (*EmbeddingProvider.requires(self), *stack)

    def _embedders(self) -> list[Embedder]:
        shared = dict(self.stack_embedders or {})
        for name in self.stack:
            if name not in shared:
                shared[name] = Embedder(backend=make_backend(name), cache_dir=self.cache_dir)  # type: ignore[arg-type]
        self.stack_embedders = shared
        return [self._embedder(), *(shared[n] for n in self.stack)]

    def _feature_embedders(self) -> list[Embedder]:
        return self._embedders()

    def _pooled(self, policy: str) -> list[str]:
        names = sorted(self.buffers_) if self.pool else [policy]
        return [p for p in names if p in self.buffers_ and len(self.buffers_[p]) >= 1]

    def _learn(self, ids: list[str], texts: list[str], scores: FloatArray, counts: FloatArray, policy: str) -> None:
        EmbeddingProvider._learn(self, ids, texts, scores, counts, policy)
        self.learned_ += 1

    def _fit(self, policy: str) -> _CombinedFit | None:
        names = self._pooled(policy)
        if sum(len(self.buffers_[p]) for p in names) < self.min_context:
            return None
        key = tuple(self.buffers_[p].version for p in names)
        cached = self.fits_.get(tuple(names))
        if cached is not None and (cached.key == key or self.learned_ - cached.learned < self.refit_every):
            return cached
        fit = self._fit_buffers(names, [self.buffers_[p] for p in names], cached)
        fit.key, fit.learned = key, self.learned_
        self.fits_[tuple(names)] = fit
        return fit

    def _fit_buffers(self, names: list[str], bufs: list[SupportBuffer], cached: _CombinedFit | None) -> _CombinedFit:
        """The residual model fitted on the buffers ``bufs`` of the policies ``names`` (reusing ``cached``'s caches)."""
        texts = [t for b in bufs for t in b.texts]
        who = np.concatenate([np.full(len(b), j) for j, b in enumerate(bufs)])  # (R,) buffer of each row
        y = np.concatenate([np.asarray(b.scores) for b in bufs])
        k = np.concatenate([np.asarray(b.counts) for b in bufs])
        fold = self._folds(np.array([i for b in bufs for i in b.ids]))
        m_oof = np.zeros(len(y))  # (R,)

        def fold_means(tr: np.ndarray) -> FloatArray:  # (B,) buffer means on a fold's training rows
            fallback = float(np.average(y[tr], weights=k[tr]))
            return _group_means(y[tr], k[tr], who[tr], len(bufs), fallback=fallback)

        for f in range(self.folds):
            tr, te = fold != f, fold == f
            if te.any() and tr.sum() >= 2:
                m_oof[te] = fold_means(tr)[who[te]]
        targets: dict[bytes, FloatArray] = {}  # every feature set's CV asks for the same row subsets

        def residual(rows: np.ndarray) -> FloatArray:  # targets of a row subset: y minus its buffer's mean
            key = np.packbits(rows).tobytes()
            if key not in targets:
                targets[key] = y[rows] - fold_means(rows)[who[rows]]
            return targets[key]

        caches = self._caches(cached)
        if caches:
            fitted = [_fit_cached_ridge(c, texts, fold, self.folds, residual, self._new_head()) for c in caches]
        else:
            fitted = [self._fit_heads(e, texts, fold, residual) for e in self._embedders()]
        r_oof = np.stack([oof for oof, _ in fitted], axis=1)  # (R, J)
        beta = _stack_weights(r_oof, y - m_oof)
        r_stack = r_oof @ beta  # (R,)
        rows = CalibrationRows(m_oof, r_stack, np.clip(m_oof + r_stack, -1, 1), y, k)
        masks = {p: who == j for j, p in enumerate(names)}
        sources = {p: b.to_dict() for p, b in zip(names, bufs, strict=True)} if self.refit_every > 1 else {}
        return _CombinedFit((), [predict for _, predict in fitted], beta, rows, masks, caches, sources=sources)

    def state_dict(self) -> dict[str, object]:
        """The embedding provider's state, the update count and (``refit_every`` > 1) the buffers of each fit."""
        state = EmbeddingProvider.state_dict(self)
        state["learned"] = self.learned_
        if self.refit_every > 1:
            state["fits"] = [{"names": list(names), "learned": fit.learned, "buffers": fit.sources}
                             for names, fit in self.fits_.items()]  # fmt: skip
        return state

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Restore :meth:`state_dict`; a stale fit is refitted on its saved buffers, so it predicts as the live one."""
        EmbeddingProvider.load_state_dict(self, state)
        self.learned_ = int(state.get("learned", 0))  # type: ignore[call-overload]
        for saved in state.get("fits", []) if self.refit_every > 1 else []:  # type: ignore[attr-defined]
            names = [str(n) for n in saved["names"]]
            bufs = [SupportBuffer.from_dict(saved["buffers"][p]) for p in names]
            fit = self._fit_buffers(names, bufs, None)
            fit.key, fit.learned = (-1,), int(saved["learned"])  # key (-1,): never the live buffers' versions
            self.fits_[tuple(names)] = fit

    def _caches(self, previous: _CombinedFit | None) -> list[RBFKernelCache]:
        """The kernel caches of a ``krr`` refit: the previous fit's, else new ones.

        Empty (refit from scratch) for other heads and for features that change over time (volatile backends).
        """
        head, embedders = self._new_head(), self._embedders()
        if not isinstance(head, KernelRidgeHead) or any(getattr(e.backend, "volatile", False) for e in embedders):
            return []
        if previous is not None and [c.embed for c in previous.caches] == [e.embed for e in embedders]:
            return previous.caches
        return [RBFKernelCache(gamma=head.gamma, embed=e.embed, pool=self._pool_kernel(e, head.gamma))
                for e in embedders]  # fmt: skip

    def prefetch(self, texts: Sequence[str]) -> None:
        """Embed the prompt pool once and keep its texts, so that ``krr`` refits look its kernel entries up.

        The pool's kernel (:class:`PoolKernel`, P² float64 per feature set) is computed once, at the first refit,
        instead of its entries every step. A pool of more than ``max_pool_kernel`` distinct texts is only embedded.
        """
        EmbeddingProvider.prefetch(self, texts)
        distinct = list(dict.fromkeys(texts))
        if len(distinct) > self.max_pool_kernel:
            log.info("combined prior: a pool of %d prompts (> max_pool_kernel %d): kernel entries computed per step",
                     len(distinct), self.max_pool_kernel)  # fmt: skip
            distinct = []
        self.pool_texts_, self.pool_kernels_ = distinct, {}

    def _pool_kernel(self, emb: Embedder, gamma: float) -> PoolKernel | None:
        """The pool's kernel for one feature set (built on first use), None without a prefetched pool."""
        if not self.pool_texts_:
            return None
        key = (id(emb), gamma)
        if key not in self.pool_kernels_:
            self.pool_kernels_[key] = PoolKernel.build(self.pool_texts_, emb.embed, gamma)
        return self.pool_kernels_[key]

    def _fit_heads(
        self, emb: Embedder, texts: list[str], fold: np.ndarray, residual: Callable[[np.ndarray], FloatArray]
    ) -> tuple[FloatArray, Callable[[list[str]], FloatArray]]:
        """Out-of-fold residuals and a predictor of one feature set's head, refitted from scratch."""
        oof, head = cross_val_fit(self._new_head, emb.embed(texts), fold, self.folds, residual)
        return oof, lambda query: head.predict(emb.embed(query))

    def _parts(self, ids: list[str], texts: list[str], policy: str) -> tuple[FloatArray, FloatArray]:
        buf = self.buffers_.get(policy)
        m = buf.mean() if buf is not None and len(buf) else 0.0
        fit = self._fit(policy)
        if fit is None or buf is None or len(buf) < self.min_context:
            log.warning(
                "combined prior: too little context for policy %r (%d rows); falling back to its running mean",
                policy,
                0 if buf is None else len(buf),
            )
            return np.full(len(ids), m), np.zeros(len(ids))
        r = np.zeros(len(ids))
        for predict, b in zip(fit.predictors, fit.beta, strict=True):
            if b > 0:
                r += b * predict(texts)
        return np.full(len(ids), m), r

    def _cv_rows(self, policy: str) -> CalibrationRows:
        fit = self._fit(policy)
        if fit is None or policy not in fit.masks:
            return CalibrationRows()
        return CalibrationRows(*(a[fit.masks[policy]] for a in fit.rows.arrays()))

    def _weight_rows(self, policy: str) -> CalibrationRows:
        fit = self._fit(policy)
        return CalibrationRows() if fit is None else fit.rows

    def metrics(self, policy: str = "default") -> dict[str, float]:
        """Embedding-provider metrics plus the stacking weight of each feature set."""
        out = EmbeddingProvider.metrics(self, policy)
        fit = self.fits_.get(tuple(self._pooled(policy)))
        if fit is not None:
            for name, b in zip((self.backend, *self.stack), fit.beta, strict=True):
                out[f"prior/stack_weight/{name}"] = float(b)
        return out


def _fit_cached_ridge(
    cache: RBFKernelCache,
    texts: list[str],
    fold: np.ndarray,
    n_folds: int,
    residual: Callable[[np.ndarray], FloatArray],
    head: KernelRidgeHead,
) -> tuple[FloatArray, Callable[[list[str]], FloatArray]]:
    """Out-of-fold residuals (R,) and a predictor ȳ + k(x, X)·dual of a kernel ridge on the rows ``texts``.

    ``cache`` is refreshed to hold ``texts``; the predictor reads it, so it is valid until the next refresh (the
    next refit of the same buffers, which replaces the fit holding the predictor).
    """
    slots = cache.refresh(texts)  # (R,)
    oof, mean, dual = kernel_ridge_cross_val(cache.gram, fold, n_folds, residual, alpha=head.alpha, rows=slots)
    return oof, lambda query: mean + cache.cross(query, slots) @ dual


def _stack_weights(r_oof: FloatArray, target: FloatArray) -> FloatArray:
    """β ≥ 0 minimising ‖r_oof·β − target‖² (non-negative least squares over out-of-fold predictions)."""
    from scipy.optimize import nnls

    beta, _ = nnls(r_oof, target)
    return np.asarray(beta, np.float64)


def _group_means(y: FloatArray, k: FloatArray, who: np.ndarray, n: int, *, fallback: float) -> FloatArray:
    """(n,) rollout-weighted mean of y per buffer; ``fallback`` for a buffer with no rows."""
    num, den = np.bincount(who, y * k, minlength=n), np.bincount(who, k, minlength=n)
    return np.where(den > 0, num / np.where(den > 0, den, 1.0), fallback)


__all__ = ["CombinedProvider", "EmbeddingProvider", "SupportBuffer", "V0Provider"]
