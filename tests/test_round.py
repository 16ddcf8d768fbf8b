"""v05.round: one step's prior → allocation → advantages → prior update, and the one path every runner takes.

Unit claims (each with the mutation that turns it red): the round's advantages are the registry estimator's with the
step's context bound (a dropped ``n0``, ``state`` or ``prompt_ids``); ``feed_n0`` is decided once (a runner that fed
n0 regardless); the prior reaches consumers on the reward scale (a missing or doubled ±1 → [0, 1] map); the
estimator and allocator states round-trip through the type-tagged JSON, whose types come from the registry specs
(a stateful spec without ``state_type``). Structure claims: no adapter or trainer module binds an estimator, calls
the registry's ``estimate``, runs ``allocate`` or feeds a provider by itself (an adapter that computes advantages any
other way turns :func:`test_runners_reach_the_estimators_only_through_the_round` red), and the verl estimator's
advantages are the round's (a spy on ``Round.advantages``).
"""

from __future__ import annotations

import ast
import copy
from pathlib import Path

import numpy as np
import pytest

from v05.allocation import allocate
from v05.estimators import PriorErrorState
from v05.priors import PriorPrediction, group_outcomes, make_provider
from v05.registry import ALLOCATORS, ESTIMATORS, estimate, get_allocator
from v05.rewards import score_to_reward_scale, to_pass_rate
from v05.round import STATE_TYPES, Prior, Round, state_from_json, state_to_json

SRC = Path(__file__).resolve().parents[1] / "src" / "v05"


def _batch(seed: int, n_groups: int = 6, k: int = 4) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    group = np.repeat(np.arange(n_groups), k)  # (N,)
    return (rng.random(n_groups * k) < 0.4).astype(np.float64), group


def test_advantages_are_the_registry_estimators_with_the_context_bound():
    """v05_eb through the round over 3 steps equals the registry's estimate with prior, n0, state, prompt_ids bound
    by hand, state carried; carry=False leaves the state where it was."""
    rnd = Round("v05_eb", options={"scale": "none"}, reward_range="01")
    keys = np.array([f"p{g}" for g in range(6)])
    state = None
    for step in range(1, 4):
        rewards, group = _batch(step)
        value = np.linspace(0.1, 0.9, 6)
        n0 = np.full(6, 3.0) + step
        est = rnd.advantages(rewards, group, prior=Prior(value, n0, "01"), keys=keys, step=step)
        ref = estimate("v05_eb", rewards, group, prior=value, n0=n0, state=state, prompt_ids=keys, scale="none",
                       reward_range="01")  # fmt: skip
        np.testing.assert_array_equal(est.advantages, ref.advantages)
        state = ref.state
        assert rnd.estimator_state.to_dict() == state.to_dict()
    frozen = rnd.estimator_state
    rnd.advantages(*_batch(9), prior=Prior(np.full(6, 0.5), np.full(6, 2.0), "01"), keys=keys, carry=False)
    assert rnd.estimator_state is frozen


def test_feed_n0_is_decided_once():
    """feed_n0=False: the provider's n0 never reaches v05_eb (it equals a call without n0), whatever the Prior holds:
    the round decides, not the runner that built the Prior."""
    rewards, group = _batch(3)
    value, n0 = np.linspace(0.2, 0.8, 6), np.full(6, 50.0)
    fed = Round("v05_eb", reward_range="01", feed_n0=True)
    unfed = Round("v05_eb", reward_range="01", feed_n0=False)
    a = fed.advantages(rewards, group, prior=Prior(value, n0, "01")).advantages
    b = unfed.advantages(rewards, group, prior=Prior(value, n0, "01")).advantages
    with_n0 = estimate("v05_eb", rewards, group, prior=value, n0=n0, reward_range="01").advantages
    np.testing.assert_array_equal(a, with_n0)
    np.testing.assert_array_equal(b, estimate("v05_eb", rewards, group, prior=value, reward_range="01").advantages)
    assert not np.array_equal(a, b)
    assert unfed.n0_of(Prior(value, n0, "01")) is None and fed.n0_of(None) is None


class _Faulty:
    """A provider whose predictions are NaN for the first prompt (the guard's running mean stands in)."""

    def __init__(self) -> None:
        self.inner = make_provider("running_mean")
        self.updates = []

    def predict(self, ids, texts, **kw):
        pred = self.inner.predict(ids, texts, **kw)
        mean = np.array(pred.mean)
        mean[0] = np.nan
        return PriorPrediction(mean, pred.tau2, pred.n0)

    def update(self, *args, **kw):
        self.updates.append(args)
        return self.inner.update(*args, **kw)

    def calibration(self):
        return self.inner.calibration()

    def state_dict(self):
        return self.inner.state_dict()

    def load_state_dict(self, state):
        self.inner.load_state_dict(state)


