"""Per-step cost of the ``combined`` prior as the trainer drives it: predict → update → calibration, ~100 steps.

Deterministic (one seeded rng): a pool of bundled V0 prompt texts, ``--prompts`` of them per step (cycled like the
trainer's queue, so prompts recur), group means of k = 4 ±1 rollouts drawn from a latent pass rate that drifts with
the step. MiniLM is never run: its rows come from a precomputed table (synthetic 384-d unit rows with topic
structure, filled into the embedder's memory cache as a warm disk cache would), so ``embed`` takes its real cached
path; TF-IDF is the real backend, prefetched like the trainer's pool. Prints the median seconds per step of
``predict``, ``update`` and ``calibration`` (over steps ≥ ``--skip``) by wall clock and by this process's CPU
time (steadier on a shared machine: waiting for a core is not counted) and, with ``--reference``, the largest
|Δ| of every prediction (mean, τ², n0) against a saved run (``--save`` writes one).

Usage: OPENBLAS_NUM_THREADS=1 python benchmarks/bench_prior_step.py [--steps 100] [--prompts 64] [--pool 1500]
       [--refit-every 1] [--save /tmp/prior_ref.npz | --reference /tmp/prior_ref.npz] [--json PATH]
``mse_vs_truth`` is the mean squared error of the predicted mean score against the latent one (2p − 1) over steps
≥ ``--skip``: what amortising the refit (``--refit-every``) costs the prior.
Before/after: run it once on a copy of ``src`` holding the old ``v05/priors`` files (``PYTHONPATH=COPY ... --save``),
then on the working tree with ``--reference``; alternate the two a few times on a busy machine.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

import numpy as np

from v05.datasets.v0 import load_v0
from v05.priors import make_provider
from v05.priors.backends import make_backend
from v05.priors.embeddings import Embedder, text_key

WIDTH = 384
"""MiniLM's embedding width."""
TOPICS = 24
"""Latent topics of the synthetic embedding table (prompts of one topic share a direction and a difficulty)."""
K_ROLLOUTS = 4


class TableBackend:
    """A stand-in for MiniLM whose rows were computed before the run (never called once the cache is filled)."""

    id = "table-minilm"
    truncated = 0

    def encode(self, texts: list[str]) -> np.ndarray:
        """Refuse: every row must come from the prefilled cache."""
        raise RuntimeError(f"TableBackend asked to encode {len(texts)} uncached texts")


def _world(rng: np.random.Generator, n_pool: int) -> tuple[list[str], list[str], np.ndarray, np.ndarray]:
    """(ids, texts, (P, D) embedding table, (P,) latent logit of each prompt's pass rate)."""
    data = load_v0()
    keys = np.array(sorted(data.prompts))[rng.permutation(len(data.prompts))[:n_pool]]
    texts = data.texts(keys)
    topic = rng.integers(0, TOPICS, n_pool)
    centre = rng.normal(size=(TOPICS, WIDTH))
    emb = centre[topic] + 1.5 * rng.normal(size=(n_pool, WIDTH))  # (P, D)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    logit = rng.normal(0.0, 1.5, TOPICS)[topic] + rng.normal(0.0, 0.7, n_pool)
    return [str(k) for k in keys], texts, emb, logit


def _provider(texts: list[str], emb: np.ndarray, refit_every: int = 1) -> object:
    minilm = Embedder(backend=TableBackend(), cache_dir=False)  # type: ignore[arg-type]
    minilm.memory_.update({text_key(t): row.astype(np.float32) for t, row in zip(texts, emb, strict=True)})
    tfidf = Embedder(backend=make_backend("tfidf"), cache_dir=False)
    prov = make_provider("combined", embedder=minilm, stack_embedders={"tfidf": tfidf}, refit_every=refit_every)
    prov.prefetch(texts)  # the trainer embeds its pool once, up front
    return prov


