"""The allocation driver, Fixed, DynamicSampling, the allocator registry, and properties shared by all allocators."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from v05.allocation import Allocation, DynamicSampling, Fixed, allocate
from v05.allocation.dps import DPS
from v05.allocation.greso import GRESO
from v05.allocation.osla import OSLA
from v05.allocation.sara import SARA
from v05.allocation.select import PriorSelect
from v05.allocation.spo import SpoSample
from v05.registry import ALLOCATORS, get_allocator


def bernoulli(p: np.ndarray, rng: np.random.Generator, reward_range: str = "01"):
    """Sampler: rollouts of pool prompt i succeed with probability p[i]."""

    def sample(ids: np.ndarray, counts: np.ndarray) -> np.ndarray:
        r = (rng.random(int(counts.sum())) < np.repeat(p[ids], counts)).astype(np.float64)
        return 2 * r - 1 if reward_range == "pm1" else r

    return sample


def constant_or_mixed(mixed: np.ndarray):
    """Deterministic sampler: prompt i's group alternates 1, 0, 1, … if mixed[i], else is all 0."""

    def sample(ids: np.ndarray, counts: np.ndarray) -> np.ndarray:
        return np.concatenate([(np.arange(c) % 2 == 0) * float(mixed[i]) for i, c in zip(ids, counts, strict=True)])

    return sample


def is_mixed(a: Allocation) -> np.ndarray:
    """(G',) whether each kept group has rewards that are not all equal."""
    r, g, idx = a.loss_batch()
    lo, hi = np.full(len(idx), np.inf), np.full(len(idx), -np.inf)
    np.minimum.at(lo, g, r)
    np.maximum.at(hi, g, r)
    return hi > lo


# ----------------------------------------------------------------------------- the driver and Fixed


def test_fixed_draws_k_for_the_first_batch_size_prompts():
    """Fixed(k=4, batch_size=3) on a pool of 5: one round, counts [4,4,4,0,0], the three groups in the loss."""
    rng = np.random.default_rng(0)
    a = allocate(Fixed(k=4, batch_size=3), bernoulli(np.full(5, 0.5), rng), n_prompts=5, rng=rng)
    np.testing.assert_array_equal(a.counts, [4, 4, 4, 0, 0])
    assert a.rounds == 1 and a.n_rollouts == 12 and a.state is None
    r, g, idx = a.loss_batch()
    np.testing.assert_array_equal(g, np.repeat([0, 1, 2], 4))
    np.testing.assert_array_equal(idx, [0, 1, 2])


def test_loss_batch_keeps_only_kept_prompts_in_draw_order():
    """loss_batch returns exactly the kept prompts' rollouts, grouped by first appearance in draw order."""
    a = Allocation(
        rewards=np.array([1.0, 0.0, 1.0, 1.0, 0.0]),
        prompt=np.array([2, 0, 2, 1, 0]),
        counts=np.array([2, 1, 2]),
        kept=np.array([True, False, True]),
        rounds=2,
    )
    r, g, idx = a.loss_batch()
    np.testing.assert_array_equal(r, [1.0, 0.0, 1.0, 0.0])
    np.testing.assert_array_equal(g, [0, 1, 0, 1])
    np.testing.assert_array_equal(idx, [2, 0])


class _Bad:
    """An allocator that returns the given counts forever (for driver checks)."""

    def __init__(self, counts):
        self.counts = counts

    def init(self, pool, state):
        return None

    def ask(self, s):
        return np.asarray(self.counts)

    def tell(self, s, draw):
        return s

    def finish(self, s):
        return np.ones(len(self.counts), bool), None


@pytest.mark.parametrize(
    ("counts", "match"), [([1, -1], "non-negative"), ([1.5, 1.0], "integers"), ([1, 1, 1], "shape")]
)
def test_driver_rejects_bad_counts_from_an_allocator(counts, match):
    """Negative, non-integer or mis-shaped counts from an allocator raise a ValueError."""
    rng = np.random.default_rng(1)
    with pytest.raises(ValueError, match=match):
        allocate(_Bad(counts), bernoulli(np.full(2, 0.5), rng), n_prompts=2, rng=rng)


