r"""POISE's value probe and its FIFO buffer of prompt groups; the prompt-only ``pca_ridge`` head.

A value probe is fitted online on the policy's own features (numpy; scikit-learn is imported on use; no torch). It is
the model behind three names: the ``poise`` estimator's baseline (:mod:`v05.estimators.poise_baseline` owns the
advantage arithmetic), the ``pca_ridge`` head, and through it the ``probe`` prior provider
(:class:`v05.priors.learned.ProbeProvider`).

The probe maps one rollout's features to a value on the reward scale (arXiv:2605.07579, released recipe):

    z = [PCA_p(h_p) ; PCA_r(h_r) ; scalars],   ŷ = clip(ȳ + wᵀ (z − z̄)/s_z, lo, hi),
    w = argmin ‖y − ȳ − Ẑw‖² + α‖w‖²   (Ẑ: z standardised column-wise; sklearn StandardScaler + Ridge)

h_p, h_r are the pooled hidden states of the prompt tail and the response tail, ``scalars`` the entropy features.
Per step the caller does, in this order: predict every rollout with the *previous* probe → advantages
(:func:`v05.estimators.poise_baseline.poise`) → ``buffer.append(...)`` with
:func:`~v05.estimators.poise_baseline.cross_rollout_targets` → ``probe.fit(*buffer.arrays())``. Predicting after the
refit would let the step's own outcomes into its baselines.

Deviations from the release (``holi-lab/POISE``, ``fit_estimator``, ``RecentDomainBuffer``): float64 throughout (the
release casts features to float32; differences ~1e-6); fitted parameters are stored as plain arrays and applied with
numpy (no pickled sklearn objects), so a JSON state round-trip predicts bit-identically; at least 2 rows are needed
to fit (PCA of one row is undefined); one probe per call site (the release keeps one per domain: math/code/other).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from v05._types import FloatArray, HeadOutput


def _contiguous(obj: object, *names: str) -> None:
    """Store the named array fields of a frozen dataclass as C-contiguous float64.

    sklearn's ``PCA.components_`` is a strided view; a JSON round trip gives a C-contiguous copy, and the matmul
    then takes another BLAS path (predictions differ in the last bit), so a resumed run would drift. One layout
    for fitted and restored parameters keeps the round trip bit-exact.
    """
    for name in names:
        object.__setattr__(obj, name, np.ascontiguousarray(getattr(obj, name), dtype=np.float64))


@dataclass(frozen=True, slots=True)
class _Projection:
    """A fitted PCA: x ↦ (x − mean) componentsᵀ; mean (H,), components (k, H), both C-contiguous float64."""

    mean: FloatArray
    components: FloatArray

    def __post_init__(self) -> None:
        _contiguous(self, "mean", "components")

    def __call__(self, x: FloatArray) -> FloatArray:
        return (x - self.mean) @ self.components.T  # (R, k)


@dataclass(frozen=True, slots=True)
class _Linear:
    """A standardised ridge: z ↦ ((z − mean)/scale)·coef + intercept; mean, scale, coef (F,), C-contiguous float64."""

    mean: FloatArray
    scale: FloatArray
    coef: FloatArray
    intercept: float

    def __post_init__(self) -> None:
        _contiguous(self, "mean", "scale", "coef")

    def __call__(self, z: FloatArray) -> FloatArray:
        return ((z - self.mean) / self.scale) @ self.coef + self.intercept  # (R,)


def _fit_pca(x: FloatArray, requested: int, seed: int) -> _Projection | None:
    """PCA with ``min(requested, rows, dim)`` components (randomized SVD, ``random_state=seed``); None if 0."""
    from sklearn.decomposition import PCA  # noqa: PLC0415 (scikit-learn is imported on use)

    n_components = min(requested, x.shape[0], x.shape[1])
    if n_components == 0:
        return None
    pca = PCA(n_components=n_components, svd_solver="randomized", random_state=seed).fit(x)
    return _Projection(np.asarray(pca.mean_, np.float64), np.asarray(pca.components_, np.float64))


def _fit_linear(z: FloatArray, y: FloatArray, alpha: float, seed: int) -> _Linear:
    """StandardScaler → Ridge(alpha) on (R, F) features; constant columns keep scale 1 (sklearn's rule)."""
    from sklearn.linear_model import Ridge  # noqa: PLC0415
    from sklearn.preprocessing import StandardScaler  # noqa: PLC0415

    scaler = StandardScaler().fit(z)
    ridge = Ridge(alpha=alpha, random_state=seed).fit(scaler.transform(z), y)
    return _Linear(
        np.asarray(scaler.mean_, np.float64),
        np.asarray(scaler.scale_, np.float64),
        np.asarray(ridge.coef_, np.float64).reshape(-1),
        float(ridge.intercept_),
    )


def _project(projection: _Projection | None, x: FloatArray) -> FloatArray:
    return x if projection is None else projection(x)


def _projection_state(p: _Projection | None) -> dict[str, object] | None:
    return None if p is None else {"mean": p.mean.tolist(), "components": p.components.tolist()}


def _projection_from_state(d: dict[str, list[float]] | None, width: int) -> _Projection | None:
    if d is None:
        return None
    return _Projection(np.asarray(d["mean"], np.float64), np.asarray(d["components"], np.float64).reshape(-1, width))


def _linear_state(lin: _Linear) -> dict[str, object]:
    return {
        "mean": lin.mean.tolist(),
        "scale": lin.scale.tolist(),
        "coef": lin.coef.tolist(),
        "intercept": lin.intercept,
    }


def _linear_from_state(d: dict[str, object]) -> _Linear:
    return _Linear(
        np.asarray(d["mean"], np.float64),
        np.asarray(d["scale"], np.float64),
        np.asarray(d["coef"], np.float64),
        float(d["intercept"]),  # type: ignore[arg-type]
    )


def _matrix(x: object, name: str, n_rows: int | None = None) -> FloatArray:
    """``x`` as a finite float64 (R, D) array (D may be 0), with ``n_rows`` rows if given."""
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D (rows, features), got shape {arr.shape}")
    if n_rows is not None and arr.shape[0] != n_rows:
        raise ValueError(f"{name} has {arr.shape[0]} rows, expected {n_rows} (one per rollout)")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} contains non-finite values")
    return arr


