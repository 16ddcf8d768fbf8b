"""Hypothesis strategies: ragged, shuffled flat batches."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st


@st.composite
def ragged_batches(draw, *, min_groups=1, max_groups=8, min_size=1, max_size=9, binary=True, reward_range="pm1"):
    """(rewards (N,), group (N,), prior_g (G,)) with group sizes in [min_size, max_size], rollouts shuffled."""
    n_groups = draw(st.integers(min_groups, max_groups))
    sizes = draw(st.lists(st.integers(min_size, max_size), min_size=n_groups, max_size=n_groups))
    group = np.repeat(np.arange(n_groups), sizes)
    lo = -1.0 if reward_range == "pm1" else 0.0
    n = len(group)
    if binary:
        bits = draw(st.lists(st.booleans(), min_size=n, max_size=n))
        rewards = np.where(np.array(bits, bool), 1.0, lo)
    else:
        rewards = np.array(draw(st.lists(st.floats(lo, 1.0), min_size=n, max_size=n)))
    prior = np.array(draw(st.lists(st.floats(lo, 1.0), min_size=n_groups, max_size=n_groups)))
    perm = np.array(draw(st.permutations(range(n))), dtype=np.int64)
    return rewards[perm], group[perm], prior
