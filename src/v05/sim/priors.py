r"""The simulator's priors: a value V ∈ [−1, 1] per prompt (±1 space), of controllable quality.

Spec strings (comma lists allowed on the CLI, see :mod:`v05.sim.specs`):
- ``context_mean``: each step batch's (snapshot's) mean context score — the cheap prior every run should report.
- ``oracle_noise:SIGMA``: V = clip(μ + ε, −1, 1), ε ~ N(0, SIGMA²).
- ``oracle:noise=S,bias=B,halluc=H``: V = clip(μ + B + ε, −1, 1), ε ~ N(0, S²); then, with probability H per
  prompt, V is replaced by a uniform draw on [−1, 1] (a "hallucinated" prediction, unrelated to μ).
- any learned provider of :mod:`v05.priors` (``running_mean``, ``history``, ``v0``, ``combined``, options as
  ``v0:head=knn``): fitted per snapshot on its context rows and predicting the query rows (V0 populations only).

A prior is drawn once per run (a fixed function of the prompt, as a trained value model is), from the run's rng.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from v05._types import FloatArray
from v05.priors import PROVIDERS, predict_rows
from v05.sim.populations import Population
from v05.sim.specs import OptionValue, parse_spec

PriorKind = Literal["context_mean", "oracle", "provider"]
BUILTIN_HELP = "context_mean, oracle_noise:SIGMA, oracle:noise=S,bias=B,halluc=H"


@dataclass(frozen=True, kw_only=True, slots=True)
class PriorSpec:
    """A parsed prior spec.

    Attributes:
        text: the spec as written (the ``prior`` label in records).
        kind: ``context_mean``, ``oracle`` (μ plus noise/bias/hallucination) or ``provider`` (learned).
        noise: oracle Gaussian noise sd S ≥ 0.
        bias: oracle additive bias B.
        halluc: oracle hallucination probability H ∈ [0, 1].
        provider: learned provider name (``kind="provider"``).
        options: the provider's options.
    """

    text: str
    kind: PriorKind
    noise: float = 0.0
    bias: float = 0.0
    halluc: float = 0.0
    provider: str | None = None
    options: tuple[tuple[str, OptionValue], ...] = ()

    def __post_init__(self) -> None:
        if not (np.isfinite(self.noise) and self.noise >= 0):
            raise ValueError(f"prior {self.text!r}: noise must be finite and >= 0, got {self.noise!r}")
        if not np.isfinite(self.bias):
            raise ValueError(f"prior {self.text!r}: bias must be finite, got {self.bias!r}")
        if not 0.0 <= self.halluc <= 1.0:
            raise ValueError(f"prior {self.text!r}: halluc must lie in [0, 1], got {self.halluc!r}")

    @property
    def is_learned(self) -> bool:
        """It comes from a learned provider (needs V0 data)."""
        return self.kind == "provider"


def _float(value: OptionValue | None, text: str, what: str) -> float:
    try:
        out = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"bad prior {text!r}: {what} must be a number, got {value!r}") from None
    if isinstance(value, bool):
        raise ValueError(f"bad prior {text!r}: {what} must be a number, got {value!r}")
    return out


def _providers() -> tuple[str, ...]:
    """Names of the learned providers that fit on V0 rows.

    Providers that read a live policy (``needs_policy``: ``probe``) or draw its rollouts (``needs_sampler``) have
    nothing to fit on a population's context rows, so they are not offered here.
    """
    return tuple(n for n, s in PROVIDERS.items() if not s.needs_policy and not s.needs_sampler)


def parse_prior(text: str) -> PriorSpec:
    """Parse one prior spec (see the module docstring).

    Raises:
        ValueError: unknown names (listing the valid ones), bad or out-of-range options.
    """
    spec = parse_spec(text, what="prior")
    if spec.name == "context_mean":
        if spec.value is not None or spec.options:
            raise ValueError(f"bad prior {text!r}: context_mean takes no options")
        return PriorSpec(text=spec.text, kind="context_mean")
    if spec.name == "oracle_noise":
        if spec.value is None:
            raise ValueError(f"bad prior {text!r}: expected oracle_noise:SIGMA, e.g. oracle_noise:0.3")
        return PriorSpec(text=spec.text, kind="oracle", noise=_float(spec.value, text, "SIGMA"))
    if spec.name == "oracle":
        if spec.value is not None:
            raise ValueError(f"bad prior {text!r}: expected oracle:noise=S,bias=B,halluc=H")
        opts = dict(spec.options)
        unknown = sorted(set(opts) - {"noise", "bias", "halluc"})
        if unknown:
            raise ValueError(f"bad prior {text!r}: unknown option(s) {', '.join(unknown)}; valid: noise, bias, halluc")
        vals = {k: _float(v, text, k) for k, v in opts.items()}
        return PriorSpec(text=spec.text, kind="oracle", **vals)
    names = _providers()
    if spec.name in names:
        if spec.value is not None:
            raise ValueError(f"bad prior {text!r}: provider options are key=value, e.g. {spec.name}:pooled=true")
        return PriorSpec(text=spec.text, kind="provider", provider=spec.name, options=spec.options)
    raise ValueError(f"unknown prior {spec.name!r}; valid: {BUILTIN_HELP}; learned: {', '.join(names)}")


def prior_values(spec: PriorSpec, population: Population, *, rng: np.random.Generator) -> FloatArray:
    """(P,) prior values V in [−1, 1] for every prompt of ``population``.

    Raises:
        ValueError: a learned provider on a population without V0 rows, or a provider failure.
    """
    mu = population.mu
    if spec.kind == "context_mean":
        return population.context_mean()[population.batch]
    if spec.kind == "oracle":
        v = mu + spec.bias + (spec.noise * rng.standard_normal(len(mu)) if spec.noise > 0 else 0.0)
        if spec.halluc > 0:
            hit = rng.random(len(mu)) < spec.halluc
            v = np.where(hit, rng.uniform(-1.0, 1.0, len(mu)), v)
        return np.clip(v, -1.0, 1.0)
    return _provider_values(spec, population)


def _provider_values(spec: PriorSpec, population: Population) -> FloatArray:
    if population.dataset is None or population.rows is None:
        raise ValueError(f"prior {spec.text!r} is a learned provider; it needs a V0 population (not {population.name})")
    opts = dict(spec.options)
    pooled = bool(opts.pop("pooled", False))
    pred = predict_rows(population.dataset, population.rows, spec.provider, pooled=pooled, **opts)
    v = np.asarray(pred.mean, np.float64)
    if v.shape != population.mu.shape or not np.all(np.isfinite(v)):
        raise ValueError(f"prior {spec.text!r} returned {v.shape} values for {population.n_prompts} prompts")
    return np.clip(v, -1.0, 1.0)


__all__ = ["BUILTIN_HELP", "PriorKind", "PriorSpec", "parse_prior", "prior_values"]
