"""The v05 estimator's options under TRL: the ones the adapter fills, and TRL's ``scale_rewards`` for its scaling.

Used by :class:`v05.adapters.trl.V05GRPOConfig`; it does not import TRL. TRL's name for the advantage scaling is
``scale_rewards``: v05's ``scale="group_std"`` is ``"group"`` and ``scale="none"`` is ``"none"``; any other v05
scaling (``"model_std"``, ``"batch_std"``, ...) is also ``"none"`` to TRL, whose own advantages are discarded.
"""

from __future__ import annotations

import inspect
from dataclasses import fields
from typing import Any

from v05.allocation import Allocator
from v05.names import check_options
from v05.priors import get_provider_spec
from v05.registry import CONTEXT_OPTIONS, EstimatorSpec, get_allocator

SAMPLERS = ("spo", "prior_select")
"""``v05_sampler`` names: allocators that only choose which prompts of a pool TRL generates for (one round, the
choice made before any reward), by their registry names: SPO's weighted draw and the prior's top-B selection."""

SAMPLER_REWARD_STATS = frozenset({"realised_signal"})
"""Statistics an allocator computes from the rewards its round was told (``prior_select``'s realised signal): a
sampler's draw tells placeholders, since TRL generates later, so these are left out of its log."""

_TRL_SCALE = {"group_std": "group", "none": "none"}  # v05 scale → TRL's scale_rewards name (others: "none")


def _refuses_group_std(spec: EstimatorSpec) -> bool:
    """Estimators whose baseline is not the group mean (a prior or a history): all-equal groups keep signal."""
    return spec.uses_prior or spec.keyed


def _estimator_options(options: dict[str, Any] | None, spec: EstimatorSpec, estimator: str) -> dict[str, Any]:
    """``options`` as a new dict, checked: no context option (the adapter fills those), only the estimator's names."""
    options = dict(options or {})
    reserved = sorted(set(options) & set(CONTEXT_OPTIONS))
    if reserved:
        raise ValueError(
            f"v05_estimator_options may not set {', '.join(reserved)}: the adapter fills it; remove it"
        )
    check_options(options, [o for o in spec.options if o not in CONTEXT_OPTIONS], "estimator", estimator)
    return options


def _scale_rewards(spec: EstimatorSpec, estimator: str, options: dict[str, Any], scale_rewards: str | None) -> str:
    """TRL's ``scale_rewards`` for the estimator's scaling (``options["scale"]``, else its default).

    Unset (None) gives that name; a ``scale_rewards`` that names another scaling raises ``ValueError`` (for the
    estimators with a prior or a history baseline, ``"group"`` raises with the advice to use ``"model_std"``).
    """
    param = inspect.signature(spec.fn).parameters.get("scale")
    scale = options.get("scale", "none" if param is None else param.default)
    expected = _TRL_SCALE.get(str(scale), "none")
    if scale_rewards is None or scale_rewards == expected:
        return expected
    if _refuses_group_std(spec) and scale_rewards == "group":
        raise ValueError(
            f"scale_rewards={scale_rewards!r} with v05_estimator={estimator!r}: its baseline comes "
            "from a prior or a history, which gives all-equal groups a non-zero advantage although their std is "
            "0; set scale_rewards='none' (or leave it unset), and v05_estimator_options={'scale': 'model_std'} "
            "for a Bernoulli-std scaling"
        )
    raise ValueError(
        f"scale_rewards={scale_rewards!r} contradicts v05_estimator={estimator!r} with "
        f"scale={scale!r} (TRL's name for it: {expected!r}); leave scale_rewards unset, or choose the scaling "
        "through v05_estimator_options={'scale': ...} ('group_std' ↔ 'group', 'none' ↔ 'none')"
    )


def _sampler(name: str, options: dict[str, Any] | None, *, k: int, batch_size: int) -> Allocator:
    """The ``v05_sampler`` allocator ``name``: K = ``k`` and B = ``batch_size`` (the adapter's), ``options`` the rest.

    Raises:
        ValueError: an unknown name (the valid ones listed), ``k`` or ``batch_size`` among the options, or what the
            allocator's own checks raise.
    """
    if name not in SAMPLERS:
        raise ValueError(f"unknown v05_sampler {name!r}; valid: {', '.join(SAMPLERS)}, or None (TRL's own)")
    options = dict(options or {})
    reserved = sorted({"k", "batch_size"} & set(options))
    if reserved:
        raise ValueError(
            f"v05_sampler_options may not set {', '.join(reserved)}: num_generations and the generation batch's "
            "prompts set them; remove it"
        )
    return get_allocator(name, k=k, batch_size=batch_size, **options)


def _builds_provider(spec: EstimatorSpec, sampler: str | None) -> bool:
    """The run needs a prior provider: the estimator fuses a prior, or a sampler draws by it."""
    return spec.uses_prior or sampler is not None


def _needs_drift(prior: str, options: dict[str, Any]) -> bool:
    """The provider would discount by the policy's drift, which only v05's trainer measures.

    Its spec's ``needs_drift``, with ``rho="kl"`` (the option, else the provider's default).
    """
    spec = get_provider_spec(prior)
    if not spec.needs_drift:
        return False
    default = {f.name: f.default for f in fields(spec.cls)}.get("rho")
    return options.get("rho", default) == "kl"
