"""The provider registry: one explicit dict, name → factory; unknown names list the valid ones."""

from __future__ import annotations

from v05.extras import require_modules
from v05.names import build
from v05.priors.combined import CombinedProvider
from v05.priors.compose import BaseProvider
from v05.priors.history import DomainMeanProvider, HistoryProvider, RunningMeanProvider
from v05.priors.learned import ProbeProvider, V0Provider
from v05.priors.oracle import OracleProvider

PROVIDERS: dict[str, type[BaseProvider]] = {
    "running_mean": RunningMeanProvider,
    "history": HistoryProvider,
    "v0": V0Provider,
    "combined": CombinedProvider,
    "domain_mean": DomainMeanProvider,
    "probe": ProbeProvider,
    "oracle": OracleProvider,
}
"""Provider name → class (constructed with keyword options)."""

EMBEDDING_PROVIDERS = ("v0", "combined")  # the offline evaluation can embed these (probe needs a policy)


def make_provider(name: str, **options: object) -> BaseProvider:
    """Build a provider by name with keyword options.

    Raises:
        ValueError: an unknown name or option, or a package its backend or head needs that is not installed (the
            message names the package and the extra, e.g. ``pip install 'v05[priors]'``).
    """
    return _build(name, options)


def _build(name: str, options: dict[str, object]) -> BaseProvider:
    provider = build(PROVIDERS, name, "prior provider", **options)
    require_modules(provider.requires(), f"prior {name!r}")
    return provider


def check_provider_options(name: str, options: dict[str, object]) -> None:
    """Raise the ValueError :func:`make_provider` would for ``name`` and ``options``; the provider is discarded.

    Construction only checks the options (models, encoders and data load on first use), so a config is checked
    when it loads rather than when its run first needs the prior.
    """
    _build(name, options)


__all__ = ["EMBEDDING_PROVIDERS", "PROVIDERS", "check_provider_options", "make_provider"]