def _check_count(value: object, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"{name} must be an integer >= 0, got {value!r}")


@dataclass(kw_only=True)
class PoiseProbe:
    r"""POISE's probe: PCA of the prompt and response hidden states, the scalar features, standardise, ridge, clip.

        z = [PCA_p(h_p) ; PCA_r(h_r) ; s],   ŷ = clip(ridge(standardise(z)), clip[0], clip[1])

    Each :meth:`fit` refits everything from scratch (PCA with ``min(requested, rows, dim)`` components, randomized
    SVD seeded by ``seed``; a size of 0 skips that PCA and uses the raw block). The caller owns the order: predict
    with the previous probe → advantages → ``GroupBuffer.append`` → ``fit`` on ``buffer.arrays()``; the step's
    own rows never reach its baselines, which is what keeps POISE unbiased.

    Targets are on the reward scale; set ``clip`` to the reward range ((0, 1) as the release; (−1, 1) for ±1).
    Degenerate cases: constant targets give a constant probe; constant feature columns are left unscaled.

    References:
        arXiv:2605.07579; release defaults for Qwen3-4B (PCA 32/64, α = 100, seed 42, clip [0, 1]).
    """

    pca_prompt: int = 32
    """Components kept from the prompt hidden states (0: no PCA, the raw block)."""
    pca_response: int = 64
    """Components kept from the response hidden states (0: no PCA)."""
    alpha: float = 100.0
    """Ridge penalty α ≥ 0 on the standardised features (release: 100 for Qwen3-4B, 1000 for OLMo-3-7B)."""
    seed: int = 42
    """random_state of the randomized PCA (and of the ridge solver)."""
    clip: tuple[float, float] = (0.0, 1.0)
    """Predictions are clipped to [lo, hi], the reward range."""
    prompt_pca_: _Projection | None = field(default=None, init=False, repr=False)
    response_pca_: _Projection | None = field(default=None, init=False, repr=False)
    linear_: _Linear | None = field(default=None, init=False, repr=False)
    widths_: tuple[int, int, int] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        _check_count(self.pca_prompt, "pca_prompt")
        _check_count(self.pca_response, "pca_response")
        _check_count(self.seed, "seed")
        if not np.isfinite(self.alpha) or self.alpha < 0:
            raise ValueError(f"alpha must be a finite number >= 0, got {self.alpha!r}")
        lo, hi = self.clip
        if not (np.isfinite(lo) and np.isfinite(hi) and lo <= hi):
            raise ValueError(f"clip must be finite (lo, hi) with lo <= hi, got {self.clip!r} (e.g. (0.0, 1.0))")
        self.clip = (float(lo), float(hi))

    @property
    def fitted_(self) -> bool:
        """Whether :meth:`fit` (or :meth:`load_state_dict` of a fitted state) has run."""
        return self.linear_ is not None

    def fit(self, prompt_feats: object, response_feats: object, scalars: object, targets: object) -> PoiseProbe:
        """Refit from scratch on R rows; returns the probe.

        Args:
            prompt_feats: (R, Hp) pooled prompt hidden states.
            response_feats: (R, Hr) pooled response hidden states.
            scalars: (R, S) scalar features (entropies); S may be 0.
            targets: (R,) cross-rollout targets on the reward scale (finite: drop singleton NaNs first).

        Raises:
            ValueError: non-finite values, mismatched rows, fewer than 2 rows.
        """
        y = np.asarray(targets, dtype=np.float64)
        if y.ndim != 1 or not np.isfinite(y).all():
            raise ValueError("targets must be 1-D and finite (drop singleton groups' NaN targets; GroupBuffer does)")
        if len(y) < 2:
            raise ValueError(f"the probe needs at least 2 rows to fit (PCA of one row is undefined), got {len(y)}")
        hp = _matrix(prompt_feats, "prompt_feats", len(y))
        hr = _matrix(response_feats, "response_feats", len(y))
        s = _matrix(scalars, "scalars", len(y))
        self.prompt_pca_ = _fit_pca(hp, self.pca_prompt, self.seed)
        self.response_pca_ = _fit_pca(hr, self.pca_response, self.seed)
        self.widths_ = (hp.shape[1], hr.shape[1], s.shape[1])
        z = np.hstack([_project(self.prompt_pca_, hp), _project(self.response_pca_, hr), s])  # (R, F)
        self.linear_ = _fit_linear(z, y, self.alpha, self.seed)
        return self

    def predict(self, prompt_feats: object, response_feats: object, scalars: object) -> FloatArray:
        """(Q,) predictions clipped to ``clip``, from (Q, Hp), (Q, Hr), (Q, S) features.

        Raises:
            ValueError: before fit, or on feature widths that differ from the fitted ones.
        """
        if self.linear_ is None or self.widths_ is None:
            raise ValueError("PoiseProbe.predict before fit: fit on the buffer (or load a fitted state) first")
        hp = _matrix(prompt_feats, "prompt_feats")
        hr = _matrix(response_feats, "response_feats", hp.shape[0])
        s = _matrix(scalars, "scalars", hp.shape[0])
        widths = (hp.shape[1], hr.shape[1], s.shape[1])
        if widths != self.widths_:
            raise ValueError(f"feature widths (Hp, Hr, S) = {widths} differ from the fitted {self.widths_}")
        z = np.hstack([_project(self.prompt_pca_, hp), _project(self.response_pca_, hr), s])  # (Q, F)
        return np.clip(self.linear_(z), *self.clip)

    def _config(self) -> dict[str, object]:
        return {
            "pca_prompt": int(self.pca_prompt),
            "pca_response": int(self.pca_response),
            "alpha": float(self.alpha),
            "seed": int(self.seed),
            "clip": list(self.clip),
        }

    def state_dict(self) -> dict[str, object]:
        """JSON-serialisable state: the configuration and the fitted PCA/scaler/ridge parameters as lists."""
        if self.linear_ is None or self.widths_ is None:
            return {"config": self._config(), "fitted": False}
        return {
            "config": self._config(),
            "fitted": True,
            "widths": list(self.widths_),
            "prompt_pca": _projection_state(self.prompt_pca_),
            "response_pca": _projection_state(self.response_pca_),
            "linear": _linear_state(self.linear_),
        }

    def load_state_dict(self, state: dict[str, object]) -> PoiseProbe:
        """Restore a :meth:`state_dict`; predictions are then bit-identical to the saved probe's.

        Raises:
            ValueError: if the saved configuration differs from this probe's (build it with the saved settings).
        """
        saved = state["config"]
        if saved != self._config():
            raise ValueError(f"probe state was saved with {saved}, this probe has {self._config()}")
        if not state["fitted"]:
            self.prompt_pca_ = self.response_pca_ = self.linear_ = None
            self.widths_ = None
            return self
        hp, hr, s = (int(w) for w in state["widths"])  # type: ignore[attr-defined]
        self.widths_ = (hp, hr, s)
        self.prompt_pca_ = _projection_from_state(state["prompt_pca"], hp)  # type: ignore[arg-type]
        self.response_pca_ = _projection_from_state(state["response_pca"], hr)  # type: ignore[arg-type]
        self.linear_ = _linear_from_state(state["linear"])  # type: ignore[arg-type]
        return self


