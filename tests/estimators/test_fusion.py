import json

import numpy as np
import pytest
from hypothesis import given

from tests._oracles import eb_loop, v05_loop
from tests.strategies import ragged_batches
from v05.baselines import eb_guard_pvalue
from v05.estimators import PriorErrorState, dbb, v05, v05_eb
from v05.estimators.fusion import REVISIT_WINDOW, TAU2_FLOOR, RevisitPairs, prior_error_stats
from v05.groups import segment_count, segment_mean
from v05.registry import ESTIMATORS
from v05.round import state_from_json, state_to_json


@given(ragged_batches())
def test_v05_matches_loop_and_bias_bound(batch):
    """v05 baselines equal the SPEC §3.1 loop; |b − v̄| ≤ 1/√k; advantages are r − b (scale none)."""
    r, g, prior = batch
    est = v05(r, g, prior=prior)
    np.testing.assert_allclose(est.baseline, v05_loop(r, g, prior), atol=1e-12)
    np.testing.assert_allclose(est.advantages, r - est.baseline)
    vbar, k = segment_mean(r, g)[g], segment_count(g)[g]
    assert np.all(np.abs(est.baseline - vbar) <= 1 / np.sqrt(k) + 1e-12)


@given(ragged_batches(reward_range="01"))
def test_v05_01_range_is_affine_image(batch):
    """0/1 inputs give baselines (b_pm1 + 1)/2 and advantages half of the ±1 ones."""
    r, g, prior = batch
    e01 = v05(r, g, prior=prior, reward_range="01")
    epm = v05(2 * r - 1, g, prior=2 * prior - 1)
    np.testing.assert_allclose(e01.baseline, (epm.baseline + 1) / 2, atol=1e-12)
    np.testing.assert_allclose(e01.advantages, epm.advantages / 2, atol=1e-12)


def test_v05_all_equal_group_keeps_signal():
    """4/4 correct with V = 0.8 (accepted: 0.2 ≤ 0.5): b = 0.8, A = +0.2 each — GRPO would give 0."""
    est = v05(np.ones(4), np.zeros(4, np.int64), prior=[0.8])
    np.testing.assert_allclose(est.advantages, [0.2] * 4)
    assert not est.reject[0]


@given(ragged_batches())
def test_v05_eb_fixed_n0_matches_loop(batch):
    """With a fixed n0 and no guard, v05_eb equals the pseudo-count loop (plain and LOO)."""
    r, g, prior = batch
    for loo in (False, True):
        est = v05_eb(r, g, prior=prior, n0=1.5, loo=loo)
        np.testing.assert_allclose(est.baseline, eb_loop(r, g, prior, 1.5, loo=loo), atol=1e-12)


@given(ragged_batches())
def test_v05_eb_kappa_limits(batch):
    """n0 = 0 gives the group mean; n0 → ∞ gives the prior (κ-limits of the EB form)."""
    r, g, prior = batch
    np.testing.assert_allclose(v05_eb(r, g, prior=prior, n0=0.0).baseline, segment_mean(r, g)[g], atol=1e-12)
    np.testing.assert_allclose(v05_eb(r, g, prior=prior, n0=1e12).baseline, prior[g], atol=1e-9)


def test_v05_eb_tau2_estimate_hand_value():
    """Two groups of k = 2, ±1: v̄ = (0, 1), V = (0.5, 0.5); s² = (2, 0); Σ(v̄ − V)² = 0.5, Σ s²/k = 1 →
    τ̂² = (0.5 − 1)/2 < floor 0.01 → τ² = 0.01; σ̄² = (2 + 0)/2 = 1 → n0 = 100."""
    r, g = np.array([1.0, -1, 1, 1]), np.array([0, 0, 1, 1])
    est = v05_eb(r, g, prior=[0.5, 0.5])
    np.testing.assert_allclose(est.n0, [100.0, 100.0])
    st = est.state
    assert isinstance(st, PriorErrorState) and st.count == (2,)
    np.testing.assert_allclose([st.d2[0], st.noise[0], st.var[0]], [0.5, 1.0, 2.0])


