"""SPO (arXiv 2509.13232) against verl's ``recipe/spo`` rules, written out independently here from the recipe
(``recipe/spo/spo_ray_trainer.py`` at verl 4b2b364: the tracker update, ρ from the drift with its clip, the offline
init, A = r − p̂ then global normalisation, the sampling weights) and replayed over a hand-made trace.

Mutations that turn these red: ρ applied after adding the outcome, ρ unclipped or clipped to other bounds, the first
visit's ρ not 0.96, the tracker read after its update (a leaked outcome), a biased (ddof 0) std or the mean not
removed, weights without ε or with p̂ instead of √(p̂(1 − p̂)), the offline init dividing by the trials.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from v05.allocation.driver import Pool
from v05.allocation.spo import SpoSample, spo_weights
from v05.priors import make_provider, provider_spec
from v05.priors.spo import rho_from_drift
from v05.registry import estimate
from v05.round import Round

# -- the recipe's rules, written independently (plain Python, 0/1 rewards) ----------------------------------------
D_HALF, RHO_MIN, RHO_MAX, EPS_W, EPS_A = 0.06, 0.875, 0.96, 0.05, 1e-8


def recipe_init(scores: list[int], offline_n: int = 8) -> tuple[float, float]:
    n_init = 1.0 / (1.0 - RHO_MIN)
    s = sum(int(x > 0) for x in scores)
    return n_init * (s + 0.5) / (offline_n + 1), n_init * (offline_n - s + 0.5) / (offline_n + 1)


def recipe_rho(d: float) -> float:
    return min(max(2.0 ** (-d / D_HALF), RHO_MIN), RHO_MAX)


def recipe_advantages(r: list[float], p_hat: list[float]) -> list[float]:
    a = [ri - pi for ri, pi in zip(r, p_hat, strict=True)]
    mean = sum(a) / len(a)
    std = math.sqrt(sum((x - mean) ** 2 for x in a) / (len(a) - 1))
    return [(x - mean) / (std + EPS_A) for x in a]


def recipe_probs(p_hat: list[float]) -> list[float]:
    w = [math.sqrt(p * (1 - p)) + EPS_W for p in p_hat]
    return [x / sum(w) for x in w]


# a trace: per step the sampled prompts, their outcome (k = 1) and the drift D the runner measured since their last
# visit (None: first visit, the recipe compares the response with itself, D = 0)
OFFLINE = {"a": [1, 0, 1, 1, 0, 0, 1, 1], "b": [0, 0, 0, 0, 0, 0, 0, 1], "c": [1, 1, 1, 1, 1, 1, 1, 1], "d": []}
TRACE = [
    [("a", 1.0, None), ("b", 0.0, None), ("c", 1.0, None), ("d", 0.0, None)],
    [("a", 0.0, 0.01), ("c", 1.0, 0.30), ("b", 1.0, 0.05)],
    [("d", 1.0, 0.002), ("a", 1.0, 0.07), ("b", 0.0, 0.0)],
]


@pytest.mark.parametrize("reward_range", ["01", "pm1"])
def test_a_trace_through_v05_matches_the_recipes_rules(reward_range):
    """Tracker values, ρ, advantages and sampling probabilities of every step equal the recipe's (to 1e-12)."""
    tracker = {k: list(recipe_init(v)) for k, v in OFFLINE.items()}
    rnd = Round("spo", reward_range=reward_range, prior="spo")
    keys = list(OFFLINE)
    rnd.provider.init_offline(keys, [sum(v) for v in OFFLINE.values()], [8.0] * len(keys))
    for step, visits in enumerate(TRACE, start=1):
        ids = [k for k, _, _ in visits]
        r01 = [r for _, r, _ in visits]
        # the sampling probabilities over the whole pool, before the step (tracker before its update)
        p_pool = [tracker[k][0] / sum(tracker[k]) for k in keys]
        prior = rnd.predict(keys, keys)
        np.testing.assert_allclose(prior.pass_rate, p_pool, rtol=0, atol=1e-12)
        pool = Pool(len(keys), np.array(keys), prior.value, prior.n0, reward_range, np.random.default_rng(step))
        probs = SpoSample(batch_size=2).init(pool, None).prob
        np.testing.assert_allclose(probs, recipe_probs(p_pool), rtol=0, atol=1e-12)
        # advantages: A = r − p̂ (p̂ before the update), normalised over the batch
        p_hat = [tracker[k][0] / sum(tracker[k]) for k in ids]
        rewards = np.asarray(r01) if reward_range == "01" else 2 * np.asarray(r01) - 1
        sub = rnd.predict(ids, ids)
        est = rnd.advantages(rewards, np.arange(len(ids)), prior=sub, keys=np.array(ids), step=step)
        # ε = 1e-8 sits on the run's reward scale: on ±1 rewards the std doubles, a 1e-8 relative difference
        np.testing.assert_allclose(est.advantages, recipe_advantages(r01, p_hat), rtol=1e-7, atol=1e-12)
        # ρ from the drift, then α ← ρα + r, β ← ρβ + (1 − r)
        rhos = [recipe_rho(0.0 if d is None else d) for _, _, d in visits]
        revisits = [(k, d) for k, _, d in visits if d is not None]
        if revisits:
            rnd.provider.observe_drift([k for k, _ in revisits], [d for _, d in revisits])
        np.testing.assert_allclose(rnd.provider.discount(ids), rhos, rtol=0, atol=1e-15)
        rnd.learn(ids, ids, rewards, np.arange(len(ids)), step=step)
        for (k, r, _), rho in zip(visits, rhos, strict=True):
            tracker[k] = [rho * tracker[k][0] + r, rho * tracker[k][1] + (1 - r)]
        alpha, beta = rnd.provider.beta_of(keys)
        np.testing.assert_allclose(alpha, [tracker[k][0] for k in keys], rtol=0, atol=1e-12)
        np.testing.assert_allclose(beta, [tracker[k][1] for k in keys], rtol=0, atol=1e-12)