@dataclass(frozen=True, slots=True)
class _GroupRows:
    prompt: FloatArray  # (n, Hp)
    response: FloatArray  # (n, Hr)
    scalars: FloatArray  # (n, S)
    targets: FloatArray  # (n,)


@dataclass
class GroupBuffer:
    """FIFO of whole prompt groups: appending a step's rows evicts the oldest groups while more than ``max_rows``.

    A group is the rows of one key within one :meth:`append` (the same prompt in a later step is a new group), kept
    in first-appearance order; a group is never split. Rows with a NaN target (singleton groups, see
    :func:`~v05.estimators.poise_baseline.cross_rollout_targets`) are dropped. As the release, a single group larger
    than ``max_rows`` is evicted at once (the buffer may then be empty).

    The JSON state stores every feature as a list: 4,096 rows of two 2,560-wide hidden states (Qwen3-4B) are
    ~21 M floats, ~0.4 GB of text; pool or reduce the features first for large models.

    References: the release's ``RecentDomainBuffer`` (math 4096, code/other 3072 rows).
    """

    max_rows: int = 4096
    """Rows kept at most (after eviction of whole oldest groups)."""
    _groups: deque[_GroupRows] = field(default_factory=deque, init=False, repr=False)
    _n_rows: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.max_rows, bool) or not isinstance(self.max_rows, (int, np.integer)) or self.max_rows < 1:
            raise ValueError(f"max_rows must be an integer >= 1, got {self.max_rows!r}")

    def __len__(self) -> int:
        return self._n_rows

    @property
    def n_groups(self) -> int:
        """Groups held."""
        return len(self._groups)

    def append(
        self, group_keys: object, prompt_feats: object, response_feats: object, scalars: object, targets: object
    ) -> None:
        """Add the rows of one step, grouped by key, then evict the oldest groups beyond ``max_rows``.

        Args:
            group_keys: (R,) a key per row (group ids, uids or prompt keys); equal keys form one group.
            prompt_feats: (R, Hp) prompt features.
            response_feats: (R, Hr) response features.
            scalars: (R, S) scalar features.
            targets: (R,) targets; NaN rows are dropped.

        Raises:
            ValueError: mismatched rows, non-finite features, infinite targets, widths unlike the held rows'.
        """
        keys = np.asarray(group_keys)
        y = np.asarray(targets, dtype=np.float64)
        if keys.ndim != 1 or y.ndim != 1 or len(keys) != len(y):
            raise ValueError(f"group_keys and targets must be 1-D of equal length, got {keys.shape} and {y.shape}")
        if np.isinf(y).any():
            raise ValueError("targets contain inf (NaN marks rows to drop; inf is an error)")
        hp = _matrix(prompt_feats, "prompt_feats", len(y))
        hr = _matrix(response_feats, "response_feats", len(y))
        s = _matrix(scalars, "scalars", len(y))
        if self._groups:
            held = self._groups[0]
            want = (held.prompt.shape[1], held.response.shape[1], held.scalars.shape[1])
            if (hp.shape[1], hr.shape[1], s.shape[1]) != want:
                raise ValueError(f"feature widths {(hp.shape[1], hr.shape[1], s.shape[1])} differ from held {want}")
        rows_of: dict[object, list[int]] = {}
        for i, key in enumerate(keys.tolist()):
            if not np.isnan(y[i]):
                rows_of.setdefault(key, []).append(i)
        for rows in rows_of.values():  # first-appearance order (dicts keep insertion order)
            idx = np.asarray(rows, np.int64)
            self._groups.append(_GroupRows(hp[idx], hr[idx], s[idx], y[idx]))
            self._n_rows += len(idx)
        while self._groups and self._n_rows > self.max_rows:
            self._n_rows -= len(self._groups.popleft().targets)

    def arrays(self) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
        """(prompt_feats (R, Hp), response_feats (R, Hr), scalars (R, S), targets (R,)), oldest rows first."""
        if not self._groups:
            return np.zeros((0, 0)), np.zeros((0, 0)), np.zeros((0, 0)), np.zeros(0)
        gs = list(self._groups)
        return (
            np.vstack([g.prompt for g in gs]),
            np.vstack([g.response for g in gs]),
            np.vstack([g.scalars for g in gs]),
            np.concatenate([g.targets for g in gs]),
        )

    def state_dict(self) -> dict[str, object]:
        """JSON-serialisable state: ``max_rows``, the group sizes and every row as lists."""
        hp, hr, s, y = self.arrays()
        return {
            "max_rows": int(self.max_rows),
            "sizes": [len(g.targets) for g in self._groups],
            "widths": [hp.shape[1], hr.shape[1], s.shape[1]],
            "prompt_feats": hp.tolist(),
            "response_feats": hr.tolist(),
            "scalars": s.tolist(),
            "targets": y.tolist(),
        }

    def load_state_dict(self, state: dict[str, object]) -> GroupBuffer:
        """Restore a :meth:`state_dict` (same groups, same order).

        Raises:
            ValueError: if the saved ``max_rows`` differs (build the buffer with the saved limit).
        """
        if int(state["max_rows"]) != self.max_rows:  # type: ignore[call-overload]
            raise ValueError(f"buffer state was saved with max_rows={state['max_rows']}, this one has {self.max_rows}")
        sizes = [int(n) for n in state["sizes"]]  # type: ignore[attr-defined]
        wp, wr, ws = (int(w) for w in state["widths"])  # type: ignore[attr-defined]
        n = sum(sizes)
        hp = np.asarray(state["prompt_feats"], np.float64).reshape(n, wp)
        hr = np.asarray(state["response_feats"], np.float64).reshape(n, wr)
        s = np.asarray(state["scalars"], np.float64).reshape(n, ws)
        y = np.asarray(state["targets"], np.float64).reshape(n)
        self._groups, self._n_rows = deque(), n
        for start, stop in zip(np.cumsum([0, *sizes[:-1]]), np.cumsum(sizes), strict=True):
            self._groups.append(_GroupRows(hp[start:stop], hr[start:stop], s[start:stop], y[start:stop]))
        return self


