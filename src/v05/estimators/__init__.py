"""Advantage estimators: pure functions over a flat ragged batch, each returning an :class:`Estimate`.

Group-relative: ``grpo``, ``drgrpo``, ``rloo``, ``reinforce_pp_baseline``, ``oracle``; batch-relative:
``reinforce_pp``. Prior fusion: ``v05`` (the paper's shrinkage + test) and ``v05_eb`` (ours). History: ``dbb``.
A tracker's value as the baseline, normalised over the batch: ``spo``. The name → function registry is
:mod:`v05.registry`.
"""

from v05.estimators._batch import Estimate
from v05.estimators.fusion import PriorErrorState, v05, v05_eb
from v05.estimators.group import drgrpo, grpo, oracle, reinforce_pp, reinforce_pp_baseline, rloo
from v05.estimators.history import dbb
from v05.estimators.poise_baseline import cross_rollout_targets, poise
from v05.estimators.tracker import spo

__all__ = [
    "Estimate",
    "PriorErrorState",
    "cross_rollout_targets",
    "dbb",
    "drgrpo",
    "grpo",
    "oracle",
    "poise",
    "reinforce_pp",
    "reinforce_pp_baseline",
    "rloo",
    "spo",
    "v05",
    "v05_eb",
]
