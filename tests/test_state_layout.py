"""Every carried state survives its JSON round trip with the same values *and the same memory layout*.

A resumed run is bit-exact only if a restored state computes exactly as the live one: numpy and BLAS pick their
summation order and kernels by dtype, shape and contiguity, so a state whose arrays come back C-contiguous where
the live ones were strided views (sklearn's ``PCA.components_``) predicts differently in the last bit and the
resumed run drifts. One test per state kind: fitted POISE probe (PCA on both blocks), its group buffer, DBB's Beta
history, DPS's HMM state, ``v05_eb``'s prior-error window, and every prior provider (their continued predictions).
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from v05.allocation import allocate
from v05.estimators.poise_baseline import cross_rollout_targets
from v05.priors import make_provider
from v05.registry import estimate, get_allocator
from v05.round import state_from_json, state_to_json
from v05.value_probe import GroupBuffer, PoiseProbe


def arrays_of(obj: object, path: str = "") -> dict[str, object]:
    """Every leaf reachable through dataclass fields, mappings and sequences, by path (arrays and scalars)."""
    if isinstance(obj, np.ndarray):
        return {path: obj}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out: dict[str, object] = {}
        for f in dataclasses.fields(obj):
            out |= arrays_of(getattr(obj, f.name), f"{path}.{f.name}")
        return out
    if isinstance(obj, dict):
        out = {}
        for key in sorted(obj, key=str):
            out |= arrays_of(obj[key], f"{path}[{key!r}]")
        return out
    if isinstance(obj, (list, tuple)) and not isinstance(obj, str):
        out = {}
        for i, item in enumerate(obj):
            out |= arrays_of(item, f"{path}[{i}]")
        return out
    return {path: obj}


def assert_same_layout(live: object, restored: object) -> None:
    """Same leaves; arrays with equal values, dtype, shape and C/F contiguity; other leaves equal (NaN = NaN)."""
    a, b = arrays_of(live), arrays_of(restored)
    assert sorted(a) == sorted(b)
    for path, x in a.items():
        y = b[path]
        if isinstance(x, np.ndarray):
            assert isinstance(y, np.ndarray), path
            layout = lambda v: (v.dtype.str, v.shape, v.flags.c_contiguous, v.flags.f_contiguous)  # noqa: E731
            assert layout(x) == layout(y), f"{path}: live {layout(x)} vs restored {layout(y)}"
            np.testing.assert_array_equal(x, y, err_msg=path)
        elif isinstance(x, float) and np.isnan(x):
            assert isinstance(y, float) and np.isnan(y), path
        else:
            assert x == y, path


def json_round_trip(state: object) -> object:
    return json.loads(json.dumps(state))


def continue_after_round_trip(step, n_steps: int = 4):
    """Run ``step(t, state)`` n_steps times, round-trip the state through the trainer's JSON, check its layout, and
    return the next step's result from the live and from the restored state (their states' layout checked too)."""
    state = None
    for t in range(n_steps):
        state = step(t, state).state
    restored = state_from_json(json_round_trip(state_to_json(state)))
    assert_same_layout(state, restored)
    a, b = step(n_steps, state), step(n_steps, restored)
    assert_same_layout(a.state, b.state)
    return a, b


def _probe_data(rng: np.random.Generator, n_groups: int, k: int = 2) -> tuple[np.ndarray, ...]:
    group = np.repeat(np.arange(n_groups), k)
    u = rng.standard_normal(n_groups)
    prompt = u[group, None] * rng.standard_normal(24) + 0.3 * rng.standard_normal((n_groups * k, 24))
    response = rng.standard_normal((n_groups * k, 40))
    scalars = rng.standard_normal((n_groups * k, 3))
    rewards = (rng.random(n_groups * k) < 1 / (1 + np.exp(-2 * u[group]))).astype(float)
    return prompt, response, scalars, cross_rollout_targets(rewards, group)


@pytest.mark.parametrize(("pca_prompt", "pca_response"), [(5, 7), (5, 0), (0, 7), (32, 64)])
def test_fitted_poise_probe_keeps_its_layout_through_json(pca_prompt, pca_response):
    """A fitted probe (PCA on either, both or neither block) restores with the live arrays' layout, and predicts
    bit-identically on fresh rows. Fails if sklearn's strided ``components_`` is stored as it comes."""
    rng = np.random.default_rng(5)
    probe = PoiseProbe(pca_prompt=pca_prompt, pca_response=pca_response).fit(*_probe_data(rng, 60))
    restored = PoiseProbe(pca_prompt=pca_prompt, pca_response=pca_response)
    restored.load_state_dict(json_round_trip(probe.state_dict()))
    assert_same_layout(probe, restored)
    query = _probe_data(rng, 40)[:3]
    np.testing.assert_array_equal(restored.predict(*query), probe.predict(*query))


