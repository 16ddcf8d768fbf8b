"""The ``combined`` prior's per-step refit (kernel cache + shared-factor CV) against a slow refit from scratch.

The scenario: two policies pooled, 20 prompts a step, buffers of 48 that turn over, prompts seen again, and five
texts shared by two prompt ids; TF-IDF features (two widths), so no model is loaded.
"""

import json
import logging

import numpy as np
import pytest
from scipy.linalg import cho_factor, cho_solve

from v05.priors import make_provider
from v05.priors.combined import CombinedProvider, _CombinedFit, _group_means, _stack_weights
from v05.priors.compose import CalibrationRows
from v05.priors.kernel_cache import fixed_point_rbf, fixed_point_rows

WORDS = ["algebra", "geometry", "primes", "calculus", "probability", "integers", "triangle", "sequence"]
FILLER = (
    "find compute prove show that the sum product of all real roots digits circle area radius angle "
    "modulo remainder least greatest common divisor fraction ratio square cube number value"
).split()
OPTIONS = {
    "backend": "tfidf",
    "backend_options": {"n_features": 256, "ngram_min": 3, "ngram_max": 5},
    "cache_dir": False,
    "context_size": 48,
    "min_context": 16,
    "min_online": 200,  # calibrate on the context CV rows throughout, so they are compared too
}


def _steps(n_steps=8):
    """(policy, ids, texts, scores) of each step; deterministic."""
    rng = np.random.default_rng(11)
    n = 80
    topic = rng.integers(0, len(WORDS), n)
    texts = [f"{WORDS[t]}: " + " ".join(rng.choice(FILLER, 9)) + f" ({i})" for i, t in enumerate(topic)]
    texts[70:75] = texts[:5]  # prompts under two ids with one text
    ids = [f"p{i}" for i in range(n)]
    mu = np.where(topic == 2, -0.7, 0.3) + 0.2 * np.cos(np.arange(n))
    out = []
    for step in range(n_steps):
        idx = (np.arange(20) + 13 * step) % n
        wins = rng.binomial(4, (1 + np.clip(mu[idx], -1, 1)) / 2)
        out.append(("a" if step % 3 else "b", [ids[i] for i in idx], [texts[i] for i in idx], 2 * wins / 4 - 1))
    return out


def _run(prov, steps):
    """(S, 3, 20) mean, τ², n0 of each step's prediction (made before that step's update)."""
    out = []
    for step, (policy, ids, texts, scores) in enumerate(steps):
        pred = prov.predict(ids, texts, policy=policy)
        out.append(np.stack([pred.mean, pred.tau2, pred.n0]))
        prov.update(ids, texts, scores, np.full(len(ids), 4.0), policy=policy, step=step + 1)
    return np.stack(out)


