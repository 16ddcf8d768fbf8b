r"""Ragged-group primitives over a flat batch (numpy only, float64, no Python loops over groups).

A batch is ``values (N,)`` with ``group (N,)`` ids in ``[0, G)``; groups may differ in size. Reductions return
``(G,)`` arrays (suffix ``_g``); ``x_g[group]`` gathers them back to rollouts. Variances are two-pass (centred):
first the group means, then the mean of squared deviations, never Σx² − (Σx)²/n.

>>> import numpy as np
>>> r, g = np.array([1., 0., 0., 1., 1.]), np.array([0, 0, 0, 0, 1])
>>> segment_mean(r, g)
array([0.5, 1. ])
>>> segment_var(r, g, ddof=1)  # group 0: Σ(r − 0.5)² / 3 = 1/3; group 1 has n = 1 → nan
array([0.33333333,        nan])
"""

from __future__ import annotations

import numpy as np

from v05._checks import as_index_1d
from v05._types import FloatArray, IntArray


def n_groups_of(group: IntArray, n_groups: int | None = None) -> int:
    """Number of groups G: ``n_groups`` if given (checked against the ids), else ``max(group) + 1``."""
    top = int(group.max()) + 1 if group.size else 0
    if n_groups is None:
        return top
    if n_groups < top:
        raise ValueError(f"group ids reach {top - 1} but n_groups={n_groups}")
    return n_groups


def segment_count(group: IntArray, n_groups: int | None = None) -> IntArray:
    """n_g = #{i : group_i = g}, shape (G,)."""
    return np.bincount(group, minlength=n_groups_of(group, n_groups)).astype(np.int64)


def segment_sum(values: FloatArray, group: IntArray, n_groups: int | None = None) -> FloatArray:
    """S_g = Σ_{i ∈ g} values_i, shape (G,)."""
    return np.bincount(group, weights=values, minlength=n_groups_of(group, n_groups))


def segment_mean(
    values: FloatArray, group: IntArray, n_groups: int | None = None, *, n_g: IntArray | None = None
) -> FloatArray:
    """x̄_g = S_g / n_g, shape (G,); nan for an empty group. ``n_g``: precomputed counts (G,), trusted."""
    if n_g is None:
        n_g = segment_count(group, n_groups)
    s_g = np.bincount(group, weights=values, minlength=len(n_g))
    with np.errstate(invalid="ignore", divide="ignore"):
        return s_g / n_g


def segment_var(
    values: FloatArray,
    group: IntArray,
    n_groups: int | None = None,
    *,
    ddof: int = 1,
    n_g: IntArray | None = None,
    mean_g: FloatArray | None = None,
) -> FloatArray:
    """Two-pass group variance Σ_{i∈g} (x_i − x̄_g)² / (n_g − ddof), shape (G,); nan where n_g ≤ ddof.

    ``n_g`` (counts) and ``mean_g`` (group means of ``values``) may be passed precomputed; they are trusted.
    """
    if n_g is None:
        n_g = segment_count(group, n_groups)
    if mean_g is None:
        mean_g = segment_mean(values, group, n_g=n_g)
    dev = values - mean_g[group]  # (N,) centred first: no catastrophic cancellation
    ss_g = np.bincount(group, weights=dev * dev, minlength=len(n_g))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n_g > ddof, ss_g / np.maximum(n_g - ddof, 1), np.nan)


def segment_std(
    values: FloatArray,
    group: IntArray,
    n_groups: int | None = None,
    *,
    ddof: int = 1,
    n_g: IntArray | None = None,
    mean_g: FloatArray | None = None,
) -> FloatArray:
    """Group standard deviation √segment_var, shape (G,) (same precomputed ``n_g``/``mean_g`` options)."""
    return np.sqrt(segment_var(values, group, n_groups, ddof=ddof, n_g=n_g, mean_g=mean_g))


def group_index(uids: object) -> tuple[IntArray, np.ndarray]:
    """Map arbitrary per-rollout uids (strings, ints, ...) to dense group ids in [0, G).

    Returns:
        ``(group (N,), unique_uids (G,))`` with ``unique_uids[group] == uids``; ids follow first appearance, so
        a batch laid out prompt by prompt keeps its order.

    Raises:
        ValueError: ``uids`` is not 1-D, or holds values that cannot be ordered together (None beside ints).

    >>> group_index(["b", "a", "b", "c"])[0]
    array([0, 1, 0, 2])
    """
    arr = np.asarray(uids)
    if arr.ndim != 1:
        raise ValueError(f"uids must be 1-D, got shape {arr.shape}")
    try:
        uniq, first, inverse = np.unique(arr, return_index=True, return_inverse=True)
    except TypeError:  # an object array of unorderable uids (None beside ints, mixed types)
        raise ValueError(
            f"uids must be mutually comparable (all strings or all numbers), got {arr[:4].tolist()}"
        ) from None
    order = np.argsort(first, kind="stable")  # rank of each unique uid by first appearance
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return rank[inverse.reshape(-1)].astype(np.int64), uniq[order]


def as_group(group: object, n_rollouts: int, *, n_groups: int | None = None) -> tuple[IntArray, int]:
    """Validate a group id array against a batch: 1-D ints, length N, every id in [0, G) non-empty.

    Returns:
        ``(group, G)``.

    Raises:
        ValueError: naming the problem (length mismatch, negative or non-integer ids, empty groups).
    """
    g = as_index_1d(group, "group")
    if len(g) != n_rollouts:
        raise ValueError(f"length mismatch (rewards: {n_rollouts}, group: {len(g)})")
    top = int(g.max()) + 1 if g.size else 0
    if top > max(n_rollouts, n_groups or 0):  # G ≤ N when no group is empty: refuse before counting G bins
        raise ValueError(
            f"group ids must cover [0, G) without gaps; id {top - 1} exceeds what {n_rollouts} rollouts can fill "
            "(map arbitrary uids with v05.groups.group_index)"
        )
    n_g = segment_count(g, n_groups)
    empty = np.flatnonzero(n_g == 0)
    if empty.size:
        raise ValueError(
            f"group ids must cover [0, G) without gaps; {empty.size} empty group(s), first id {int(empty[0])} "
            "(map arbitrary uids with v05.groups.group_index)"
        )
    return g, len(n_g)


__all__ = [
    "as_group",
    "group_index",
    "n_groups_of",
    "segment_count",
    "segment_mean",
    "segment_std",
    "segment_sum",
    "segment_var",
]
