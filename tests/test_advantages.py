import numpy as np
import pytest
from hypothesis import given

from tests.strategies import ragged_batches
from v05.advantages import scale_advantages
from v05.baselines import group_mean


def test_group_std_hand_value_and_singleton():
    """r = [1,0,0,1]: std (ddof 1) = √(1/3), A = ±0.5/(0.57735 + 1e-6); a singleton stays unscaled (here 0)."""
    r, g = np.array([1.0, 0, 0, 1, 1.0]), np.array([0, 0, 0, 0, 1])
    a = scale_advantages(r, group_mean(r, g), g, scale="group_std")
    np.testing.assert_allclose(a[:4], np.array([1, -1, -1, 1]) * 0.5 / (np.sqrt(1 / 3) + 1e-6))
    assert a[4] == 0.0


def test_model_std_is_scale_invariant_between_ranges():
    """model_std gives the same advantages for a 0/1 batch and its ±1 image (Bernoulli std √(b(1−b)) vs √(1 − b²))."""
    r01, b01 = np.array([1.0, 0.0, 1.0]), np.array([0.3, 0.3, 0.8])
    g = np.array([0, 0, 1])
    a01 = scale_advantages(r01, b01, g, scale="model_std", reward_range="01")
    apm = scale_advantages(2 * r01 - 1, 2 * b01 - 1, g, scale="model_std", reward_range="pm1")
    np.testing.assert_allclose(a01, apm)


def test_model_std_floor():
    """b = ±1 would divide by zero; the floor 1e-2 on 1 − b² caps the scale at 1/0.1 = 10."""
    a = scale_advantages(np.array([-1.0]), np.array([1.0]), np.zeros(1, np.int64), scale="model_std")
    np.testing.assert_allclose(a, [-2.0 / 0.1])


@given(ragged_batches(binary=False))
def test_batch_whiten_zero_mean_unit_var(batch):
    """batch_whiten leaves mean 0 and unbiased variance var/(var + eps) ≤ 1."""
    r, g, _ = batch
    a = scale_advantages(r, group_mean(r, g), g, scale="batch_whiten", eps=1e-8)
    assert abs(a.mean()) < 1e-9
    if len(a) > 1:
        assert a.var(ddof=1) <= 1 + 1e-9


def test_unknown_scale():
    """Unknown scale names list the valid ones."""
    with pytest.raises(ValueError, match="valid: none, group_std"):
        scale_advantages(np.zeros(2), np.zeros(2), np.zeros(2, np.int64), scale="std")  # type: ignore[arg-type]
