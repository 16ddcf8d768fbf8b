"""The provider registry: one explicit dict, name → factory; unknown names list the valid ones."""

from __future__ import annotations

from v05.priors.incontext import CombinedProvider, ProbeProvider, V0Provider
from v05.priors.providers import BaseProvider, HistoryProvider, RunningMeanProvider

PROVIDERS: dict[str, type[BaseProvider]] = {
    "running_mean": RunningMeanProvider,
    "history": HistoryProvider,
    "v0": V0Provider,
    "combined": CombinedProvider,
    "probe": ProbeProvider,
}
"""Provider name → class (constructed with keyword options)."""

EMBEDDING_PROVIDERS = ("v0", "combined")  # the offline evaluation can embed these (probe needs a policy)


def make_provider(name: str, **options: object) -> BaseProvider:
    """Build a provider by name with keyword options; unknown names or options raise ValueError."""
    if name not in PROVIDERS:
        raise ValueError(f"unknown prior provider {name!r}; valid: {', '.join(PROVIDERS)}")
    try:
        return PROVIDERS[name](**options)  # type: ignore[arg-type]
    except TypeError as err:
        raise ValueError(f"bad options for prior provider {name!r}: {err}") from None


__all__ = ["EMBEDDING_PROVIDERS", "PROVIDERS", "make_provider"]
