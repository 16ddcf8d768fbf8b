"""The provider registry: one explicit dict, name → spec (its class and what a runner must give it).

Unknown names list the valid ones. The spec is the only place a provider's needs are declared: runners read them
through :func:`get_provider_spec`, never from the provider object.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from v05.extras import require_modules
from v05.names import build, lookup
from v05.priors.combined import CombinedProvider
from v05.priors.compose import BaseProvider
from v05.priors.history import DomainMeanProvider, HistoryProvider, RunningMeanProvider
from v05.priors.learned import ProbeProvider, V0Provider
from v05.priors.oracle import OracleProvider
from v05.priors.spo import SpoProvider


@dataclass(frozen=True, slots=True)
class ProviderSpec:
    """A registered prior provider and what a runner must give it.

    Attributes:
        cls: its class (a :class:`~v05.priors.compose.BaseProvider`; keyword options = its init fields).
        needs_policy: it reads the live policy's features (``probe``): the runner binds the policy
            (``bind_policy``), and the provider reads the rendered prompt, not the bare problem text.
        needs_sampler: it draws extra rollouts of the current policy (``oracle``, a bound, not a method): only v05's
            trainer can give it them (``bind_sampler``); TRL and verl refuse it, and the offline evaluation on V0
            data has nothing to fit it on.
        reads_text: it embeds each prompt's bare problem text (``v0``, ``combined``), so a runner must supply that
            text; the others read prompt keys only (``running_mean``, ``domain_mean``, ``history``, ``oracle``),
            except ``probe``, which reads the policy (``needs_policy``).
        feeds_n0: its n0 is a pseudo-count in rollouts that an estimator or allocator with an ``n0`` option may
            take (the runner's ``feed_n0`` switch gates it); True for every provider today.
        needs_drift: with ``rho="kl"`` it discounts each prompt's evidence by the policy's drift since the prompt's
            last visit (``spo``: ``observe_drift`` before ``update``); only v05's trainer measures it (TRL and verl
            refuse ``rho="kl"``; ``rho="constant"`` needs nothing).
        offline_init: it can start from n offline rollouts per prompt of the starting policy (``spo``:
            ``init_offline``), which v05's trainer draws and counts (``init_rollouts``).
        starts_from: it can start each prompt from another provider's prediction (``spo``: options ``start_from``,
            the provider's name, and ``start_options``, its options); what that provider needs the runner gives
            (:func:`provider_spec`).
    """

    cls: type[BaseProvider]
    needs_policy: bool = False
    needs_sampler: bool = False
    reads_text: bool = False
    feeds_n0: bool = True
    needs_drift: bool = False
    offline_init: bool = False
    starts_from: bool = False


PROVIDERS: dict[str, ProviderSpec] = {
    "running_mean": ProviderSpec(RunningMeanProvider),
    "history": ProviderSpec(HistoryProvider),
    "v0": ProviderSpec(V0Provider, reads_text=True),
    "combined": ProviderSpec(CombinedProvider, reads_text=True),
    "domain_mean": ProviderSpec(DomainMeanProvider),
    "probe": ProviderSpec(ProbeProvider, needs_policy=True),
    "oracle": ProviderSpec(OracleProvider, needs_sampler=True),
    "spo": ProviderSpec(SpoProvider, needs_drift=True, offline_init=True, starts_from=True),
}
"""Provider name → spec (its class, constructed with keyword options, and the capabilities runners read)."""

EMBEDDING_PROVIDERS = tuple(n for n, s in PROVIDERS.items() if s.reads_text and not s.needs_policy)
"""Providers the offline evaluation embeds with its own text backend (``v0``, ``combined``; not ``probe``)."""


def get_provider_spec(name: str) -> ProviderSpec:
    """The registered provider ``name``; unknown names list the valid ones."""
    return lookup(PROVIDERS, name, "prior provider")


def make_provider(name: str, **options: object) -> BaseProvider:
    """Build a provider by name with keyword options.

    Raises:
        ValueError: an unknown name or option, or a package its backend or head needs that is not installed (the
            message names the package and the extra, e.g. ``pip install 'v05[priors]'``).
    """
    return _build(name, options)


def _build(name: str, options: dict[str, object]) -> BaseProvider:
    options = dict(options)
    if "start_from" in options or "start_options" in options:
        if not get_provider_spec(name).starts_from:
            raise ValueError(f"prior provider {name!r} has no start_from (only {', '.join(_starters())} do)")
        start, start_options = options.pop("start_from", None), options.pop("start_options", None) or {}
        if not isinstance(start, str) or not isinstance(start_options, dict):
            raise ValueError("start_from must name a prior provider and start_options be a mapping of its options")
        if get_provider_spec(start).starts_from or get_provider_spec(start).needs_sampler:
            raise ValueError(f"start_from={start!r}: a learned prior (not a tracker, not the oracle bound)")
        options["start"] = _build(start, start_options)
    provider = build({n: s.cls for n, s in PROVIDERS.items()}, name, "prior provider", **options)
    require_modules(provider.requires(), f"prior {name!r}")
    return provider


def _starters() -> list[str]:
    return [n for n, s in PROVIDERS.items() if s.starts_from]


def provider_spec(name: str, options: dict[str, object] | None = None) -> ProviderSpec:
    """What a runner must give the provider ``name`` built with ``options``: its spec, with a start provider's needs.

    A tracker started from another provider (``start_from``) needs what that one needs too: the policy (``probe``),
    the bare problem texts (``v0``, ``combined``). Without ``start_from`` it is :func:`get_provider_spec`.
    """
    spec = get_provider_spec(name)
    start = (options or {}).get("start_from")
    if not spec.starts_from or not isinstance(start, str):
        return spec
    inner = get_provider_spec(start)
    return replace(spec, needs_policy=spec.needs_policy or inner.needs_policy,
                   reads_text=spec.reads_text or inner.reads_text)  # fmt: skip


def check_provider_options(name: str, options: dict[str, object]) -> None:
    """Raise the ValueError :func:`make_provider` would for ``name`` and ``options``; the provider is discarded.

    Construction only checks the options (models, encoders and data load on first use), so a config is checked
    when it loads rather than when its run first needs the prior.
    """
    _build(name, options)


__all__ = [
    "EMBEDDING_PROVIDERS",
    "PROVIDERS",
    "ProviderSpec",
    "check_provider_options",
    "get_provider_spec",
    "make_provider",
    "provider_spec",
]
