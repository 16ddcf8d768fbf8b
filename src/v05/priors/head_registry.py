"""Head name → head factory: the one registry of the in-context providers' heads.

It sits above the modules that define heads — :mod:`v05.priors.heads` (kernel ridge, GP, kNN, logistic, TabPFN),
:mod:`v05.value_probe` (``pca_ridge``, POISE's probe on prompt features) and :mod:`v05.priors.v0_official` (TabPFN
configured as the released V0 runs it) — so none of them imports another to register itself. Importing it loads
numpy only: scikit-learn, TabPFN and torch are imported when a head is fitted.
"""

from __future__ import annotations

from collections.abc import Callable

from v05.names import build
from v05.priors.heads import GaussianProcessHead, Head, KernelRidgeHead, KNNHead, LogisticHead, TabPFNHead
from v05.priors.v0_official import V0TabPFNHead
from v05.value_probe import PcaRidgeHead

HEADS: dict[str, Callable[..., Head]] = {
    "krr": KernelRidgeHead,
    "gp": GaussianProcessHead,
    "knn": KNNHead,
    "logistic": LogisticHead,
    "logistic_hard": lambda **kw: LogisticHead(hard=True, **kw),
    "tabpfn": TabPFNHead,
    "v0_tabpfn": V0TabPFNHead,
    "pca_ridge": PcaRidgeHead,
}
"""Head name → factory(**options). ``v0_tabpfn`` is TabPFN configured as the released V0 runs it."""


def make_head(name: str, **options: float | int | str | None) -> Head:
    """Build a head by name; unknown names list the valid ones (:func:`v05.names.build`)."""
    return build(HEADS, name, "head", **options)


__all__ = ["HEADS", "make_head"]
