"""Fuzz the estimator API (``v05.registry.estimate`` / ``compute_advantages`` and the estimator functions).

Contract (``compute_advantages``' Raises section): malformed input raises ``ValueError`` with a one-line message;
otherwise every float output (advantages, baselines, weights, n0, the returned state) is finite.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz._contract import call, fuzz_settings, tick
from tests.strategies import (
    BAD_FLOATS,
    BATCH_MUTATIONS,
    JUNK_VALUES,
    SEEDS,
    messy_batch,
    messy_floats,
    messy_keys,
    messy_option,
    pick,
    ragged_arrays,
    registry_names,
)
from v05.advantages import SCALES
from v05.estimators import cross_rollout_targets
from v05.estimators.fusion import PriorErrorState
from v05.groups import group_index
from v05.registry import ESTIMATORS, compute_advantages, estimate

pytestmark = pytest.mark.fuzz

OPTION_KIND = {
    "eps": "float", "tau2": "float", "tau2_floor": "float", "alpha0": "float", "beta0": "float", "n0": "float",
    "lambda_": "prob", "guard_level": "prob", "step": "int", "min_groups": "int", "include_current": "bool",
    "loo": "bool",
}  # fmt: skip
CHOICES = {
    "scale": (*SCALES, *SCALES, "bogus", "", None, 3, ["none"]),
    "decay": ("visit", "step", "bogus", None),
    "noise": ("bound", "plugin", "gauss"),
    "switch": ("smooth", "hard", "soft"),
}


def messy_options(rng: np.random.Generator, name: str, n_groups: int, n_rollouts: int) -> dict[str, object]:
    """Some options of estimator ``name`` (required ones usually present) with messy values; sometimes an unknown."""
    spec = ESTIMATORS[name]
    options: dict[str, object] = {}
    for option in spec.options:
        required = option in ("mu", "values", "prompt_ids")
        if rng.random() < (0.9 if required else 0.5):
            if option in CHOICES:
                options[option] = pick(rng, CHOICES[option])
            elif option == "state":
                options[option] = None if rng.random() < 0.7 else pick(rng, JUNK_VALUES)
            elif option == "n0" and rng.random() < 0.4:
                options[option] = messy_floats(rng, n_groups, lo=0.0, hi=50.0)
            elif option in OPTION_KIND:
                options[option] = None if rng.random() < 0.15 else messy_option(rng, OPTION_KIND[option])
            elif option == "mu":
                options[option] = messy_floats(rng, pick(rng, (n_groups, n_rollouts)))
            elif option == "values":
                options[option] = messy_floats(rng, n_rollouts)
            elif option == "prompt_ids":
                options[option] = messy_keys(rng, n_groups)
    if rng.random() < 0.05:
        options[pick(rng, ("k", "kappa", "Scale", "prior_g", "n0 "))] = 1.0
    return options


@fuzz_settings(2100)
@given(registry_names(tuple(ESTIMATORS)), st.sampled_from(BATCH_MUTATIONS), st.sampled_from(("pm1", "01")), SEEDS)
def test_estimate_raises_only_valueerror_and_never_returns_nan(name, mutation, reward_range, seed):
    """Any estimator name, batch, prior and options: a ValueError, or an Estimate whose floats are all finite."""
    tick(__name__)
    rng = np.random.default_rng(seed)
    rewards, group, n_groups, n_rollouts, reward_range = messy_batch(rng, mutation, reward_range)
    spec = ESTIMATORS.get(name) if isinstance(name, str) else None
    prior = None
    if spec is None or spec.uses_prior or rng.random() < 0.1:
        prior = None if rng.random() < 0.05 else messy_floats(rng, pick(rng, (n_groups, n_rollouts)), p_bad=0.2)
    options = messy_options(rng, name, n_groups, n_rollouts) if spec is not None else {}
    call(estimate, name, rewards, group, prior=prior, reward_range=reward_range, **options)


EXTREME = (5e-324, 1e-300, 1e-12, 1e-6, 0.5, 1.0, 1e6, 1e300, 1.7e308)
EXTREME_OPTIONS = {
    "scale": SCALES, "eps": EXTREME, "tau2": EXTREME, "tau2_floor": EXTREME, "alpha0": EXTREME, "beta0": EXTREME,
    "lambda_": (5e-324, 1e-300, 1e-6, 0.5, 1.0), "guard_level": (None, 1e-300, 0.01, 0.5, 1 - 1e-16),
    "min_groups": (0, 1, 2, 3), "loo": (True, False), "include_current": (True, False),
    "noise": ("bound", "plugin"), "switch": ("smooth", "hard"),
}  # fmt: skip


@fuzz_settings(1300)
@given(st.sampled_from(tuple(ESTIMATORS)), st.sampled_from(("pm1", "01")), SEEDS)
def test_valid_batches_with_extreme_options_stay_finite(name, reward_range, seed):
    """Valid batches with valid-but-extreme options (eps = 5e-324, n0 = 1.7e308, tiny τ²): a ValueError or finite."""
    tick(__name__)
    rng = np.random.default_rng(seed)
    rewards, group, prior = ragged_arrays(rng, lo=0.0 if reward_range == "01" else -1.0)
    n_groups = len(prior)
    options: dict[str, object] = {}
    for option in ESTIMATORS[name].options:
        if option == "mu":
            options[option] = prior
        elif option == "values":
            options[option] = prior[group]
        elif option == "prompt_ids":
            options[option] = np.arange(n_groups)
        elif rng.random() < 0.5:
            continue
        elif option == "n0":
            options[option] = pick(rng, EXTREME) if rng.random() < 0.5 else rng.choice(EXTREME, n_groups)
        elif option == "decay":
            options[option], options["step"] = "step", int(pick(rng, (0, 1, 2**40, 2**62)))
        elif option in EXTREME_OPTIONS:
            options[option] = pick(rng, EXTREME_OPTIONS[option])
    prior = prior if ESTIMATORS[name].uses_prior else None
    call(compute_advantages, name, rewards, group, prior=prior, reward_range=reward_range, **options)


STEP_NUMBERS = (-5, -1, 0, 1, 2, 3, 10, 2**62, 2**63, 2**64, -(2**63) - 1, 1.5, None)


@fuzz_settings(300)
@given(st.integers(1, 3), st.sampled_from(("visit", "step")), st.sampled_from(("pm1", "01")), SEEDS)
def test_dbb_over_steps_with_messy_prompt_keys(n_steps, decay, reward_range, seed):
    """dbb carried over steps with unicode / duplicated / mixed / None / NaN keys and any step numbers: ValueError
    or finite advantages and a finite history."""
    tick(__name__)
    rng = np.random.default_rng(seed)
    state = None
    options = {"decay": decay, "lambda_": pick(rng, (0.7, 1.0, 1e-9)), "include_current": bool(rng.random() < 0.5)}
    for _ in range(n_steps):
        rewards, group, prior = ragged_arrays(rng, max_groups=4, max_size=5, lo=0.0 if reward_range == "01" else -1)
        keys = messy_keys(rng, len(prior), "int" if rng.random() < 0.4 else None)
        out, err = call(estimate, "dbb", rewards, group, prompt_ids=keys, state=state, step=pick(rng, STEP_NUMBERS),
                        reward_range=reward_range, **options)  # fmt: skip
        if err is None:
            state = out.state


@fuzz_settings(250)
@given(st.integers(1, 4), st.sampled_from((1, 2, 256)), st.sampled_from((None, 1e-2, 1e-300, 5e-324)), SEEDS)
def test_v05_eb_state_over_steps(n_steps, window, floor, seed):
    """v05_eb's PriorErrorState over steps (tiny windows, tiny τ² floors, the guard, LOO): ValueError or finite."""
    tick(__name__)
    rng = np.random.default_rng(seed)
    state = PriorErrorState(window=window)
    options = {"loo": bool(rng.random() < 0.5), "guard_level": pick(rng, (None, 0.01)), "min_groups": 1}
    if floor is not None:
        options["tau2_floor"] = floor
    for _ in range(n_steps):
        rewards, group, prior = ragged_arrays(rng, max_groups=5, max_size=5)
        out, err = call(estimate, "v05_eb", rewards, group, prior=prior, state=state, **options)
        if err is None:
            state = out.state


