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
    float_arrays,
    junk,
    messy_batches,
    prompt_keys,
    ragged_batches,
    registry_names,
    scalar_option,
)
from v05.advantages import SCALES
from v05.estimators import cross_rollout_targets
from v05.estimators.fusion import PriorErrorState
from v05.groups import group_index
from v05.registry import ESTIMATORS, compute_advantages, estimate

pytestmark = pytest.mark.fuzz

def option_values(name: str, n_groups: int, n_rollouts: int) -> st.SearchStrategy[object]:
    """A value for the estimator option ``name``: valid, extreme or of the wrong type."""
    per_group = float_arrays(n_groups)
    if name == "scale":
        return st.sampled_from((*SCALES, *SCALES, "bogus", "", None, 3))
    if name in ("eps", "tau2", "tau2_floor", "alpha0", "beta0"):
        return st.one_of(st.none(), scalar_option("float"))
    if name in ("lambda_", "guard_level"):
        return st.one_of(st.none(), scalar_option("prob"))
    if name == "decay":
        return st.sampled_from(("visit", "step", "bogus", None))
    if name in ("step", "min_groups"):
        return st.one_of(st.none(), scalar_option("int"))
    if name in ("include_current", "loo"):
        return scalar_option("bool")
    if name == "noise":
        return st.sampled_from(("bound", "plugin", "gauss"))
    if name == "switch":
        return st.sampled_from(("smooth", "hard", "soft"))
    if name == "n0":
        return st.one_of(st.none(), scalar_option("float"), float_arrays(n_groups, lo=0.0, hi=50.0))
    if name == "state":
        return st.one_of(st.none(), st.none(), junk())
    if name == "mu":
        return st.one_of(per_group, float_arrays(n_rollouts))
    if name == "values":
        return float_arrays(n_rollouts)
    if name == "prompt_ids":
        return st.one_of(prompt_keys(n_groups), st.none())
    return junk()


@st.composite
def estimator_calls(draw):
    """(name, rewards, group, prior, reward_range, options) for ``estimate``."""
    name = draw(registry_names(tuple(ESTIMATORS)))
    rewards, group, n_groups, n_rollouts, reward_range = draw(messy_batches())
    spec = ESTIMATORS.get(name) if isinstance(name, str) else None
    prior = None
    if spec is None or spec.uses_prior or draw(st.integers(0, 9)) == 0:
        prior = draw(st.one_of(float_arrays(n_groups), float_arrays(n_rollouts), st.none()))
    options: dict[str, object] = {}
    names = spec.options if spec is not None else ()
    required = {"mu", "values", "prompt_ids"}
    for option in names:
        if option in required and draw(st.integers(0, 9)) > 0 or draw(st.booleans()):
            options[option] = draw(option_values(option, n_groups, n_rollouts))
    if draw(st.integers(0, 19)) == 0:
        options[draw(st.sampled_from(("k", "kappa", "Scale", "prior_g")))] = 1.0
    return name, rewards, group, prior, reward_range, options


@fuzz_settings(2500)
@given(estimator_calls())
def test_estimate_raises_only_valueerror_and_never_returns_nan(call_args):
    """Any estimator name, batch, prior and options: a ValueError, or an Estimate whose floats are all finite."""
    tick(__name__)
    name, rewards, group, prior, reward_range, options = call_args
    call(estimate, name, rewards, group, prior=prior, reward_range=reward_range, **options)


EXTREME = st.sampled_from((5e-324, 1e-300, 1e-12, 1e-6, 0.5, 1.0, 1e6, 1e300, 1.7e308))


@st.composite
def valid_calls(draw):
    """A valid ragged batch (singletons, all-equal groups likely) and valid-but-extreme options for one estimator."""
    reward_range = draw(st.sampled_from(("pm1", "01")))
    rewards, group, prior = draw(
        ragged_batches(max_groups=6, max_size=6, binary=draw(st.booleans()), reward_range=reward_range)
    )
    n_groups = int(group.max()) + 1
    name = draw(st.sampled_from(tuple(ESTIMATORS)))
    spec = ESTIMATORS[name]
    options: dict[str, object] = {}
    for option in spec.options:
        if option not in ("mu", "values", "prompt_ids") and draw(st.booleans()):
            continue
        if option == "scale":
            options[option] = draw(st.sampled_from(SCALES))
        elif option in ("eps", "tau2", "tau2_floor", "alpha0", "beta0"):
            options[option] = draw(EXTREME)
        elif option == "lambda_":
            options[option] = draw(st.sampled_from((5e-324, 1e-300, 1e-6, 0.5, 1.0)))
        elif option == "guard_level":
            options[option] = draw(st.sampled_from((None, 1e-300, 0.01, 0.5, 1 - 1e-16)))
        elif option == "n0":
            options[option] = draw(st.one_of(EXTREME, st.just(0.0), st.lists(EXTREME, min_size=n_groups,
                                                                             max_size=n_groups)))  # fmt: skip
        elif option == "min_groups":
            options[option] = draw(st.integers(0, 3))
        elif option in ("loo", "include_current"):
            options[option] = draw(st.booleans())
        elif option == "noise":
            options[option] = draw(st.sampled_from(("bound", "plugin")))
        elif option == "switch":
            options[option] = draw(st.sampled_from(("smooth", "hard")))
        elif option == "decay":
            options[option] = "step"
            options["step"] = draw(st.integers(0, 2**40))
        elif option == "mu":
            options[option] = prior
        elif option == "values":
            options[option] = prior[group]
        elif option == "prompt_ids":
            options[option] = np.arange(n_groups)
    return name, rewards, group, prior if spec.uses_prior else None, reward_range, options