class SlowCombined(CombinedProvider):
    """The refit as written before the cache (on the fixed-point kernel): every row embedded, the whole Gram matrix
    computed at once, one Cholesky per fold.
    """

    def _fit(self, policy):
        names = self._pooled(policy)
        if sum(len(self.buffers_[p]) for p in names) < self.min_context:
            return None
        key = tuple(self.buffers_[p].version for p in names)
        cached = self.fits_.get(tuple(names))
        if cached is not None and cached.key == key:
            return cached
        bufs = [self.buffers_[p] for p in names]
        texts = [t for b in bufs for t in b.texts]
        who = np.concatenate([np.full(len(b), j) for j, b in enumerate(bufs)])
        y = np.concatenate([np.asarray(b.scores) for b in bufs])
        k = np.concatenate([np.asarray(b.counts) for b in bufs])
        fold = self._folds(np.array([i for b in bufs for i in b.ids]))

        def fold_means(tr):  # (B,) rollout-weighted buffer means on the rows tr
            return _group_means(y[tr], k[tr], who[tr], len(bufs), fallback=float(np.average(y[tr], weights=k[tr])))

        def residual(tr):
            return y[tr] - fold_means(tr)[who[tr]]

        m_oof, r_oof, predictors = np.zeros(len(y)), [], []
        for f in range(self.folds):
            tr, te = fold != f, fold == f
            if te.any() and tr.sum() >= 2:
                m_oof[te] = fold_means(tr)[who[te]]
        head = self._new_head()
        for emb in self._embedders():
            rows = fixed_point_rows(emb.embed(texts))
            gram = fixed_point_rbf(rows, rows, head.gamma)
            oof = np.zeros(len(y))
            for f in range(self.folds):
                tr, te = fold != f, fold == f
                if te.any() and tr.sum() >= 2:
                    t = residual(tr)
                    dual = cho_solve(cho_factor(gram[np.ix_(tr, tr)] + head.alpha * np.eye(tr.sum())), t - t.mean())
                    oof[te] = t.mean() + gram[np.ix_(te, tr)] @ dual
            t = residual(np.ones(len(y), bool))
            mean = t.mean()
            dual = cho_solve(cho_factor(gram + head.alpha * np.eye(len(y))), t - mean)
            r_oof.append(oof)
            predictors.append(
                lambda q, e=emb, r=rows, d=dual, m=mean, g=head.gamma: (
                    m + fixed_point_rbf(fixed_point_rows(e.embed(q)), r, g) @ d
                )
            )
        r_oof = np.stack(r_oof, axis=1)
        beta = _stack_weights(r_oof, y - m_oof)
        r_stack = r_oof @ beta
        rows = CalibrationRows(m_oof, r_stack, np.clip(m_oof + r_stack, -1, 1), y, k)
        fit = _CombinedFit(key, predictors, beta, rows, {p: who == j for j, p in enumerate(names)}, [])
        self.fits_[tuple(names)] = fit
        return fit


@pytest.fixture(autouse=True)
def _quiet(caplog):
    caplog.set_level(logging.ERROR)  # the first steps warn that a buffer is too small


def test_combined_equals_a_slow_refit_from_scratch_at_every_step():
    """Cached kernel entries, reused query rows and the shared-factor CV change no prediction (mean, τ², n0) by more
    than 1e-9 relative to refitting everything from scratch, one Cholesky per fold, at each of 8 steps."""
    steps = _steps()
    fast = _run(make_provider("combined", **OPTIONS), steps)
    slow = _run(SlowCombined(**OPTIONS), steps)
    assert np.any(fast[:, 0] != 0)  # the residual model does predict
    np.testing.assert_allclose(fast, slow, rtol=1e-9, atol=1e-9)


def test_combined_matches_the_implementation_before_the_cache():
    """Predictions recorded from the pre-cache code (commit 5076a84: float32 Gram matrices, a Cholesky per fold)
    at steps 4, 5, 6 and 8 agree to 1e-5 (mean) and 1e-6 relative (n0). That code's own predictions moved by up to
    5e-7 (mean) between OpenBLAS kernels or thread counts, its float32 kernel being order-dependent (~1e-6)."""
    out = _run(make_provider("combined", **OPTIONS), _steps())
    mean = np.array([
        [0.472430658710007, 0.712189488047362, 0.193873550235794, 0.466662226222188],
        [0.147713315747452, -0.046188107333899, -0.172945819161294, 0.187120283385471],
        [-0.159950678067652, 0.295044190613132, -0.185486653884516, -0.409246729267479],
        [0.14856114870161, 0.230125304239443, 0.285000921391429, 0.168373954640932],
    ])  # fmt: skip
    n0 = np.array([103.3333333333333, 19.175288346332305, 13.788733492524578, 16.11131423642907])
    np.testing.assert_allclose(out[[3, 4, 5, 7], 0, :4], mean, rtol=0, atol=1e-5)
    np.testing.assert_allclose(out[[3, 4, 5, 7], 2, 0], n0, rtol=1e-6)


def test_combined_restored_mid_run_continues_bit_identically():
    """A provider restored from a JSON state after 5 steps (empty kernel cache) predicts, at every later step, exactly
    as the live one (whose cache holds entries computed at earlier refits)."""
    steps = _steps(9)
    live = make_provider("combined", **OPTIONS)
    _run(live, steps[:5])
    restored = make_provider("combined", **OPTIONS)
    restored.load_state_dict(json.loads(json.dumps(live.state_dict())))
    assert not restored.fits_ and live.fits_[("a", "b")].caches[0].used_ > 0
    np.testing.assert_array_equal(_run(live, steps[5:]), _run(restored, steps[5:]))


