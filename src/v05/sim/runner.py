r"""The simulator's grid: estimators × allocators × priors × k → one record per configuration.

A *step* is one allocation + estimation on one step batch (V0: one snapshot's query rows). A *replicate* is one
pass over every batch; ``reps`` replicates are run. The policy is frozen, so a replicate re-asks the same prompts:
stateful pieces (``v05_eb``'s prior-error window, ``dbb``'s per-prompt history, SARA/DPS histories) carry their
state per batch from replicate to replicate. ``v05_eb`` thus estimates τ² from *previous* steps of the same policy,
and DBB sees the same prompts recur — its best case (in real training the policy moves between visits).

How each record is computed (``method``):
- ``exact``: fixed k with an estimator whose baseline is a per-group function of the rewards, the prior and fixed
  parameters (``EstimatorSpec.exact_in_sim == "group"``: grpo, drgrpo, rloo, reinforce_pp_baseline, v05, oracle):
  binomial expectation, one pass, SE 0.
- ``exact_given_state``: fixed k with an estimator exact given its carried state (``exact_in_sim == "given_state"``:
  ``v05_eb``): the state runs on sampled steps; each step whose state already holds ``min_groups`` groups is scored
  by the exact expectation given that state (the first step, whose n0 comes from the batch itself, is scored by its
  sample). SE over replicates.
- ``monte_carlo``: everything else (OSLA, dynamic_sampling, SARA, DPS, prior_select, dbb). All estimators of one cell
  score the same sampled rollouts (common random numbers). SE over replicates.
OSLA's ``eb_guard`` test is given the prior's calibrated pseudo-count n0 = E[1 − μ²]/E[(V − μ)²] over the cell (what
a perfectly calibrated provider reports; ``prior_select``'s belief reads it too). Pool-selecting allocators
(``AllocatorSpec.pool``: dynamic_sampling, sara, dps, prior_select, greso) draw from each batch's context rows (V0)
as the candidate pool (those with an ``order`` option walk it at random), keep as many groups as the batch has
prompts, and see the ``context_mean`` prior unless the prior is a built-in one. Their MSE is over the groups they
kept, i.e. over different prompts than the fixed-batch methods.
"""

from __future__ import annotations

import functools
import inspect
import warnings
import zlib
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from v05._types import FloatArray, IntArray
from v05.allocation import Allocation, allocate
from v05.estimators import Estimate
from v05.estimators.fusion import TAU2_FLOOR
from v05.registry import get_allocator, get_allocator_spec, get_estimator
from v05.rewards import to_pass_rate
from v05.sim.config import SimConfig
from v05.sim.metrics import Tally, enumerate_outcomes, group_stats
from v05.sim.populations import Population
from v05.sim.priors import PriorSpec, parse_prior, prior_values
from v05.sim.specs import Spec, parse_spec

SWEEP_ESTIMATORS = ("grpo", "v05", "v05_eb")
"""Estimators run under the prior-quality sweep (``noise_sweep``)."""


@dataclass(frozen=True, slots=True)
class SimResult:
    """Records of one simulation run.

    Attributes:
        records: one dict per configuration (see :func:`run_simulation`).
        population: name of the population.
        notes: warnings raised during the run and skipped cells, one line each.
        config: the configuration.
    """

    records: tuple[dict[str, Any], ...]
    population: str
    notes: tuple[str, ...]
    config: SimConfig


@dataclass(slots=True)
class _Cell:
    """One (prior, allocator, k) cell of the grid (local, mutable).

    It holds the population, prior values, groups to keep per batch (pool allocators) and lazily drawn steps.
    """

    pop: Population
    prior: FloatArray
    alloc: Spec
    k: int
    seed: tuple[object, ...]
    targets: tuple[int, ...] = ()
    steps: list[list[Allocation]] | None = None
    notes: list[str] = field(default_factory=list)


def _rng(*parts: object) -> np.random.Generator:
    return np.random.default_rng([zlib.crc32(str(p).encode()) for p in parts])


def _sampler(mu: FloatArray, rng: np.random.Generator):  # noqa: ANN202
    p = to_pass_rate(mu, "pm1")

    def sample(ids: IntArray, counts: IntArray) -> FloatArray:
        pr = np.repeat(p[ids], counts)
        return np.where(rng.random(pr.size) < pr, 1.0, -1.0)

    return sample