def test_v05_eb_state_uses_history_not_current_batch():
    """With ≥ min_groups of history, n0 comes from the state only: changing this batch leaves n0 unchanged."""
    state = PriorErrorState().push(d2=40.0, noise=10.0, var=60.0, count=100)  # τ² = 0.3, σ̄² = 0.6 → n0 = 2
    g = np.repeat(np.arange(4), 4)
    for seed in (0, 1):
        r = np.where(np.random.default_rng(seed).random(16) < 0.5, 1.0, -1.0)
        est = v05_eb(r, g, prior=np.zeros(4), state=state)
        np.testing.assert_allclose(est.n0, 2.0)
        assert est.state.n_groups == 104


def test_v05_eb_guard_marks_hallucinations():
    """A prior at −0.9 (p_V = 0.05) with n0 = 20 predicts Beta–Binomial(8, 1, 19); 8/8 successes has probability
    C(8,8)·B(9, 19)/B(1, 19) = Π_{i<8} (1 + i)/(20 + i) ≈ 4.5e-7 → p ≈ 9.0e-7 < 0.01: rejected, n0 → 0, b = v̄ = 1.
    The other prompt (V = 0, 4/8) is ordinary and keeps n0."""
    r = np.concatenate([np.ones(8), np.tile([1.0, -1.0], 4)])
    g = np.repeat([0, 1], 8)
    est = v05_eb(r, g, prior=[-0.9, 0.0], n0=20.0, guard_level=0.01)
    assert est.reject.tolist() == [True, False]
    assert est.n0[0] == 0.0 and est.n0[1] == 20.0
    np.testing.assert_allclose(est.baseline[:8], 1.0)
    p = eb_guard_pvalue(np.array([8.0]), np.array([8.0]), np.array([-0.9]), np.array([20.0]))
    np.testing.assert_allclose(p, 2 * np.prod([(1 + i) / (20 + i) for i in range(8)]), rtol=1e-6)


def test_v05_eb_guard_is_calibrated_for_binomial_outcomes():
    """Under the model it tests (p ~ Beta(n0·p_V, n0·(1 − p_V)), s ~ Binomial(k, p)) the guard's rejection rate is at
    most its level, at k = 4 and every V (the old Gaussian radius fired on ordinary k = 4 extremes). 20,000 prompts
    per V; bound: level + 4 SE (false-failure rate < 1e-4)."""
    rng = np.random.default_rng(8)
    n, k, n0, level = 20_000, 4, 8.0, 0.05
    for v in (-0.9, -0.4, 0.0, 0.6, 0.95):
        p_v = (v + 1) / 2
        p = rng.beta(n0 * p_v, n0 * (1 - p_v), n)
        s = rng.binomial(k, p).astype(float)
        rate = np.mean(eb_guard_pvalue(s, np.full(n, float(k)), np.full(n, v), np.full(n, n0)) < level)
        assert rate <= level + 4 * np.sqrt(level * (1 - level) / n), (v, rate)


def test_v05_eb_loo_unbiased_under_defaults_and_with_the_guard():
    """LOO-EB with fixed n0 and a prior blind to the batch keeps E[A_i·(r_i − μ)] = Var(r) (unbiased PG), under the
    defaults and with the guard on (its LOO decisions use the other k − 1 rollouts only); the plain form is biased
    by the factor 1 − 1/(n0 + k). The issue's case: p = 0.3 (±1: μ = −0.4, Var = 0.84), V = 0.9, n0 = 2, k = 4
    (a guard deciding from v̄, which contains r_i, gave 0.73); 40,000 groups; tolerance 4 SE (false-failure rate
    ≈ 6e-5 per check)."""
    rng = np.random.default_rng(11)
    p, k, n_groups, n0 = 0.3, 4, 40_000, 2.0
    mu, var = 2 * p - 1, 1 - (2 * p - 1) ** 2
    r = np.where(rng.random(n_groups * k) < p, 1.0, -1.0)
    g = np.repeat(np.arange(n_groups), k)
    for v in (0.1, 0.9):
        prior = np.full(n_groups, v)
        for options, factor in (
            ({"loo": True}, 1.0),
            ({"loo": True, "guard_level": 0.05}, 1.0),
            ({"loo": False}, 1 - 1 / (n0 + k)),
        ):
            est = v05_eb(r, g, prior=prior, n0=n0, **options)
            x = (est.advantages * (r - mu)).reshape(n_groups, k).mean(1)
            se = x.std(ddof=1) / np.sqrt(n_groups)
            assert abs(x.mean() - var * factor) < 4 * se, (v, options, x.mean())
    guarded = v05_eb(r, g, prior=np.full(n_groups, 0.9), n0=n0, loo=True, guard_level=0.05)
    assert guarded.reject.mean() > 0.1  # the guard really fires in this case


