"""Claims about the providers through the registry (running mean, history) and the machinery they share
(``v05.priors.compose``: calibration, state, input checks); ``oracle`` is in test_oracle.py."""

import json
import logging

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from v05.allocation.posterior import BetaHistory
from v05.priors import PROVIDERS, make_provider


def test_registry_has_the_contract_names_and_rejects_unknown():
    """running_mean, domain_mean, history, v0, combined are registered; unknown names and options are ValueErrors."""
    assert {"running_mean", "domain_mean", "history", "v0", "combined"} <= set(PROVIDERS)
    with pytest.raises(ValueError, match="running_mean, history, v0, combined"):
        make_provider("nope")
    with pytest.raises(ValueError, match="bad options"):
        make_provider("running_mean", colour="red")


def test_running_mean_is_rollout_weighted_over_the_window():
    """Two steps: means 0.5 (k=2) and −1 (k=1, two prompts) → (0.5·2·1 + (−1)·1·2)/(2 + 2) = −0.25; window 1 → −1."""
    prov = make_provider("running_mean", steps=2)
    prov.update(["a"], ["A"], np.array([0.5]), np.array([2.0]))
    prov.update(["b", "c"], ["B", "C"], np.array([-1.0, -1.0]), np.array([1.0, 1.0]))
    assert prov.predict(["z"], ["Z"]).mean[0] == pytest.approx(-0.25)
    short = make_provider("running_mean", steps=1)
    short.update(["a"], ["A"], np.array([0.5]), np.array([2.0]))
    short.update(["b"], ["B"], np.array([-1.0]), np.array([1.0]))
    assert short.predict(["z"], ["Z"]).mean[0] == pytest.approx(-1.0)


def test_empty_provider_predicts_half_with_a_warning(caplog):
    """With no outcomes, a provider predicts V = 0 (p = 0.5) and logs a warning."""
    with caplog.at_level(logging.WARNING):
        pred = make_provider("history").predict(["a"], ["A"])
    assert pred.mean[0] == 0.0 and "no outcomes" in caplog.text


def test_history_fuses_own_evidence_with_the_policy_mean():
    """One prompt seen with 4 rollouts, v̄ = 1 (E_sum = 4, E_n = 4) → V = (4 + n_m·m)/(4 + n_m); unseen → m."""
    prov = make_provider("history", lambda_=0.5)
    ids = [f"p{i}" for i in range(10)]
    scores = np.array([1.0] + [-0.5] * 9)
    prov.update(ids, ids, scores, np.full(10, 4.0))
    m = np.mean(scores)
    pred = prov.predict(["p0", "new"], ["p0", "new"])
    n_m = pred.n0[1]
    assert pred.mean[1] == pytest.approx(m)
    assert pred.mean[0] == pytest.approx((4 + n_m * m) / (4 + n_m))
    assert pred.n0[0] == pytest.approx(n_m + 4)  # own rollouts add to the pseudo-count


def test_history_state_is_a_beta_history():
    """The history provider keeps one BetaHistory per policy: α − α₀ is the discounted success count."""
    prov = make_provider("history", lambda_=0.5)
    prov.update(["a"], ["A"], np.array([0.5]), np.array([4.0]))  # 3 successes of 4
    prov.update(["a"], ["A"], np.array([-1.0]), np.array([2.0]))  # 0 of 2
    hist = prov.history_["default"]
    assert isinstance(hist, BetaHistory)
    alpha, beta = hist.lookup(np.array(["a"]))
    assert alpha[0] - hist.alpha0 == pytest.approx(0.5 * 3 + 0)
    assert beta[0] - hist.beta0 == pytest.approx(0.5 * 1 + 2)


def test_state_dict_round_trips_through_json():
    """state_dict is JSON; a fresh provider loaded from it predicts the same."""
    prov = make_provider("history")
    prov.update(["a", "b"], ["A", "B"], np.array([0.2, -0.6]), np.array([8.0, 8.0]))
    state = json.loads(json.dumps(prov.state_dict()))
    other = make_provider("history")
    other.load_state_dict(state)
    a, b = prov.predict(["a", "c"], ["A", "C"]), other.predict(["a", "c"], ["A", "C"])
    np.testing.assert_allclose(a.mean, b.mean)
    with pytest.raises(ValueError, match="not 'running_mean'"):
        make_provider("running_mean").load_state_dict(state)


def test_online_calibration_uses_predictions_made_before_the_outcomes():
    """record() compares outcomes with the stored predictions; after min_online groups calibration() uses them."""
    prov = make_provider("running_mean", min_online=4)
    prov.update([f"c{i}" for i in range(8)], ["t"] * 8, np.zeros(8), np.full(8, 4.0))
    ids = [f"q{i}" for i in range(4)]
    prov.predict(ids, ids)  # V = 0 for all
    prov.record(ids, np.array([0.5, -0.5, 0.5, -0.5]), np.full(4, 5.0))
    cal = prov.calibration()
    assert cal.n == 4 and cal.tau2 == pytest.approx(0.0625)  # see test_calibrate_hand_values


def test_inputs_are_validated():
    """Scores outside [−1, 1], counts < 1 and length mismatches are ValueErrors."""
    prov = make_provider("running_mean")
    with pytest.raises(ValueError, match=r"\[-1, 1\]"):
        prov.update(["a"], ["A"], np.array([2.0]), np.array([1.0]))
    with pytest.raises(ValueError, match="counts"):
        prov.update(["a"], ["A"], np.array([0.0]), np.array([0.0]))
    with pytest.raises(ValueError, match="length mismatch"):
        prov.predict(["a", "b"], ["A"])


