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
    est = dbb(np.ones(4), np.zeros(4, np.int64), prompt_ids=[0])
    assert np.all(est.advantages > 0)
    prior_only = dbb(np.ones(4), np.zeros(4, np.int64), prompt_ids=[0], include_current=False)
    np.testing.assert_allclose(prior_only.baseline, 0.0)


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
        dbb(r, g, prompt_ids=[1], alpha0=0.0)
    with pytest.raises(ValueError, match="lambda_"):
        dbb(r, g, prompt_ids=[1], lambda_=1.5)


def test_dbb_refuses_batch_local_keys():
    """Without prompt_ids the history would be keyed by batch-local group ids: two different prompts that are both
    group 0 in consecutive steps would share a history. dbb refuses, naming the fix."""
    r, g = np.array([1.0, 1.0]), np.array([0, 0])
    with pytest.raises(ValueError, match="stable prompt keys"):
        dbb(r, g)
    with pytest.raises(ValueError, match="stable prompt keys"):
        dbb(r, g, state=dbb(r, g, prompt_ids=["a"]).state)
    with pytest.raises(ValueError, match="distinct"):
        dbb(np.ones(4), np.array([0, 0, 1, 1]), prompt_ids=["a", "a"])


def test_dbb_step_decay_discounts_by_steps_since_last_visit():
    """decay="step" requires the step and discounts by λ^(step − last visit): a prompt seen at step 0 (4/4 successes:
    α = 5, β = 1) and again at step 3 with 0/2: λ³ = 0.125 → α = 0.125·5 + 0.875 + 0 = 1.5, β = 0.125 + 0.875 + 2 = 3.
    Without step it is refused (a constant default step would never discount)."""
    r, g = np.ones(4), np.zeros(4, np.int64)
    with pytest.raises(ValueError, match="step"):
        dbb(r, g, prompt_ids=["q"], decay="step")
    e0 = dbb(r, g, prompt_ids=["q"], decay="step", step=0, lambda_=0.5, reward_range="01")
    e3 = dbb(np.zeros(2), np.zeros(2, np.int64), prompt_ids=["q"], state=e0.state, decay="step", step=3,
             lambda_=0.5, reward_range="01", scale="none")  # fmt: skip
    np.testing.assert_allclose(e3.baseline, 1.5 / 4.5)
    with pytest.raises(ValueError, match="before a prompt's last update"):
        dbb(r, g, prompt_ids=["q"], state=e3.state, decay="step", step=1)


def test_dbb_prior_must_match_the_carried_state():
    """alpha0/beta0 apply to a new history; with a carried state a different value is refused, not ignored."""
    r, g = np.ones(2), np.zeros(2, np.int64)
    e = dbb(r, g, prompt_ids=["q"], alpha0=2.0, beta0=3.0, reward_range="01", scale="none")
    np.testing.assert_allclose(e.baseline, 4.0 / 7.0)  # (2 + 2)/(2 + 3 + 2)
    dbb(r, g, prompt_ids=["q"], state=e.state, alpha0=2.0)  # the same prior is fine
    with pytest.raises(ValueError, match="alpha0"):
        dbb(r, g, prompt_ids=["q"], state=e.state, alpha0=1.0)
