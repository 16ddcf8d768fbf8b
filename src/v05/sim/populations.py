r"""Populations of prompts with true values μ (±1 space), grouped into step batches, with what a prior may see.

Two sources:
- :func:`v0_population`: real V0 data. Each query row's score s is the prompt's true value μ = s (plug-in truth:
  s is itself a mean over a few rollouts, so this treats a 10/10 prompt as deterministic). Each snapshot (policy) is
  one step batch; its context rows are what a prior may see, and the pool for pool-selecting allocators.
- :func:`synthetic_population`: pass rates p from a Beta mixture (``bimodal`` by default: many prompts the policy
  (almost) never or (almost) always solves, like real RL data), μ = 2p − 1; each batch gets its own synthetic
  context, scored like V0's (mean of ``context_rollouts`` ±1 rewards).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from v05._types import FloatArray, IntArray
from v05.datasets.v0 import V0Dataset, V0Rows
from v05.rewards import from_pass_rate

BETA_MIXTURES: dict[str, tuple[tuple[float, float, float], ...]] = {
    "bimodal": ((0.3, 0.5, 4.0), (0.3, 4.0, 0.5), (0.4, 1.5, 1.5)),
    "uniform": ((1.0, 1.0, 1.0),),
    "hard": ((0.7, 0.5, 4.0), (0.3, 1.5, 1.5)),
}
"""Named pass-rate mixtures: (weight, a, b) components of p ~ Σ w·Beta(a, b)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Population:
    """Prompts with true values, split into step batches.

    Attributes:
        name: label for records (``v0:<dir>[:split]`` or ``synthetic:<kind>``).
        mu: (P,) true values E[r | prompt] in [−1, 1].
        batch: (P,) step batch (V0: snapshot) of each prompt, in [0, B).
        keys: (P,) stable prompt keys (unique within a batch).
        batch_names: (B,) readable batch names.
        context: (B,) per batch, the ±1 scores a prior may see (V0 context rows).
        context_keys: (B,) per batch, the prompt keys of those scores.
        dataset: the V0 dataset behind it (for learned prior providers), or None.
        rows: the V0 query rows behind ``mu`` (same order), or None.
    """

    name: str
    mu: FloatArray
    batch: IntArray
    keys: np.ndarray
    batch_names: tuple[str, ...]
    context: tuple[FloatArray, ...]
    context_keys: tuple[np.ndarray, ...]
    dataset: V0Dataset | None = field(default=None, repr=False)
    rows: V0Rows | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        mu = np.asarray(self.mu, np.float64)
        batch = np.asarray(self.batch, np.int64)
        if mu.ndim != 1 or mu.size == 0:
            raise ValueError(f"mu must be a non-empty 1-D array, got shape {mu.shape}")
        if not np.all(np.isfinite(mu)) or np.any(np.abs(mu) > 1):
            raise ValueError("mu must be finite and in [-1, 1] (±1 reward space)")
        if batch.shape != mu.shape or np.asarray(self.keys).shape != mu.shape:
            raise ValueError(f"batch and keys must have shape {mu.shape}")
        n_batches = len(self.batch_names)
        if batch.min() < 0 or batch.max() >= n_batches or len(np.unique(batch)) != n_batches:
            raise ValueError(f"batch ids must cover [0, {n_batches}) exactly")
        if len(self.context) != n_batches or len(self.context_keys) != n_batches:
            raise ValueError(f"context and context_keys need one entry per batch ({n_batches})")
        object.__setattr__(self, "mu", mu)
        object.__setattr__(self, "batch", batch)

    @property
    def n_prompts(self) -> int:
        """P, the number of prompts."""
        return len(self.mu)

    @property
    def n_batches(self) -> int:
        """B, the number of step batches."""
        return len(self.batch_names)

    def batch_index(self, b: int) -> IntArray:
        """(P_b,) indices of the prompts of batch ``b``."""
        return np.flatnonzero(self.batch == b)

    def context_mean(self) -> FloatArray:
        """(B,) mean context score per batch."""
        return np.array([float(np.mean(c)) for c in self.context])

    def context_pool(self) -> Population:
        """The context rows as a population (the candidate pool of pool-selecting allocators).

        Its true values are the context scores, and it is its own context; it carries no V0 query rows.
        """
        mu = np.concatenate(self.context)
        batch = np.concatenate([np.full(len(c), b) for b, c in enumerate(self.context)])
        keys = np.concatenate(self.context_keys)
        return replace(self, name=f"{self.name}:context_pool", mu=mu, batch=batch, keys=keys, rows=None)


