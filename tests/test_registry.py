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


def _allocate_coin_flips(allocator: object, prior: np.ndarray | None) -> object:
    """One allocation step over 40 prompts whose rollouts pass with probability 1/2."""
    from v05.allocation import allocate

    rng = np.random.default_rng(0)

    def sample(ids: np.ndarray, counts: np.ndarray) -> np.ndarray:
        return np.where(rng.random(int(np.sum(counts))) < 0.5, 1.0, -1.0)

    return allocate(allocator, sample, n_prompts=40, rng=rng, prior=prior, keys=np.arange(40))


def test_every_allocator_spec_names_its_base_group_size_and_whether_it_selects_from_a_pool():
    """AllocatorSpec: ``k_option`` is a field of the allocator's class (the simulator's k grid sets it), ``pool``
    says what the allocator itself says (a candidate pool larger than the batch), and ``uses_prior`` what it does
    without a prior (it refuses to run). A spec without ``k_option`` cannot be written (a new allocator fails here,
    at registration, not with a KeyError deep in the simulator)."""
    from dataclasses import fields

    from v05.allocation import Fixed
    from v05.registry import ALLOCATORS, AllocatorSpec, get_allocator, get_allocator_spec
    from v05.sim.config import SimConfig

    for name, spec in ALLOCATORS.items():
        assert spec.k_option in {f.name for f in fields(spec.cls)}, name
        allocator = get_allocator(name, batch_size=8, **{spec.k_option: 4})
        assert spec.pool == (allocator.candidate_pool(8) > 8), name
        _allocate_coin_flips(allocator, np.zeros(40))
        if spec.uses_prior:
            with pytest.raises(ValueError, match="needs a prior"):
                _allocate_coin_flips(allocator, None)
        else:
            _allocate_coin_flips(allocator, None)
        assert get_allocator_spec(name) is spec
    with pytest.raises(TypeError, match="k_option"):
        AllocatorSpec(Fixed)  # type: ignore[call-arg]
    assert ALLOCATORS["osla"].uses_prior and ALLOCATORS["prior_select"].uses_prior
    SimConfig(allocators=tuple(ALLOCATORS))  # every registered allocator is a valid grid entry
    with pytest.raises(ValueError, match="the grid's --ks sets k_init"):
        SimConfig(allocators=("osla:k_init=2",))


def _two_batches(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Two batches of 3 groups × 4 rollouts that share group 0 and differ in the other groups' rewards."""
    rng = np.random.default_rng(seed)
    group = np.repeat(np.arange(3), 4)
    a = np.where(rng.random(12) < 0.5, 1.0, -1.0)
    b = a.copy()
    b[4:] = np.where(rng.random(8) < 0.8, 1.0, -1.0)
    b[4:8] = 1.0  # group 1 all-pass in batch b: a batch-level statistic (its mean, its std) moves
    return a, b, group, np.array([0.3, -0.2, 0.6])


def test_exact_in_sim_estimators_have_baselines_local_to_their_group():
    """``exact_in_sim="group"``: a group's baselines depend on its own rewards, prior and true value only, so
    changing the other groups of the batch leaves them unchanged (what lets the simulator enumerate one group's
    outcomes exactly); the batch-mean baseline of reinforce_pp moves, which is why it is sampled. ``"given_state"``
    estimators have the ``min_groups`` option the simulator reads, and given a state holding that many groups
    their baselines are local too."""
    from v05.registry import ESTIMATORS

    for name, spec in ESTIMATORS.items():
        if spec.exact_in_sim is None:
            continue
        assert not spec.needs_values and not spec.keyed, name
        state = None
        if spec.exact_in_sim == "given_state":
            assert "min_groups" in spec.options, name
            rng = np.random.default_rng(1)
            warm_group = np.repeat(np.arange(64), 4)
            warm = np.where(rng.random(256) < 0.5, 1.0, -1.0)
            state = spec.fn(warm, warm_group, **spec.bind({}, prior=rng.uniform(-1, 1, 64), state=None)).state
        else:
            assert not spec.stateful, name
        for seed in range(5):
            a, b, group, prior = _two_batches(seed)
            kw = spec.bind({}, prior=prior, mu=prior, state=state, prompt_ids=np.arange(3))
            base_a = spec.fn(a, group, **kw).baseline
            base_b = spec.fn(b, group, **kw).baseline
            np.testing.assert_array_equal(base_a[:4], base_b[:4], err_msg=name)
    pp = ESTIMATORS["reinforce_pp"]
    a, b, group, _ = _two_batches(0)
    assert not np.array_equal(pp.fn(a, group).baseline[:4], pp.fn(b, group).baseline[:4])