def _draw_steps(cell: _Cell, reps: int) -> list[list[Allocation]]:
    """Sampled allocations, ``steps[rep][batch]``, with allocator state carried per batch."""
    spec = get_allocator_spec(cell.alloc.name)
    opts = dict(cell.alloc.options) | {spec.k_option: cell.k}
    walks_pool = spec.pool and "order" in {f.name for f in fields(spec.cls)}  # takes its pool in an order
    if spec.pool:
        opts.setdefault("batch_size", None)  # replaced per batch below
    rng = _rng(*cell.seed, "draw")
    # the prior's worth in rollouts as a perfectly calibrated provider would report it (OSLA's eb_guard test reads
    # it): n0 = E[1 − μ²] / max(E[(V − μ)²], floor) over the cell's prompts
    err2 = float(np.mean((cell.prior - cell.pop.mu) ** 2))
    n0 = float(np.mean(1.0 - cell.pop.mu**2)) / max(err2, TAU2_FLOOR)
    states: dict[int, Any] = {}
    steps = []
    short = 0
    for _ in range(reps):
        row = []
        for b in range(cell.pop.n_batches):
            idx = cell.pop.batch_index(b)
            o = dict(opts)
            if spec.pool:
                o["batch_size"] = o["batch_size"] or cell.targets[b]
                if walks_pool:
                    o.setdefault("order", "random")
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                allocator = get_allocator(cell.alloc.name, **o)
                a = allocate(
                    allocator,
                    _sampler(cell.pop.mu[idx], rng),
                    n_prompts=len(idx),
                    rng=rng,
                    prior=cell.prior[idx],
                    n0=n0,
                    keys=cell.pop.keys[idx],
                    state=states.get(b),
                )
            for w in caught:
                note = f"{cell.alloc.text} k={cell.k}: {w.message}"
                if note not in cell.notes:
                    cell.notes.append(note)
            states[b] = a.state
            row.append(a)
            short += int(spec.pool and a.kept.sum() < cell.targets[b])
        steps.append(row)
    if short:
        cell.notes.append(
            f"{cell.alloc.text} k={cell.k}: kept fewer groups than the batch size in {short} of "
            f"{reps * cell.pop.n_batches} steps (rounds or pool ran out)"
        )
    return steps


def _call(
    spec: Spec, rewards: FloatArray, group: IntArray, *, prior: FloatArray, mu: FloatArray, keys: np.ndarray, state: Any
) -> Estimate:
    """Run the estimator's registered function (its options were checked against the registry once, at parse)."""
    es = get_estimator(spec.name)
    return es.fn(rewards, group, reward_range="pm1", **es.bind(spec.options, prior=prior, mu=mu, state=state,
                                                               prompt_ids=keys))  # fmt: skip


def _exact_step(spec: Spec, cell: _Cell, idx: IntArray, state: Any, tally: Tally, replicate: int) -> None:
    """Score batch ``idx`` by its exact binomial expectation (given ``state``)."""
    mu = cell.pop.mu[idx]
    en = enumerate_outcomes(cell.k, mu)
    prompt_g = idx[en.prompt]  # (G,) population index of each enumerated group
    est = _call(
        spec,
        en.rewards,
        en.group,
        prior=cell.prior[prompt_g],
        mu=mu[en.prompt],
        keys=cell.pop.keys[prompt_g],
        state=state,
    )
    tally.add(group_stats(est, en.group, mu[en.prompt], prompt_g, en.prob), replicate=replicate, sampled=False)


@functools.cache
def _default_option(name: str, option: str) -> Any:
    return inspect.signature(get_estimator(name).fn).parameters[option].default


def _state_ready(spec: Spec, state: Any) -> bool:
    # v05_eb ignores the batch for τ², σ̄² once its state holds min_groups groups (see v05.estimators.fusion).
    min_groups = spec.option_dict().get("min_groups", _default_option(spec.name, "min_groups"))
    return state is not None and state.n_groups >= int(min_groups)


def _score(spec: Spec, cell: _Cell, reps: int) -> tuple[Tally, str, float, int]:
    """Run one estimator on a cell; returns (tally, method, rollouts spent, groups kept)."""
    pop = cell.pop
    tally = Tally(pop.n_prompts)
    fixed = cell.alloc.name == "fixed" and not cell.alloc.options
    exact = get_estimator(spec.name).exact_in_sim
    if fixed and exact == "group":
        for b in range(pop.n_batches):
            _exact_step(spec, cell, pop.batch_index(b), None, tally, 0)
        return tally, "exact", float(cell.k * pop.n_prompts), pop.n_prompts
    state_exact = fixed and exact == "given_state"
    if cell.steps is None:
        cell.steps = _draw_steps(cell, reps)
    states: dict[int, Any] = {}
    spent, kept = 0.0, 0
    for rep, row in enumerate(cell.steps):
        for b, a in enumerate(row):
            idx = pop.batch_index(b)
            spent += a.n_rollouts
            if not a.kept.any():
                continue
            rewards, group, pool_index = a.loss_batch()
            kept += len(pool_index)
            prompt_g = idx[pool_index]  # (G,)
            state_in = states.get(b)
            est = _call(
                spec,
                rewards,
                group,
                prior=cell.prior[prompt_g],
                mu=pop.mu[prompt_g],
                keys=pop.keys[prompt_g],
                state=state_in,
            )
            states[b] = est.state
            if state_exact and _state_ready(spec, state_in):
                _exact_step(spec, cell, idx, state_in, tally, rep)
            else:
                stats = group_stats(est, group, pop.mu[prompt_g], prompt_g, np.ones(len(prompt_g)))
                tally.add(stats, replicate=rep, sampled=True)
    return tally, "exact_given_state" if state_exact else "monte_carlo", spent, kept