def test_group_buffer_keeps_its_layout_through_json():
    """A buffer after two appends (one eviction) restores with the same rows, groups and layout, and the probes fit
    on the live and the restored buffer predict bit-identically."""
    rng = np.random.default_rng(6)
    live = GroupBuffer(max_rows=70)
    for _ in range(2):
        prompt, response, scalars, targets = _probe_data(rng, 20)
        live.append(np.repeat(np.arange(20), 2), prompt, response, scalars, targets)
    restored = GroupBuffer(max_rows=70).load_state_dict(json_round_trip(live.state_dict()))
    assert_same_layout(live.arrays(), restored.arrays())
    assert_same_layout(list(live._groups), list(restored._groups))
    query = _probe_data(rng, 10)[:3]
    fit = lambda buf: PoiseProbe(pca_prompt=5, pca_response=7).fit(*buf.arrays()).predict(*query)  # noqa: E731
    np.testing.assert_array_equal(fit(restored), fit(live))


def _steps(rng: np.random.Generator, n_steps: int, n_keys: int = 30, k: int = 4):
    """(keys (G,), rewards (N,) ±1, group (N,), prior (G,)) for a few steps over a recurring key set."""
    for _ in range(n_steps):
        keys = rng.choice(n_keys, size=8, replace=False)
        group = np.repeat(np.arange(8), k)
        p = (keys + 1) / (n_keys + 1)
        rewards = np.where(rng.random(8 * k) < p[group], 1.0, -1.0)
        yield keys, rewards, group, np.clip(2 * p - 1 + 0.1 * rng.standard_normal(8), -1, 1)


@pytest.mark.parametrize(("name", "options"), [("dbb", {"decay": "visit"}), ("dbb", {"decay": "step"}),
                                               ("v05_eb", {"scale": "none"})])  # fmt: skip
def test_estimator_states_keep_their_layout_through_json(name, options):
    """DBB's Beta history and ``v05_eb``'s prior-error window: after 4 steps the JSON round trip gives the same
    arrays (layout included), and the next step's advantages and state are identical from either."""
    steps = list(_steps(np.random.default_rng(7), 5))

    def step(t, st):
        keys, rewards, group, prior = steps[t]
        kw = dict(options, state=st)
        if name == "dbb":
            kw["prompt_ids"] = keys
            if options["decay"] == "step":
                kw["step"] = t + 1
        else:
            kw["prior"] = prior
        return estimate(name, rewards, group, **kw)

    a, b = continue_after_round_trip(step)
    np.testing.assert_array_equal(a.advantages, b.advantages)


@pytest.mark.parametrize("name", ["dps", "sara", "greso"])
def test_allocator_states_keep_their_layout_through_json(name):
    """DPS's HMM state, SARA's Beta history and GRESO's streaks after 4 steps: the JSON round trip gives the same
    arrays (layout included), and the next step selects the same prompts and leaves the same state."""
    options = {"group_size": 4} if name == "sara" else {"k": 4}
    allocator = get_allocator(name, batch_size=8, **options)
    truth = np.random.default_rng(8).random(32)

    def step(t, st):
        keys = np.arange(32)
        rng = np.random.default_rng([t, 1])

        def sample(ids, counts):
            return np.where(rng.random(int(np.sum(counts))) < np.repeat(truth[ids], counts), 1.0, -1.0)

        return allocate(allocator, sample, n_prompts=32, rng=np.random.default_rng([t, 2]), keys=keys, state=st)

    a, b = continue_after_round_trip(step)
    np.testing.assert_array_equal(a.counts, b.counts)


PROVIDERS = [
    ("running_mean", {}),
    ("history", {}),
    ("v0", {"backend": "tfidf"}),
    ("combined", {"backend": "tfidf"}),
    ("combined", {"backend": "tfidf", "refit_every": 4, "min_context": 12}),  # fitted at update 1: stale
    ("domain_mean", {}),
    ("domain_mean", {"separator": "2"}),  # keys "12", "32", "20", ...: several domains
]


@pytest.mark.parametrize(("name", "options"), PROVIDERS)
def test_provider_states_continue_bit_identically(name, options):
    """Each provider, after 4 steps of updates: a JSON round trip of its state predicts bit-identically (mean, τ²,
    n0), and after one more identical update both still agree bit for bit."""
    rng = np.random.default_rng(9)
    texts = [f"what is {i} plus {i % 7}?" for i in range(40)]

    def feed(prov, t):
        r = np.random.default_rng([t, 3])
        idx = r.choice(40, size=12, replace=False)
        ids = [str(i) for i in idx]
        counts = np.full(12, 4.0)
        scores = 2 * r.binomial(4, (idx + 1) / 41) / 4 - 1
        prov.predict(ids, [texts[i] for i in idx])
        prov.update(ids, [texts[i] for i in idx], scores, counts, step=t + 1)

    live = make_provider(name, **options)
    for t in range(4):
        feed(live, t)
    restored = make_provider(name, **options)
    restored.load_state_dict(json_round_trip(live.state_dict()))
    query = [str(i) for i in rng.permutation(40)]
    qtexts = [texts[int(i)] for i in query]
    for _ in range(2):
        a, b = live.predict(query, qtexts), restored.predict(query, qtexts)
        for field in ("mean", "tau2", "n0"):
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)
        feed(live, 4)
        feed(restored, 4)