@fuzz_settings(100)
@given(
    st.sampled_from((float("nan"), float("inf"), -1.0, 1e308, 2.5, "x", None)),
    st.sampled_from(("d2", "noise", "var", "count", "window")),
    st.booleans(),
    SEEDS,
)
def test_v05_eb_refuses_a_corrupt_state(bad, field, via_dict, seed):
    """A PriorErrorState holding NaN/inf/huge/negative sums (e.g. from a corrupt checkpoint) is refused with a
    ValueError, or harmless (finite outputs)."""
    tick(__name__)
    rewards, group, prior = ragged_arrays(np.random.default_rng(seed), max_groups=4, max_size=4)
    fields: dict[str, object] = {"window": 1, "d2": (1.0,), "noise": (0.5,), "var": (0.5,), "count": (20,)}
    fields[field] = bad if field == "window" else (bad,)
    state, err = call(PriorErrorState.from_dict, fields) if via_dict else call(PriorErrorState, **fields)
    if err is None:
        call(estimate, "v05_eb", rewards, group, prior=prior, state=state, min_groups=1)


UID_SAMPLES = ("a", "é", "😀", "", "a\u0301", "b")


@fuzz_settings(500)
@given(st.sampled_from(BATCH_MUTATIONS), st.sampled_from(("keys", "text", "junk")), SEEDS)
def test_cross_rollout_targets_and_group_index(mutation, uid_kind, seed):
    """cross_rollout_targets: ValueError, or finite targets except the documented NaN of singleton groups;
    group_index: ValueError, or dense ids in [0, G) in first-appearance order."""
    tick(__name__)
    rng = np.random.default_rng(seed)
    rewards, group, *_ = messy_batch(rng, mutation, "pm1")
    out, err = call(cross_rollout_targets, rewards, group, allow_nan=("output",))
    if err is None:
        g = np.asarray(group).astype(np.int64)
        singleton = (np.bincount(g) == 1)[g]
        assert np.all(np.isfinite(out[~singleton])) and np.all(np.isnan(out[singleton]))
    if uid_kind == "keys":
        uids = messy_keys(rng, int(rng.integers(0, 8)))
    elif uid_kind == "text":
        uids = [pick(rng, UID_SAMPLES) for _ in range(int(rng.integers(0, 8)))]
    else:
        uids = pick(rng, JUNK_VALUES)
    dense, err = call(group_index, uids, allow_nan=("output",))  # NaN uids come back as given
    if err is None:
        ids, uniq = dense
        assert ids.dtype == np.int64 and (ids.size == 0 or set(ids.tolist()) == set(range(int(ids.max()) + 1)))


