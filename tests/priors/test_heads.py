"""Claims about the in-context heads."""

import numpy as np
import pytest

from v05.priors.head_registry import HEADS, make_head
from v05.priors.heads import TABPFN_CHECKPOINT, check_tabpfn_checkpoint


def _data(rng, n=200, d=8):
    x = rng.standard_normal((n, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    y = np.clip(np.tanh(3 * x[:, 0]) + 0.2 * rng.standard_normal(n), -1, 1)
    return x, y


@pytest.mark.filterwarnings("ignore:The optimal value found")  # GP hyperparameter bounds on toy data
@pytest.mark.parametrize("name", ["krr", "knn", "logistic", "gp"])
def test_score_heads_beat_the_mean_on_a_learnable_signal(name):
    """Each regression head explains part of y = tanh(3x₀) + noise on held-out rows (MSE below the mean's)."""
    rng = np.random.default_rng(0)
    x, y = _data(rng, 300)
    head = make_head(name).fit(x[:200], y[:200])
    pred = head.predict(x[200:])
    assert pred.shape == (100,)
    assert np.mean((pred - y[200:]) ** 2) < np.mean((y[:200].mean() - y[200:]) ** 2)


def test_logistic_hard_outputs_probability_of_nonnegative_score():
    """The V0-style head outputs P(s ≥ 0) in [0, 1], flagged as such."""
    rng = np.random.default_rng(1)
    x, y = _data(rng)
    head = make_head("logistic_hard").fit(x, y)
    p = head.predict(x)
    assert head.output == "prob_nonneg"
    assert np.all((p >= 0) & (p <= 1))
    assert np.corrcoef(p, y)[0, 1] > 0.3


def test_logistic_hard_with_one_class_predicts_that_class():
    """A support set whose labels all agree cannot train a classifier: the head predicts that class."""
    x = np.eye(4)
    assert np.all(make_head("logistic_hard").fit(x, np.ones(4)).predict(x) == 1.0)


def test_tabpfn_head_names_the_missing_checkpoint(tmp_path):
    """Without local weights, the error names TabPFN's checkpoint file and how to supply it."""
    with pytest.raises(ValueError, match=TABPFN_CHECKPOINT):
        make_head("tabpfn").fit(np.eye(3), np.array([-1.0, 1.0, 1.0]))
    with pytest.raises(ValueError, match="not found"):
        check_tabpfn_checkpoint(str(tmp_path))


def test_unknown_head_lists_valid_names():
    """An unknown head name is a ValueError listing every valid head."""
    with pytest.raises(ValueError, match="krr, gp, knn"):
        make_head("forest")
    assert set(HEADS) >= {"krr", "gp", "knn", "logistic", "tabpfn"}


def test_krr_head_equals_scikit_learn_kernel_ridge():
    """The numpy KRR is scikit-learn's KernelRidge(kernel="rbf") on centred targets (float32 Gram: 1e-5)."""
    from sklearn.kernel_ridge import KernelRidge

    rng = np.random.default_rng(3)
    x, y = _data(rng, 120, 16)
    head = make_head("krr", alpha=0.3, gamma=2.0).fit(x[:90], y[:90])
    ref = KernelRidge(alpha=0.3, kernel="rbf", gamma=2.0).fit(x[:90], y[:90] - y[:90].mean())
    np.testing.assert_allclose(head.predict(x[90:]), y[:90].mean() + ref.predict(x[90:]), atol=1e-5)


def test_cross_val_fit_equals_one_head_per_fold():
    """cross_val_fit (one Gram matrix) gives the per-fold loop's out-of-fold predictions and the full fit; a fold
    without training rows is skipped (its rows keep 0), for KRR (shared Gram) and kNN (the generic loop)."""
    from v05.priors.heads import cross_val_fit

    rng = np.random.default_rng(4)
    x, y = _data(rng, 60, 8)
    fold = rng.integers(0, 4, 60)
    fold[fold == 3] = 2  # fold 3 empty
    w = rng.uniform(0.5, 1.5, 60)

    def target(rows):
        return y[rows] * w[rows] - np.mean(y[rows])

    for name in ("krr", "knn"):
        oof, full = cross_val_fit(lambda n=name: make_head(n), x, fold, 4, target)
        loop = np.zeros(60)
        for f in range(4):
            tr, te = fold != f, fold == f
            if te.any():
                loop[te] = make_head(name).fit(x[tr], target(tr)).predict(x[te])
        np.testing.assert_allclose(oof, loop, atol=1e-6)
        ref_full = make_head(name).fit(x, target(np.ones(60, bool)))
        np.testing.assert_allclose(full.predict(x[:5]), ref_full.predict(x[:5]), atol=1e-6)


def test_v0_tabpfn_head_by_name_names_the_missing_checkpoint():
    """`make_head("v0_tabpfn")` builds V0's TabPFN head; without the weights, fitting it names the missing file."""
    head = make_head("v0_tabpfn", checkpoint="/nonexistent/tabpfn.ckpt")
    assert type(head).__name__ == "V0TabPFNHead" and head.n_estimators == 4
    with pytest.raises((ValueError, ImportError), match="tabpfn"):
        head.fit(np.zeros((4, 3)), np.array([1.0, -1.0, 1.0, -1.0]))


def test_kernel_ridge_cross_val_equals_a_cholesky_per_fold():
    """One shared Cholesky factor gives the out-of-fold predictions and the full fit of one solve per fold to float64
    round-off (1e-12), with an empty fold, a fold left with one training row, and data rows repeating gram rows."""
    from scipy.linalg import cho_factor, cho_solve

    from v05.priors.heads import kernel_ridge_cross_val

    def loop(gram, fold, n_folds, target, alpha):
        n, out = len(fold), np.zeros(len(fold))
        for f in range(n_folds):
            tr, te = fold != f, fold == f
            if te.any() and tr.sum() >= 2:
                t = target(tr)
                dual = cho_solve(cho_factor(gram[np.ix_(tr, tr)] + alpha * np.eye(tr.sum())), t - t.mean())
                out[te] = t.mean() + gram[np.ix_(te, tr)] @ dual
        y = target(np.ones(n, bool))
        return out, y.mean(), cho_solve(cho_factor(gram + alpha * np.eye(n)), y - y.mean())

    rng = np.random.default_rng(5)
    x, y = _data(rng, 90, 8)
    gram = np.exp(-2.0 * np.sum((x[:, None] - x[None]) ** 2, axis=-1))  # (90, 90), exactly symmetric
    w = rng.uniform(0.5, 1.5, 90)
    cases = [
        (rng.integers(0, 5, 90), 5, None),
        (np.where(rng.integers(0, 4, 90) == 3, 2, rng.integers(0, 3, 90)), 4, None),  # fold 3 empty
        (np.r_[np.zeros(89, int), 1], 2, None),  # fold 1 holds one row; fold 0 has one training row: skipped
        (rng.integers(0, 5, 120), 5, rng.integers(0, 90, 120)),  # 120 data rows on 90 gram rows
    ]
    for fold, n_folds, rows in cases:
        g = gram if rows is None else gram[np.ix_(rows, rows)]
        yy = np.resize(y, len(fold)) * np.resize(w, len(fold))

        def target(mask, yy=yy):
            return yy[mask] - 0.5 * np.mean(yy[mask])

        got = kernel_ridge_cross_val(gram, fold, n_folds, target, alpha=0.3, rows=rows)
        want = loop(g, fold, n_folds, target, 0.3)
        np.testing.assert_allclose(got[0], want[0], rtol=0, atol=1e-12)
        assert abs(got[1] - want[1]) < 1e-15
        np.testing.assert_allclose(got[2], want[2], rtol=0, atol=1e-12)
