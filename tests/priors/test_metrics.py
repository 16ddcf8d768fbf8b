"""Claims about the accuracy metrics and the reliability table."""

import numpy as np
import pytest

from v05.priors.metrics import prior_metrics, reliability_plot, reliability_table


def test_metrics_hand_values():
    """ŷ = [−.5, .5, .5], s = [−1, 1, 0]: mse = (.25 + .25 + .25)/3 = .25; within-snapshot AUC (s > 0) = 0.75."""
    m = prior_metrics(np.array([-0.5, 0.5, 0.5]), np.array([-1.0, 1.0, 0.0]), np.zeros(3), np.zeros(3))
    assert m.mse == pytest.approx(0.25) and m.mae == pytest.approx(0.5)
    assert m.auc_within == pytest.approx(0.75)  # the positive (0.5) beats −0.5 (1) and ties 0.5 (½): 1.5/2
    assert reliability_table(np.array([-0.5, 0.5]), np.array([-1.0, 1.0]), bins=2) == [(-0.5, -1.0, 1), (0.5, 1.0, 1)]


def test_gauc_groups_by_step_only_like_v0():
    """gauc_step pools snapshots of one step (V0's metrics.py); auc_within keeps them apart."""
    pred = np.array([0.1, 0.2, 0.9, 0.8])
    score = np.array([-1.0, 1.0, -1.0, 1.0])
    m = prior_metrics(pred, score, snapshot=np.array([0, 0, 1, 1]), step=np.array([16, 16, 16, 16]))
    assert m.auc_within == pytest.approx(0.5)  # snapshot 0: 1; snapshot 1: 0
    assert m.gauc_step == pytest.approx(0.5)  # pooled: pos {0.2, 0.8} vs neg {0.1, 0.9}: wins 1 + 0 + 1 + 0 of 4


def test_reliability_plot_writes_a_png(tmp_path):
    """The reliability diagram is written as a PNG file."""
    path = reliability_plot({"p": (np.array([-0.5, 0.5]), np.array([-1.0, 1.0]))}, tmp_path / "r.png")
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_eb_fusion_ratio_hand_value():
    """μ = 0, V = 0.5, n0 = 2, k = 4: MSE_EB = (4·1 + 4·0.25)/36 = 5/36, MSE_GRPO = 1/4 → ratio 5/9, worth 4·9/5 − 4."""
    import numpy as np

    from v05.priors.metrics import eb_fusion_ratio

    ratio, worth = eb_fusion_ratio(np.array([0.5]), np.array([2.0]), np.array([0.0]), k=4)
    np.testing.assert_allclose([ratio, worth], [5 / 9, 4 * 9 / 5 - 4])