@dataclass(kw_only=True, slots=True)
class PcaRidgeHead:
    r"""Prompt-only probe for the ``probe`` prior (ours): PCA → standardise → ridge on centred ±1 scores.

        ŷ = ȳ + wᵀ Ẑ(x),   w = (ẐᵀẐ + αI)⁻¹ Ẑᵀ(y − ȳ),   Ẑ = standardise(PCA_k(x)),   k = min(n_components, C, D)

    A :class:`v05.priors.heads.Head` (``output = "score"``): ``fit(x (C, D), y (C,))``, ``predict(x (Q, D))``.
    Outputs are not clipped (heads also fit residuals); the provider clips priors to [−1, 1].
    Degenerate cases: constant scores give ŷ = ȳ; fewer than 2 context rows are refused.
    """

    requires: ClassVar[tuple[str, ...]] = ("sklearn",)  # modules it imports on use (v05.extras)

    n_components: int = 32
    """PCA components kept (clamped to the rows and the width; 0: standardise the raw embeddings)."""
    alpha: float = 100.0
    """Ridge penalty α ≥ 0 on the standardised components."""
    seed: int = 42
    """random_state of the randomized PCA."""
    output: HeadOutput = "score"
    pca_: _Projection | None = field(default=None, init=False, repr=False)
    linear_: _Linear | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        _check_count(self.n_components, "n_components")
        _check_count(self.seed, "seed")
        if not np.isfinite(self.alpha) or self.alpha < 0:
            raise ValueError(f"alpha must be a finite number >= 0, got {self.alpha!r}")

    def fit(self, x: FloatArray, y: FloatArray) -> PcaRidgeHead:
        """Fit on context embeddings (C, D) and scores (C,); returns the head."""
        xm = _matrix(x, "x")
        yv = np.asarray(y, np.float64)
        if yv.shape != (xm.shape[0],) or not np.isfinite(yv).all():
            raise ValueError(f"y must be finite with one score per row ({xm.shape[0]}), got shape {yv.shape}")
        if len(yv) < 2:
            raise ValueError(f"PcaRidgeHead needs at least 2 context rows, got {len(yv)}")
        self.pca_ = _fit_pca(xm, self.n_components, self.seed)
        self.linear_ = _fit_linear(_project(self.pca_, xm), yv, self.alpha, self.seed)
        return self

    def predict(self, x: FloatArray) -> FloatArray:
        """(Q,) predictions for query embeddings (Q, D)."""
        if self.linear_ is None:
            raise ValueError("PcaRidgeHead.predict before fit")
        return self.linear_(_project(self.pca_, _matrix(x, "x")))


__all__ = ["GroupBuffer", "PcaRidgeHead", "PoiseProbe"]
