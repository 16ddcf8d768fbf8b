"""Claims about POISE's probe, its group buffer and the prompt-only ``pca_ridge`` head (``v05.value_probe``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from v05.estimators.poise_baseline import cross_rollout_targets, poise
from v05.priors.heads import cross_val_fit
from v05.value_probe import GroupBuffer, PcaRidgeHead, PoiseProbe


def _rollouts(rng, n_groups, k=2, hp=24, hr=40, s=3):
    """Synthetic rollouts: each prompt has a pass rate p = sigmoid(2·u), u ~ N(0, 1), written into its prompt features
    along a random direction (plus noise); response features and entropies carry noise only. Rewards 0/1."""
    u = rng.standard_normal(n_groups)
    p = 1 / (1 + np.exp(-2 * u))
    group = np.repeat(np.arange(n_groups), k)
    direction = rng.standard_normal(hp)
    prompt = u[group, None] * direction + 0.3 * rng.standard_normal((n_groups * k, hp))
    response = rng.standard_normal((n_groups * k, hr))
    scalars = rng.standard_normal((n_groups * k, s))
    rewards = (rng.random(n_groups * k) < p[group]).astype(float)
    return prompt, response, scalars, rewards, group, p


def test_pca_sizes_clamp_to_rows_and_width():
    """n_components = min(requested, rows, dim): 5 rows of widths 3 and 10 keep 3 and 5 components; 0 skips the PCA."""
    rng = np.random.default_rng(0)
    x_p, x_r, s, y = rng.random((5, 3)), rng.random((5, 10)), rng.random((5, 2)), rng.random(5)
    probe = PoiseProbe().fit(x_p, x_r, s, y)
    assert probe.prompt_pca_.components.shape == (3, 3)
    assert probe.response_pca_.components.shape == (5, 10)
    assert probe.linear_.coef.shape == (3 + 5 + 2,)
    raw = PoiseProbe(pca_prompt=0, pca_response=2).fit(x_p, x_r, s, y)
    assert raw.prompt_pca_ is None and raw.linear_.coef.shape == (3 + 2 + 2,)


def test_predictions_are_clipped_to_the_reward_range():
    """Far-out queries push the ridge beyond [0, 1]; the probe returns the clipped value (and [−1, 1] when asked)."""
    rng = np.random.default_rng(1)
    prompt, response, scalars, rewards, group, _ = _rollouts(rng, 100)
    targets = cross_rollout_targets(rewards, group)
    probe = PoiseProbe(alpha=1.0).fit(prompt, response, scalars, targets)
    far = np.vstack([50 * prompt[:5], -50 * prompt[:5]])
    z = np.hstack([probe.prompt_pca_(far), probe.response_pca_(response[:10]), scalars[:10]])
    raw = probe.linear_(z)
    assert raw.max() > 1 and raw.min() < 0  # the clip is active
    pred = probe.predict(far, response[:10], scalars[:10])
    np.testing.assert_array_equal(pred, np.clip(raw, 0.0, 1.0))
    pm1 = PoiseProbe(alpha=1.0, clip=(-1.0, 1.0)).fit(prompt, response, scalars, 2 * targets - 1)
    assert pm1.predict(far, response[:10], scalars[:10]).min() == -1.0


def test_learns_a_prompt_value_signal():
    """Trained on cross-rollout targets of 600 prompts (k = 2), the probe predicts held-out prompts' pass rates with
    MSE below that of the training-target mean (the value is linear in the prompt features)."""
    rng = np.random.default_rng(2)
    prompt, response, scalars, rewards, group, p = _rollouts(rng, 800)
    tr = group < 600
    probe = PoiseProbe(pca_prompt=8, pca_response=8).fit(
        prompt[tr], response[tr], scalars[tr], cross_rollout_targets(rewards[tr], group[tr])
    )
    pred = probe.predict(prompt[~tr], response[~tr], scalars[~tr])
    truth = p[group[~tr]]
    mse, mse_mean = np.mean((pred - truth) ** 2), np.mean((rewards[tr].mean() - truth) ** 2)
    assert mse < 0.5 * mse_mean, (mse, mse_mean)


def test_matches_the_release_pipeline():
    """Predictions equal sklearn's PCA(randomized, seed 42) → StandardScaler → Ridge applied as the release does (our
    fitted parameters are applied with numpy)."""
    from sklearn.decomposition import PCA
    from sklearn.linear_model import Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(3)
    prompt, response, scalars, rewards, group, _ = _rollouts(rng, 60)
    y = cross_rollout_targets(rewards, group)
    probe = PoiseProbe(pca_prompt=4, pca_response=6, alpha=10.0).fit(prompt, response, scalars, y)
    pp = PCA(n_components=4, svd_solver="randomized", random_state=42).fit(prompt)
    pr = PCA(n_components=6, svd_solver="randomized", random_state=42).fit(response)
    z = np.hstack([pp.transform(prompt), pr.transform(response), scalars])
    model = make_pipeline(StandardScaler(), Ridge(alpha=10.0, random_state=42)).fit(z, y)
    np.testing.assert_allclose(probe.predict(prompt, response, scalars), np.clip(model.predict(z), 0, 1), atol=1e-12)


def test_refit_is_from_scratch():
    """A second fit forgets the first: it equals a fresh probe fitted on the second data set."""
    rng = np.random.default_rng(4)
    a = _rollouts(rng, 30)
    b = _rollouts(rng, 40)
    fit = lambda probe, d: probe.fit(d[0], d[1], d[2], cross_rollout_targets(d[3], d[4]))  # noqa: E731
    twice = fit(fit(PoiseProbe(), a), b)
    np.testing.assert_array_equal(twice.predict(*a[:3]), fit(PoiseProbe(), b).predict(*a[:3]))


def test_state_round_trip_predicts_identically():
    """state_dict → JSON text → load_state_dict gives bit-identical predictions; an unfitted state stays unfitted;
    a state saved with other settings is refused."""
    rng = np.random.default_rng(5)
    prompt, response, scalars, rewards, group, _ = _rollouts(rng, 50)
    probe = PoiseProbe(pca_prompt=5, pca_response=0).fit(
        prompt, response, scalars, cross_rollout_targets(rewards, group)
    )
    restored = PoiseProbe(pca_prompt=5, pca_response=0).load_state_dict(json.loads(json.dumps(probe.state_dict())))
    assert restored.fitted_
    np.testing.assert_array_equal(restored.predict(prompt, response, scalars), probe.predict(prompt, response, scalars))
    assert not PoiseProbe().load_state_dict(json.loads(json.dumps(PoiseProbe().state_dict()))).fitted_
    with pytest.raises(ValueError, match="saved with"):
        PoiseProbe(alpha=1.0).load_state_dict(probe.state_dict())


def test_buffer_evicts_whole_groups_oldest_first_and_drops_nan_targets():
    """max_rows = 5. Step 1: groups a (2 rows), b (2), a singleton s (NaN target, dropped) → 4 rows. Step 2: group c
    (3 rows) → 7 > 5, so a (the oldest) goes whole → b, c = 5 rows. Step 3: a group of 6 > 5 rows evicts everything."""
    buf = GroupBuffer(max_rows=5)

    def feats(rows, tag):
        return np.full((rows, 2), tag), np.full((rows, 3), tag), np.full((rows, 1), tag)

    buf.append(["a", "b", "a", "s", "b"], *feats(5, 1.0), [0.1, 0.2, 0.3, np.nan, 0.4])
    assert len(buf) == 4 and buf.n_groups == 2
    np.testing.assert_array_equal(buf.arrays()[3], [0.1, 0.3, 0.2, 0.4])  # grouped, first-appearance order
    buf.append([7, 7, 7], *feats(3, 2.0), [0.5, 0.6, 0.7])
    hp, hr, s, y = buf.arrays()
    assert len(buf) == 5 and buf.n_groups == 2
    np.testing.assert_array_equal(y, [0.2, 0.4, 0.5, 0.6, 0.7])
    np.testing.assert_array_equal(hp[:, 0], [1, 1, 2, 2, 2])
    assert hr.shape == (5, 3) and s.shape == (5, 1)
    buf.append(np.zeros(6, int), *feats(6, 3.0), np.full(6, 0.5))
    assert len(buf) == 0 and buf.arrays()[3].shape == (0,)


def test_buffer_state_round_trip():
    """state_dict → JSON → load_state_dict restores the same rows and group boundaries (later evictions agree)."""
    rng = np.random.default_rng(6)
    a, b = GroupBuffer(max_rows=10), GroupBuffer(max_rows=10)
    a.append([0, 0, 1, 1, 2, 2], rng.random((6, 4)), rng.random((6, 5)), rng.random((6, 0)), rng.random(6))
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    for got, want in zip(b.arrays(), a.arrays(), strict=True):
        np.testing.assert_array_equal(got, want)
    step = ([5, 5, 5, 5, 5], rng.random((5, 4)), rng.random((5, 5)), rng.random((5, 0)), rng.random(5))
    a.append(*step)
    b.append(*step)
    assert a.n_groups == b.n_groups == 3 and len(a) == len(b) == 9
    with pytest.raises(ValueError, match="max_rows"):
        GroupBuffer(max_rows=3).load_state_dict(a.state_dict())


def test_step_order_keeps_baselines_blind_to_the_step():
    """The documented order — predict with the previous probe → advantages → append → refit — gives baselines that do
    not depend on the step's own rewards: flipping every reward of step 2 leaves its baselines unchanged."""
    rng = np.random.default_rng(7)
    probe, buf = PoiseProbe(pca_prompt=4, pca_response=4), GroupBuffer(max_rows=200)
    prompt, response, scalars, rewards, group, _ = _rollouts(rng, 40)
    buf.append(group, prompt, response, scalars, cross_rollout_targets(rewards, group))  # step 1 (bootstrap rows)
    probe.fit(*buf.arrays())
    prompt, response, scalars, rewards, group, _ = _rollouts(rng, 40)  # step 2
    values = probe.predict(prompt, response, scalars)  # the previous probe, frozen during the step
    est = poise(rewards, group, values=values, reward_range="01")
    flipped = poise(1 - rewards, group, values=values, reward_range="01")
    np.testing.assert_array_equal(est.baseline, flipped.baseline)
    buf.append(group, prompt, response, scalars, cross_rollout_targets(rewards, group))
    probe.fit(*buf.arrays())  # refit after the advantages
    assert len(buf) == 160


