import numpy as np
import pytest
from hypothesis import given

from tests._oracles import eb_loop, v05_loop
from tests.strategies import ragged_batches
from v05.estimators import PriorErrorState, v05, v05_eb
from v05.groups import segment_count, segment_mean


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
        est = v05_eb(r, g, prior=prior, n0=1.5, guard_z=None, loo=loo)
        np.testing.assert_allclose(est.baseline, eb_loop(r, g, prior, 1.5, loo=loo), atol=1e-12)


@given(ragged_batches())
def test_v05_eb_kappa_limits(batch):
    """n0 = 0 gives the group mean; n0 → ∞ gives the prior (κ-limits of the EB form)."""
    r, g, prior = batch
    np.testing.assert_allclose(v05_eb(r, g, prior=prior, n0=0.0).baseline, segment_mean(r, g)[g], atol=1e-12)
    np.testing.assert_allclose(v05_eb(r, g, prior=prior, n0=1e12, guard_z=None).baseline, prior[g], atol=1e-9)


def test_v05_eb_tau2_estimate_hand_value():
    """Two groups of k = 2, ±1: v̄ = (0, 1), V = (0.5, 0.5); s² = (2, 0); Σ(v̄ − V)² = 0.5, Σ s²/k = 1 →
    τ̂² = (0.5 − 1)/2 < floor 0.01 → τ² = 0.01; σ̄² = (2 + 0)/2 = 1 → n0 = 100."""
    r, g = np.array([1.0, -1, 1, 1]), np.array([0, 0, 1, 1])
    est = v05_eb(r, g, prior=[0.5, 0.5], guard_z=None)
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
        est = v05_eb(r, g, prior=np.zeros(4), state=state, guard_z=None)
        np.testing.assert_allclose(est.n0, 2.0)
        assert est.state.n_groups == 104


def test_v05_eb_guard_marks_hallucinations():
    """A prior at −0.9 against 8/8 successes (|d| = 1.9 > 3·√(0.01 + 1/8) ≈ 1.10 with τ² = 0.01, σ̄² = 1) is rejected:
    n0 → 0 and b = v̄ = 1; the other prompt keeps n0."""
    r = np.concatenate([np.ones(8), np.tile([1.0, -1.0], 4)])
    g = np.repeat([0, 1], 8)
    est = v05_eb(r, g, prior=[-0.9, 0.0], tau2=0.01, n0=None)
    assert est.reject.tolist() == [True, False]
    assert est.n0[0] == 0.0 and est.n0[1] > 0
    np.testing.assert_allclose(est.baseline[:8], 1.0)


def test_v05_eb_loo_unbiased_with_batch_independent_prior():
    """LOO-EB with fixed n0 and a prior blind to the batch keeps E[A_i·(r_i − μ)] = Var(r) (unbiased PG); the plain
    form is biased by the factor 1 − 1/(n0 + k). 40,000 groups, k = 4, p = 0.3 (±1: μ = −0.4, Var = 0.84), V = 0.1;
    tolerance 4 SE (false-failure rate ≈ 6e-5)."""
    rng = np.random.default_rng(11)
    p, k, n_groups, n0 = 0.3, 4, 40_000, 2.0
    mu, var = 2 * p - 1, 1 - (2 * p - 1) ** 2
    r = np.where(rng.random(n_groups * k) < p, 1.0, -1.0)
    g = np.repeat(np.arange(n_groups), k)
    prior = np.full(n_groups, 0.1)
    for loo, factor in ((True, 1.0), (False, 1 - 1 / (n0 + k))):
        a = v05_eb(r, g, prior=prior, n0=n0, guard_z=None, loo=loo).advantages
        x = (a * (r - mu)).reshape(n_groups, k).mean(1)
        se = x.std(ddof=1) / np.sqrt(n_groups)
        assert abs(x.mean() - var * factor) < 4 * se


def test_v05_eb_beats_group_mean_with_calibrated_prior():
    """A calibrated prior (τ = 0.3) fused with n0 = σ̄²/τ² lowers baseline MSE vs the group mean at k = 4 (theory:
    σ̄²/(k + n0) vs σ̄²/k); 5,000 prompts, MSE ratio checked against theory within 4 SE of a paired difference."""
    rng = np.random.default_rng(3)
    n_groups, k = 5000, 4
    mu = rng.uniform(-0.9, 0.9, n_groups)
    prior = np.clip(mu + rng.normal(0, 0.3, n_groups), -1, 1)
    r = np.where(rng.random((n_groups, k)) < ((mu + 1) / 2)[:, None], 1.0, -1.0).ravel()
    g = np.repeat(np.arange(n_groups), k)
    eb = v05_eb(r, g, prior=prior, guard_z=None).baseline.reshape(n_groups, k)[:, 0]
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
    est = v05_eb(r, g, prior=[0.0, 0.0, 0.5], guard_z=None)
    np.testing.assert_allclose(est.n0, 2.75 / 3 / 0.01)
    np.testing.assert_allclose(v05_eb(r, g, prior=[0.0] * 3, tau2=0.5, guard_z=None).n0, 2.0)
