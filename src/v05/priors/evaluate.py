"""Evaluate prior providers on V0-format data: per-snapshot predictions, context cross-validation, online replay.

- ``predict_rows``: fit on context only (each snapshot is one policy; ``pooled`` lets ``combined`` share every
  snapshot's context) and predict the given rows, with τ²/n0 from context-only calibration. The simulator's seam.
- ``cross_validate_context``: 5-fold CV over the context rows, folds grouped by prompt id so a held-out prompt is
  hidden from every snapshot's pool (priors-on-real-data.md §3.1).
- ``predict_rows_online``: prequential replay of query rows in steps of ``batch_size`` rows per snapshot; each row is
  predicted before its outcome is revealed, and revealed outcomes only *calibrate* the provider (``record``): the
  means and buffers stay those of the context. This is how a provider notices that its features carry no signal.
- ``evaluate_v0``: the ``v05 prior eval`` table; ``benchmark_throughput``: prompts/s for new prompts.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from v05.datasets.v0 import V0Dataset, V0Rows, load_v0
from v05.priors.backends import make_backend
from v05.priors.base import PriorPrediction
from v05.priors.compose import BaseProvider
from v05.priors.embeddings import Embedder
from v05.priors.metrics import eb_fusion_ratio, prior_metrics, reliability_plot
from v05.priors.registry import EMBEDDING_PROVIDERS, get_provider_spec, make_provider

EMBEDDING_OPTIONS = frozenset(
    {
        "backend",
        "backend_options",
        "head",
        "head_options",
        "cache_dir",
        "embedder",
        "context_size",
        "min_context",
        "folds",
        "seed",
        "stack",
        "stack_embedders",
    }
)
"""Options only the embedding providers take; ``evaluate_v0`` drops them for the others."""

LABEL_ROLLOUTS = 10
"""Rollouts behind each V0 score (scores lie on a 0.2 grid: means of 10 ±1 rewards)."""


def _options(dataset: V0Dataset, provider: str, pooled: bool, options: dict[str, object]) -> dict[str, object]:
    """Provider options for V0 data: one shared embedder, a buffer that holds a whole snapshot context."""
    opts = dict(options)
    if provider in EMBEDDING_PROVIDERS:
        if opts.get("embedder") is None:
            backend = make_backend(str(opts.get("backend", "minilm")), **dict(opts.get("backend_options") or {}))  # type: ignore[call-overload]
            opts["embedder"] = Embedder(backend=backend, cache_dir=opts.get("cache_dir"))
        per_snapshot = np.bincount(dataset.context.snapshot, minlength=len(dataset.snapshots))
        opts.setdefault("context_size", int(per_snapshot.max()))
    if provider == "combined":
        opts.setdefault("pool", pooled)
        if opts.get("stack_embedders") is None:
            stack = opts.get("stack", ("tfidf",))
            opts["stack_embedders"] = {
                n: Embedder(backend=make_backend(n), cache_dir=opts.get("cache_dir")) for n in stack
            }  # type: ignore[union-attr]
    return opts


def _fit_on(dataset: V0Dataset, context: V0Rows, provider: str, options: dict[str, object]) -> BaseProvider:
    prov = make_provider(provider, **options)
    for s in np.unique(context.snapshot):
        part = context.select(context.snapshot == s)
        prov.update(
            list(part.prompt_id),
            dataset.texts(part.prompt_id),
            part.score,
            np.full(len(part), float(LABEL_ROLLOUTS)),
            policy=dataset.snapshot_name(int(s)),
        )
    return prov


def _predict_snapshots(dataset: V0Dataset, prov: BaseProvider, rows: V0Rows) -> PriorPrediction:
    mean, tau2, n0 = np.zeros(len(rows)), np.zeros(len(rows)), np.zeros(len(rows))
    for s in np.unique(rows.snapshot):
        idx = np.flatnonzero(rows.snapshot == s)
        pred = prov.predict(
            list(rows.prompt_id[idx]), dataset.texts(rows.prompt_id[idx]), policy=dataset.snapshot_name(int(s))
        )
        mean[idx], tau2[idx], n0[idx] = pred.mean, pred.tau2, pred.n0
    return PriorPrediction(mean, tau2, n0)


def _check_offline(provider: str) -> None:
    """Refuse a provider that cannot learn from (prompt, score) data: the ``oracle`` bound draws live rollouts."""
    if get_provider_spec(provider).needs_sampler:
        raise ValueError(
            f"prior {provider!r} measures pass rates with extra rollouts of a live policy (v05 train only): there is "
            "nothing to fit or evaluate on offline data"
        )


def predict_rows(
    dataset: V0Dataset, rows: V0Rows, provider: str, *, pooled: bool = False, **options: object
) -> PriorPrediction:
    """Fit ``provider`` on the context of each snapshot (all snapshots' contexts if ``pooled``) and predict ``rows``.

    Args:
        dataset: the V0 data (its context is the only thing the provider learns from).
        rows: (R,) rows to predict (any snapshots of ``dataset``).
        provider: a name in ``PROVIDERS``.
        pooled: share all snapshots' contexts (``combined``'s residual model); others keep one context per snapshot.
        **options: provider options (e.g. ``backend="tfidf"``, ``head="knn"``, ``cache_dir=...``).

    Returns:
        (R,) predicted scores in [−1, 1] with the provider's context-calibrated τ² and n0 for each row's snapshot.
    """
    _check_offline(provider)
    opts = _options(dataset, provider, pooled, options)
    prov = _fit_on(dataset, dataset.context, provider, opts)
    return _predict_snapshots(dataset, prov, rows)


def context_folds(dataset: V0Dataset, folds: int = 5, seed: int = 0) -> np.ndarray:
    """(C,) fold of each context row; all rows of one prompt id share a fold."""
    uniq, inv = np.unique(dataset.context.prompt_id.astype(str), return_inverse=True)
    perm = np.random.default_rng(seed).permutation(len(uniq))
    return (perm % folds)[inv]


def cross_validate_context(
    dataset: V0Dataset, provider: str, *, pooled: bool = False, folds: int = 5, seed: int = 0, **options: object
) -> PriorPrediction:
    """Out-of-fold predictions for every context row (prompt-grouped folds; see the module docstring)."""
    opts = _options(dataset, provider, pooled, options)
    fold = context_folds(dataset, folds, seed)
    parts: list[tuple[np.ndarray, PriorPrediction]] = []
    ctx = dataset.context
    for f in range(folds):
        held = ctx.select(fold == f)
        prov = _fit_on(dataset, ctx.select(fold != f), provider, opts)
        parts.append((np.flatnonzero(fold == f), _predict_snapshots(dataset, prov, held)))
    order = np.concatenate([i for i, _ in parts])
    pred = PriorPrediction.concat([p for _, p in parts])
    return pred.take(np.argsort(order))


def predict_rows_online(
    dataset: V0Dataset, rows: V0Rows, provider: str, *, pooled: bool = False, batch_size: int = 1, **options: object
) -> PriorPrediction:
    """Prequential replay: predict ``batch_size`` rows per snapshot per step, then reveal them for calibration only."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    opts = _options(dataset, provider, pooled, options)
    prov = _fit_on(dataset, dataset.context, provider, opts)
    pos = {int(s): np.flatnonzero(rows.snapshot == s) for s in np.unique(rows.snapshot)}
    mean, tau2, n0 = np.zeros(len(rows)), np.zeros(len(rows)), np.zeros(len(rows))
    n_steps = max(-(-len(i) // batch_size) for i in pos.values()) if pos else 0
    for t in range(n_steps):
        batch = {s: i[t * batch_size : (t + 1) * batch_size] for s, i in pos.items()}
        for s, idx in batch.items():  # predict the whole step first: no outcome of this step is known yet
            if len(idx):
                p = prov.predict(
                    list(rows.prompt_id[idx]), dataset.texts(rows.prompt_id[idx]), policy=dataset.snapshot_name(s)
                )
                mean[idx], tau2[idx], n0[idx] = p.mean, p.tau2, p.n0
        for s, idx in batch.items():
            if len(idx):
                prov.record(
                    list(rows.prompt_id[idx]),
                    rows.score[idx],
                    np.full(len(idx), float(LABEL_ROLLOUTS)),
                    policy=dataset.snapshot_name(s),
                )
    return PriorPrediction(mean, tau2, n0)


def _steps(dataset: V0Dataset, rows: V0Rows) -> np.ndarray:
    return np.array([dataset.snapshots[int(s)][2] for s in rows.snapshot])


def evaluate_v0(
    dataset: V0Dataset,
    providers: Sequence[str],
    *,
    pooled: bool = False,
    protocols: Sequence[str] = ("offline", "online"),
    folds: int = 5,
    batch_size: int = 1,
    plot: str | Path | None = None,
    **options: object,
) -> list[dict[str, object]]:
    """The ``v05 prior eval`` results: one row per (provider, split, protocol), plus ``context_cv``.

    ``offline`` fits on the context and predicts each query split; ``online`` replays the split prequentially
    (calibration only). Rows carry ``provider, split, protocol, pooled, mse, mae, pearson, spearman, auc_within,
    auc_global, gauc_step, calibration_slope, bias, n, tau2_mean, n0_mean, eb_over_grpo_k4, worth_k4``
    (``v05_eb`` at k = 4 with the provider's own n0 against GRPO, exact, plug-in truth; see ``eb_fusion_ratio``).
    """
    bad = [p for p in protocols if p not in ("offline", "online")]
    if bad:
        raise ValueError(f"unknown protocol(s) {bad}; valid: offline, online")
    for name in providers:
        _check_offline(name)
    shared = dict(options)
    results: list[dict[str, object]] = []
    curves: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    embedders: dict[str, Embedder] = {}
    for name in providers:
        opts = {k: v for k, v in shared.items() if name in EMBEDDING_PROVIDERS or k not in EMBEDDING_OPTIONS}
        if name in EMBEDDING_PROVIDERS:  # one embedder (and one model load) for every provider and split
            key = str(opts.get("backend", "minilm"))
            if key not in embedders:
                embedders[key] = _options(dataset, name, pooled, opts)["embedder"]  # type: ignore[assignment]
            opts["embedder"] = embedders[key]
            if name == "combined":
                opts["stack_embedders"] = _options(dataset, name, pooled, opts)["stack_embedders"]
        tasks: list[tuple[str, str, V0Rows, PriorPrediction]] = []
        ctx = dataset.context
        tasks.append(
            ("context_cv", "cv", ctx, cross_validate_context(dataset, name, pooled=pooled, folds=folds, **opts))
        )
        for split in sorted(dataset.queries):
            rows = dataset.queries[split]
            if "offline" in protocols:
                tasks.append((split, "offline", rows, predict_rows(dataset, rows, name, pooled=pooled, **opts)))
            if "online" in protocols:
                pred = predict_rows_online(dataset, rows, name, pooled=pooled, batch_size=batch_size, **opts)
                tasks.append((split, "online", rows, pred))
        for split, protocol, rows, pred in tasks:
            met = prior_metrics(pred.mean, rows.score, rows.snapshot, _steps(dataset, rows)).to_dict()
            ratio, worth = eb_fusion_ratio(pred.mean, pred.n0, rows.score, k=4)
            results.append(
                {
                    "provider": name,
                    "split": split,
                    "protocol": protocol,
                    "pooled": pooled,
                    **met,
                    "tau2_mean": float(np.mean(pred.tau2)),
                    "n0_mean": float(np.mean(pred.n0)),
                    "eb_over_grpo_k4": ratio,
                    "worth_k4": worth,
                }
            )
            if protocol in ("cv", "offline"):
                curves[f"{name} {split}"] = (pred.mean, rows.score)
    if plot is not None:
        reliability_plot(curves, plot, title=f"prior reliability ({'pooled' if pooled else 'per snapshot'})")
    return results


def benchmark_throughput(
    n_prompts: int = 512,
    *,
    backend: str = "minilm",
    context: int = 256,
    cache_dir: str | Path | None = None,
    seed: int = 0,
    **backend_options: object,
) -> dict[str, float]:
    """Time embedding + predicting ``n_prompts`` new prompts with the ``v0`` provider (KRR head) on bundled prompts.

    The context (``context`` prompts) is embedded first and not timed; the timed part encodes the new prompts with a
    fresh (memory-only unless ``cache_dir``) cache, fits the head and predicts. A second pass over the same prompts
    measures the cached path.

    Returns:
        ``{"n_prompts", "seconds", "prompts_per_s", "cached_seconds", "cached_prompts_per_s", "load_seconds"}``.
    """
    data = load_v0()
    keys = np.array(sorted(data.prompts))
    rng = np.random.default_rng(seed)
    pick = rng.permutation(len(keys))
    if n_prompts + context > len(keys):
        raise ValueError(f"n_prompts + context must be <= {len(keys)} bundled prompts, got {n_prompts + context}")
    ctx_keys, new_keys = keys[pick[:context]], keys[pick[context : context + n_prompts]]
    t0 = time.perf_counter()
    embedder = Embedder(
        backend=make_backend(backend, **backend_options), cache_dir=False if cache_dir is None else cache_dir
    )
    prov = make_provider("v0", embedder=embedder, context_size=context)
    prov.update(list(ctx_keys), data.texts(ctx_keys), rng.uniform(-1, 1, context), np.full(context, 10.0))
    prov.predict(list(ctx_keys[:1]), data.texts(ctx_keys[:1]))  # loads the model and fits the head on the context
    load = time.perf_counter() - t0
    t1 = time.perf_counter()
    prov.predict(list(new_keys), data.texts(new_keys))
    seconds = time.perf_counter() - t1
    t2 = time.perf_counter()
    prov.predict(list(new_keys), data.texts(new_keys))
    cached = time.perf_counter() - t2
    return {
        "n_prompts": float(n_prompts),
        "seconds": seconds,
        "prompts_per_s": n_prompts / seconds,
        "cached_seconds": cached,
        "cached_prompts_per_s": n_prompts / max(cached, 1e-9),
        "load_seconds": load,
        "truncated": float(embedder.truncated),
    }


__all__ = [
    "LABEL_ROLLOUTS",
    "benchmark_throughput",
    "context_folds",
    "cross_validate_context",
    "evaluate_v0",
    "predict_rows",
    "predict_rows_online",
]
