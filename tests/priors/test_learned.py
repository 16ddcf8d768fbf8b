"""Claims about the learned providers fitted in context (``v0``, ``combined``) on synthetic prompts (TF-IDF)."""

import json
import logging

import numpy as np
import pytest

from v05.priors import make_provider

WORDS = ["algebra", "geometry", "primes", "calculus", "probability", "integers", "triangle", "sequence"]


def _prompts(rng, n):
    """Prompts whose score depends on one topic word: 'primes' prompts are hard (−0.8), others easy (+0.4)."""
    topic = rng.integers(0, len(WORDS), n)
    texts = [f"problem {i} about {WORDS[t]} {WORDS[t]} {WORDS[t]}" for i, t in enumerate(topic)]
    mu = np.where(topic == 2, -0.8, 0.4)
    return [f"id{i}" for i in range(n)], texts, mu


def _opts(**kw):
    return {"backend": "tfidf", "cache_dir": False, "min_online": 8, **kw}


@pytest.mark.parametrize("name", ["v0", "combined"])
def test_learned_provider_learns_a_prompt_signal(name):
    """With a topic that sets difficulty, the provider ranks unseen hard prompts below easy ones (AUC > 0.9)."""
    rng = np.random.default_rng(0)
    ids, texts, mu = _prompts(rng, 300)
    prov = make_provider(name, **_opts())
    prov.update(ids[:200], texts[:200], mu[:200], np.full(200, 8.0))
    pred = prov.predict(ids[200:], texts[200:])
    hard = mu[200:] < 0
    assert pred.mean[hard].mean() < pred.mean[~hard].mean() - 0.5
    assert prov.calibration().n0 > 2  # the measured worth exceeds a policy mean's


def test_small_buffer_falls_back_to_running_mean(caplog):
    """A buffer below min_context predicts its mean, with a logged warning."""
    prov = make_provider("v0", **_opts(min_context=50))
    prov.update(["a", "b"], ["x", "y"], np.array([0.2, 0.6]), np.array([4.0, 4.0]))
    with caplog.at_level(logging.WARNING):
        pred = prov.predict(["c"], ["z"])
    assert pred.mean[0] == pytest.approx(0.4) and "falling back" in caplog.text


def test_online_calibration_switches_off_a_residual_model_without_signal():
    """If recent outcomes do not follow the residual model, its weight w drops to 0 and V returns to the mean."""
    rng = np.random.default_rng(1)
    ids, texts, mu = _prompts(rng, 260)
    prov = make_provider("combined", **_opts())
    prov.update(ids[:200], texts[:200], mu[:200], np.full(200, 8.0))
    assert prov.residual_weight() > 0.5
    q_ids, q_texts = ids[200:], texts[200:]
    weights, m = [], mu[:200].mean()
    for step in range(30):  # the policy changed: every prompt now scores the policy mean
        start = 10 * (step % 6)
        prov.predict(q_ids[start : start + 10], q_texts[start : start + 10])
        prov.record(q_ids[start : start + 10], np.full(10, m), np.full(10, 8.0))
        weights.append(prov.residual_weight())
    assert weights[-1] < 0.05 and weights[-1] < weights[0]


def test_combined_pools_context_across_policies():
    """A policy with a small buffer gets prompt-level predictions from a residual model fitted on other policies."""
    rng = np.random.default_rng(2)
    ids, texts, mu = _prompts(rng, 340)
    prov = make_provider("combined", **_opts(min_context=16))
    prov.update(ids[:300], texts[:300], mu[:300], np.full(300, 8.0), policy="old")
    prov.update(ids[300:320], texts[300:320], mu[300:320] + 0.2, np.full(20, 8.0), policy="new")
    pred = prov.predict(ids[320:], texts[320:], policy="new")
    hard = mu[320:] < 0
    assert pred.mean[hard].mean() < pred.mean[~hard].mean()


def test_learned_state_round_trips():
    """v0 state (buffers, history, calibration rows) is JSON and restores the same predictions."""
    rng = np.random.default_rng(3)
    ids, texts, mu = _prompts(rng, 80)
    prov = make_provider("v0", **_opts())
    prov.update(ids[:60], texts[:60], mu[:60], np.full(60, 8.0))
    other = make_provider("v0", **_opts())
    other.load_state_dict(json.loads(json.dumps(prov.state_dict())))
    np.testing.assert_allclose(prov.predict(ids[60:], texts[60:]).mean, other.predict(ids[60:], texts[60:]).mean)


def test_buffer_keeps_the_latest_distinct_prompts():
    """The support buffer holds the latest C distinct prompts; a re-seen prompt takes its newest score."""
    prov = make_provider("v0", **_opts(context_size=3))
    prov.update(["a", "b", "c"], ["A", "B", "C"], np.array([0.1, 0.2, 0.3]), np.ones(3))
    prov.update(["a", "d"], ["A", "D"], np.array([0.9, 0.4]), np.ones(2))
    buf = prov.buffers_["default"]
    assert buf.ids == ["c", "a", "d"] and buf.scores == [0.3, 0.9, 0.4]


def test_combined_rejects_classification_heads():
    """combined fits residuals, so it needs a regression head."""
    with pytest.raises(ValueError, match="regression head"):
        make_provider("combined", head="logistic_hard")


def test_buffer_keeps_the_last_outcome_of_a_prompt_repeated_in_one_step():
    """A prompt listed twice in one update enters the buffer once, with its last outcome."""
    prov = make_provider("v0", **_opts())
    prov.update(["a", "b", "a"], ["A", "B", "A"], np.array([0.1, 0.2, 0.7]), np.ones(3))
    buf = prov.buffers_["default"]
    assert buf.ids == ["b", "a"] and buf.scores == [0.2, 0.7]