def v0_population(dataset: V0Dataset, splits: tuple[str, ...] | None = None) -> Population:
    """Prompts = the V0 query rows (μ = score), one step batch per snapshot, context = the snapshot's context rows.

    Args:
        dataset: a loaded V0 directory (``v05.datasets.v0.load_v0``).
        splits: query splits to use (e.g. ``("train",)``); None = all of them.

    Raises:
        ValueError: an unknown split, or a snapshot with query rows but no context rows.
    """
    names = tuple(sorted(dataset.queries)) if splits is None else tuple(splits)
    unknown = [s for s in names if s not in dataset.queries]
    if unknown or not names:
        raise ValueError(f"unknown V0 split(s) {unknown or names}; available: {', '.join(sorted(dataset.queries))}")
    parts = [dataset.queries[s] for s in names]
    rows = V0Rows(
        np.concatenate([p.prompt_id for p in parts]),
        np.concatenate([p.score for p in parts]),
        np.concatenate([p.snapshot for p in parts]),
    )
    snaps = np.unique(rows.snapshot)  # snapshots with query rows, sorted
    context, context_keys = [], []
    for s in snaps:
        mask = dataset.context.snapshot == s
        if not mask.any():
            raise ValueError(f"snapshot {dataset.snapshot_name(int(s))} has query rows but no context rows")
        context.append(dataset.context.score[mask])
        context_keys.append(dataset.context.prompt_id[mask])
    return Population(
        name=f"v0:{dataset.root.name}" + ("" if splits is None else ":" + "+".join(names)),
        mu=rows.score,
        batch=np.searchsorted(snaps, rows.snapshot),
        keys=rows.prompt_id,
        batch_names=tuple(dataset.snapshot_name(int(s)) for s in snaps),
        context=tuple(context),
        context_keys=tuple(context_keys),
        dataset=dataset,
        rows=rows,
    )


def sample_pass_rates(kind: str, n: int, rng: np.random.Generator) -> FloatArray:
    """(n,) pass rates from a named mixture (``BETA_MIXTURES``) or ``beta:A:B`` (one Beta(A, B))."""
    if kind.startswith("beta:"):
        try:
            a, b = (float(x) for x in kind[5:].split(":"))
        except ValueError:
            raise ValueError(f"bad synthetic population {kind!r}: expected beta:A:B, e.g. beta:0.5:0.5") from None
        if not (a > 0 and b > 0):
            raise ValueError(f"bad synthetic population {kind!r}: A and B must be > 0")
        components = ((1.0, a, b),)
    elif kind in BETA_MIXTURES:
        components = BETA_MIXTURES[kind]
    else:
        raise ValueError(f"unknown synthetic population {kind!r}; valid: {', '.join(BETA_MIXTURES)}, beta:A:B")
    weights = np.array([c[0] for c in components])
    which = rng.choice(len(components), size=n, p=weights / weights.sum())  # (n,)
    a = np.array([c[1] for c in components])[which]
    b = np.array([c[2] for c in components])[which]
    return rng.beta(a, b)


def synthetic_population(
    kind: str = "bimodal",
    *,
    rng: np.random.Generator,
    n_prompts: int = 64,
    n_batches: int = 4,
    n_context: int = 256,
    context_rollouts: int = 10,
) -> Population:
    """A synthetic population: ``n_batches`` step batches of ``n_prompts`` prompts each.

    Args:
        kind: a name in ``BETA_MIXTURES`` (``bimodal``, ``uniform``, ``hard``) or ``beta:A:B``.
        rng: random generator.
        n_prompts: prompts per batch.
        n_batches: step batches.
        n_context: context prompts per batch (fresh draws from the same mixture).
        context_rollouts: rollouts behind each context score (V0 uses 10).

    Raises:
        ValueError: an unknown kind or non-positive sizes.
    """
    for name, val in (("n_prompts", n_prompts), ("n_batches", n_batches), ("n_context", n_context)):
        if int(val) < 1:
            raise ValueError(f"{name} must be >= 1, got {val}")
    if int(context_rollouts) < 1:
        raise ValueError(f"context_rollouts must be >= 1, got {context_rollouts}")
    p = sample_pass_rates(kind, n_prompts * n_batches, rng)
    context, context_keys = [], []
    for b in range(n_batches):
        p_ctx = sample_pass_rates(kind, n_context, rng)
        wins = rng.binomial(context_rollouts, p_ctx)
        context.append(from_pass_rate(wins / context_rollouts, "pm1"))
        context_keys.append(np.array([f"ctx{b}_{i}" for i in range(n_context)], dtype=object))
    return Population(
        name=f"synthetic:{kind}",
        mu=from_pass_rate(p, "pm1"),
        batch=np.repeat(np.arange(n_batches), n_prompts),
        keys=np.array([f"p{i}" for i in range(n_prompts * n_batches)], dtype=object),
        batch_names=tuple(f"batch{b}" for b in range(n_batches)),
        context=tuple(context),
        context_keys=tuple(context_keys),
    )


__all__ = ["BETA_MIXTURES", "Population", "sample_pass_rates", "synthetic_population", "v0_population"]
