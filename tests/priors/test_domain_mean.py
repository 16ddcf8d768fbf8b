"""Claims about ``domain_mean`` (``v05.priors.history.DomainMeanProvider``): a running mean per domain (key prefix)."""

import json
import logging

import numpy as np
import pytest

from v05.priors import make_provider
from v05.tasks import make_task


def two_domains(**options):
    """Domain a: v̄ 0.5 (k 2) and 0 (k 2) → mean 1/4; domain b: −1 (k 4) and −0.5 (k 4) → mean −6/8 = −3/4;
    policy mean (1 + 0 − 4 − 2)/12 = −5/12."""
    prov = make_provider("domain_mean", **options)
    prov.update(["a.1", "a.2", "b.1", "b.2"], ["t"] * 4, np.array([0.5, 0.0, -1.0, -0.5]), np.array([2.0, 2, 4, 4]))
    return prov


def test_each_domain_gets_its_own_rollout_weighted_mean():
    """Hand values: a.* → 1/4, b.* → −3/4 (the global mean −5/12 would serve both: the domain split is the point);
    an unseen domain and a key without the separator get the policy mean −5/12."""
    pred = two_domains().predict(["a.9", "b.9", "c.9", "plain"], ["t"] * 4)
    np.testing.assert_allclose(pred.mean, [0.25, -0.75, -5 / 12, -5 / 12], rtol=0, atol=1e-15)


def test_the_domain_is_the_key_up_to_the_first_separator():
    """``mix2.arithmetic:abc`` → ``mix2``; a key without the separator is the shared domain ``""``; the separator is
    an option (``:`` splits single-task keys by namespace) and must be a non-empty string."""
    prov = make_provider("domain_mean")
    assert prov.domain_of("mix2.arithmetic:abc.def") == "mix2"
    assert prov.domain_of("arithmetic:abc") == prov.domain_of("x") == ""
    colon = make_provider("domain_mean", separator=":")
    colon.update(["arithmetic:1", "math:1"], ["t", "t"], np.array([1.0, -1.0]), np.array([4.0, 4.0]))
    np.testing.assert_array_equal(colon.predict(["arithmetic:2", "math:2"], ["t", "t"]).mean, [1.0, -1.0])
    for bad in ("", 3, None):
        with pytest.raises(ValueError, match="separator"):
            make_provider("domain_mean", separator=bad)


def test_the_window_is_the_last_steps_updates_and_an_absent_domain_falls_back():
    """steps=1: after a second update with domain a only (v̄ −1, k 2), a.* → −1 and b.* (no outcome in the window)
    → the policy mean of the window, −1; steps=2 keeps both: a.* → (1 + 0 − 2)/6 = −1/6, b.* → −3/4."""
    short = two_domains(steps=1)
    short.update(["a.3"], ["t"], np.array([-1.0]), np.array([2.0]))
    np.testing.assert_allclose(short.predict(["a.9", "b.9"], ["t", "t"]).mean, [-1.0, -1.0])
    long = two_domains(steps=2)
    long.update(["a.3"], ["t"], np.array([-1.0]), np.array([2.0]))
    np.testing.assert_allclose(long.predict(["a.9", "b.9"], ["t", "t"]).mean, [-1 / 6, -0.75])


def test_with_no_outcomes_it_predicts_zero_with_the_running_mean_warning(caplog):
    """Nothing seen: V = 0 (p = 0.5) and the running mean's warning."""
    with caplog.at_level(logging.WARNING):
        pred = make_provider("domain_mean").predict(["a.1"], ["t"])
    assert pred.mean[0] == 0.0 and "no outcomes" in caplog.text


def test_calibration_rows_leave_one_out_within_the_domain():
    """Before online rows: a.1 → the other a row, 0; a.2 → 0.5; b.1 → −0.5; b.2 → −1 (global leave-one-out would
    give −0.6, −0.5, −0.125, −0.375). Every error is 0.5, so the calibration's MSE is 0.25 (running_mean: 0.56)."""
    prov = two_domains()
    rows = prov._cv_rows("default")
    np.testing.assert_allclose(rows.m, [0.0, 0.5, -0.5, -1.0])
    np.testing.assert_array_equal(rows.r, 0.0)
    assert prov.calibration().mse == pytest.approx(0.25)
    rm = make_provider("running_mean")
    rm.update(["a.1", "a.2", "b.1", "b.2"], ["t"] * 4, np.array([0.5, 0.0, -1.0, -0.5]), np.array([2.0, 2, 4, 4]))
    assert rm.calibration().mse == pytest.approx((1.1**2 + 0.5**2 + 0.875**2 + 0.125**2) / 4)


