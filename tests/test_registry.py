import subprocess
import sys

import numpy as np
import pytest

import v05
from v05.registry import ESTIMATORS, estimate, get_estimator

R, G = np.array([1.0, -1.0, 1.0, 1.0]), np.array([0, 0, 1, 1])


def test_compute_advantages_contract_per_group_and_per_rollout_prior():
    """compute_advantages(estimator, rewards, group, prior=, reward_range=, **options) accepts (G,) or (N,) priors."""
    a = v05.compute_advantages("v05", R, G, prior=[0.5, 0.0], scale="none")
    b = v05.compute_advantages("v05", R, G, prior=[0.5, 0.5, 0.0, 0.0])
    np.testing.assert_allclose(a, b)
    assert a.shape == (4,)


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_every_estimator_runs_in_both_ranges(name):
    """Every registered estimator returns finite (N,) advantages for ±1 and 0/1 batches."""
    spec = get_estimator(name)
    for rr, r, prior in (("pm1", R, [0.2, -0.3]), ("01", (R + 1) / 2, [0.6, 0.35])):
        kw = {"prior": prior} if spec.uses_prior else {}
        if spec.needs_truth:
            kw["mu"] = prior
        if spec.keyed:
            kw["prompt_ids"] = ["p0", "p1"]
        if spec.needs_values:
            kw["values"] = np.asarray(prior)[G]
        a = v05.compute_advantages(name, r, G, reward_range=rr, **kw)
        assert a.shape == (4,) and np.all(np.isfinite(a))


@pytest.mark.parametrize(
    ("kwargs", "msg"),
    [
        ({"estimator": "gpro"}, "unknown estimator 'gpro'; valid: grpo, drgrpo"),
        ({"rewards": [1.0, np.nan, 0, 1]}, "non-finite"),
        ({"rewards": [1.0, np.inf, 0, 1]}, "non-finite"),
        ({"rewards": [2.0, 1.0, 0, 1]}, "outside the declared reward_range"),
        ({"rewards": [1.0, 0.0, 1.0, 1.0], "reward_range": "0-1"}, "unknown reward_range"),
        ({"rewards": [1.0, 1.0, 1.0]}, "length mismatch"),
        ({"rewards": [], "group": []}, "empty"),
        ({"group": [0, 0, 1.5, 1]}, "integers"),
        ({"group": [0, 0, -1, 1]}, "non-negative"),
        ({"rewards": [[1.0, 1.0], [1.0, 1.0]]}, "1-D"),
        ({"estimator": "v05", "prior": [0.5, np.nan]}, "non-finite"),
        ({"estimator": "v05", "prior": [0.5, 1.2]}, "prior outside"),
        ({"estimator": "v05", "prior": [0.5, 0.1, 0.2]}, "one value per group"),
        ({"estimator": "grpo", "prior": [0.5, 0.1]}, "does not use a prior"),
        ({"estimator": "grpo", "kappa": 2}, "no option"),
        ({"estimator": "grpo", "scale": "zscore"}, "unknown scale"),
    ],
)
def test_bad_input_raises_clear_value_error(kwargs, msg):
    """Bad input of every kind named in the issue raises ValueError with a message naming the problem."""
    args = {"estimator": "grpo", "rewards": R, "group": G} | kwargs
    with pytest.raises(ValueError, match=msg):
        v05.compute_advantages(args.pop("estimator"), args.pop("rewards"), args.pop("group"), **args)


def test_estimate_returns_state_for_stateful_estimators():
    """estimate() exposes Estimate.state; feeding it back accumulates history (dbb: α grows)."""
    e1 = estimate("dbb", R, G, prompt_ids=[10, 11])
    e2 = estimate("dbb", R, G, prompt_ids=[10, 11], state=e1.state)
    assert e2.state.alpha.sum() > e1.state.alpha.sum()


def test_import_is_fast_and_torch_free():
    """`import v05` (and the allocators) does not import torch (the import-time target lives in `v05 bench core`)."""
    code = (
        "import time, sys; t = time.perf_counter(); import v05, v05.allocation; "
        "print(time.perf_counter() - t, 'torch' in sys.modules)"
    )
    runs = [
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
        for _ in range(3)
    ]
    assert all(r[1] == "False" for r in runs)


def test_bind_gives_each_estimator_exactly_the_context_it_takes():
    """EstimatorSpec.bind, the one binding of a runner's context: each estimator gets the context arguments it
    declares and no other; a user's n0 wins over the provider's; step only when given; the user's options are kept
    and never mutated; no context name is a user option anywhere (CONTEXT_OPTIONS)."""
    from v05.registry import CONTEXT_OPTIONS, ESTIMATORS

    context = {"prior": "P", "state": "S", "prompt_ids": "K", "mu": "M", "values": "V"}
    for name, spec in ESTIMATORS.items():
        user = {"eps": 0.5} if "eps" in spec.options else {}
        kw = spec.bind(user, n0="N", step=7, **context)
        keys = spec.keyed or "prompt_ids" in spec.options  # required, or optional (v05_eb's revisit pairs)
        takes = {"prior": spec.uses_prior, "state": spec.stateful, "prompt_ids": keys,
                 "mu": spec.needs_truth, "values": spec.needs_values}  # fmt: skip
        assert {k for k in context if k in kw} == {k for k, t in takes.items() if t}, name
        assert all(kw[k] == v for k, v in context.items() if k in kw)
        assert ("n0" in kw) == ("n0" in spec.options) and ("step" in kw) == ("step" in spec.options)
        assert user == ({"eps": 0.5} if "eps" in spec.options else {})
        assert set(kw) <= set(spec.options) | {"prior"}
    eb = ESTIMATORS["v05_eb"]
    assert eb.bind({"n0": 3.0}, n0="fed")["n0"] == 3.0 and "n0" not in eb.bind({}, n0=None)
    assert eb.bind({}, prior=None, state=None) == {"prior": None, "state": None}  # a fresh state is passed as None
    assert "step" not in ESTIMATORS["dbb"].bind({}, step=None, prompt_ids="K")
    assert set(CONTEXT_OPTIONS) == {"state", "prompt_ids", "step", "prior", "mu", "values"}


def test_every_registry_answers_an_unknown_name_and_bad_options_the_same_way():
    """The six registries go through v05.names: an unknown name lists the valid ones, a bad keyword names the entry."""
    from v05.priors import make_provider
    from v05.priors.backends import make_backend
    from v05.priors.head_registry import make_head
    from v05.registry import get_allocator, get_estimator
    from v05.tasks import make_task

    lookups = {"estimator": get_estimator, "allocator": get_allocator, "prior provider": make_provider,
               "head": make_head, "embedding backend": make_backend, "task": make_task}  # fmt: skip
    for what, call in lookups.items():
        with pytest.raises(ValueError, match=f"^unknown {what} 'nope'; valid: "):
            call("nope")
    for call, what in ((lambda: make_provider("history", nope=1), "prior provider 'history'"),
                       (lambda: make_head("knn", nope=1), "head 'knn'"),
                       (lambda: make_backend("tfidf", nope=1), "embedding backend 'tfidf'")):  # fmt: skip
        with pytest.raises(ValueError, match=f"^bad options for {what}: "):
            call()