def test_history_beats_the_running_mean_when_prompts_recur():
    """200 prompts with fixed pass rates p ~ U(0, 1), 4 rollouts each per epoch, 6 epochs: from the second epoch on,
    history's MSE against the true score is below the running mean's (a gap of many standard errors at these sizes)."""
    rng = np.random.default_rng(0)
    p = rng.uniform(0, 1, 200)
    mu = 2 * p - 1
    ids = [f"p{i}" for i in range(200)]
    provs = {n: make_provider(n) for n in ("running_mean", "history")}
    err = {n: [] for n in provs}
    for epoch in range(6):
        wins = rng.binomial(4, p)
        scores = 2 * wins / 4 - 1
        for name, prov in provs.items():
            pred = prov.predict(ids, ids)
            if epoch > 0:
                err[name].append((pred.mean - mu) ** 2)
            prov.update(ids, ids, scores, np.full(200, 4.0), step=epoch)
    hist, mean = np.concatenate(err["history"]), np.concatenate(err["running_mean"])
    diff = mean - hist
    assert diff.mean() > 4 * diff.std() / np.sqrt(len(diff))
    assert provs["history"].calibration().n0 > provs["running_mean"].calibration().n0


def test_history_is_the_running_mean_exactly_when_no_prompt_recurs():
    """On a fresh pool (each prompt drawn once: the lm grid's `smollm2-arith2-fresh`) `history` has no per-prompt
    evidence, so its prediction (mean, tau2, n0) and calibration equal `running_mean`'s bit for bit, step after step;
    the lm grid's rm_k1 and rec_k1 cells train identically for that reason. A prompt seen again breaks the tie."""
    rng = np.random.default_rng(3)
    provs = {n: make_provider(n) for n in ("running_mean", "history")}
    for step in range(12):
        ids = [f"s{step}p{i}" for i in range(16)]
        counts = rng.integers(1, 4, 16).astype(float)
        scores = 2 * rng.binomial(counts.astype(int), rng.uniform(0, 1, 16)) / counts - 1
        preds = [prov.predict(ids, ids) for prov in provs.values()]
        for field in ("mean", "tau2", "n0"):
            np.testing.assert_array_equal(getattr(preds[0], field), getattr(preds[1], field))
        for prov in provs.values():
            prov.update(ids, ids, scores, counts, step=step)
    assert provs["history"].calibration() == provs["running_mean"].calibration()
    seen = ["s11p0", "s11p1"]
    assert not np.array_equal(provs["history"].predict(seen, seen).mean, provs["running_mean"].predict(seen, seen).mean)


def test_group_outcomes_from_a_flat_batch():
    """Rewards [1,0,0 | 1,1] in 0/1 space → ±1 means [−1/3, 1] and counts [3, 2]."""
    from v05.priors import group_outcomes

    scores, counts = group_outcomes(np.array([1.0, 0, 0, 1, 1]), np.array([0, 0, 0, 1, 1]), reward_range="01")
    np.testing.assert_allclose(scores, [-1 / 3, 1.0])
    np.testing.assert_allclose(counts, [3, 2])


def test_importing_priors_loads_no_heavy_library():
    """`import v05.priors` (and its CLI module) loads neither torch, scikit-learn nor sentence-transformers."""
    import subprocess
    import sys

    code = (
        "import sys, v05.priors, v05.priors.cli; "
        "print(sorted(m for m in ('torch', 'sklearn', 'sentence_transformers', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@settings(max_examples=30)
@given(
    st.lists(
        st.lists(st.tuples(st.integers(0, 5), st.integers(1, 8), st.integers(0, 8)), min_size=1, max_size=6),
        min_size=1,
        max_size=5,
    ),
    st.sampled_from(["running_mean", "domain_mean", "history"]),
)
def test_predictions_stay_in_range_and_survive_a_state_round_trip(steps, name):
    """Any sequence of steps (prompt, rollouts, successes) gives V in [−1, 1], τ² > 0, n0 > 0, and a JSON round
    trip of the state reproduces the predictions (keys ``d{pid % 3}.p{pid}`` and one without a domain: three
    domains and the shared one for ``domain_mean``)."""
    prov = make_provider(name)
    for step in steps:
        seen = {}
        for pid, k, wins in step:
            seen[key(pid)] = (k, min(wins, k))
        ids = list(seen)
        k = np.array([seen[i][0] for i in ids], float)
        scores = 2 * np.array([seen[i][1] for i in ids], float) / k - 1
        prov.predict(ids, ids)
        prov.update(ids, ids, scores, k)
    ids = [key(i) for i in range(7)]
    pred = prov.predict(ids, ids)
    assert np.all(np.abs(pred.mean) <= 1) and np.all(pred.tau2 > 0) and np.all(pred.n0 > 0)
    other = make_provider(name)
    other.load_state_dict(json.loads(json.dumps(prov.state_dict())))
    np.testing.assert_allclose(other.predict(ids, ids).mean, pred.mean)


def key(pid: int) -> str:
    """A prompt key with a domain prefix, except prompt 5 (the shared domain ``""``)."""
    return "p5" if pid == 5 else f"d{pid % 3}.p{pid}"