def test_a_row_alone_in_its_domain_is_calibrated_against_the_whole_window():
    """One a row (v̄ 1, k 2) and two b rows (−1, 0; k 2): a.1's leave-one-out mean is the other rows' −1/2; b's are
    each other's."""
    prov = make_provider("domain_mean")
    prov.update(["a.1", "b.1", "b.2"], ["t"] * 3, np.array([1.0, -1.0, 0.0]), np.array([2.0, 2.0, 2.0]))
    np.testing.assert_allclose(prov._cv_rows("default").m, [-0.5, 0.0, -1.0])


def test_on_a_single_domain_task_it_equals_the_running_mean_exactly():
    """The keys of a non-mixture task (arithmetic: ``arithmetic:<sha1>``, no ``.``) form one domain: over 12 steps
    of predictions and updates (ragged counts, context CV then online calibration) domain_mean's predictions (mean,
    τ², n0), calibration and metrics are bit-identical to running_mean's."""
    keys = [p.key for p in make_task("arithmetic", n_train=200, n_eval=8, n_val=8).train_prompts()]
    assert not any("." in k for k in keys)
    rng = np.random.default_rng(3)
    provs = {n: make_provider(n, steps=3, min_online=16) for n in ("running_mean", "domain_mean")}
    for t in range(12):
        idx = rng.choice(len(keys), size=int(rng.integers(4, 20)), replace=False)
        ids = [keys[i] for i in idx]
        counts = rng.integers(1, 6, len(ids)).astype(float)
        scores = 2 * rng.binomial(counts.astype(int), rng.uniform(0, 1, len(ids))) / counts - 1
        a, b = (p.predict(ids, ids, policy="pi") for p in provs.values())
        for field in ("mean", "tau2", "n0"):
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=f"step {t}: {field}")
        np.testing.assert_equal(provs["running_mean"].metrics("pi"), provs["domain_mean"].metrics("pi"))  # NaN = NaN
        for p in provs.values():
            p.update(ids, ids, scores, counts, policy="pi", step=t)
    assert len(provs["domain_mean"].online_) >= 16  # both calibration regimes were compared


def test_on_a_mixture_the_components_are_the_domains():
    """A two-component mixture (easy add/sub, mul): its keys ``mix0.…``/``mix1.…`` give two domains, and their
    means are the components' own."""
    task = make_task("mixture", components=[
        {"task": "arithmetic", "options": {"n_train": 20, "n_eval": 4, "n_val": 4, "mix": [1.0, 0.0, 0.0]}},
        {"task": "arithmetic", "options": {"n_train": 20, "n_eval": 4, "n_val": 4, "mix": [0.0, 0.0, 1.0]}},
    ])  # fmt: skip
    ids = [p.key for p in task.train_prompts()]
    comp = np.array([int(p.meta["component"]) for p in task.train_prompts()])
    prov = make_provider("domain_mean")
    assert {prov.domain_of(k) for k in ids} == {"mix0", "mix1"}
    prov.update(ids, ids, np.where(comp == 0, 0.8, -0.8), np.full(len(ids), 4.0))
    np.testing.assert_allclose(prov.predict(ids, ids).mean, np.where(comp == 0, 0.8, -0.8))


def test_state_round_trips_through_json_exactly():
    """After steps over two domains and two policies, a JSON round trip gives the same state, the same predictions
    and calibration, and both stay bit-identical through one more update."""
    live = two_domains(steps=2)
    live.update(["a.3", "c.1"], ["t", "t"], np.array([0.25, 1.0]), np.array([4.0, 3.0]), policy="other")
    live.update(["b.4"], ["t"], np.array([1 / 3]), np.array([3.0]))
    state = json.loads(json.dumps(live.state_dict()))
    restored = make_provider("domain_mean", steps=2)
    restored.load_state_dict(state)
    assert json.loads(json.dumps(restored.state_dict())) == state
    query = ["a.9", "b.9", "c.9", "plain"]
    for _ in range(2):
        for policy in ("default", "other"):
            a, b = live.predict(query, query, policy=policy), restored.predict(query, query, policy=policy)
            for field in ("mean", "tau2", "n0"):
                np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
            np.testing.assert_equal(live.calibration(policy).to_dict(), restored.calibration(policy).to_dict())
        for p in (live, restored):
            p.update(["a.5", "b.5"], ["t", "t"], np.array([0.1, -0.7]), np.array([5.0, 2.0]))
    with pytest.raises(ValueError, match="not 'running_mean'"):
        make_provider("running_mean").load_state_dict(state)