def test_driver_caps_rounds():
    """An allocator that never finishes hits max_rounds with a clear error."""
    rng = np.random.default_rng(2)
    with pytest.raises(ValueError, match="max_rounds=3"):
        allocate(_Bad([1, 0]), bernoulli(np.full(2, 0.5), rng), n_prompts=2, rng=rng, max_rounds=3)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_prompts": 0}, "n_prompts"),
        ({"n_prompts": 2.0}, "n_prompts"),
        ({"prior": [0.5, 1.5], "reward_range": "01"}, "prior outside"),
        ({"prior": [-1.2, 0.0]}, "prior outside"),
        ({"prior": [0.5]}, "one value per pool prompt"),
        ({"prior": [np.nan, 0.0]}, "non-finite"),
        ({"keys": [1, 2, 3]}, "keys must have shape"),
        ({"reward_range": "0-1"}, "unknown reward_range"),
    ],
)
def test_driver_bad_input(kwargs, match):
    """Bad pool size, prior (range, length, NaN), keys and reward range each raise a ValueError naming it."""
    rng = np.random.default_rng(3)
    kwargs = {"n_prompts": 2, **kwargs}
    with pytest.raises(ValueError, match=match):
        allocate(Fixed(k=2), bernoulli(np.full(2, 0.5), rng), rng=rng, **kwargs)


def test_driver_rejects_a_bad_sampler():
    """A sampler returning the wrong number of rewards, or rewards outside the range, is reported."""
    rng = np.random.default_rng(4)
    with pytest.raises(ValueError, match="returned 3 rewards for 4"):
        allocate(Fixed(k=2), lambda ids, c: np.zeros(3), n_prompts=2, rng=rng)
    with pytest.raises(ValueError, match="outside"):
        allocate(Fixed(k=2), lambda ids, c: np.full(4, 2.0), n_prompts=2, rng=rng, reward_range="01")


# ----------------------------------------------------------------------------- DynamicSampling


def test_dynamic_sampling_keeps_only_mixed_groups_and_stops_at_batch_size():
    """DS takes pool prompts in rounds of gen_batch_size; only mixed groups are kept, truncated to batch_size."""
    rng = np.random.default_rng(5)
    mixed = np.array([1, 0, 0, 1, 0, 1, 1, 1, 1, 0], bool)
    a = allocate(
        DynamicSampling(k=4, batch_size=3, gen_batch_size=4),
        constant_or_mixed(mixed),
        n_prompts=10,
        rng=rng,
        reward_range="01",
    )
    # round 1: prompts 0–3 → mixed 0, 3; round 2: prompts 4–7 → mixed 5, 6, 7 → 4 kept, truncated to 0, 3, 5
    np.testing.assert_array_equal(a.counts, [4] * 8 + [0] * 2)
    np.testing.assert_array_equal(np.flatnonzero(a.kept), [0, 3, 5])
    assert a.rounds == 2 and a.n_rollouts == 2 * 4 * 4 and is_mixed(a).all()


def test_dynamic_sampling_stops_at_max_rounds_or_pool_end():
    """With no mixed prompt DS spends max_rounds · gen_batch_size · k and keeps nothing; a short pool ends it early."""
    rng = np.random.default_rng(6)
    none = constant_or_mixed(np.zeros(100, bool))
    a = allocate(DynamicSampling(k=2, batch_size=4, max_rounds=3), none, n_prompts=100, rng=rng, reward_range="01")
    assert a.rounds == 3 and a.n_rollouts == 3 * 4 * 2 and not a.kept.any()
    b = allocate(DynamicSampling(k=2, batch_size=4, max_rounds=10), none, n_prompts=6, rng=rng, reward_range="01")
    assert b.rounds == 2 and b.n_rollouts == 12


def test_dynamic_sampling_random_order_is_a_seeded_permutation():
    """order="random" samples the prompts of one rng permutation: reproducible per seed, different across seeds."""
    mixed = np.ones(50, bool)
    picks = [
        tuple(
            np.flatnonzero(
                allocate(
                    DynamicSampling(k=2, batch_size=5, order="random"),
                    constant_or_mixed(mixed),
                    n_prompts=50,
                    rng=np.random.default_rng(s),
                    reward_range="01",
                ).counts
            )
        )
        for s in (0, 0, 1)
    ]
    assert picks[0] == picks[1] != picks[2]
    assert len(picks[0]) == 5