def test_rho_clips_as_the_recipe_and_the_first_visit_gets_the_upper_clip():
    """ρ = clip(2^(−D/0.06), 0.875, 0.96): D = 0 → 0.96, D = 0.06 → 0.875 (2^−1 clipped), between → 2^(−D/0.06)."""
    d = np.array([0.0, 0.003, 0.01, 0.06, 2.0])
    np.testing.assert_allclose(rho_from_drift(d), [recipe_rho(x) for x in d], rtol=0, atol=1e-15)
    assert rho_from_drift([0.0])[0] == 0.96 and 0.875 < rho_from_drift([0.01])[0] < 0.96
    with pytest.raises(ValueError, match="drift must be >= 0"):
        rho_from_drift([-0.1])


def test_kl_rho_refuses_a_revisit_without_its_drift_and_constant_needs_none():
    """rho="kl" with a revisited prompt and no observed drift raises (never a silent ρ = 0.96); rho="constant"
    discounts by rho_value."""
    p = make_provider("spo")
    p.update(["a"], ["a"], np.array([1.0]), np.array([1.0]))  # first visit: D = 0
    with pytest.raises(ValueError, match="needs the policy's drift"):
        p.update(["a"], ["a"], np.array([1.0]), np.array([1.0]))
    c = make_provider("spo", rho="constant", rho_value=0.5)
    c.update(["a"], ["a"], np.array([1.0]), np.array([1.0]))
    c.update(["a"], ["a"], np.array([-1.0]), np.array([1.0]))
    assert np.allclose(c.beta_of(["a"]), ([0.5 * (0.5 * 0.5 + 1)], [0.5 * 0.5 * 0.5 + 1]))


def test_offline_init_divides_by_the_configured_n_and_refuses_more_trials():
    """Fewer trials than offline_n count the missing ones as failures (the recipe's formula); more raise."""
    p = make_provider("spo", offline_n=8)
    p.init_offline(["x"], [3.0], [4.0])
    assert np.allclose(p.beta_of(["x"]), ([8 * 3.5 / 9], [8 * 5.5 / 9]))
    with pytest.raises(ValueError, match="offline_n"):
        p.init_offline(["y"], [3.0], [9.0])