def test_v05_eb_loo_without_history_is_rloo_and_k1_never_uses_a_flagged_prior():
    """LOO with no n0, no τ² and no history falls back to n0 = 0 (RLOO: n0 would otherwise depend on r_i); a k = 1
    group is never flagged by the LOO guard (no other rollout), and with n0 = 0 its baseline is r_i (A = 0), not V."""
    r, g = np.array([1.0, -1.0, -1.0, 1.0, 1.0]), np.array([0, 0, 0, 0, 1])
    est = v05_eb(r, g, prior=[0.5, -0.9], loo=True)
    np.testing.assert_allclose(est.n0, 0.0)
    np.testing.assert_allclose(est.baseline[:4], [-1 / 3, 1 / 3, 1 / 3, -1 / 3])  # (S − r_i)/3 with S = 0
    np.testing.assert_allclose(est.advantages[4], 0.0)
    flagged = v05_eb(r, g, prior=[0.5, -0.9], n0=50.0, loo=True, guard_level=0.2)
    assert flagged.reject[1]  # the full-group test flags V = −0.9 against 1/1 at level 0.2 ...
    np.testing.assert_allclose(flagged.baseline[4], -0.9)  # ... but rollout 4's LOO decision has no evidence: b = V


def test_v05_eb_loo_weight_is_k_minus_one():
    """The LOO baseline rests on k − 1 rollouts: weight (k − 1)/(k − 1 + n0) = 3/5 for k = 4, n0 = 2."""
    r, g = np.array([1.0, -1.0, -1.0, 1.0]), np.zeros(4, np.int64)
    np.testing.assert_allclose(v05_eb(r, g, prior=[0.0], n0=2.0, loo=True).weight, [0.6])
    np.testing.assert_allclose(v05_eb(r, g, prior=[0.0], n0=2.0).weight, [4 / 6])


def test_prior_error_window_is_sized_in_groups():
    """window counts groups: with 16 groups per step and window 256 it keeps 16 steps (8 steps would be 128 groups);
    a step is never split, so the newest steps holding ≥ window groups are kept."""
    st = PriorErrorState(window=256)
    for i in range(40):
        st = st.push(d2=float(i), noise=0.0, var=1.0, count=16)
    assert st.n_groups == 256 and len(st.count) == 16 and st.d2[0] == 24.0
    st = st.push(d2=0.0, noise=0.0, var=1.0, count=300)  # one big step alone holds ≥ 256
    assert st.count == (300,)
    assert PriorErrorState.from_dict(st.to_dict()) == st


def test_prior_scales_refuse_group_std():
    """group_std divides all-equal groups (which a prior gives signal) by std 0: refused for v05, v05_eb and dbb."""
    r, g = np.ones(4), np.zeros(4, np.int64)
    for fn, kw in ((v05, {"prior": [0.5]}), (v05_eb, {"prior": [0.5]}), (dbb, {"prompt_ids": ["q"]})):
        with pytest.raises(ValueError, match="group_std"):
            fn(r, g, scale="group_std", **kw)


def test_ambiguous_per_rollout_prior_is_refused():
    """With one rollout per group (N = G) and group ids out of order, a prior of length N could be per group or per
    rollout: refused. In order, both readings agree and it is accepted."""
    r = np.array([1.0, -1.0, 1.0])
    with pytest.raises(ValueError, match="could be per group"):
        v05(r, np.array([1, 0, 2]), prior=[0.1, 0.2, 0.3])
    est = v05_eb(r, np.array([0, 1, 2]), prior=[0.1, 0.2, 0.3], n0=1e12)  # n0 → ∞: b = V, read in order
    np.testing.assert_allclose(est.baseline, [0.1, 0.2, 0.3])


