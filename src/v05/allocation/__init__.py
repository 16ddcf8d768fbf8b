"""Rollout allocation: the driver loop, the allocators, and the per-prompt beliefs they keep (numpy only).

- :mod:`~v05.allocation.driver`: ``allocate`` (the only sampling loop), ``Pool``, ``Draw``, ``Allocation``, the
  ``Allocator`` protocol.
- :mod:`~v05.allocation.uniform`: ``Fixed`` (GRPO's k per prompt) and ``DynamicSampling`` (DAPO).
- :mod:`~v05.allocation.osla`: V0.5's one-step-look-ahead budget. :mod:`~v05.allocation.sara`: SARA.
  :mod:`~v05.allocation.dps`: DPS's HMM prompt selection. :mod:`~v05.allocation.greso`: GRESO's pre-rollout skip of
  prompts with zero-variance streaks. :mod:`~v05.allocation.select`: ``PriorSelect``, prompt selection by the value
  prior's predicted outcome variance.
- :mod:`~v05.allocation.posterior`: ``BetaPosterior`` and the discounted ``BetaHistory`` (shared with the ``dbb``
  estimator and the ``history`` prior); :mod:`~v05.allocation.keyed`: the sorted-key store behind every per-prompt
  state.
"""

from v05.allocation.dps import DPS, DpsState
from v05.allocation.driver import Allocation, Allocator, Draw, Pool, SampleFn, allocate
from v05.allocation.greso import GRESO, GresoState
from v05.allocation.osla import OSLA
from v05.allocation.posterior import BetaHistory, BetaPosterior
from v05.allocation.sara import SARA
from v05.allocation.select import PriorSelect
from v05.allocation.uniform import DynamicSampling, Fixed

__all__ = [
    "DPS",
    "GRESO",
    "OSLA",
    "SARA",
    "Allocation",
    "Allocator",
    "BetaHistory",
    "BetaPosterior",
    "Draw",
    "DpsState",
    "DynamicSampling",
    "Fixed",
    "GresoState",
    "Pool",
    "PriorSelect",
    "SampleFn",
    "allocate",
]