def _record(
    spec: Spec,
    cell: _Cell,
    prior: PriorSpec,
    tally: Tally,
    method: str,
    spent: float,
    kept: int,
    reps: int,
    pop_name: str,
) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "estimator": spec.text,
        "allocator": cell.alloc.text,
        "prior": prior.text,
        "k": cell.k,
        **tally.summary(),
        "rollouts_per_prompt": spent / max(kept, 1),
        "method": method,
        "reps": 1 if method == "exact" else reps,
        "population": cell.pop.name if get_allocator_spec(cell.alloc.name).pool else pop_name,
    }
    rec["zero_adv_frac"] = rec.pop("zero_adv_frac")
    return rec


def run_simulation(population: Population, config: SimConfig) -> SimResult:
    """Run the grid and return one record per (estimator, allocator, prior, k), plus equal-budget records.

    Every record holds ``estimator, allocator, prior, k, mse, rollouts_per_prompt, zero_adv_frac,
    grad_weight_var`` (the contract; definitions in :mod:`v05.sim.metrics`) and ``mse_se, mse_rollout,
    reject_rate, mean_weight, k_hist, prompts_seen, method, reps, population`` (and ``equal_budget_to`` on the
    equal-budget records).

    Raises:
        ValueError: bad configuration, or a prior that cannot be computed for this population.
    """
    estimators = config.estimator_specs()
    allocators = config.allocator_specs()
    priors = config.prior_specs()
    n_given = len(config.priors)
    records: list[dict[str, Any]] = []
    notes: list[str] = []
    targets = tuple(int(np.sum(population.batch == b)) for b in range(population.n_batches))
    pool_pop = population.context_pool() if any(get_allocator_spec(a.name).pool for a in allocators) else None
    for i, prior in enumerate(priors):
        sweep = i >= n_given
        v = prior_values(prior, population, rng=_rng(config.seed, "prior", prior.text))
        for alloc in allocators:
            if sweep and alloc.name not in ("fixed", "osla"):
                continue
            pop, pv = population, v
            alloc_spec = get_allocator_spec(alloc.name)
            if alloc_spec.pool and pool_pop is not None:
                pop = pool_pop
                pool_prior = prior if not prior.is_learned else parse_prior("context_mean")
                pv = prior_values(pool_prior, pop, rng=_rng(config.seed, "pool_prior", prior.text))
            for k in config.ks:
                if sweep and alloc.name == "osla" and k != 4:
                    continue
                cell = _Cell(pop, pv, alloc, int(k), (config.seed, prior.text, alloc.text, int(k)), targets)
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")  # recorded when the cell draws its steps
                        get_allocator(alloc.name, **(dict(alloc.options) | {alloc_spec.k_option: int(k)}))
                except ValueError as err:
                    notes.append(f"skipped {alloc.text} at k={k}: {err}")
                    continue
                for spec in estimators:
                    if sweep and (
                        spec.name not in SWEEP_ESTIMATORS
                        or (alloc.name == "fixed" and get_estimator(spec.name).exact_in_sim != "group" and k != 4)
                    ):
                        continue
                    tally, method, spent, kept = _score(spec, cell, config.reps)
                    records.append(_record(spec, cell, prior, tally, method, spent, kept, config.reps, population.name))
                notes.extend(n for n in cell.notes if n not in notes)
    if config.equal_budget:
        records.extend(_equal_budget(records, population, priors, estimators, config))
    return SimResult(tuple(records), population.name, tuple(notes), config)


def _equal_budget(
    records: list[dict[str, Any]],
    population: Population,
    priors: tuple[PriorSpec, ...],
    estimators: tuple[Spec, ...],
    config: SimConfig,
) -> list[dict[str, Any]]:
    """Fixed-k records at k = round(OSLA's realised rollouts per prompt).

    For GRPO and for the OSLA record's own estimator when it is exact (or exact given its state).
    """
    have = {(r["estimator"], r["allocator"], r["prior"], r["k"]) for r in records}
    by_text = {p.text: p for p in priors}
    out: list[dict[str, Any]] = []
    fixed = parse_spec("fixed", what="allocator")
    for r in list(records):
        if not r["allocator"].startswith("osla"):
            continue
        k_eq = max(1, int(round(r["rollouts_per_prompt"])))
        prior = by_text[r["prior"]]
        v = prior_values(prior, population, rng=_rng(config.seed, "prior", prior.text))
        for spec in estimators:
            key = (spec.text, "fixed", prior.text, k_eq)
            exactish = get_estimator(spec.name).exact_in_sim is not None
            if not exactish or spec.text not in ("grpo", r["estimator"]) or key in have:
                continue
            have.add(key)
            cell = _Cell(population, v, fixed, k_eq, (config.seed, prior.text, "fixed", k_eq))
            tally, method, spent, kept = _score(spec, cell, config.reps)
            rec = _record(spec, cell, prior, tally, method, spent, kept, config.reps, population.name)
            rec["equal_budget_to"] = f"{r['allocator']}@k_init={r['k']}"
            out.append(rec)
    return out


__all__ = ["SimConfig", "SimResult", "run_simulation"]