def test_v05_eb_beats_group_mean_with_calibrated_prior():
    """A calibrated prior (τ = 0.3) fused with n0 = σ̄²/τ² lowers baseline MSE vs the group mean at k = 4 (theory:
    σ̄²/(k + n0) vs σ̄²/k); 5,000 prompts, MSE ratio checked against theory within 4 SE of a paired difference."""
    rng = np.random.default_rng(3)
    n_groups, k = 5000, 4
    mu = rng.uniform(-0.9, 0.9, n_groups)
    prior = np.clip(mu + rng.normal(0, 0.3, n_groups), -1, 1)
    r = np.where(rng.random((n_groups, k)) < ((mu + 1) / 2)[:, None], 1.0, -1.0).ravel()
    g = np.repeat(np.arange(n_groups), k)
    eb = v05_eb(r, g, prior=prior).baseline.reshape(n_groups, k)[:, 0]
    gm = segment_mean(r, g)
    d = (gm - mu) ** 2 - (eb - mu) ** 2  # paired per-prompt improvement
    assert d.mean() > 4 * d.std(ddof=1) / np.sqrt(n_groups)


def test_fusion_needs_a_prior_and_valid_options():
    """No prior, a prior out of range, or bad option values raise ValueError naming the problem."""
    r, g = np.array([1.0, -1.0]), np.array([0, 0])
    with pytest.raises(ValueError, match="needs a prior"):
        v05(r, g)
    with pytest.raises(ValueError, match="prior outside"):
        v05(r, g, prior=[1.5])
    with pytest.raises(ValueError, match="prior outside"):
        v05(np.array([1.0, 0.0]), g, prior=[-0.5], reward_range="01")
    with pytest.raises(ValueError, match="n0 must be"):
        v05_eb(r, g, prior=[0.0], n0=-1.0)
    with pytest.raises(ValueError, match="noise"):
        v05(r, g, prior=[0.0], noise="huge")
    with pytest.raises(ValueError, match="window"):
        PriorErrorState(window=0)


def test_v05_eb_single_rollouts_use_the_plugin_variance():
    """k = 1 groups have no variance estimate; they enter τ² with the plug-in 1 − V²: r = (1, −1, 1), V = (0, 0, 0.5):
    Σ(v̄ − V)² = 1 + 1 + 0.25 = 2.25, Σ ŝ² = 1 + 1 + 0.75 = 2.75 → τ̂² = (2.25 − 2.75)/3 < floor 0.01 → τ² = 0.01,
    σ̄² = 2.75/3 → n0 = 91.67."""
    r, g = np.array([1.0, -1.0, 1.0]), np.arange(3)
    est = v05_eb(r, g, prior=[0.0, 0.0, 0.5])
    np.testing.assert_allclose(est.n0, 2.75 / 3 / 0.01)
    np.testing.assert_allclose(v05_eb(r, g, prior=[0.0] * 3, tau2=0.5).n0, 2.0)


