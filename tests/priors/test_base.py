"""Claims about the calibration arithmetic and the prediction type (hand-computed values)."""

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from v05.priors.base import Calibration, PriorPrediction, auc_score, calibrate


def _auc_oracle(score, label):
    pos = [s for s, y in zip(score, label, strict=False) if y]
    neg = [s for s, y in zip(score, label, strict=False) if not y]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in itertools.product(pos, neg))
    return wins / (len(pos) * len(neg))


def test_auc_matches_pairwise_oracle_with_ties():
    """The rank AUC equals the pairwise-comparison AUC, ties counting one half."""
    rng = np.random.default_rng(0)
    for _ in range(20):
        score = rng.integers(0, 4, 15).astype(float)
        label = rng.random(15) < 0.5
        if label.all() or not label.any():
            continue
        assert auc_score(score, label) == pytest.approx(_auc_oracle(score, label))


def test_auc_is_nan_with_one_class():
    """AUC is undefined (NaN) when every label is the same."""
    assert np.isnan(auc_score(np.array([0.1, 0.2]), np.array([True, True])))


def test_calibrate_hand_values():
    """V = [0, 0], v̄ = [0.5, −0.5], k = [5, 5]:
    mse = 0.25; noise = (1 − 0.25)/4 = 0.1875 each; τ² = 0.0625;
    σ̄² = 0.75·5/4 = 0.9375; n0 = 0.9375/0.0625 = 15."""
    cal = calibrate(np.array([0.0, 0.0]), np.array([0.5, -0.5]), np.array([5.0, 5.0]))
    assert cal.mse == pytest.approx(0.25)
    assert cal.noise == pytest.approx(0.1875)
    assert cal.tau2 == pytest.approx(0.0625)
    assert cal.n0 == pytest.approx(15.0)
    assert cal.n == 2


def test_calibrate_floor_and_single_rollout_plugin():
    """τ² is floored; with k = 1 the noise term is the plug-in (1 − V²)."""
    cal = calibrate(np.array([0.0]), np.array([1.0]), np.array([1.0]), floor=1e-3)
    assert cal.tau2 == pytest.approx(1e-3)  # mse 1 − noise 1 = 0 → floor
    assert cal.sigma2 == pytest.approx(1.0)


def test_calibrate_is_unbiased_for_a_known_prior_error():
    """μ ~ U(−.8,.8), V = μ + N(0, 0.3²), v̄ from k = 8 rollouts → τ̂² ≈ 0.09 within 4 SE (false failures ≈ 6e-5)."""
    rng = np.random.default_rng(1)
    n, k = 20000, 8
    mu = rng.uniform(-0.8, 0.8, n)
    v = mu + 0.3 * rng.standard_normal(n)
    vbar = 2 * rng.binomial(k, (mu + 1) / 2) / k - 1
    cal = calibrate(v, vbar, np.full(n, float(k)), floor=0.0)
    terms = (vbar - v) ** 2 - (1 - vbar**2) / (k - 1)
    assert abs(cal.tau2 - 0.09) < 4 * terms.std() / np.sqrt(n)


def test_prediction_validates_shapes_and_maps_to_beta():
    """A prediction carries equal 1-D arrays; to_beta gives Beta(n0·p, n0·(1 − p))."""
    pred = PriorPrediction(np.array([0.0, 0.5]), np.array([0.5, 0.5]), np.array([2.0, 4.0]))
    beta = pred.to_beta()
    np.testing.assert_allclose(beta.alpha, [1.0, 3.0])  # 2·0.5, 4·0.75
    np.testing.assert_allclose(beta.beta, [1.0, 1.0])
    with pytest.raises(ValueError, match="one shape"):
        PriorPrediction(np.zeros(2), np.zeros(3), np.zeros(2))


def test_calibration_to_dict_names_metrics():
    """Calibration metrics carry a prior/ prefix for the training log."""
    d = Calibration(0.5, 0.6, 1.6, 10).to_dict()
    assert d["prior/tau2"] == 0.5 and d["prior/n0"] == 1.6


@st.composite
def _calibration_rows(draw):
    n = draw(st.integers(1, 12))
    k = np.array(draw(st.lists(st.integers(1, 16), min_size=n, max_size=n)), dtype=float)
    wins = np.array([draw(st.integers(0, int(ki))) for ki in k], dtype=float)
    v = np.array(draw(st.lists(st.floats(-1, 1), min_size=n, max_size=n)))
    return v, 2 * wins / k - 1, k


@given(_calibration_rows(), st.randoms())
def test_calibration_is_bounded_and_permutation_invariant(rows, rnd):
    """τ̂² ≥ floor, n0 = σ̄²/τ̂² ≥ 0, AUC in [0, 1] or NaN; permuting the groups changes nothing."""
    v, vbar, k = rows
    cal = calibrate(v, vbar, k)
    assert cal.tau2 >= 1e-3 and cal.n0 >= 0
    assert np.isnan(cal.auc) or 0 <= cal.auc <= 1
    perm = np.array(rnd.sample(range(len(v)), len(v)))
    again = calibrate(v[perm], vbar[perm], k[perm])
    assert again.tau2 == pytest.approx(cal.tau2) and again.sigma2 == pytest.approx(cal.sigma2)


def test_one_tau2_floor_for_calibration_and_v05_eb():
    """Provider calibration and v05_eb floor τ̂² at the same value (they are one estimate): a perfect prior reports
    τ² = TAU2_FLOOR = 0.01 in both, so its n0 = σ̄²/0.01 agrees."""
    import numpy as np

    from v05.estimators import v05_eb
    from v05.estimators.fusion import TAU2_FLOOR
    from v05.priors.base import calibrate

    assert TAU2_FLOOR == 0.01
    r = np.array([1.0, -1.0, 1.0, -1.0, 1.0, 1.0, -1.0, -1.0])
    g = np.repeat(np.arange(2), 4)
    cal = calibrate(np.zeros(2), np.zeros(2), np.full(2, 4.0))
    est = v05_eb(r, g, prior=np.zeros(2))
    assert cal.tau2 == TAU2_FLOOR and np.allclose(est.n0, cal.n0)
