"""Claims about the V0-data seam (predict_rows), context CV, online replay, metrics and the CLI."""

import numpy as np
import pytest

from v05.datasets.v0 import load_v0
from v05.priors import PROVIDERS, cross_validate_context, predict_rows, predict_rows_online


@pytest.fixture(scope="module")
def data():
    return load_v0()


@pytest.mark.parametrize(
    "name",
    [n for n, s in PROVIDERS.items() if not s.needs_policy and not s.needs_sampler],
)
def test_predict_rows_contract(data, name):
    """Every provider returns (R,) scores in [−1, 1] with positive τ² and n0 = σ̄²/τ² for the train rows."""
    rows = data.queries["train"]
    opts = {"backend": "tfidf", "cache_dir": False} if name in ("v0", "combined") else {}
    pred = predict_rows(data, rows, name, **opts)
    assert pred.mean.shape == pred.tau2.shape == pred.n0.shape == (len(rows),)
    assert np.all(np.abs(pred.mean) <= 1) and np.all(pred.tau2 > 0) and np.all(pred.n0 > 0)


def test_running_mean_predicts_each_snapshot_context_mean(data):
    """running_mean on V0 data is exactly the snapshot's context mean (the reference prior)."""
    rows = data.queries["train"]
    pred = predict_rows(data, rows, "running_mean")
    ctx = data.context
    expected = np.array([ctx.score[ctx.snapshot == s].mean() for s in rows.snapshot])
    np.testing.assert_allclose(pred.mean, expected)


def test_context_cv_hides_held_out_prompts(data):
    """Context CV predicts every context row once; running_mean's CV MSE is the known 0.539–0.540."""
    pred = cross_validate_context(data, "running_mean")
    assert len(pred) == len(data.context)
    assert np.mean((pred.mean - data.context.score) ** 2) == pytest.approx(0.5396, abs=2e-3)


def test_online_replay_never_learns_the_mean_from_queries(data):
    """Online replay only calibrates: running_mean's predictions equal the offline ones."""
    rows = data.queries["train"]
    np.testing.assert_allclose(
        predict_rows_online(data, rows, "running_mean").mean, predict_rows(data, rows, "running_mean").mean
    )


@pytest.mark.slow
def test_bundled_targets_with_minilm(data):
    """Issue targets on the bundled data (MiniLM; ~3 min to embed without the cache): pooled combined context CV MSE
    < 0.46 (snapshot mean 0.540), and in the online replay of train_query no provider is worse than the snapshot mean
    by more than 0.01 MSE."""
    pytest.importorskip("sentence_transformers")
    ctx, rows = data.context, data.queries["train"]
    cv = cross_validate_context(data, "combined", pooled=True)
    assert np.mean((cv.mean - ctx.score) ** 2) < 0.46
    base = np.mean((predict_rows(data, rows, "running_mean").mean - rows.score) ** 2)
    for name, pooled in [("history", False), ("v0", False), ("combined", False), ("combined", True)]:
        pred = predict_rows_online(data, rows, name, pooled=pooled)
        assert np.mean((pred.mean - rows.score) ** 2) <= base + 0.01, (name, pooled)


def test_probe_prior_needs_a_policy_offline(data):
    """The probe prior reads a live policy's hidden states; on V0 data (no policy) it refuses with the reason."""
    with pytest.raises(ValueError, match="policy's hidden states"):
        predict_rows(data, data.queries["train"], "probe")