def test_dynamic_sampling_statistically_yields_only_mixed_groups():
    """On random pass rates, every kept group is mixed, and B groups are kept when the pool allows."""
    rng = np.random.default_rng(7)
    p = rng.uniform(size=400)
    a = allocate(DynamicSampling(k=8, batch_size=32, gen_batch_size=64), bernoulli(p, rng), n_prompts=400, rng=rng)
    assert a.kept.sum() == 32 and is_mixed(a).all()


# ----------------------------------------------------------------------------- registry


def test_registry_names_and_base_group_size_options():
    """The eight allocators are registered; each accepts its documented base group size and batch_size."""
    assert list(ALLOCATORS) == ["fixed", "osla", "dynamic_sampling", "sara", "dps", "prior_select", "greso", "spo"]
    base = {"fixed": "k", "osla": "k_init", "dynamic_sampling": "k", "sara": "group_size", "dps": "k",
            "prior_select": "k", "greso": "k", "spo": "k"}  # fmt: skip
    for name, opt in base.items():
        alloc = get_allocator(name, **{opt: 4, "batch_size": 8})
        assert getattr(alloc, opt) == 4 and alloc.batch_size == 8


def test_registry_errors_list_the_valid_choices():
    """Unknown names list the valid names; unknown options list the valid fields; bad values give the config's error."""
    with pytest.raises(ValueError, match="valid: fixed, osla, dynamic_sampling, sara, dps, prior_select, greso, spo"):
        get_allocator("grpo")
    with pytest.raises(ValueError, match=r"no option\(s\) kk; valid: k, batch_size"):
        get_allocator("fixed", kk=2)
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        get_allocator("fixed", k=-1)


# ----------------------------------------------------------------------------- properties of every allocator


@st.composite
def configured(draw):
    """An allocator with small random options, its rollout cap for a pool of P, and P."""
    name = draw(st.sampled_from(list(ALLOCATORS)))
    n = draw(st.integers(1, 30))
    k = draw(st.integers(2, 6))
    b = draw(st.integers(1, 12))
    if name == "fixed":
        return Fixed(k=k, batch_size=b), k * min(b, n), n
    if name == "osla":
        k_max = draw(st.integers(4, 10))
        budget = draw(st.none() | st.integers(0, 20))
        alloc = OSLA(
            k_init=4,
            k_max=k_max,
            schedule=draw(st.sampled_from(["plus_one", "jump"])),
            batch_size=b,
            extra_budget=budget,
            fill=budget is not None and draw(st.booleans()),
        )
        cap = k_max * min(b, n) if budget is None else min(k_max * min(b, n), 4 * min(b, n) + budget)
        return alloc, cap, n
    if name == "dynamic_sampling":
        gen, rounds = draw(st.integers(1, 12)), draw(st.integers(1, 4))
        return DynamicSampling(k=k, batch_size=b, gen_batch_size=gen, max_rounds=rounds), rounds * gen * k, n
    if name == "sara":
        g = draw(st.integers(2, 8))
        m_max = draw(st.integers(1, g))
        m0 = draw(st.integers(1, m_max))
        lo = draw(st.floats(0.0, 0.9))
        budget = draw(st.none() | st.integers(1, 80))
        alloc = SARA(
            group_size=g,
            batch_size=b,
            m0=m0,
            m_max=m_max,
            tau_lo=lo,
            tau_hi=draw(st.floats(lo + 0.05, 1.0)),
            budget=budget,
            wave_size=draw(st.none() | st.integers(1, 8)),
            order=draw(st.sampled_from(["pool", "random"])),
        )
        return alloc, min(budget or n * g, n * g), n
    if name == "prior_select":
        alloc = PriorSelect(
            k=draw(st.integers(1, 6)),
            batch_size=b,
            thompson=draw(st.booleans()),
            explore_frac=draw(st.sampled_from([0.0, 0.25, 0.5])),
        )
        return alloc, alloc.k * min(b, n), n
    if name == "greso":
        alloc = GRESO(
            k=k,
            batch_size=b,
            p_explore_correct=draw(st.sampled_from([0.05, 0.5, 0.95])),
            min_keep=draw(st.sampled_from([0.0, 0.01])),
        )
        return alloc, k * min(b, n), n
    if name == "spo":
        alloc = SpoSample(k=draw(st.integers(1, 6)), batch_size=b, epsilon=draw(st.sampled_from([0.05, 1e-6, 1.0])))
        return alloc, alloc.k * min(b, n), n
    return DPS(k=k, batch_size=b), k * min(b, n), n