def run(n_steps: int, n_prompts: int, n_pool: int, seed: int, refit_every: int = 1) -> dict[str, np.ndarray]:
    """Drive the provider; returns per-step times and the stacked predictions."""
    rng = np.random.default_rng(seed)
    ids, texts, emb, logit = _world(rng, n_pool)
    prov = _provider(texts, emb, refit_every)
    order = rng.permutation(n_pool)
    wall: dict[str, list[float]] = {"predict": [], "update": [], "calibration": []}
    cpu: dict[str, list[float]] = {"predict": [], "update": [], "calibration": []}
    means, tau2s, n0s, truth = [], [], [], []

    def timed(name: str, call: object, *args: object, **kwargs: object) -> object:
        w0, c0 = time.perf_counter(), time.process_time()
        out = call(*args, **kwargs)  # type: ignore[operator]
        wall[name].append(time.perf_counter() - w0)
        cpu[name].append(time.process_time() - c0)
        return out

    for step in range(1, n_steps + 1):
        start = ((step - 1) * n_prompts) % n_pool
        idx = order[np.arange(start, start + n_prompts) % n_pool]  # the queue cycles through the pool
        s_ids, s_texts = [ids[i] for i in idx], [texts[i] for i in idx]
        pred = timed("predict", prov.predict, s_ids, s_texts)  # type: ignore[attr-defined]
        p = 1.0 / (1.0 + np.exp(-(logit[idx] + 0.02 * step)))  # the policy improves
        wins = rng.binomial(K_ROLLOUTS, p)
        scores = 2.0 * wins / K_ROLLOUTS - 1.0  # (G,) ±1 group means
        counts = np.full(n_prompts, float(K_ROLLOUTS))
        timed("update", prov.update, s_ids, s_texts, scores, counts, step=step)  # type: ignore[attr-defined]
        timed("calibration", prov.calibration)  # type: ignore[attr-defined]  # the trainer logs it every step
        means.append(pred.mean)
        truth.append(2.0 * p - 1.0)  # the latent mean score the prediction is for
        tau2s.append(pred.tau2)
        n0s.append(pred.n0)
    return {
        **{f"{name}_s": np.array(v) for name, v in wall.items()},
        **{f"{name}_cpu_s": np.array(v) for name, v in cpu.items()},
        "mean": np.stack(means),
        "tau2": np.stack(tau2s),
        "n0": np.stack(n0s),
        "truth": np.stack(truth),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--pool", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip", type=int, default=10, help="steps left out of the medians (buffer filling up)")
    parser.add_argument("--save", default=None, help="write this run's predictions here (.npz)")
    parser.add_argument("--reference", default=None, help="compare predictions with a run saved by --save")
    parser.add_argument("--refit-every", type=int, default=1, help="the combined prior's refit_every")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # the first steps warn that the buffer is too small
    out = run(args.steps, args.prompts, args.pool, args.seed, args.refit_every)
    tail = slice(args.skip, None)
    result: dict[str, float] = {}
    for clock in ("", "_cpu"):
        parts = [f"{name}{clock}_s" for name in ("predict", "update", "calibration")]
        result |= {f"median_{part}": float(np.median(out[part][tail])) for part in parts}
        total = sum(out[part] for part in parts)
        result[f"median_total{clock}_s"] = float(np.median(total[tail]))
        result[f"sum_total{clock}_s"] = float(np.sum(total))
    result["mse_vs_truth"] = float(np.mean((out["mean"][tail] - out["truth"][tail]) ** 2))  # the prior's quality
    if args.save:
        np.savez(args.save, mean=out["mean"], tau2=out["tau2"], n0=out["n0"])
    if args.reference:
        ref = np.load(args.reference)
        for name in ("mean", "tau2", "n0"):
            n = min(len(out[name]), len(ref[name]))  # the steps both runs made
            result[f"max_abs_diff_{name}"] = float(np.max(np.abs(out[name][:n] - ref[name][:n])))
    text = json.dumps(result, indent=2)
    print(text)  # a script, not the library: printing is its output
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            fh.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