@fuzz_settings(1500)
@given(valid_calls())
def test_valid_batches_with_extreme_options_stay_finite(call_args):
    """Valid batches with valid-but-extreme options (eps = 5e-324, n0 = 1.7e308, tiny τ²): a ValueError or finite."""
    tick(__name__)
    name, rewards, group, prior, reward_range, options = call_args
    call(compute_advantages, name, rewards, group, prior=prior, reward_range=reward_range, **options)


@fuzz_settings(500)
@given(
    st.lists(ragged_batches(max_groups=4, max_size=5), min_size=1, max_size=3),
    st.data(),
)
def test_dbb_over_steps_with_messy_prompt_keys(steps, data):
    """dbb carried over steps with unicode / duplicated / mixed / None keys and any step numbers: ValueError or
    finite, and the returned history is finite."""
    tick(__name__)
    state = None
    options = {
        "decay": data.draw(st.sampled_from(("visit", "step"))),
        "lambda_": data.draw(st.sampled_from((0.7, 1.0, 1e-9))),
        "include_current": data.draw(st.booleans()),
    }
    for rewards, group, _ in steps:
        keys = data.draw(prompt_keys(int(group.max()) + 1))
        step = data.draw(st.one_of(st.integers(-5, 10), st.sampled_from((2**62, 2**63, 2**64, -(2**63) - 1))))
        out, err = call(estimate, "dbb", rewards, group, prompt_ids=keys, state=state, step=step, **options)
        if err is None:
            state = out.state


@fuzz_settings(400)
@given(
    st.lists(ragged_batches(max_groups=5, max_size=5), min_size=1, max_size=4),
    st.sampled_from((1, 2, 256)),
    st.sampled_from((None, 1e-2, 1e-300, 5e-324)),
    st.booleans(),
    st.sampled_from((None, 0.01)),
)
def test_v05_eb_state_over_steps(steps, window, floor, loo, guard):
    """v05_eb's PriorErrorState over steps (tiny windows, tiny τ² floors, the guard): ValueError or finite."""
    tick(__name__)
    state = PriorErrorState(window=window)
    options = {"loo": loo, "guard_level": guard, "min_groups": 1}
    if floor is not None:
        options["tau2_floor"] = floor
    for rewards, group, prior in steps:
        out, err = call(estimate, "v05_eb", rewards, group, prior=prior, state=state, **options)
        if err is None:
            state = out.state


@fuzz_settings(300)
@given(
    st.sampled_from((float("nan"), float("inf"), -1.0, 1e308)),
    st.sampled_from(("d2", "noise", "var")),
    ragged_batches(max_groups=4, max_size=4),
)
def test_v05_eb_refuses_a_corrupt_state(bad, field, batch):
    """A PriorErrorState holding NaN/inf/huge sums (e.g. restored from a corrupt checkpoint) is refused or harmless."""
    tick(__name__)
    rewards, group, prior = batch
    sums = {"d2": (1.0,), "noise": (0.5,), "var": (0.5,)}
    sums[field] = (bad,)
    try:
        state = PriorErrorState(window=1, count=(20,), **sums)
    except ValueError:
        return
    call(estimate, "v05_eb", rewards, group, prior=prior, state=state, min_groups=1)


@fuzz_settings(600)
@given(st.data())
def test_cross_rollout_targets_and_group_index(data):
    """cross_rollout_targets: ValueError, or finite targets except the documented NaN of singleton groups;
    group_index: ValueError, or dense ids in first-appearance order."""
    tick(__name__)
    rewards, group, n_groups, n_rollouts, _ = data.draw(messy_batches())
    out, err = call(cross_rollout_targets, rewards, group, allow_nan=("output",))
    if err is None:
        g = np.asarray(group).astype(np.int64)
        singleton = (np.bincount(g) == 1)[g]
        assert np.all(np.isfinite(out[~singleton])) and np.all(np.isnan(out[singleton]))
    uids = data.draw(st.one_of(prompt_keys(n_rollouts), st.lists(st.sampled_from(("a", "é", "😀", "")), max_size=8)))
    dense, err = call(group_index, uids, allow_nan=("output",))  # NaN uids come back as given
    if err is None:
        ids, uniq = dense
        assert ids.dtype == np.int64 and (ids.size == 0 or set(ids.tolist()) == set(range(int(ids.max()) + 1)))


@pytest.mark.parametrize("bad", [*BAD_FLOATS[:3]])
def test_compute_advantages_rejects_non_finite_rewards(bad):
    """A non-finite reward is a ValueError naming rewards (the boundary check every estimator shares)."""
    with pytest.raises(ValueError, match="rewards"):
        compute_advantages("grpo", [1.0, bad], [0, 0])
