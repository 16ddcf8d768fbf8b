"""The simulator's configuration: what the grid runs, with every spec string checked at construction."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from v05.registry import CONTEXT_OPTIONS, get_allocator, get_allocator_spec, get_estimator
from v05.sim.priors import PriorSpec, parse_prior
from v05.sim.specs import Spec, parse_spec


@dataclass(frozen=True, kw_only=True, slots=True)
class SimConfig:
    """What the grid runs. Spec strings are ``name[:key=value,...]`` (see :mod:`v05.sim.specs`)."""

    estimators: tuple[str, ...] = ("grpo", "rloo", "v05", "v05_eb", "dbb")
    """estimators (names of ``v05.registry.ESTIMATORS``, options as ``v05_eb:loo=true``)."""
    allocators: tuple[str, ...] = ("fixed", "osla", "dynamic_sampling", "sara", "dps")
    """allocators (names of ``v05.registry.ALLOCATORS``, options as ``osla:schedule=jump``); k sets the base size."""
    priors: tuple[str, ...] = ("context_mean",)
    """priors (see :mod:`v05.sim.priors`); the first is the headline prior of the claims."""
    ks: tuple[int, ...] = (1, 2, 4, 8, 16)
    """base group sizes k (each allocator's ``AllocatorSpec.k_option``: fixed k, osla k_init, pool allocators'
    group size)."""
    noise_sweep: tuple[float, ...] = (0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0)
    """σ values of extra ``oracle_noise:σ`` priors for the prior-quality view (grpo, v05, v05_eb; fixed and osla)."""
    reps: int = 32
    """replicates (passes over the population) for sampled records."""
    seed: int = 0
    """seed of every random stream (streams are derived per cell, so results do not depend on grid order)."""
    equal_budget: bool = True
    """add fixed-k records at k = round(OSLA's realised rollouts per prompt) (GRPO and OSLA's estimator)."""

    def __post_init__(self) -> None:
        for name in ("estimators", "allocators", "priors", "ks"):
            if not getattr(self, name):
                raise ValueError(f"{name} must not be empty")
        for k in self.ks:
            if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1 or k > 256:
                raise ValueError(f"every k must be an integer in [1, 256], got {k!r}")
        if isinstance(self.reps, bool) or not isinstance(self.reps, (int, np.integer)) or self.reps < 2:
            raise ValueError(f"reps must be an integer >= 2, got {self.reps!r}")
        for s in self.noise_sweep:
            if not (np.isfinite(s) and s >= 0):
                raise ValueError(f"noise_sweep values must be finite and >= 0, got {s!r}")
        self.estimator_specs()
        self.allocator_specs()
        self.prior_specs()

    def estimator_specs(self) -> tuple[Spec, ...]:
        """Parsed and checked estimator specs."""
        return tuple(_estimator_spec(t) for t in self.estimators)

    def allocator_specs(self) -> tuple[Spec, ...]:
        """Parsed and checked allocator specs."""
        return tuple(_allocator_spec(t) for t in self.allocators)

    def prior_specs(self) -> tuple[PriorSpec, ...]:
        """Parsed priors: the configured ones, then the sweep's ``oracle_noise:σ`` not already listed."""
        given = tuple(parse_prior(t) for t in self.priors)
        texts = {p.text for p in given}
        sweep = tuple(parse_prior(f"oracle_noise:{s:g}") for s in self.noise_sweep)
        return given + tuple(p for p in sweep if p.text not in texts)


def _estimator_spec(text: str) -> Spec:
    spec = parse_spec(text, what="estimator")
    es = get_estimator(spec.name)
    bad = sorted(
        {k for k, _ in spec.options} - set(es.options)
        | (set(CONTEXT_OPTIONS) & set(dict(spec.options)))
    )
    if spec.value is not None or bad:
        raise ValueError(f"bad estimator {text!r}: options are key=value from: {', '.join(es.options) or 'none'}")
    if es.needs_values:
        raise ValueError(
            f"estimator {spec.name!r} needs per-rollout probe values from a policy's hidden states; the simulator has "
            "no policy (train it with `v05 train estimator.name=poise`)"
        )
    return spec


def _allocator_spec(text: str) -> Spec:
    spec = parse_spec(text, what="allocator")
    k_option = get_allocator_spec(spec.name).k_option
    if spec.value is not None or k_option in dict(spec.options):
        raise ValueError(f"bad allocator {text!r}: options are key=value; the grid's --ks sets {k_option}")
    get_allocator(spec.name, **dict(spec.options))  # validates option names and values now
    return spec


__all__ = ["SimConfig"]
