import numpy as np
import pytest

from v05.allocation.posterior import BetaHistory, BetaPosterior


def test_beta_moments_hand_values():
    """Beta(2, 2): mean 0.5, var 4/(16·5) = 0.05, E[p²] = (2·3)/(4·5) = 0.3, E[p⁰] = 1."""
    post = BetaPosterior(np.array([2.0]), np.array([2.0]))
    np.testing.assert_allclose([post.mean[0], post.var[0]], [0.5, 0.05])
    np.testing.assert_allclose(post.moment(2), [0.3])
    np.testing.assert_allclose(post.moment(0), [1.0])


def test_from_mean_and_update():
    """from_mean(p̂ = 0.25, κ = 4) = Beta(1, 3); +3 successes of 4 trials → Beta(4, 4)."""
    post = BetaPosterior.from_mean(np.array([0.25]), 4.0).update(np.array([3.0]), np.array([4.0]))
    np.testing.assert_allclose([post.alpha[0], post.beta[0]], [4.0, 4.0])


def test_history_unseen_prior_and_visit_decay():
    """Unseen keys read (α₀, β₀); a second visit discounts the first: α = λ·4 + (1 − λ)·1 + 0 with λ = 0.5 → 2.5."""
    h = BetaHistory.empty().update(np.array(["x"]), np.array([3.0]), np.array([3.0]), lambda_=0.5)
    h = h.update(np.array(["x", "y"]), np.array([0.0, 1.0]), np.array([0.0, 1.0]), lambda_=0.5)
    a, b = h.lookup(np.array(["x", "y", "z"]))
    np.testing.assert_allclose(a, [2.5, 2.0, 1.0])
    np.testing.assert_allclose(b, [1.0, 1.0, 1.0])


@pytest.mark.parametrize(("alpha", "beta"), [([0.0], [1.0]), ([1.0], [np.nan]), ([1.0, 2.0], [1.0])])
def test_posterior_rejects_bad_parameters(alpha, beta):
    """Non-positive, non-finite or mismatched α/β raise ValueError."""
    with pytest.raises(ValueError):
        BetaPosterior(np.array(alpha), np.array(beta))


def test_history_rejects_duplicate_keys():
    """One update takes one entry per prompt."""
    with pytest.raises(ValueError, match="distinct"):
        BetaHistory.empty().update(np.array([1, 1]), np.ones(2), np.ones(2))