def test_at_k1_the_prior_error_is_not_identified_and_the_estimate_sits_at_the_floor():
    """Simulated truth: a calibrated prior (E[μ | V] = V) with error variance τ² = 0.1.

    With one rollout per prompt, E[(r − V)²] = E[1 − μ²] + τ², and calibration gives E[μ²] = E[V²] + τ², so
    E[(r − V)²] = 1 − E[V²] = E[1 − V²], the plug-in noise: their difference is 0 whatever τ² is, so τ̂² falls to
    TAU2_FLOOR and n0 = σ̄²/0.01 (≈ 80) although the true n0 is ≈ 8. At k = 2 the within-group variance separates the
    two and τ̂² recovers 0.1. Hence the logged prior/tau2 at the floor at k = 1 says nothing about the prior; and at
    k = 1 the plain fusion is A = n0/(n0 + 1)·(r − V), so n0 only scales the step (the direction is r − V).
    """
    rng = np.random.default_rng(0)
    g = 200_000
    v = rng.uniform(-0.4, 0.4, g)  # the prior
    mu = v + rng.uniform(-0.5477, 0.5477, g)  # truth: E[μ | V] = V, Var(μ − V) = 0.1
    r = np.where(rng.random((g, 2)) < ((1 + mu) / 2)[:, None], 1.0, -1.0)  # two rollouts per prompt
    one = prior_error_stats(r[:, 0], v, np.zeros(g), np.ones(g))
    state1 = PriorErrorState(window=g).push(*one)
    assert state1.tau2() == TAU2_FLOOR  # the raw estimate is ≈ 0 ± 0.005
    assert abs((one[0] - one[1]) / g) < 0.01
    var2 = (r[:, 0] - r[:, 1]) ** 2 / 2  # unbiased within-group variance at k = 2
    state2 = PriorErrorState(window=g).push(*prior_error_stats(r.mean(1), v, var2, np.full(g, 2.0)))
    assert state2.tau2() == pytest.approx(0.1, abs=0.01)
    assert state1.n0() > 5 * state2.n0()
    # at k = 1 the fusion is the scaled r − V whatever n0: only the step size changes
    est = v05_eb(r[:8, 0], np.arange(8), prior=v[:8], tau2=0.1)
    np.testing.assert_allclose(est.advantages, est.n0[0] / (est.n0[0] + 1) * (r[:8, 0] - v[:8]))


def _revisit_run(tau2_from, *, steps=120, per_step=64, pool=400, seed=0, window=None):
    """Simulated truth for ``tau2_from``: a calibrated prior (E[μ | V] = V, Var(μ − V) = 0.1, fixed policy), one
    rollout per prompt, ``per_step`` prompts drawn from ``pool`` each step (≈ 19 visits per prompt at the defaults)."""
    rng = np.random.default_rng(seed)
    v = rng.uniform(-0.4, 0.4, pool)
    mu = v + rng.uniform(-0.5477, 0.5477, pool)
    state = None if window is None else PriorErrorState(revisits=RevisitPairs(window=window))
    for _ in range(steps):
        ids = rng.choice(pool, per_step, replace=False)
        r = np.where(rng.random(per_step) < (1 + mu[ids]) / 2, 1.0, -1.0)
        est = v05_eb(r, np.arange(per_step), prior=v[ids], state=state, tau2_from=tau2_from, prompt_ids=ids)
        state = est.state
    return state, mu, v


def test_v05_eb_revisit_pairs_recover_tau2_and_sigma2_at_k1():
    """At k = 1 the within-group estimate sits at the floor (previous test); pairs of visits to the same prompt
    recover the simulated τ² = 0.1 and σ̄² = E[1 − μ²], so n0 comes out near its true value σ̄²/τ² (≈ 8, not ≈ 90)."""
    state, mu, v = _revisit_run("revisits")
    assert state.revisits is not None and state.revisits.ready()
    assert state.revisits.n_pairs == REVISIT_WINDOW
    true_tau2, true_sigma2 = float(np.mean((mu - v) ** 2)), float(np.mean(1 - mu**2))
    assert state.tau2() == pytest.approx(true_tau2, abs=0.1)  # the default window: SE ≈ 0.03
    assert state.n0() == pytest.approx(true_sigma2 / true_tau2, rel=0.6)
    # a long window pins both down: SE ≈ 0.01 (E[μ²] instead of the residuals' product would read ≈ 0.15)
    long, _, _ = _revisit_run("revisits", steps=400, window=30_000)
    assert long.revisits.n_pairs > 20_000
    assert long.tau2() == pytest.approx(true_tau2, abs=0.025)
    assert long.sigma2() == pytest.approx(true_sigma2, abs=0.025)
    true_n0 = true_sigma2 / true_tau2
    floored, _, _ = _revisit_run("groups")
    assert floored.revisits is None and floored.tau2() == TAU2_FLOOR and floored.n0() > 5 * true_n0