@pytest.mark.parametrize("bad", BAD_FLOATS[:3])
def test_compute_advantages_rejects_non_finite_rewards(bad):
    """A non-finite reward is a ValueError naming rewards (the boundary check every estimator shares)."""
    with pytest.raises(ValueError, match="rewards"):
        compute_advantages("grpo", [1.0, bad], [0, 0])


def test_option_types_and_degenerate_eps_regression():
    """Estimator options of the wrong type, eps = 0 and a τ² near the smallest double are ValueErrors (they were
    TypeErrors, or NaN advantages: 0/0 on an all-equal group, n0 = σ̄²/τ² = inf)."""
    r, g, prior = np.array([1.0, 1.0, -1.0, 1.0]), np.array([0, 0, 1, 1]), np.array([0.0, 0.5])
    bad_calls = [
        ("grpo", {"eps": 0.0}), ("grpo", {"eps": "x"}), ("grpo", {"eps": None}), ("reinforce_pp_baseline", {"eps": 0}),
        ("v05_eb", {"prior": prior, "tau2": 5e-324}),
        ("v05_eb", {"prior": prior, "guard_level": "x"}), ("v05_eb", {"prior": prior, "min_groups": None}),
        ("v05_eb", {"prior": prior, "n0": object()}), ("v05_eb", {"prior": prior, "tau2": "x"}),
        ("dbb", {"prompt_ids": [None, 1]}), ("dbb", {"prompt_ids": [float("nan"), 1.0]}),
        ("dbb", {"prompt_ids": [0, 1], "lambda_": None}), ("dbb", {"prompt_ids": [0, 1], "step": 2**63}),
        ("dbb", {"prompt_ids": [0, 1], "alpha0": "x"}), ("oracle", {}), ("poise", {}),
        ("grpo", {"reward_range": ["pm1"]}),
    ]  # fmt: skip
    for name, options in bad_calls:
        with pytest.raises(ValueError):
            estimate(name, r, g, **options)
    with pytest.raises(ValueError, match="overflows"):  # v̄ = V: τ̂² falls to the floor, n0 = 2/5e-324
        estimate("v05_eb", [1.0, -1.0], [0, 0], prior=[0.0], tau2_floor=5e-324)


def test_batch_boundary_checks_regression():
    """Huge ints in rewards, a huge group id and unorderable uids are ValueErrors (OverflowError, an 8 TiB bincount
    and a TypeError before)."""
    with pytest.raises(ValueError, match="rewards"):
        compute_advantages("grpo", [1.0, 2**2000], [0, 0])
    with pytest.raises(ValueError, match="group ids"):
        compute_advantages("grpo", [1.0, 1.0], [0, 2**40])
    with pytest.raises(ValueError, match="uids"):
        group_index([None, 1, "a"])


def test_prior_error_state_refuses_corrupt_sums_regression():
    """A PriorErrorState with NaN / negative / mismatched sums (a corrupt checkpoint) is a ValueError, in the
    constructor and in from_dict (NaN advantages, TypeError or KeyError before)."""
    for fields in ({"d2": (float("nan"),), "noise": (0.5,), "var": (0.5,), "count": (4,)},
                   {"d2": (1.0,), "noise": (-0.5,), "var": (0.5,), "count": (4,)},
                   {"d2": (1.0, 2.0), "noise": (0.5,), "var": (0.5,), "count": (4,)},
                   {"d2": (1.0,), "noise": (0.5,), "var": (0.5,), "count": (2.5,)}):  # fmt: skip
        with pytest.raises(ValueError):
            PriorErrorState(window=4, **fields)
    for d in ({"window": 4}, {"window": 4, "d2": [None], "noise": [0.5], "var": [0.5], "count": [4]},
              {"window": 4, "d2": [1.0], "noise": [0.5], "var": [0.5], "count": [float("inf")]}):  # fmt: skip
        with pytest.raises(ValueError):
            PriorErrorState.from_dict(d)
