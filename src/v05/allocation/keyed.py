"""Per-prompt state keyed by stable prompt ids: lookup and upsert over a sorted key array (numpy only).

The one implementation behind every store that outlives a step (``BetaHistory`` for DBB/SARA/the history prior,
``DpsState`` for DPS): keys are kept sorted so lookups are a vectorised ``searchsorted``.

>>> find(np.array([2, 5, 9]), np.array([5, 7]))
(array([1, 2]), array([ True, False]))
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def find(store_keys: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions of ``keys`` (Q,) in the sorted ``store_keys`` (S,) and a (Q,) mask of which are present.

    Positions of absent keys are clipped into range (read them only where the mask is true); an empty store gives
    zeros and an all-false mask.
    """
    keys = np.asarray(keys)
    if store_keys.size == 0:
        return np.zeros(len(keys), np.int64), np.zeros(len(keys), bool)
    pos = np.minimum(np.searchsorted(store_keys, keys), len(store_keys) - 1)
    return pos, store_keys[pos] == keys


def upsert(
    store_keys: np.ndarray, store_values: Sequence[np.ndarray], keys: np.ndarray, values: Sequence[np.ndarray]
) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """Insert or replace the rows of distinct ``keys`` (Q,); returns the sorted keys and the matching value arrays.

    Args:
        store_keys: (S,) sorted keys of the store.
        store_values: arrays with S rows each (any trailing shape).
        keys: (Q,) distinct keys to write.
        values: arrays with Q rows each, aligned with ``store_values``.
    """
    keys = np.asarray(keys)
    if store_keys.size == 0:
        merged_keys, parts = keys, [np.asarray(v) for v in values]
    else:
        keep = ~np.isin(store_keys, keys)  # (S,) rows not overwritten
        merged_keys = np.concatenate([store_keys[keep], keys])
        parts = [np.concatenate([s[keep], v]) for s, v in zip(store_values, values, strict=True)]
    order = np.argsort(merged_keys, kind="stable")
    return merged_keys[order], tuple(p[order] for p in parts)


__all__ = ["find", "upsert"]