def test_revisit_pairs_are_the_product_of_both_visits_residuals():
    """Hand values: prompt 7 seen with (v̄, V) = (1, 0.2) then (−1, −0.5): one pair, err = 0.8·(−0.5), sq = −1."""
    pairs = RevisitPairs(min_pairs=1).push([7, 3], np.array([1.0, -1.0]), np.array([0.2, 0.0]))
    assert pairs.n_pairs == 0 and not pairs.ready()
    pairs = pairs.push(np.array([7]), np.array([-1.0]), np.array([-0.5]))
    assert pairs.err == (pytest.approx(0.8 * -0.5),) and pairs.sq == (-1.0,)
    assert pairs.tau2() == pytest.approx(-0.4) and pairs.sigma2() == 1.0  # 1 − (−1) clipped to 1
    state = PriorErrorState(revisits=pairs)
    assert state.tau2() == TAU2_FLOOR  # a negative τ̂² is floored like the within-group one


def test_v05_eb_revisits_never_use_this_batch_and_round_trip_checkpoints():
    """n0 comes from the state before this batch (so the LOO form stays unbiased); the state's JSON keeps integer
    and string keys apart and a state without revisits keeps its old layout."""
    state, _, v = _revisit_run("revisits", steps=60)
    ids = np.arange(8)
    a = v05_eb(np.ones(8), np.arange(8), prior=v[:8], state=state, tau2_from="revisits", prompt_ids=ids, loo=True)
    b = v05_eb(-np.ones(8), np.arange(8), prior=v[:8], state=state, tau2_from="revisits", prompt_ids=ids, loo=True)
    np.testing.assert_array_equal(a.n0, b.n0)
    np.testing.assert_allclose(a.n0, state.n0())
    assert a.state.revisits.n_pairs > state.revisits.n_pairs or state.revisits.n_pairs == REVISIT_WINDOW
    back = state_from_json(json.loads(json.dumps(state_to_json(a.state))))
    assert back == a.state
    mixed = RevisitPairs().push(np.array(["p1", 2], dtype=object), np.array([0.5, -0.5]), np.array([0.0, 0.1]))
    assert [k for k, _, _ in RevisitPairs.from_dict(json.loads(json.dumps(mixed.to_dict()))).last] == ["p1", 2]
    assert "revisits" not in PriorErrorState().push(1.0, 1.0, 1.0, 1).to_dict()


def test_v05_eb_revisits_need_prompt_ids_and_a_known_source():
    """tau2_from='revisits' needs prompt_ids, one key per group; an unknown tau2_from is a ValueError."""
    with pytest.raises(ValueError, match="prompt_ids"):
        v05_eb([1.0], [0], prior=[0.0], tau2_from="revisits")
    with pytest.raises(ValueError, match="unknown tau2_from"):
        v05_eb([1.0], [0], prior=[0.0], tau2_from="pairs", prompt_ids=[0])
    with pytest.raises(ValueError, match="one key per group"):
        v05_eb([1.0, 1.0], [0, 1], prior=[0.0, 0.0], tau2_from="revisits", prompt_ids=[0])


def test_registry_binds_prompt_ids_to_v05_eb_revisits():
    """The runners' one binding passes prompt_ids to an estimator with a prompt_ids option when they have them."""
    spec = ESTIMATORS["v05_eb"]
    kw = spec.bind({"tau2_from": "revisits"}, prior=np.zeros(2), prompt_ids=np.array([4, 5]))
    est = spec.fn(np.array([1.0, -1.0]), np.arange(2), reward_range="pm1", **kw)
    assert [k for k, _, _ in est.state.revisits.last] == [4, 5]
    assert "prompt_ids" not in spec.bind({}, prior=np.zeros(2))


def test_revisit_pairs_refuse_a_restored_state_push_cannot_have_written():
    """A checkpoint's pairs are checked on load: a product outside ±4, a mean outside ±1, NaN, a missing key."""
    good = (
        RevisitPairs(min_pairs=1)
        .push([1], np.array([0.5]), np.array([0.0]))
        .push([1], np.array([1.0]), np.array([0.5]))
    )
    d = good.to_dict()
    assert RevisitPairs.from_dict(d) == good
    for bad in ({**d, "err": [5.0]}, {**d, "sq": [float("nan")]}, {**d, "last": [[1, 2.0, 0.0]]}):
        with pytest.raises(ValueError, match="RevisitPairs"):
            RevisitPairs.from_dict(bad)
    with pytest.raises(ValueError, match="not a RevisitPairs dict"):
        RevisitPairs.from_dict({k: v for k, v in d.items() if k != "sq"})