def test_the_sampler_draws_the_batch_without_replacement_and_reports_the_rest_passed():
    """SpoSample: min(B, P) distinct prompts, k rollouts each, the others passed; uncertain prompts drawn more often."""
    p = np.array([0.5, 0.5, 0.0, 1.0, 0.02, 0.98])
    counts = np.zeros(6)
    for seed in range(400):
        pool = Pool(6, None, p, None, "01", np.random.default_rng(seed))
        alloc = SpoSample(batch_size=2, k=1)
        s = alloc.init(pool, None)
        ask = alloc.ask(s)
        assert ask.sum() == 2 and set(np.unique(ask)) <= {0, 1}
        fin = alloc.finish(alloc.tell(s, None))
        assert (fin.kept == (ask > 0)).all() and (fin.passed == ~fin.kept).all()
        counts += ask
    assert counts[:2].min() > counts[2:4].max()  # p̂ = 0.5 outdraws p̂ ∈ {0, 1}
    np.testing.assert_allclose(spo_weights(p), np.sqrt(p * (1 - p)) + 0.05)


def test_the_spo_estimator_is_the_prior_baseline_normalised_over_the_batch():
    """estimate("spo") with scale="none" is r − V; with the default batch_norm it is centred, unit (ddof 1) std."""
    r, v = np.array([1.0, 0.0, 1.0, 0.0, 1.0]), np.array([0.2, 0.5, 0.9, 0.1, 0.5])
    plain = estimate("spo", r, np.arange(5), prior=v, reward_range="01", scale="none").advantages
    np.testing.assert_allclose(plain, r - v)
    a = estimate("spo", r, np.arange(5), prior=v, reward_range="01").advantages
    assert abs(a.mean()) < 1e-12 and abs(a.std(ddof=1) - 1) < 1e-6


def test_a_tracker_started_from_a_prior_starts_each_unseen_prompt_at_its_belief():
    """start_from (issue 42's cold start): a prompt the tracker has not seen starts, at first sight, from the start
    provider's prediction, α₀ = p·n0 + ½, β₀ = (1 − p)·n0 + ½ (written out here), not Beta(½, ½); a visit then
    moves it by ρ·α + s as ever; the start provider learns every outcome (a prompt first seen later starts from the
    updated prior); the state carries the start's, and a state saved without a start is refused on load."""
    start = make_provider("running_mean")
    start.update(["x", "y", "z", "w"], ["", "", "", ""], np.array([1.0, 1.0, 1.0, -1.0]), np.ones(4))  # pm1 scores
    p0 = start.predict(["new"], [""])
    spo = make_provider("spo", rho="constant", rho_value=0.875, start_from="running_mean")
    spo.start.load_state_dict(start.state_dict())
    pred = spo.predict(["a"], ["question a"])
    p, n0 = (p0.mean[0] + 1) / 2, p0.n0[0]
    alpha0, beta0 = p * n0 + 0.5, (1 - p) * n0 + 0.5
    assert spo.tracker_["default"]["a"] == pytest.approx([alpha0, beta0, 0])
    assert pred.mean[0] == pytest.approx(2 * alpha0 / (alpha0 + beta0) - 1)
    assert pred.n0[0] == pytest.approx(alpha0 + beta0)
    assert pred.mean[0] != 0.0  # Beta(½, ½) would predict 0
    spo.update(["a"], ["question a"], np.array([-1.0]), np.ones(1))
    assert spo.tracker_["default"]["a"] == pytest.approx([0.875 * alpha0, 0.875 * beta0 + 1, 1])
    assert spo.start.predict(["other"], [""]).mean[0] < p0.mean[0]  # the start learned the failure
    state = spo.state_dict()
    again = make_provider("spo", rho="constant", rho_value=0.875, start_from="running_mean")
    again.load_state_dict(state)
    assert again.state_dict() == state
    with pytest.raises(ValueError, match="without a start provider"):
        make_provider("spo", rho="constant").load_state_dict(state)


def test_start_from_is_refused_where_it_cannot_mean_anything():
    """Two starts (offline and start_from), a start on a provider without one, the oracle bound or another tracker as
    the start: one line each; provider_spec gives a started tracker what its start needs (texts, the policy)."""
    with pytest.raises(ValueError, match="choose one"):
        make_provider("spo", offline=True, start_from="history")
    with pytest.raises(ValueError, match="has no start_from"):
        make_provider("history", start_from="running_mean")
    for bad in ("oracle", "spo"):
        with pytest.raises(ValueError, match="a learned prior"):
            make_provider("spo", start_from=bad)
    assert not provider_spec("spo").reads_text
    assert provider_spec("spo", {"start_from": "combined"}).reads_text
    assert provider_spec("spo", {"start_from": "probe"}).needs_policy
