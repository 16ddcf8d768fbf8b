import numpy as np
import pytest

from tests._oracles import dbb_loop
from v05.allocation.posterior import BetaHistory
from v05.estimators import dbb


def test_dbb_matches_reference_loop_over_steps():
    """Three steps of ragged batches over recurring string keys: baselines equal the methods-siblings §8 loop."""
    rng = np.random.default_rng(5)
    keys_all = np.array(["a", "b", "c", "d", "e"])
    state, oracle_state = None, {}
    for _ in range(3):
        keys = rng.choice(keys_all, size=3, replace=False)
        sizes = rng.integers(1, 6, size=3)
        g = np.repeat(np.arange(3), sizes)
        r01 = (rng.random(len(g)) < 0.4).astype(float)
        est = dbb(r01, g, prompt_ids=keys, state=state, reward_range="01", lambda_=0.6, scale="none")
        np.testing.assert_allclose(est.baseline, dbb_loop(r01, g, keys, oracle_state, 0.6, 1.0, 1.0), atol=1e-12)
        state = est.state


def test_dbb_hand_value_and_model_std():
    """First visit, prior (1,1), 3/4 successes: α = 4, β = 2, μ̃ = 2/3; A = (r − 2/3)/√(2/9)."""
    est = dbb(np.array([1.0, 1, 1, 0]), np.zeros(4, np.int64), reward_range="01", prompt_ids=["q"])
    np.testing.assert_allclose(est.baseline, 2 / 3)
    np.testing.assert_allclose(est.advantages, (np.array([1, 1, 1, 0]) - 2 / 3) / np.sqrt(2 / 9))


def test_dbb_all_equal_group_keeps_signal_and_prior_only_mode():
    """All-correct group: μ̃ < 1 so A > 0 (no variance collapse); include_current=False uses the prior (0.5)."""
    est = dbb(np.ones(4), np.zeros(4, np.int64))
    assert np.all(est.advantages > 0)
    np.testing.assert_allclose(dbb(np.ones(4), np.zeros(4, np.int64), include_current=False).baseline, 0.0)


def test_history_step_decay_and_roundtrip():
    """decay="step": a prompt unseen for 2 steps is discounted by λ² toward the prior; to_dict/from_dict round-trips."""
    h = BetaHistory.empty().update(np.array([1]), np.array([4.0]), np.array([4.0]), lambda_=0.5, decay="step", step=0)
    h2 = h.update(np.array([1]), np.array([0.0]), np.array([0.0]), lambda_=0.5, decay="step", step=2)
    a, b = h2.lookup(np.array([1]))
    np.testing.assert_allclose([a[0], b[0]], [0.25 * 5 + 0.75 * 1, 0.25 * 1 + 0.75 * 1])
    back = BetaHistory.from_dict(h2.to_dict())
    np.testing.assert_array_equal(back.keys, h2.keys)
    np.testing.assert_allclose(back.alpha, h2.alpha)


def test_dbb_bad_input():
    """Wrong number of prompt ids, non-positive priors or λ outside (0, 1] raise ValueError."""
    r, g = np.array([1.0, -1.0]), np.array([0, 0])
    with pytest.raises(ValueError, match="prompt_ids"):
        dbb(r, g, prompt_ids=[1, 2])
    with pytest.raises(ValueError, match="alpha0"):
        dbb(r, g, alpha0=0.0)
    with pytest.raises(ValueError, match="lambda_"):
        dbb(r, g, lambda_=1.5)