@pytest.mark.parametrize("reward_range", ["01", "pm1"])
def test_predict_converts_once_and_learn_feeds_group_outcomes(reward_range):
    """predict: the provider's ±1 score, mapped once to the reward scale (value), kept as score; pass_rate from the
    value; a NaN row counted as a fallback. learn: the provider gets the groups' ±1 means and counts."""
    rnd = Round("v05", reward_range=reward_range, prior="running_mean")
    rnd.provider = _Faulty()
    keys, texts = [f"k{i}" for i in range(6)], [f"t{i}" for i in range(6)]
    rewards, group = _batch(1)
    if reward_range == "pm1":
        rewards = 2 * rewards - 1
    assert rnd.learn(keys, texts, rewards, group, step=1)
    scores, counts = group_outcomes(rewards, group, reward_range=reward_range)
    np.testing.assert_array_equal(rnd.provider.updates[0][2], scores)
    np.testing.assert_array_equal(rnd.provider.updates[0][3], counts)
    prior = rnd.predict(keys, texts)
    assert prior.fallbacks == 1 and prior.reward_range == reward_range
    np.testing.assert_array_equal(prior.value, score_to_reward_scale(prior.score, reward_range))
    np.testing.assert_array_equal(prior.pass_rate, to_pass_rate(prior.value, reward_range))
    assert np.all(np.isfinite(prior.value))
    part = prior.take(np.array([2, 0]))
    np.testing.assert_array_equal(part.value, prior.value[[2, 0]])
    np.testing.assert_array_equal(part.n0, prior.n0[[2, 0]])


def test_allocate_carries_the_allocator_state_and_reads_the_prior_on_the_reward_scale():
    """SARA through the round over 2 steps equals allocate() by hand with the state carried; OSLA gets the Prior's
    value and fed n0 exactly."""
    def sample(seed):
        rng = np.random.default_rng(seed)
        return lambda ids, counts: (rng.random(int(np.sum(counts))) < 0.5).astype(np.float64)

    sara = get_allocator("sara", batch_size=4, group_size=4)
    rnd = Round(None, reward_range="01", allocator=sara)
    keys = np.array([f"p{i}" for i in range(16)])
    state = None
    for step in (1, 2):
        got = rnd.allocate(sample(step), n_prompts=16, rng=np.random.default_rng(step), keys=keys)
        ref = allocate(sara, sample(step), n_prompts=16, rng=np.random.default_rng(step), keys=keys,
                       reward_range="01", state=state)  # fmt: skip
        np.testing.assert_array_equal(got.counts, ref.counts)
        state = ref.state
        assert state_to_json(rnd.allocator_state) == state_to_json(state)
    osla = get_allocator("osla", batch_size=4, k_init=4, k_max=8, test="eb_guard")
    value, n0 = np.array([0.1, 0.5, 0.9, 0.3]), np.array([1.0, 2.0, 30.0, 4.0])
    got = Round(None, reward_range="01", allocator=osla).allocate(
        sample(5), n_prompts=4, rng=np.random.default_rng(0), prior=Prior(value, n0, "01"))
    ref = allocate(osla, sample(5), n_prompts=4, rng=np.random.default_rng(0), prior=value, n0=n0, reward_range="01")
    np.testing.assert_array_equal(got.counts, ref.counts)


def test_state_dict_round_trips_and_state_types_come_from_the_specs():
    """A round's state (estimator, provider, guard) restores into a fresh round that then computes the same next
    step; STATE_TYPES is exactly the specs' state types, every stateful estimator declares one, and a state of an
    undeclared type is refused."""
    keys = np.array([f"p{g}" for g in range(6)])
    live = Round("v05_eb", reward_range="01", prior="history")
    for step in (1, 2):
        rewards, group = _batch(step)
        prior = live.predict(keys, list(keys))
        live.advantages(rewards, group, prior=prior, keys=keys, step=step)
        live.learn(keys, list(keys), rewards, group, step=step)
    saved = copy.deepcopy(live.state_dict())
    assert set(saved) == {"allocator", "provider", "prior_guard", "estimator"}
    assert saved["estimator"]["type"] == "PriorErrorState"
    restored = Round("v05_eb", reward_range="01", prior="history")
    restored.load_state_dict(saved)
    rewards, group = _batch(3)
    a = live.advantages(rewards, group, prior=live.predict(keys, list(keys)), keys=keys, step=3)
    b = restored.advantages(rewards, group, prior=restored.predict(keys, list(keys)), keys=keys, step=3)
    np.testing.assert_array_equal(a.advantages, b.advantages)
    declared = {s.state_type for s in (*ESTIMATORS.values(), *ALLOCATORS.values()) if s.state_type is not None}
    assert set(STATE_TYPES.values()) == declared
    assert all((s.state_type is not None) == s.stateful for s in ESTIMATORS.values())
    with pytest.raises(ValueError, match="cannot checkpoint a state of type"):
        state_to_json(np.zeros(2))
    with pytest.raises(ValueError, match="unknown state type"):
        state_from_json({"type": "Nope", "data": {}})
    assert isinstance(state_from_json(saved["estimator"]), PriorErrorState)