def test_probe_refuses_bad_inputs():
    """Fewer than 2 rows, NaN targets, mismatched rows, predicting before fit or with other widths: ValueError."""
    rng = np.random.default_rng(8)
    x = rng.random((4, 3))
    with pytest.raises(ValueError, match="at least 2 rows"):
        PoiseProbe().fit(x[:1], x[:1], x[:1], [0.5])
    with pytest.raises(ValueError, match="finite"):
        PoiseProbe().fit(x, x, x, [0.5, np.nan, 0.1, 0.2])
    with pytest.raises(ValueError, match="rows"):
        PoiseProbe().fit(x, x[:3], x, [0.5, 0.1, 0.1, 0.2])
    with pytest.raises(ValueError, match="before fit"):
        PoiseProbe().predict(x, x, x)
    probe = PoiseProbe().fit(x, x, x, [0.5, 0.1, 0.1, 0.2])
    with pytest.raises(ValueError, match="widths"):
        probe.predict(x, x, x[:, :2])
    with pytest.raises(ValueError, match="clip"):
        PoiseProbe(clip=(1.0, 0.0))
    with pytest.raises(ValueError, match="pca_prompt"):
        PoiseProbe(pca_prompt=-1)


def test_pca_ridge_head_learns_scores_and_follows_the_head_protocol():
    """The prompt-only head (output "score") beats the mean on y = tanh(3x₀) + noise over 8-d unit embeddings on
    held-out rows, and runs through heads.cross_val_fit; constant scores give a constant prediction ȳ."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((300, 8))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    y = np.clip(np.tanh(3 * x[:, 0]) + 0.2 * rng.standard_normal(300), -1, 1)
    head = PcaRidgeHead(alpha=1.0).fit(x[:200], y[:200])
    assert head.output == "score"
    pred = head.predict(x[200:])
    assert pred.shape == (100,)
    assert np.mean((pred - y[200:]) ** 2) < np.mean((y[:200].mean() - y[200:]) ** 2)
    oof, fitted = cross_val_fit(PcaRidgeHead, x, np.arange(300) % 5, 5, lambda mask: y[mask])
    assert oof.shape == (300,) and fitted.linear_ is not None
    np.testing.assert_allclose(PcaRidgeHead().fit(x[:10], np.full(10, 0.3)).predict(x[10:20]), 0.3, atol=1e-12)
    with pytest.raises(ValueError, match="at least 2"):
        PcaRidgeHead().fit(x[:1], y[:1])
