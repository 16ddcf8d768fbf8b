"""Fuzz the allocator API: ``v05.registry.get_allocator`` and ``v05.allocation.allocate`` (the one sampling loop).

Contract (their Raises sections): a bad name, option, pool, prior, keys, state or sampler output raises
``ValueError``; otherwise the allocation is well formed — counts ≥ 0 that match the rollouts drawn, kept prompts
among the sampled ones, finite rewards and finite statistics. The bugs this fuzzing found are pinned by the
regression tests at the end.
"""

from __future__ import annotations

import dataclasses
import typing

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz._contract import call, fuzz_settings, tick
from tests.strategies import (
    BAD_FLOATS,
    JUNK_VALUES,
    OPTION_POOLS,
    SEEDS,
    messy_floats,
    messy_keys,
    messy_option,
    pick,
    registry_names,
)
from v05.allocation import allocate
from v05.allocation.osla import osla_stop_k
from v05.allocation.posterior import BetaPosterior
from v05.allocation.sara import p_eff
from v05.allocation.select import prior_belief
from v05.registry import ALLOCATORS, get_allocator

pytestmark = pytest.mark.fuzz

PROBABILITIES = {"guard_level", "tau_lo", "tau_hi", "lambda_", "explore_frac"}
MAX_ROLLOUTS = 4096
"""A sampler asked for more rollouts than this in one round stops the case (a legitimate but huge request)."""


class HugeRequest(Exception):
    """Raised by the fuzz sampler when an allocator asks for more than ``MAX_ROLLOUTS`` rollouts at once."""


