import numpy as np
import pytest
from hypothesis import given

from tests._oracles import grpo_loop, rloo_loop
from tests.strategies import ragged_batches
from v05.estimators import drgrpo, grpo, oracle, reinforce_pp, reinforce_pp_baseline, rloo


@given(ragged_batches(binary=False))
def test_grpo_drgrpo_rloo_match_loops(batch):
    """Vectorised GRPO, Dr. GRPO and RLOO equal their per-group loop oracles on ragged shuffled batches."""
    r, g, _ = batch
    np.testing.assert_allclose(grpo(r, g).advantages, grpo_loop(r, g), atol=1e-9)
    np.testing.assert_allclose(drgrpo(r, g).advantages, grpo_loop(r, g, norm=False), atol=1e-12)
    np.testing.assert_allclose(rloo(r, g).advantages, rloo_loop(r, g), atol=1e-12)


@given(ragged_batches(binary=False, min_size=2))
def test_rloo_is_n_over_n_minus_1_times_mean_advantage(batch):
    """RLOO advantage = n/(n − 1) × (r − r̄) (identity)."""
    r, g, _ = batch
    n = np.bincount(g)[g]
    np.testing.assert_allclose(rloo(r, g).advantages, n / (n - 1) * drgrpo(r, g).advantages, atol=1e-12)


@given(ragged_batches(binary=False))
def test_permutation_and_shift_invariance(batch):
    """Permuting rollouts permutes outputs; adding a constant to a group leaves mean/LOO advantages unchanged."""
    r, g, _ = batch
    perm = np.random.default_rng(0).permutation(len(r))
    for fn in (grpo, drgrpo, rloo):
        np.testing.assert_allclose(fn(r[perm], g[perm]).advantages, fn(r, g).advantages[perm], atol=1e-9)
    r2 = 0.75 * r
    shifted = r2 + 0.25 * (g % 2)  # stays in [−1, 1]
    np.testing.assert_allclose(drgrpo(shifted, g).advantages, drgrpo(r2, g).advantages, atol=1e-12)
    np.testing.assert_allclose(rloo(shifted, g).advantages, rloo(r2, g).advantages, atol=1e-12)


@given(ragged_batches(binary=False))
def test_relabelling_and_concatenation(batch):
    """Relabelling groups changes nothing; per-group estimators commute with concatenating disjoint batches."""
    r, g, _ = batch
    n_groups = g.max() + 1
    relabel = np.random.default_rng(1).permutation(n_groups)
    np.testing.assert_allclose(rloo(r, relabel[g]).advantages, rloo(r, g).advantages, atol=1e-12)
    both = grpo(np.concatenate([r, r]), np.concatenate([g, g + n_groups])).advantages
    np.testing.assert_allclose(both, np.concatenate([grpo(r, g).advantages] * 2), atol=1e-12)


def test_grpo_same_in_both_reward_ranges():
    """GRPO is affine-invariant: 0/1 and ±1 versions of one batch give the same advantages (up to ε effects)."""
    r01, g = np.array([1.0, 0, 0, 1, 1, 0]), np.array([0, 0, 0, 0, 1, 1])
    a01 = grpo(r01, g, reward_range="01").advantages
    apm = grpo(2 * r01 - 1, g).advantages
    np.testing.assert_allclose(a01, apm, atol=1e-5)


def test_singleton_groups_get_zero_advantage():
    """v05's documented singleton rule (verl differs: A = r): grpo, drgrpo, rloo give a lone rollout A = 0."""
    r, g = np.array([1.0, -1.0, 1.0]), np.array([0, 0, 1])
    for fn in (grpo, drgrpo, rloo):
        assert fn(r, g).advantages[2] == 0.0


def test_reinforce_pp_hand_value():
    """a = r − r̄_g = [0.5, −0.5, 0]; whitened: mean 0, unbiased var 0.25 → A = a / √(0.25 + 1e-8)."""
    r, g = np.array([1.0, 0.0, 1.0]), np.array([0, 0, 1])
    a = reinforce_pp_baseline(r, g, reward_range="01").advantages
    np.testing.assert_allclose(a, np.array([0.5, -0.5, 0.0]) / np.sqrt(0.25 + 1e-8))


def test_oracle_uses_mu_per_group_or_rollout():
    """oracle: A = r − μ_g; μ accepted per group (G,) or per rollout (N,)."""
    r, g = np.array([1.0, -1.0, 1.0]), np.array([0, 0, 1])
    a = oracle(r, g, mu=[0.2, -0.4]).advantages
    np.testing.assert_allclose(a, [0.8, -1.2, 1.4])
    np.testing.assert_allclose(oracle(r, g, mu=[0.2, 0.2, -0.4]).advantages, a)
    with pytest.raises(ValueError, match="constant within each group"):
        oracle(r, g, mu=[0.2, 0.3, -0.4])


def test_rloo_unbiased_statistical():
    """E[A_i | μ] = 0 for RLOO (its baseline excludes r_i): over 40,000 groups of k = 4 at p = 0.3 the mean of the
    advantages of successes, weighted as in the PG estimate E[A·r], equals k/(k−1)·Var... checked as E[A_i·(r_i − μ)]
    = Var(r) exactly for an unbiased baseline; tolerance 4 SE (false-failure rate ≈ 6e-5)."""
    rng = np.random.default_rng(7)
    p, k, n_groups = 0.3, 4, 40_000
    r = (rng.random(n_groups * k) < p).astype(float)
    g = np.repeat(np.arange(n_groups), k)
    a = rloo(r, g, reward_range="01").advantages
    x = a * (r - p)  # E = Var(r) = p(1 − p) when b ⟂ r_i
    se = x.reshape(n_groups, k).mean(1).std(ddof=1) / np.sqrt(n_groups)
    assert abs(x.mean() - p * (1 - p)) < 4 * se
    # the group-mean baseline is biased by the factor (k − 1)/k on the same quantity
    y = drgrpo(r, g, reward_range="01").advantages * (r - p)
    assert abs(y.mean() - p * (1 - p) * (k - 1) / k) < 4 * se


def test_reinforce_pp_whitens_the_returns_over_the_batch_and_works_at_k1():
    """A_i = (r_i − r̄)/√(var(r) + ε) with the batch's unbiased variance: the batch mean is the baseline, so single
    rollouts carry signal (a group baseline gives them 0), and the sign follows the reward."""
    r = np.array([1.0, -1.0, -1.0, 1.0, -1.0])
    est = reinforce_pp(r, np.arange(5))
    np.testing.assert_allclose(est.baseline, np.full(5, -0.2))
    np.testing.assert_allclose(est.advantages, (r + 0.2) / np.sqrt(np.var(r, ddof=1) + 1e-8))
    assert np.all(np.sign(est.advantages) == np.sign(r))
    np.testing.assert_array_equal(grpo(r, np.arange(5)).advantages, np.zeros(5))
    np.testing.assert_array_equal(reinforce_pp(np.ones(4), np.arange(4)).advantages, np.zeros(4))
    # 0/1 rewards are the affine image: the same whitened advantages
    np.testing.assert_allclose(reinforce_pp((r + 1) / 2, np.arange(5), reward_range="01").advantages, est.advantages)