def test_combined_with_a_head_other_than_krr_refits_from_scratch():
    """kNN (no shared Gram matrix) takes the generic path: no kernel caches, finite predictions."""
    steps = _steps(6)
    prov = make_provider("combined", head="knn", **OPTIONS)
    out = _run(prov, steps)
    assert all(not fit.caches for fit in prov.fits_.values()) and np.all(np.isfinite(out))


class CountingCombined(CombinedProvider):
    """Records the update count at each refit of the residual model."""

    def _fit_buffers(self, names, bufs, cached):
        self.refits = [*getattr(self, "refits", []), self.learned_]
        return CombinedProvider._fit_buffers(self, names, bufs, cached)


def test_refit_every_amortises_the_refit_and_one_is_every_update():
    """refit_every = 3 refits the residual model when it has none for the pooled policies and then only once 3
    updates have passed: over 9 steps (the first lacks context, the second sees policy b only, the third pools a
    and b: a new model) at update counts 1, 2, 5, 8; in between its predictions differ from a refit-every-update
    provider's (stale residuals) but stay finite, and refit_every = 1 refits after every update."""
    steps = _steps(9)
    every = CountingCombined(**OPTIONS)
    amortised = CountingCombined(**OPTIONS, refit_every=3)
    a, b = _run(every, steps), _run(amortised, steps)
    assert every.refits == list(range(1, 9))
    assert amortised.refits == [1, 2, 5, 8]
    np.testing.assert_array_equal(a[:3], b[:3])  # both fitted the same buffers so far
    assert not np.allclose(a[3, 0], b[3, 0]) and not np.allclose(a[4, 0], b[4, 0])  # fits 1 and 2 updates old
    assert np.all(np.isfinite(b))
    with pytest.raises(ValueError, match="refit_every"):
        make_provider("combined", **OPTIONS, refit_every=0)


def test_refit_every_restored_from_a_stale_fit_continues_bit_identically():
    """Saved one update after its last refit (refit_every = 3), the state carries that fit's buffers: the restored
    provider rebuilds the stale fit and predicts exactly as the live one at every later step. Restored without them
    (the key dropped), it would refit on the current buffers and predict otherwise."""
    steps = _steps(10)
    opts = {**OPTIONS, "refit_every": 3}
    live = CountingCombined(**opts)
    _run(live, steps[:6])
    assert live.refits == [1, 2, 5] and live.learned_ == 6  # the fit in use is 1 update old
    state = json.loads(json.dumps(live.state_dict()))
    restored = make_provider("combined", **opts)
    restored.load_state_dict(state)
    fresh = make_provider("combined", **opts)
    fresh.load_state_dict({k: v for k, v in state.items() if k != "fits"})
    policy, ids, texts, _ = steps[6]
    ahead, other = live.predict(ids, texts, policy=policy), fresh.predict(ids, texts, policy=policy)
    assert not np.array_equal(ahead.mean, other.mean)
    np.testing.assert_array_equal(_run(live, steps[6:]), _run(restored, steps[6:]))


def test_a_prefetched_pool_changes_no_prediction_bit_for_bit():
    """prefetch() precomputes the pool's kernel per feature set; the predictions of every step (mean, τ², n0) equal,
    bit for bit, those of a provider that computes every kernel entry (the pool holds 60 of the 80 prompts, so some
    entries are looked up and some computed); max_pool_kernel below the pool's size precomputes nothing."""
    steps = _steps(9)
    pool_texts = [t for _, _, texts, _ in steps for t in texts][:60]
    plain = make_provider("combined", **OPTIONS)
    pooled = make_provider("combined", **OPTIONS)
    pooled.prefetch(pool_texts)
    np.testing.assert_array_equal(_run(plain, steps), _run(pooled, steps))
    assert pooled.pool_kernels_ and all(c.pool is not None for c in pooled.fits_[("a", "b")].caches)
    small = make_provider("combined", **OPTIONS, max_pool_kernel=10)
    small.prefetch(pool_texts)
    _run(small, steps[:3])
    assert not small.pool_kernels_
