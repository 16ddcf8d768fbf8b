"""Exact binomial expectations: hand formulas and the reference numbers of priors-on-real-data.md §5.2."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from v05.datasets.v0 import load_v0
from v05.registry import estimate
from v05.sim import SimConfig, run_simulation, v0_population
from v05.sim.metrics import Tally, binomial_pmf, enumerate_outcomes, group_stats

KS = (1, 2, 4, 8, 16)
# priors-on-real-data.md §5.2, train_query only, prior = snapshot context mean ("global mean in brackets").
REF_GRPO = (0.6850, 0.3425, 0.1713, 0.0856, 0.0428)
REF_SHRINK = (0.2447, 0.1722, 0.1205, 0.0732, 0.0439)  # V0.5-style shrink, σ² = 1 (= the v05 estimator)
REF_EB_CTX = (0.2517, 0.1870, 0.1217, 0.0713, 0.0389)  # Beta n0 = EB(ctx)


@pytest.fixture(scope="module")
def population():
    return v0_population(load_v0())


@pytest.fixture(scope="module")
def exact_records(population):
    cfg = SimConfig(
        estimators=("grpo", "v05", "rloo"), allocators=("fixed",), ks=KS, noise_sweep=(), equal_budget=False
    )
    return {(r["estimator"], r["k"]): r for r in run_simulation(population, cfg).records}


def test_pmf_rows_sum_to_one():
    """Binomial probabilities over x = 0..k sum to 1, including the deterministic ends μ = ±1."""
    mu = np.array([-1.0, -0.3, 0.0, 0.8, 1.0])
    for k in KS:
        np.testing.assert_allclose(binomial_pmf(k, mu).sum(axis=1), 1.0, atol=1e-12)


def test_enumerated_batch_layout():
    """Group (p, x) holds x rewards +1 then k − x rewards −1."""
    en = enumerate_outcomes(2, np.array([0.0]))
    np.testing.assert_array_equal(en.rewards, [-1, -1, 1, -1, 1, 1])
    np.testing.assert_array_equal(en.group, [0, 0, 1, 1, 2, 2])
    np.testing.assert_allclose(en.prob, [0.25, 0.5, 0.25])


def test_grpo_exact_mse_is_hand_formula(population, exact_records):
    """GRPO's baseline is v̄: MSE = mean over prompts of (1 − μ²)/k, in ±1 space."""
    for k in KS:
        expected = float(np.mean((1 - population.mu**2) / k))
        assert exact_records[("grpo", k)]["mse"] == pytest.approx(expected, abs=1e-12)
        assert exact_records[("grpo", k)]["mse_se"] == 0.0


def test_rloo_exact_mse_is_leave_one_out_variance(population, exact_records):
    """RLOO's per-rollout baseline is a mean of k − 1 others: MSE = mean (1 − μ²)/(k − 1) for k ≥ 2."""
    for k in KS[1:]:
        expected = float(np.mean((1 - population.mu**2) / (k - 1)))
        assert exact_records[("rloo", k)]["mse"] == pytest.approx(expected, abs=1e-12)


def test_reproduces_reference_grpo_and_shrinkage(exact_records):
    """The bracketed train-only numbers of priors-on-real-data.md §5.2 to 1e-3 (GRPO, shrink σ² = 1 = v05)."""
    for k, g, s in zip(KS, REF_GRPO, REF_SHRINK, strict=True):
        assert exact_records[("grpo", k)]["mse"] == pytest.approx(g, abs=1e-3)
        assert exact_records[("v05", k)]["mse"] == pytest.approx(s, abs=1e-3)


def test_reproduces_reference_eb_context_n0(population):
    """Beta n0 = EB(ctx) (§4: n0 = σ̄²/τ̂² from the context, LOO-mean prior) through v05_eb with fixed n0."""
    for k, ref in zip(KS, REF_EB_CTX, strict=True):
        tally = Tally(population.n_prompts)
        for b in range(population.n_batches):
            idx = population.batch_index(b)
            sc = population.context[b]
            loo = (sc.sum() - sc) / (len(sc) - 1)
            tau2 = max(np.mean((sc - loo) ** 2) - np.mean((1 - sc**2) / 9), 1e-3)
            n0 = np.mean((1 - sc**2) / 0.9) / tau2
            mu = population.mu[idx]
            en = enumerate_outcomes(k, mu)
            est = estimate("v05_eb", en.rewards, en.group, prior=np.full(len(en.prob), sc.mean()), n0=n0)
            tally.add(group_stats(est, en.group, mu[en.prompt], idx[en.prompt], en.prob), replicate=0, sampled=False)
        assert tally.summary()["mse"] == pytest.approx(ref, abs=1e-3)


def test_grad_weight_var_zero_for_group_centred(exact_records):
    """GRPO and RLOO advantages sum to zero within every group, so Var Σ A = 0 exactly."""
    for k in KS:
        assert exact_records[("grpo", k)]["grad_weight_var"] == pytest.approx(0.0, abs=1e-20)
        assert exact_records[("rloo", k)]["grad_weight_var"] == pytest.approx(0.0, abs=1e-20)


def test_zero_adv_frac_matches_all_equal_probability(population, exact_records):
    """A GRPO group has no signal iff all k rewards agree: P = p^k + (1 − p)^k."""
    p = (population.mu + 1) / 2
    for k in KS:
        expected = float(np.mean(p**k + (1 - p) ** k))
        assert exact_records[("grpo", k)]["zero_adv_frac"] == pytest.approx(expected, abs=1e-12)


@given(
    mu=st.lists(st.floats(-1.0, 1.0), min_size=1, max_size=6),
    k=st.integers(1, 12),
)
def test_enumerated_grpo_mse_property(mu, k):
    """For any μ and k, the enumerated exact MSE of the group-mean baseline is (1 − μ²)/k per prompt."""
    mu = np.array(mu)
    en = enumerate_outcomes(k, mu)
    est = estimate("drgrpo", en.rewards, en.group)
    tally = Tally(len(mu))
    tally.add(group_stats(est, en.group, mu[en.prompt], en.prompt, en.prob), replicate=0, sampled=False)
    assert tally.summary()["mse"] == pytest.approx(float(np.mean((1 - mu**2) / k)), abs=1e-9)
