"""The selection grid's fields (issue 42) on a task setting's results: the pool's spread and the oracle's headroom.

Per task setting, beside ``pool``:

- ``pass_rate_var``: the candidate pool's Var(p) as the oracle saw it, each step's ``pool_prior_var`` (the variance
  of the measured p̂ = (s + ½)/(m + 1) over every candidate of the step) averaged over the steps of each seed's run,
  then over the seeds. It holds the sampling noise of m rollouts too, E[p(1 − p)]·m/(m + 1)², the same for every
  setting at equal m and pass rate; None where the oracle's cells have not run or did not log it;
- ``oracle_selection_headroom`` and ``oracle_selection_headroom_ci95``: the oracle's selection − ``control``
  (uniform k = 1 with the running mean), paired over the run and the seeds, as fractions, with its 95 % t-interval
  (the attribution's ``headroom``).

Per method: ``vs_uniform_diff`` and ``vs_uniform_ci95`` (its paired difference to ``control``, the fields
``vs_running_mean_*`` of every grid under the name the selection grid's contract gives them) and ``tuned`` (compared
at its best tuning setting, not at its config as it is).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from v05.registry import ALLOCATORS
from v05.report.runs import Run

POOL_VAR_KEY = "pool_prior_var"
"""The metric each step logs: the variance of the prior's pass rates over the step's whole candidate pool."""


def pool_pass_rate_var(runs: Sequence[Run]) -> float | None:
    """Var(p) of the candidate pool: each run's mean ``pool_prior_var`` over its steps, averaged over the runs."""
    per_run = [float(np.mean(v)) for v in (r.series(POOL_VAR_KEY)[1] for r in runs) if v.size]
    return float(np.mean(per_run)) if per_run else None


def selects(runs: Sequence[Run]) -> bool:
    """Whether the runs' allocator selects and reads the prior (prior_select): their oracle is a selection bound."""
    names = {r.config_value("allocator.name") for r in runs}
    return bool(names) and all(n in ALLOCATORS and ALLOCATORS[n].pool and ALLOCATORS[n].uses_prior for n in names)


def add_selection_fields(
    task: dict[str, Any], headroom: dict[str, Any] | None, oracle_runs: Sequence[Run]
) -> dict[str, Any]:
    """``task`` (one task setting's results) with the module docstring's fields added, where the oracle selects.

    ``headroom`` is the attribution's (None: no oracle or control declared), ``oracle_runs`` the oracle's finished
    runs. An oracle that does not select (the evidence grid's: a baseline at k = 1) leaves ``task`` as it is: its
    headroom is the baseline's, not the selection's.
    """
    if not selects(oracle_runs):
        return task
    task["pass_rate_var"] = pool_pass_rate_var(oracle_runs)
    task["oracle_selection_headroom"] = None if headroom is None else headroom["oracle_diff"]
    task["oracle_selection_headroom_ci95"] = None if headroom is None else headroom["oracle_ci95"]
    for entry in task["methods"].values():
        entry["vs_uniform_diff"] = entry.get("vs_running_mean_diff")
        entry["vs_uniform_ci95"] = entry.get("vs_running_mean_ci95")
        entry["tuned"] = entry.get("setting") is not None
    return task


__all__ = ["POOL_VAR_KEY", "add_selection_fields", "pool_pass_rate_var", "selects"]