def field_kinds(cls: type) -> dict[str, tuple[str, tuple[object, ...]]]:
    """Option name → (kind, Literal choices) from the config dataclass's annotations."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        args = tuple(a for a in typing.get_args(hint) if a is not type(None))
        if typing.get_origin(hint) is typing.Literal:
            out[f.name] = ("choice", args)
        elif hint is bool:
            out[f.name] = ("bool", ())
        elif hint is int or int in args:
            out[f.name] = ("int", ())
        else:
            out[f.name] = ("prob" if f.name in PROBABILITIES else "float", ())
    return out


KINDS = {name: field_kinds(spec.cls) for name, spec in ALLOCATORS.items()}
SMALL_INTS = (1, 2, 3, 4, 6, 8, 16)


HUGE_INTS = (2**31, 2**40, 2**62, 2**63, 2**64 + 1, 10**30)


def messy_allocator_options(rng: np.random.Generator, name: str, *, sane: bool, huge: bool = False):
    """Options of allocator ``name``: ``sane`` keeps them valid-looking (small ints, in-range floats, valid modes),
    ``huge`` makes some integers huge (k = 2**63 ...); otherwise any value (junk, non-finite, huge) may appear."""
    options: dict[str, object] = {}
    for option, (kind, choices) in KINDS.get(name, {}).items():
        if rng.random() < 0.5:
            continue
        if kind == "choice":
            options[option] = pick(rng, choices) if sane or rng.random() < 0.7 else pick(rng, ("bogus", None, 1))
        elif huge and kind == "int" and rng.random() < 0.5:
            options[option] = pick(rng, HUGE_INTS)
        elif sane:
            options[option] = pick(rng, SMALL_INTS if kind == "int" else OPTION_POOLS[kind][:7])
        else:
            options[option] = messy_option(rng, kind)
    if not sane and rng.random() < 0.05:
        options[pick(rng, ("K", "kk", "batch"))] = 1
    return options


NUMBER_OPTIONS = {
    ("osla", "guard_level"), ("sara", "lambda_"), ("sara", "alpha0"), ("sara", "beta0"), ("dps", "lambda_"),
    ("dps", "alpha0"), ("prior_select", "explore_frac"),
}  # fmt: skip


@fuzz_settings(800)
@given(registry_names(tuple(ALLOCATORS)), SEEDS)
def test_get_allocator_raises_only_valueerror(name, seed):
    """Any allocator name and options: a configured allocator or a one-line ValueError."""
    tick(__name__)
    known = isinstance(name, str) and name in KINDS
    options = messy_allocator_options(np.random.default_rng(seed), name, sane=False) if known else {}
    call(get_allocator, name, **options)


def fuzz_sampler(rng: np.random.Generator, reward_range: str, mode: str):
    """``sample(ids, counts)``: binary rewards (``mode="binary"``), graded ones, or broken output."""
    lo = 0.0 if reward_range == "01" else -1.0

    def sample(ids: np.ndarray, counts: np.ndarray) -> object:
        total = int(np.sum(counts, dtype=object))  # exact: int64 sums of huge requests wrap around
        if total > MAX_ROLLOUTS or np.any(counts > MAX_ROLLOUTS):
            raise HugeRequest(total)
        r = np.where(rng.random(total) < rng.random(), 1.0, lo)
        if mode == "graded":
            return rng.uniform(lo, 1.0, total)
        if mode == "broken" and rng.random() < 0.5:
            return messy_floats(rng, total, lo=lo, p_bad=1.0)
        return r

    return sample


def messy_pool(rng: np.random.Generator, n_prompts: int, reward_range: str, *, sane: bool):
    """(prior, n0, keys) for a pool of ``n_prompts``: valid when ``sane``, else possibly malformed."""
    lo = 0.0 if reward_range == "01" else -1.0
    prior = messy_floats(rng, n_prompts, lo=lo, p_bad=0.0 if sane else 0.3)
    n0 = pick(rng, (None, 0.0, 1.0, 4.0, 1e6, "array"))
    if n0 == "array":
        n0 = messy_floats(rng, n_prompts, lo=0.0, hi=20.0, p_bad=0.0 if sane else 0.3)
    if not sane and rng.random() < 0.2:
        n0 = pick(rng, (*BAD_FLOATS, -1.0, *JUNK_VALUES))
    kind = "int" if sane else pick(rng, ("int", "str", "dup", "mixed", "none", "2d", "short", "bytes", "float"))
    keys = messy_keys(rng, n_prompts, kind) if rng.random() < 0.8 else None  # NaN keys: refused
    if sane and rng.random() < 0.3:
        prior = None
    return prior, n0, keys


def check_allocation(out, n_prompts: int) -> None:
    """The allocation is consistent: counts match the rollouts, kept ⊆ sampled, finite rewards and stats."""
    assert out.counts.shape == (n_prompts,) and out.counts.min() >= 0
    assert len(out.rewards) == len(out.prompt) == int(out.counts.sum())
    assert np.array_equal(np.bincount(out.prompt, minlength=n_prompts), out.counts)
    assert not np.any(out.kept & (out.counts == 0))
    rewards, group, pool_index = out.loss_batch()
    assert np.all(np.isfinite(rewards)) and len(group) == len(rewards)


N_PROMPTS = (1, 1, 2, 3, 5, 8, 12, 0, -1, True, 2.5, np.int64(4), "4", None)


@fuzz_settings(1300)
@given(
    st.sampled_from(tuple(ALLOCATORS)),
    st.sampled_from(("sane", "sane", "messy", "huge")),
    st.sampled_from(("binary", "binary", "binary", "graded", "broken")),
    st.sampled_from(("pm1", "01", "pm1", "01", "bogus")),
    SEEDS,
)
def test_allocate_raises_only_valueerror_and_stays_consistent(name, how, mode, reward_range, seed):
    """Any configured allocator over any pool (size, prior, n0, keys, state) and sampler output: a ValueError, or
    a consistent allocation with finite rewards and statistics."""
    tick(__name__)
    rng = np.random.default_rng(seed)
    sane = how != "messy"
    options = messy_allocator_options(rng, name, sane=True, huge=how == "huge")
    allocator, err = call(get_allocator, name, **options)
    if err is not None:
        return
    n_prompts = pick(rng, N_PROMPTS[:7] if sane else N_PROMPTS)
    size = n_prompts if isinstance(n_prompts, int | np.integer) and n_prompts > 0 else 3
    prior, n0, keys = messy_pool(rng, int(size), reward_range, sane=sane)
    state = None if sane or rng.random() < 0.7 else pick(rng, JUNK_VALUES)
    max_rounds = pick(rng, (1000, 1000, 1, 2)) if sane else pick(rng, (1000, 1, 0, -1))
    try:
        out, err = call(
            allocate, allocator, fuzz_sampler(rng, str(reward_range), mode), n_prompts=n_prompts,
            rng=np.random.default_rng(seed), prior=prior, n0=n0, keys=keys, reward_range=reward_range, state=state,
            max_rounds=max_rounds,
        )  # fmt: skip
    except HugeRequest:
        return
    if err is None and out is not None:
        check_allocation(out, int(n_prompts))


@fuzz_settings(250)
@given(st.sampled_from(("sara", "dps", "fixed", "osla", "prior_select", "dynamic_sampling")), SEEDS)
def test_stateful_allocators_over_steps_with_changing_pools(name, seed):
    """SARA's and DPS's state carried over steps whose pools change (new, repeated, unicode or reordered keys):
    ValueError or consistent allocations."""
    tick(__name__)
    rng = np.random.default_rng(seed)
    allocator, err = call(get_allocator, name, **messy_allocator_options(rng, name, sane=True))
    if err is not None:
        return
    state = None
    for _ in range(int(rng.integers(1, 4))):
        n_prompts = int(rng.integers(1, 9))
        keys = messy_keys(rng, n_prompts, pick(rng, ("int", "int", "str", "dup", "mixed")))
        prior = rng.uniform(-1, 1, n_prompts)
        try:
            out, err = call(allocate, allocator, fuzz_sampler(rng, "pm1", "binary"), n_prompts=n_prompts,
                            rng=rng, prior=prior, n0=1.0, keys=keys, state=state)  # fmt: skip
        except HugeRequest:
            return
        if err is None:
            check_allocation(out, n_prompts)
            state = out.state


@fuzz_settings(500)
@given(st.sampled_from(("osla_stop_k", "p_eff", "prior_belief", "from_mean")), SEEDS)
def test_allocation_helpers_raise_only_valueerror(which, seed):
    """The public helpers (osla_stop_k, p_eff, prior_belief, BetaPosterior.from_mean) on messy input."""
    tick(__name__)
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 6))
    if which == "osla_stop_k":
        k_max = pick(rng, (1, 4, 16, 64, 1024, 2**40, 2**62, 2**63, 0, -1, 1.5, "16", None))
        call(osla_stop_k, messy_floats(rng, n, lo=0.0, hi=3.0), pick(rng, (1, 4, 16, 0, 2.5, 2**40)),
             c=messy_option(rng, "float"), k_max=k_max)  # fmt: skip
    elif which == "p_eff":
        belief = BetaPosterior(np.ones(n) + rng.random(n), np.ones(n) + rng.random(n))
        size = messy_option(rng, "int")
        call(p_eff, belief, messy_floats(rng, n, lo=0.0, hi=4.0), messy_floats(rng, n, lo=0.0, hi=4.0),
             group_size=size)  # fmt: skip
    elif which == "prior_belief":
        n0 = messy_option(rng, "float")
        call(prior_belief, messy_floats(rng, n, lo=0.0, hi=1.0), n0, alpha0=messy_option(rng, "float"))
    else:
        mean, kappa = messy_floats(rng, n, lo=0.0, hi=1.0), messy_option(rng, "float")
        call(BetaPosterior.from_mean, mean, kappa)


# -- regressions: bugs the fuzzing found (each raised TypeError, OverflowError or hung before the fix) -----------


@pytest.mark.parametrize(("name", "option", "bad"), [*((n, o, "abc") for n, o in sorted(NUMBER_OPTIONS)),
                                                      ("dps", "alpha0", 2**2000)])  # fmt: skip
def test_get_allocator_non_number_option_is_valueerror(name, option, bad):
    """get_allocator(name, option="abc", or an int beyond float range) raises ValueError naming the option, not
    TypeError (2**70 is a float 1.2e21, accepted)."""
    with pytest.raises(ValueError, match=option):
        get_allocator(name, **{option: bad})


HUGE_K = [("fixed", {"k": 2**64 + 1}), ("osla", {"k_init": 2**64 + 1, "k_max": 2**64 + 1}),
          ("osla", {"extra_budget": 2**63}), ("dynamic_sampling", {"k": 2**63}), ("sara", {"group_size": 2**63}),
          ("dps", {"k": 2**64 + 1}), ("prior_select", {"k": 2**64 + 1}),
          ("p_eff", {"group_size": 2**2000})]  # fmt: skip


@pytest.mark.parametrize(("name", "options"), HUGE_K)
def test_huge_k_is_a_valueerror(name, options):
    """k beyond int64 is refused with a ValueError (at get_allocator or allocate), not an OverflowError."""
    with pytest.raises(ValueError):
        if name == "p_eff":
            p_eff(BetaPosterior(np.ones(1), np.ones(1)), [0], [0], **options)
        allocator = get_allocator(name, **options)
        allocate(allocator, fuzz_sampler(np.random.default_rng(0), "pm1", "binary"), n_prompts=4,
                 rng=np.random.default_rng(0), prior=np.zeros(4), n0=1.0, keys=np.arange(4))  # fmt: skip


@pytest.mark.parametrize("name", ["sara", "dps"])
def test_unorderable_keys_are_a_valueerror(name):
    """allocate(keys=[None, 0, 1]) for a keyed allocator raises ValueError naming keys."""
    with pytest.raises(ValueError, match="keys"):
        allocate(get_allocator(name, batch_size=2), fuzz_sampler(np.random.default_rng(0), "pm1", "binary"),
                 n_prompts=3, rng=np.random.default_rng(0), keys=[None, 0, 1])  # fmt: skip


@pytest.mark.parametrize("name", ["sara", "dps"])
def test_nan_keys_are_a_valueerror(name):
    """allocate(keys=[nan, 0.0, 1.0]) for a keyed allocator raises ValueError naming keys."""
    with pytest.raises(ValueError, match="keys"):
        allocate(get_allocator(name, batch_size=2), fuzz_sampler(np.random.default_rng(0), "pm1", "binary"),
                 n_prompts=3, rng=np.random.default_rng(0), keys=[float("nan"), 0.0, 1.0])  # fmt: skip


@pytest.mark.parametrize("bad", [object(), {"a": 1}, 2**2000])
@pytest.mark.parametrize("where", ["allocate", "prior_belief", "from_mean"])
def test_non_number_n0_is_a_valueerror(where, bad):
    """A pseudo-count that is not a number is refused with a ValueError."""
    with pytest.raises(ValueError):
        if where == "allocate":
            allocate(get_allocator("prior_select", batch_size=2), fuzz_sampler(np.random.default_rng(0), "pm1",
                     "binary"), n_prompts=3, rng=np.random.default_rng(0), prior=np.zeros(3), n0=bad)  # fmt: skip
        elif where == "prior_belief":
            prior_belief([0.5, 0.5], bad)
        else:
            BetaPosterior.from_mean(np.array([0.5]), bad)


def test_osla_stop_k_does_not_scan_to_a_huge_k_max(monkeypatch):
    """osla_stop_k with k_max = 3000 and c = 1e-300 evaluates the gain a bounded number of times (≤ 64), so a huge
    k_max cannot hang the allocator."""
    import v05.allocation.osla as osla

    calls = []
    real = osla.osla_gain
    monkeypatch.setattr(osla, "osla_gain", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert osla.osla_stop_k([1.0], 1, c=1e-300, k_max=3000)[0] == 3000
    assert len(calls) <= 64, f"{len(calls)} gain evaluations for k_max = 3000"


def test_osla_stop_k_bisection_equals_the_scan():
    """The bisected k* equals the scan k, k + 1, … it replaced, on random Δ̂², k, c, k_max and σ² (scalar and (P,))."""
    from v05.allocation.osla import _stop_k, osla_gain

    def scan(d, k, c, k_max, s2):
        stop, running = k.copy(), (d > 0) & (k < k_max)
        while running.any():
            go = running & (osla_gain(d, stop, s2) > c)
            stop, running = stop + go, go & (stop + go < k_max)
        return stop

    rng = np.random.default_rng(0)
    for _ in range(2000):
        n = int(rng.integers(1, 12))
        d = rng.exponential(rng.choice([0.01, 1.0, 100.0]), n) * (rng.random(n) < 0.9)
        k, k_max, c = rng.integers(1, 40, n), int(rng.integers(1, 300)), 10 ** rng.uniform(-8, 0)
        s2 = rng.uniform(0, 2, n) if rng.random() < 0.3 else float(rng.choice([1.0, 0.0, 0.3]))
        np.testing.assert_array_equal(_stop_k(d, k, c, k_max, s2), scan(d, k, c, k_max, s2))


def test_shared_number_checks_regression():
    """Options checked by the shared helpers (check_positive, check_probability) refuse non-numbers with a
    ValueError naming the option (they raised TypeError from np.isfinite or a comparison)."""
    for name, options in (("osla", {"c": "abc"}), ("osla", {"c": None}), ("sara", {"tau_lo": "x"}),
                          ("sara", {"tau_hi": [0.7]}), ("prior_select", {"alpha0": None}),
                          ("prior_select", {"default_n0": "4"})):  # fmt: skip
        with pytest.raises(ValueError, match=next(iter(options))):
            get_allocator(name, **options)
