"""v05: adaptive advantage baselines for RLVR (V0.5 prior fusion, OSLA allocation, and their peers).

The statistical core (groups, estimators, allocators, simulator) needs numpy only; importing ``v05`` never
imports torch. Entry point: :func:`compute_advantages` over the estimator registry.
"""

from v05.registry import ESTIMATORS, compute_advantages, get_estimator

__version__ = "0.1.0"
__all__ = ["ESTIMATORS", "__version__", "compute_advantages", "get_estimator"]
