r"""Heads: small regressors fitted in context on (embedding, score) pairs, predicting scores of new prompts.

Every head follows the TabPFN/scikit-learn in-context pattern: ``fit(X (C, D), y (C,))`` stores or fits on the
context, ``predict(X (Q, D)) -> (Q,)``. Targets and outputs are ±1 scores, except heads whose ``output`` is
``"prob_nonneg"`` (V0's label: P(s ≥ 0)), which the provider maps to E[s] with a calibration fitted on its context.

- ``krr``: RBF kernel ridge on centred scores, ŷ = ȳ + k(x, X)(K + αI)⁻¹(y − ȳ) (α = 0.3, γ = 2 measured best on
  MiniLM, priors-on-real-data.md §3.1); numpy + scipy, cross-validation and the final fit share one Gram matrix
  and one Cholesky factor (:func:`kernel_ridge_cross_val`).
- ``gp``: Gaussian process, ConstantKernel·RBF + WhiteKernel on standardised scores (marginal likelihood).
- ``knn``: mean score of the k most cosine-similar context prompts (k = 20).
- ``logistic``: binomial logistic regression on p = (s + 1)/2 (each row twice, weights p and 1 − p), ŷ = 2P − 1;
  ``logistic_hard`` fits 1[s ≥ 0] like V0 and outputs P(s ≥ 0).
- ``tabpfn``: the TabPFN classifier V0 uses (optional extra; weights from a local checkpoint only);
  ``v0_tabpfn``: the same model configured exactly as the released V0 code runs it (n_estimators 4, float32, no
  preprocessing, logits averaged; outputs E[s] = 2p̂ − 1).
scikit-learn is imported inside the heads, so importing this module is cheap.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Protocol

import numpy as np

from v05._checks import error_line
from v05._types import FloatArray, HeadOutput
from v05.rewards import to_pass_rate


class Head(Protocol):
    """A regressor fitted in context. ``output`` says what ``predict`` returns."""

    output: HeadOutput
    requires: ClassVar[tuple[str, ...]]  # top-level modules it imports on use (checked when a provider is built)

    def fit(self, x: FloatArray, y: FloatArray) -> Head:
        """Fit on context embeddings (C, D) and scores (C,)."""
        ...

    def predict(self, x: FloatArray) -> FloatArray:
        """Predict (Q,) scores (or P(s ≥ 0)) for query embeddings (Q, D)."""
        ...


def rbf_gram(a: FloatArray, b: FloatArray, gamma: float) -> FloatArray:
    """K_ij = exp(−γ‖a_i − b_j‖²), shape (A, B), via ‖a‖² + ‖b‖² − 2a·b (clipped at 0 against rounding).

    The inner products run in float32 (half the cost for wide features such as 2,048 hashed n-grams; the kernel's
    relative error stays ~1e-6, far below the ridge's α), the result is float64.
    """
    a32, b32 = np.asarray(a, np.float32), np.asarray(b, np.float32)
    cross = (a32 @ b32.T).astype(np.float64)  # (A, B)
    d2 = np.sum(a * a, axis=1)[:, None] + np.sum(b * b, axis=1)[None, :] - 2.0 * cross
    return np.exp(-gamma * np.maximum(d2, 0.0))


@dataclass(kw_only=True, slots=True)
class KernelRidgeHead:
    """RBF kernel ridge on centred scores: ŷ = ȳ + k(x, X)(K + αI)⁻¹(y − ȳ), K_ij = exp(−γ‖x_i − x_j‖²).

    Numpy only (the same estimator as scikit-learn's ``KernelRidge(kernel="rbf")``); :meth:`cross_val_predict`
    computes the context's Gram matrix once for every fold.
    """

    requires: ClassVar[tuple[str, ...]] = ("scipy",)  # modules it imports on use (v05.extras)

    alpha: float = 0.3
    gamma: float = 2.0
    output: HeadOutput = "score"
    mean_: float = field(default=0.0, init=False)
    x_: FloatArray | None = field(default=None, init=False)
    dual_: FloatArray | None = field(default=None, init=False)

    def fit(self, x: FloatArray, y: FloatArray) -> KernelRidgeHead:
        """Fit on context embeddings (C, D) and scores (C,); returns the head."""
        x = np.asarray(x, np.float64)
        self.mean_ = float(np.mean(y))
        self.x_ = x
        self.dual_ = _ridge_solve(rbf_gram(x, x, self.gamma), np.asarray(y, np.float64) - self.mean_, self.alpha)
        return self

    def predict(self, x: FloatArray) -> FloatArray:
        """(Q,) predictions for query embeddings (Q, D)."""
        if self.x_ is None or self.dual_ is None:
            raise ValueError("KernelRidgeHead.predict before fit")
        return self.mean_ + rbf_gram(np.asarray(x, np.float64), self.x_, self.gamma) @ self.dual_

    def cross_val_fit(
        self, x: FloatArray, fold: np.ndarray, n_folds: int, target: Callable[[np.ndarray], FloatArray]
    ) -> FloatArray:
        """Out-of-fold predictions (R,), then fit this head on every row; one (R, R) Gram matrix for it all.

        Fold f is predicted by a ridge fitted on the other rows with targets ``target(train mask)``; rows of a fold
        with fewer than 2 training rows keep 0. The numbers of fitting one head per fold, to float64 round-off
        (:func:`kernel_ridge_cross_val`).
        """
        x = np.asarray(x, np.float64)
        out, self.mean_, self.dual_ = kernel_ridge_cross_val(
            rbf_gram(x, x, self.gamma), fold, n_folds, target, alpha=self.alpha
        )
        self.x_ = x
        return out


def _ridge_solve(gram: FloatArray, y: FloatArray, alpha: float) -> FloatArray:
    """(K + αI)⁻¹ y by Cholesky (K + αI is symmetric positive definite for α > 0)."""
    from scipy.linalg import cho_factor, cho_solve  # noqa: PLC0415 (scipy ships with the priors extra)

    return cho_solve(cho_factor(gram + alpha * np.eye(len(gram)), lower=True, check_finite=False), y,
                     check_finite=False)  # fmt: skip


def kernel_ridge_cross_val(
    gram: FloatArray,
    fold: np.ndarray,
    n_folds: int,
    target: Callable[[np.ndarray], FloatArray],
    *,
    alpha: float,
    rows: np.ndarray | None = None,
) -> tuple[FloatArray, float, FloatArray]:
    r"""Out-of-fold kernel-ridge predictions and the fit on every row, from one Cholesky factor of A = K + αI.

    Fold f's ridge is fitted on its training rows S with centred targets z_S = t − t̄ (t = ``target(S)``) and
    predicts its rows T as t̄ + K_TS A_SS⁻¹ z_S. With H = A⁻¹ and z_T = 0, the block inverse gives

        K_TS A_SS⁻¹ z_S = −(H_TT)⁻¹ (H z)_T,   (H_TT)⁻¹ = A_TT − A_TS A_SS⁻¹ A_ST (the Schur complement)

    and, rows sorted by fold with A = L Lᵀ and Q the rows after T (the columns T of L⁻¹ are L_TT⁻¹ on T,
    −L_QQ⁻¹ L_QT L_TT⁻¹ on Q and 0 above):

        (H_TT)⁻¹ = L_TT (I + MᵀM)⁻¹ L_TTᵀ,   M = L_QQ⁻¹ L_QT

    So one Cholesky factorisation serves every fold and the full fit; a fold adds one triangular solve with |T|
    right-hand sides and a |T| × |T| Cholesky (5 equal folds and the full fit: 83 instead of 148 (R/5)³ flops).
    ``gram`` is taken as symmetric. The numbers equal per-fold solves to float64 round-off. A fold without rows,
    or with fewer than 2 training rows, is skipped (its rows keep 0).

    Args:
        gram: (M, M) kernel matrix; data row i is ``gram[rows[i]]`` (``rows`` None: M = R and row i is row i).
        fold: (R,) fold of each row in [0, n_folds).
        n_folds: number of folds.
        target: the training targets given an (R,) boolean row mask (a fold's training rows, or all rows).
        alpha: ridge α > 0.
        rows: (R,) row of ``gram`` that holds each data row (rows may repeat).

    Returns:
        (R,) out-of-fold predictions, ȳ of the full fit, and its (R,) dual coefficients (K + αI)⁻¹(y − ȳ).
    """
    from scipy.linalg import blas, cho_factor, cho_solve  # noqa: PLC0415 (scipy ships with the priors extra)

    fold = np.asarray(fold)
    n = len(fold)
    order = np.argsort(fold, kind="stable")  # (R,) rows sorted by fold
    position = np.empty(n, np.int64)
    position[order] = np.arange(n)  # sorted position of each row
    bounds = np.searchsorted(fold[order], np.arange(n_folds + 1))  # fold f holds sorted rows bounds[f]:bounds[f+1]
    take = order if rows is None else np.asarray(rows)[order]
    a = np.take(np.take(gram, take, axis=0), take, axis=1)  # (R, R) A = K + αI in fold order (faster than ix_)
    a[np.diag_indices(n)] += alpha
    chol = _cholesky(a)  # (R, R) lower L
    z, means, active = np.zeros((n, n_folds + 1)), np.zeros(n_folds), []  # (R, F + 1) centred targets, 0 on fold f
    for f in range(n_folds):
        tr = fold != f
        if bounds[f] == bounds[f + 1] or tr.sum() < 2:
            continue
        t = np.asarray(target(tr), np.float64)
        means[f] = float(np.mean(t))
        z[position[tr], f] = t - means[f]
        active.append(f)
    y = np.asarray(target(np.ones(n, bool)), np.float64)
    mean = float(np.mean(y))
    z[:, n_folds] = (y - mean)[order]  # the full fit's targets
    hz = cho_solve((chol, True), z, check_finite=False)  # (R, F + 1) H z; its last column is the full fit's dual
    out = np.zeros(n)  # (R,) in fold order
    for f in active:
        lo, hi = bounds[f], bounds[f + 1]
        l_tt = chol[lo:hi, lo:hi]
        w = l_tt.T @ hz[lo:hi, f]  # (|T|,)
        if hi < n:  # M = L_QQ⁻¹ L_QT, (|Q|, |T|)
            m = blas.dtrsm(1.0, np.asfortranarray(chol[hi:, hi:]), np.asfortranarray(chol[hi:, lo:hi]), lower=1)
            w = cho_solve(cho_factor(np.eye(hi - lo) + m.T @ m, lower=True, check_finite=False), w, check_finite=False)
        out[lo:hi] = means[f] - l_tt @ w  # t̄ − (H_TT)⁻¹ (H z)_T
    return out[position], mean, hz[position, n_folds]


def _cholesky(a: FloatArray) -> FloatArray:
    """Lower Cholesky factor of the symmetric positive definite ``a`` (overwritten), F-ordered."""
    from scipy.linalg import lapack  # noqa: PLC0415

    chol, info = lapack.dpotrf(a.T, lower=1, clean=1, overwrite_a=1)  # a.T: the same symmetric matrix, F-ordered
    if info != 0:
        raise ValueError(f"kernel ridge: K + alpha*I is not positive definite (LAPACK dpotrf info {info})")
    return chol


def cross_val_fit(
    make: Callable[[], Head], x: FloatArray, fold: np.ndarray, n_folds: int, target: Callable[[np.ndarray], FloatArray]
) -> tuple[FloatArray, Head]:
    """Out-of-fold predictions (R,) of the head ``make()`` builds, and that head fitted on every row.

    Heads that can share work across folds (kernel ridge: one Gram matrix) do; others are fitted once per fold.

    Args:
        make: builds a fresh head.
        x: (R, D) features.
        fold: (R,) fold of each row in [0, n_folds).
        n_folds: number of folds.
        target: the training targets given an (R,) boolean row mask (the fold's training rows, or all rows).
    """
    head = make()
    if isinstance(head, KernelRidgeHead):
        return head.cross_val_fit(x, fold, n_folds, target), head
    out = np.zeros(len(x))
    for f in range(n_folds):
        tr, te = fold != f, fold == f
        if te.any() and tr.sum() >= 2:
            out[te] = make().fit(x[tr], target(tr)).predict(x[te])
    return out, head.fit(x, target(np.ones(len(x), bool)))


@dataclass(kw_only=True, slots=True)
class GaussianProcessHead:
    """GP regression, ConstantKernel·RBF + WhiteKernel on standardised scores; ``predict_std`` is the latent sd."""

    requires: ClassVar[tuple[str, ...]] = ("sklearn",)  # modules it imports on use (v05.extras)

    restarts: int = 1
    seed: int = 0
    output: HeadOutput = "score"
    mean_: float = field(default=0.0, init=False)
    scale_: float = field(default=1.0, init=False)
    model_: object = field(default=None, init=False)

    def fit(self, x: FloatArray, y: FloatArray) -> GaussianProcessHead:
        """Fit on context embeddings (C, D) and scores (C,); returns the head."""
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

        kernel = ConstantKernel(0.1, (1e-3, 10)) * RBF(1.0, (0.05, 20)) + WhiteKernel(0.5, (1e-3, 2))
        self.mean_, self.scale_ = float(np.mean(y)), float(np.std(y)) or 1.0
        self.model_ = GaussianProcessRegressor(kernel, n_restarts_optimizer=self.restarts, random_state=self.seed).fit(
            x, (y - self.mean_) / self.scale_
        )
        return self

    def predict(self, x: FloatArray) -> FloatArray:
        """(Q,) predictions for query embeddings (Q, D)."""
        return self.mean_ + self.scale_ * np.asarray(self.model_.predict(x), np.float64)  # type: ignore[attr-defined]

    def predict_std(self, x: FloatArray) -> FloatArray:
        """(Q,) latent sd of the score (observation noise removed)."""
        gp = self.model_
        _, sd = gp.predict(x, return_std=True)  # type: ignore[attr-defined]
        noise = gp.kernel_.k2.noise_level  # type: ignore[attr-defined]
        return np.sqrt(np.maximum(sd**2 - noise, 1e-9)) * self.scale_


@dataclass(kw_only=True, slots=True)
class KNNHead:
    """Mean score of the k nearest context prompts by cosine similarity (uniform weights)."""

    requires: ClassVar[tuple[str, ...]] = ()  # modules it imports on use (v05.extras)

    k: int = 20
    output: HeadOutput = "score"
    x_: FloatArray = field(default_factory=lambda: np.zeros((0, 0)), init=False)
    y_: FloatArray = field(default_factory=lambda: np.zeros(0), init=False)

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError(f"k must be >= 1, got {self.k}")

    def fit(self, x: FloatArray, y: FloatArray) -> KNNHead:
        """Fit on context embeddings (C, D) and scores (C,); returns the head."""
        self.x_, self.y_ = _unit_rows(x), np.asarray(y, np.float64)
        return self

    def predict(self, x: FloatArray) -> FloatArray:
        """(Q,) predictions for query embeddings (Q, D)."""
        sim = _unit_rows(x) @ self.x_.T  # (Q, C)
        k = min(self.k, sim.shape[1])
        top = np.argpartition(-sim, k - 1, axis=1)[:, :k]  # (Q, k) indices of the k most similar
        return self.y_[top].mean(axis=1)


@dataclass(kw_only=True, slots=True)
class LogisticHead:
    """Logistic regression on embeddings: binomial on p = (s + 1)/2 (``hard=False``) or V0's 1[s ≥ 0]."""

    requires: ClassVar[tuple[str, ...]] = ("sklearn",)  # modules it imports on use (v05.extras)

    c: float = 1.0
    hard: bool = False
    output: HeadOutput = "score"
    model_: object = field(default=None, init=False)
    constant_: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if self.hard:
            self.output = "prob_nonneg"

    def fit(self, x: FloatArray, y: FloatArray) -> LogisticHead:
        """Fit on context embeddings (C, D) and scores (C,); returns the head."""
        from sklearn.linear_model import LogisticRegression

        p = to_pass_rate(np.asarray(y, np.float64), "pm1")
        self.constant_ = None
        if self.hard:
            label = (y >= 0).astype(np.int64)
            if label.min() == label.max():  # one class: the classifier cannot fit; predict that class
                self.constant_ = float(label[0])
                return self
            self.model_ = LogisticRegression(C=self.c, max_iter=2000).fit(x, label)
            return self
        x2 = np.vstack([x, x])  # (2C, D): each row once as a success with weight p, once as a failure with 1 − p
        y2 = np.r_[np.ones(len(p)), np.zeros(len(p))]
        self.model_ = LogisticRegression(C=self.c, max_iter=2000).fit(x2, y2, sample_weight=np.r_[p, 1 - p] + 1e-9)
        return self

    def predict(self, x: FloatArray) -> FloatArray:
        """(Q,) predictions for query embeddings (Q, D)."""
        if self.constant_ is not None:
            return np.full(len(x), self.constant_)
        prob = np.asarray(self.model_.predict_proba(x)[:, 1], np.float64)  # type: ignore[attr-defined]
        return prob if self.hard else 2 * prob - 1


@dataclass(kw_only=True, slots=True)
class TabPFNHead:
    """V0's head: a TabPFN classifier on 1[s ≥ 0], weights loaded from a local checkpoint (never downloaded).

    Raises (at fit): ValueError naming the missing checkpoint file or the missing ``tabpfn`` package.
    """

    requires: ClassVar[tuple[str, ...]] = ("torch", "tabpfn")  # modules it imports on use (v05.extras)

    checkpoint: str | None = None
    n_estimators: int = 4
    output: HeadOutput = "prob_nonneg"
    model_: object = field(default=None, init=False)
    constant_: float | None = field(default=None, init=False)

    def fit(self, x: FloatArray, y: FloatArray) -> TabPFNHead:
        """Fit on context embeddings (C, D) and scores (C,); returns the head."""
        path = check_tabpfn_checkpoint(self.checkpoint)
        try:
            from tabpfn import TabPFNClassifier  # optional extra: pip install 'v05[tabpfn]'
        except ImportError:
            raise ValueError(
                "the tabpfn head needs the optional package: pip install -c constraints.txt 'v05[tabpfn]'"
            ) from None
        label = (np.asarray(y) >= 0).astype(np.int64)
        import torch

        self.constant_ = float(label[0]) if label.min() == label.max() else None
        if self.constant_ is None:  # V0: n_estimators=4, inference_precision=float32
            self.model_ = TabPFNClassifier(
                model_path=str(path), device="cpu", n_estimators=self.n_estimators, inference_precision=torch.float32
            ).fit(x, label)
        return self

    def predict(self, x: FloatArray) -> FloatArray:
        """(Q,) predictions for query embeddings (Q, D)."""
        if self.constant_ is not None:
            return np.full(len(x), self.constant_)
        return np.asarray(self.model_.predict_proba(x)[:, 1], np.float64)  # type: ignore[attr-defined]


TABPFN_CHECKPOINT = "tabpfn-v2.5-classifier-v2.5_default.ckpt"


def check_tabpfn_checkpoint(checkpoint: str | None) -> Path:
    """The TabPFN checkpoint path, or a ValueError naming the missing file and how to supply it."""
    how = (
        f"TabPFN weights cannot be downloaded here: copy V0's {TABPFN_CHECKPOINT} (Prior-Labs TabPFN v2.5) to this "
        "machine and pass its path (head_options={'checkpoint': PATH} / --tabpfn-checkpoint PATH)"
    )
    if checkpoint is None:
        raise ValueError(f"the tabpfn head needs a local checkpoint file ({TABPFN_CHECKPOINT}); {how}")
    path = Path(checkpoint)
    if path.is_dir():
        path = path / TABPFN_CHECKPOINT
    if not path.is_file():
        raise ValueError(f"TabPFN checkpoint file not found: {path}; {how}")
    _check_weights_only(path)
    return path


def _check_weights_only(path: Path) -> None:
    """Refuse a checkpoint that needs arbitrary unpickling before TabPFN opens it.

    TabPFN calls ``torch.load(path, weights_only=None)``: weights-only under torch >= 2.6, but a full unpickle when
    ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` is set. This explicit check (memory-mapped, so cheap) makes it safe either way.
    """
    import torch

    try:
        torch.load(str(path), map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(path))
    except Exception as err:  # noqa: BLE001 - unpickling refused or corrupt: report, never retry unsafely
        raise ValueError(f"TabPFN checkpoint {path}: not a weights-only torch checkpoint ({error_line(err)})") from None


def _unit_rows(x: FloatArray) -> FloatArray:
    """Rows scaled to unit L2 norm (zero rows stay zero)."""
    x = np.asarray(x, np.float64)
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norm > 0, norm, 1.0)


__all__ = [
    "TABPFN_CHECKPOINT",
    "GaussianProcessHead",
    "Head",
    "KNNHead",
    "KernelRidgeHead",
    "LogisticHead",
    "TabPFNHead",
    "check_tabpfn_checkpoint",
    "cross_val_fit",
    "kernel_ridge_cross_val",
    "rbf_gram",
]
