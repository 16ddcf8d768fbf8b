r"""The ``combined`` prior (ours): policy mean + per-prompt history + a residual model pooled over all policies.

The residual model is fitted on the residuals s − m_policy of *all* policies' support buffers (pooling contexts
across policies/snapshots) and composed as in :mod:`v05.priors.compose`, each part weighted by its measured error:

    b = m + w·r(x),   r(x) = Σ_j β_j·head_j(x),   β ≥ 0 (non-negative least squares of out-of-fold residuals)

Cross-validation groups rows by prompt id, so a held-out prompt is hidden from every policy's pool. The buffers,
embedder and head construction are :class:`v05.priors.learned.EmbeddingProvider`'s (shared with ``v0``).

Deviations: the heads are refitted on CPU from cached embeddings; the kernel-ridge refits keep the kernel entries of
prompts still in the buffers (:mod:`v05.priors.kernel_cache`); buffers smaller than ``min_context`` fall back to the
running mean with a logged warning.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from v05._checks import check_int
from v05._types import FloatArray
from v05.priors.backends import backend_requires, make_backend
from v05.priors.compose import CalibrationRows
from v05.priors.embeddings import Embedder
from v05.priors.heads import KernelRidgeHead, cross_val_fit, kernel_ridge_cross_val
from v05.priors.kernel_cache import PoolKernel, RBFKernelCache
from v05.priors.learned import EmbeddingProvider, SupportBuffer

log = logging.getLogger(__name__)


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


__all__ = ["CombinedProvider"]
