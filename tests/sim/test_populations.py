"""Populations: the V0 loader view and synthetic Beta mixtures."""

import numpy as np
import pytest

from v05.datasets.v0 import load_v0
from v05.sim import synthetic_population, v0_population


def test_v0_population_shapes():
    """Bundled data: 192 train query rows over 6 snapshots, 512 context rows each."""
    pop = v0_population(load_v0())
    assert pop.n_prompts == 192 and pop.n_batches == 6
    assert all(len(c) == 512 for c in pop.context)
    assert np.all(np.bincount(pop.batch) == 32)
    pool = pop.context_pool()
    assert pool.n_prompts == 6 * 512 and pool.rows is None


def test_v0_population_bad_split():
    """An unknown split is a ValueError naming the available ones."""
    with pytest.raises(ValueError, match="train"):
        v0_population(load_v0(), ("test",))


def test_synthetic_bimodal_is_bimodal():
    """The bimodal mixture puts a large share of prompts near p = 0 and p = 1."""
    pop = synthetic_population("bimodal", rng=np.random.default_rng(0), n_prompts=500, n_batches=2)
    p = (pop.mu + 1) / 2
    assert np.mean(p < 0.1) > 0.15 and np.mean(p > 0.9) > 0.15
    assert pop.n_batches == 2 and len(pop.context[0]) == 256


@pytest.mark.parametrize("kind", ["nope", "beta:1", "beta:0:1", "beta:a:b"])
def test_synthetic_bad_kind(kind):
    """An unknown population kind or a malformed beta:a:b is a ValueError."""
    with pytest.raises(ValueError):
        synthetic_population(kind, rng=np.random.default_rng(0))