# -- one path: runners reach the estimators, the allocators and the providers only through the round --------------
FORBIDDEN_NAMES = {
    ("v05.registry", "estimate"): "the registry's estimate (use Round.advantages)",
    ("v05.registry", "compute_advantages"): "compute_advantages (use Round.advantages)",
    ("v05", "compute_advantages"): "compute_advantages (use Round.advantages)",
    ("v05.allocation", "allocate"): "allocate (use Round.allocate)",
    ("v05.allocation.driver", "allocate"): "allocate (use Round.allocate)",
    ("v05.priors", "group_outcomes"): "group_outcomes (use Round.learn)",
    ("v05.priors", "make_provider"): "make_provider (the round builds the provider)",
    ("v05.priors.registry", "make_provider"): "make_provider (the round builds the provider)",
}
ALLOWED = {
    ("v05.train.value", "estimate"): "POISE's probe values and its RLOO bootstrap: a trainer-only value method",
}


def _violations(path: Path, module: str) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                why = FORBIDDEN_NAMES.get((node.module, alias.name))
                if why and (module, alias.name) not in ALLOWED:
                    out.append(f"{module}:{node.lineno} imports {why}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = ast.unparse(node.func.value)
            if node.func.attr in ("bind", "fn") and owner.endswith("spec"):
                out.append(f"{module}:{node.lineno} calls {owner}.{node.func.attr} (use Round.advantages)")
            if node.func.attr in ("predict", "update") and "guard" in owner:
                out.append(f"{module}:{node.lineno} calls {owner}.{node.func.attr} (use Round.predict/learn)")
    return out


def test_runners_reach_the_estimators_only_through_the_round():
    """No module of the trainer or the adapters binds an estimator, calls the registry's estimate, runs allocate or
    feeds a provider and its guard by itself: the three runners share v05.round (an adapter computing advantages any
    other way is named here)."""
    found = []
    for folder in ("train", "adapters"):
        for path in sorted((SRC / folder).glob("*.py")):
            found += _violations(path, f"v05.{folder}.{path.stem}")
    assert not found, "\n".join(found)
    used = {key for key in ALLOWED if any(key[1] in line for line in
            (SRC / "train" / "value.py").read_text(encoding="utf-8").splitlines() if "import" in line)}  # fmt: skip
    assert used == set(ALLOWED), "an ALLOWED entry is no longer needed"


def test_the_check_has_teeth(tmp_path):
    """The structure check names an adapter that binds a spec or imports the registry's estimate."""
    bad = tmp_path / "bad.py"
    bad.write_text("from v05.registry import estimate\n\ndef f(spec):\n    return spec.bind({})\n", encoding="utf-8")
    found = _violations(bad, "v05.adapters.bad")
    assert len(found) == 2 and "estimate" in found[0] and "bind" in found[1]


def test_the_verl_estimators_advantages_are_the_rounds(monkeypatch):
    """VerlEstimator (verl's registered advantage function) computes through Round.advantages: a spy sees every call
    and the advantages verl gets are the spy's."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("omegaconf")
    from v05.adapters.verl_estimators import VerlEstimator

    calls = []
    real = Round.advantages

    def spy(self, rewards, group, **kw):
        est = real(self, rewards, group, **kw)
        calls.append(est.advantages)
        return est

    monkeypatch.setattr(Round, "advantages", spy)
    est = VerlEstimator("rloo")
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0])
    scores = torch.zeros(6, 3)
    scores[:, -1] = rewards
    adv, _ = est(scores, torch.ones(6, 3), index=["a", "a", "a", "b", "b", "b"], config={})
    assert len(calls) == 1
    np.testing.assert_allclose(adv[:, 0].numpy(), calls[0], atol=1e-7)
    assert est.round is not None
