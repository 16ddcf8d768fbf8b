"""The reward scales (``v05.rewards``): the one place where ±1 scores, rewards on a run's scale and pass rates meet."""

from __future__ import annotations

import numpy as np
import pytest

from v05.rewards import from_pass_rate, from_pm1, score_to_reward_scale, to_pass_rate, to_pm1


@pytest.mark.parametrize("reward_range", ["pm1", "01"])
def test_pass_rates_round_trip_through_each_scale(reward_range):
    """p → reward scale → p is the identity (up to rounding), p = 1/2 is the scale's midpoint, and the ±1 image of a
    pass rate is 2p − 1 whichever scale it went through."""
    p = np.array([0.0, 0.125, 0.5, 0.9, 1.0])
    v = from_pass_rate(p, reward_range)
    np.testing.assert_allclose(to_pass_rate(v, reward_range), p, atol=1e-15)
    np.testing.assert_allclose(to_pm1(v, reward_range), 2.0 * p - 1.0, atol=1e-15)
    assert from_pass_rate(np.array([0.5]), reward_range)[0] == (0.0 if reward_range == "pm1" else 0.5)


def test_score_to_reward_scale_clips_then_maps():
    """A provider's ±1 mean lands on the reward scale clipped to its range (an overshoot by rounding is the range's
    edge), NaN stays NaN (the guard replaces it), and inside the range it is from_pm1 exactly."""
    s = np.array([-1.5, -1.0, -0.25, 0.0, 0.5, 1.0, 1.0 + 1e-12, np.nan])
    for rr, lo in (("pm1", -1.0), ("01", 0.0)):
        out = score_to_reward_scale(s, rr)
        assert out[0] == lo and out[-2] == 1.0 and np.isnan(out[-1])
        np.testing.assert_array_equal(out[1:6], from_pm1(s[1:6], rr))
    with pytest.raises(ValueError, match="unknown reward_range"):
        score_to_reward_scale(s, "0-1")
