"""The simulator: populations of prompts with true values μ, priors of controllable quality, and the grid runner.

``v05 simulate`` (:mod:`v05.sim.cli`) drives :func:`v05.sim.runner.run_simulation` and renders its records with
:mod:`v05.sim.report`. Everything here is numpy-only; randomness comes from an explicit ``np.random.Generator``.
"""

from v05.sim.config import SimConfig
from v05.sim.populations import Population, synthetic_population, v0_population
from v05.sim.priors import PriorSpec, parse_prior, prior_values
from v05.sim.runner import SimResult, run_simulation

__all__ = [
    "Population",
    "PriorSpec",
    "SimConfig",
    "SimResult",
    "parse_prior",
    "prior_values",
    "run_simulation",
    "synthetic_population",
    "v0_population",
]