@given(configured(), st.integers(0, 2**32 - 1), st.sampled_from(["01", "pm1"]), st.integers(1, 3))
def test_every_allocator_respects_counts_budget_and_loss_batch(cfg, seed, reward_range, steps):
    """For every allocator: counts are non-negative integers, rollouts never exceed the configured cap, kept ⊆
    sampled, and loss_batch is exactly the kept prompts' rollouts grouped by prompt — over several steps of state."""
    alloc, cap, n = cfg
    rng = np.random.default_rng(seed)
    p = rng.choice([0.0, 1.0, 0.5, 0.9], n)
    prior = rng.uniform(0, 1, n) if reward_range == "01" else rng.uniform(-1, 1, n)
    state = None
    for _ in range(steps):
        a = allocate(
            alloc,
            bernoulli(p, rng, reward_range),
            n_prompts=n,
            rng=rng,
            prior=prior,
            keys=rng.permutation(n),
            reward_range=reward_range,
            state=state,
        )
        state = a.state
        assert a.counts.dtype == np.int64 and a.counts.min() >= 0
        assert a.n_rollouts == len(a.rewards) == len(a.prompt) <= cap
        np.testing.assert_array_equal(np.bincount(a.prompt, minlength=n), a.counts)
        assert not np.any(a.kept & (a.counts == 0))
        r, g, idx = a.loss_batch()
        assert sorted(idx.tolist()) == np.flatnonzero(a.kept).tolist()
        np.testing.assert_array_equal(np.bincount(g, minlength=len(idx)), a.counts[idx])
        assert len(r) == a.counts[a.kept].sum()
        if isinstance(alloc, (DynamicSampling, SARA)):
            assert a.kept.sum() <= alloc.batch_size
        if isinstance(alloc, DynamicSampling):
            assert is_mixed(a).all()
        if isinstance(alloc, SARA):
            assert a.counts.max(initial=0) <= alloc.group_size and np.all(a.counts[a.kept] == alloc.group_size)
        if isinstance(alloc, (DPS, PriorSelect, GRESO, SpoSample)):
            assert a.n_rollouts == cap
        assert a.passed.dtype == bool and not np.any(a.passed & (a.counts > 0))  # passed over = never sampled
        if isinstance(alloc, (DPS, PriorSelect, SpoSample)):  # a selection: every unsampled prompt was rejected
            np.testing.assert_array_equal(a.passed, a.counts == 0)
        if not isinstance(alloc, (DPS, PriorSelect, GRESO, SpoSample)):  # the others stop early: unsampled = unreached
            assert not a.passed.any()
        if isinstance(alloc, OSLA) and alloc.fill:  # budget-neutral: exactly the cap (k_init·B + budget or k_max·B)
            assert a.n_rollouts == cap


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"k": 1}, "k must"),
        ({"batch_size": 0}, "batch_size"),
        ({"gen_batch_size": 0}, "gen_batch_size"),
        ({"max_rounds": 0}, "max_rounds"),
        ({"order": "sorted"}, "order"),
        ({"k": True}, "k must"),
    ],
)
def test_dynamic_sampling_bad_config(options, match):
    """Invalid DS options raise a ValueError naming the option."""
    with pytest.raises(ValueError, match=match):
        DynamicSampling(**options)


def test_dynamic_sampling_random_order_truncates_in_sampling_order():
    """With order="random" the kept groups are the first batch_size mixed groups in the *permutation*, not in pool
    index order. Every prompt is mixed here, so kept = the first batch_size prompts of the step's permutation."""
    rng_seed = 3
    perm = np.random.default_rng(rng_seed).permutation(12)

    def sample(ids, counts):
        return np.tile([1.0, 0.0], int(counts.sum()) // 2)

    a = allocate(
        DynamicSampling(k=2, batch_size=3, gen_batch_size=6, order="random"),
        sample,
        n_prompts=12,
        rng=np.random.default_rng(rng_seed),
        reward_range="01",
    )
    np.testing.assert_array_equal(np.flatnonzero(a.kept), np.sort(perm[:3]))
    assert a.stats["rounds"] == 1 and a.stats["mixed_groups"] == 6 and a.stats["kept_groups"] == 3
