"""Prior specs: parsing, comma lists, and the built-in priors' values."""

import numpy as np
import pytest

from v05.datasets.v0 import load_v0
from v05.sim import parse_prior, prior_values, v0_population
from v05.sim.specs import parse_spec, split_specs


@pytest.fixture(scope="module")
def population():
    return v0_population(load_v0())


def test_split_specs_rejoins_options():
    """``key=value`` pieces continue the spec before them."""
    assert split_specs("context_mean,oracle:noise=0.2,bias=0.1,halluc=0.05,oracle_noise:0.3") == (
        "context_mean",
        "oracle:noise=0.2,bias=0.1,halluc=0.05",
        "oracle_noise:0.3",
    )


def test_parse_spec_values():
    """Options become bool/int/float/str."""
    s = parse_spec("v05_eb:loo=true,min_groups=8,tau2_floor=0.02,x=abc")
    assert s.option_dict() == {"loo": True, "min_groups": 8, "tau2_floor": 0.02, "x": "abc"}


def test_context_mean_is_per_snapshot_mean(population):
    """context_mean gives each prompt its snapshot's mean context score."""
    v = prior_values(parse_prior("context_mean"), population, rng=np.random.default_rng(0))
    for b in range(population.n_batches):
        np.testing.assert_allclose(v[population.batch_index(b)], population.context[b].mean())


def test_oracle_priors(population):
    """Zero noise gives μ; bias is clipped to [−1, 1]; halluc = 1 replaces every value by a uniform draw."""
    rng = np.random.default_rng(0)
    np.testing.assert_allclose(prior_values(parse_prior("oracle_noise:0"), population, rng=rng), population.mu)
    v = prior_values(parse_prior("oracle:bias=0.5"), population, rng=rng)
    np.testing.assert_allclose(v, np.clip(population.mu + 0.5, -1, 1))
    h = prior_values(parse_prior("oracle:halluc=1"), population, rng=rng)
    assert np.all(np.abs(h) <= 1) and np.corrcoef(h, population.mu)[0, 1] < 0.3
    n = prior_values(parse_prior("oracle_noise:0.3"), population, rng=rng)
    assert 0.2 < np.std(n - population.mu) < 0.35


@pytest.mark.parametrize(
    "text",
    [
        "nope",
        "oracle_noise",
        "oracle_noise:x",
        "oracle:noise=-1",
        "oracle:halluc=2",
        "oracle:foo=1",
        "context_mean:1",
        "",
        "1abc",
    ],
)
def test_bad_prior_specs(text):
    """Unknown names and bad options raise ValueError."""
    with pytest.raises(ValueError):
        parse_prior(text)


def test_unknown_prior_lists_valid_ones():
    """The error names the built-in priors."""
    with pytest.raises(ValueError, match="context_mean"):
        parse_prior("nope")


def test_learned_provider_routes_to_predict_rows(population):
    """A learned provider name goes to v05.priors.predict_rows; its values are per prompt and in [−1, 1]."""
    pytest.importorskip("v05.priors")
    spec = parse_prior("running_mean")
    assert spec.is_learned and spec.provider == "running_mean"
    v = prior_values(spec, population, rng=np.random.default_rng(0))
    assert v.shape == population.mu.shape and np.all(np.abs(v) <= 1)


def test_learned_provider_needs_v0_population():
    """A synthetic population has no V0 rows for a learned provider: ValueError."""
    pytest.importorskip("v05.priors")
    from v05.sim import synthetic_population

    pop = synthetic_population("uniform", rng=np.random.default_rng(0), n_prompts=4, n_batches=1)
    with pytest.raises(ValueError, match="V0 population"):
        prior_values(parse_prior("running_mean"), pop, rng=np.random.default_rng(0))


def test_a_provider_that_reads_a_live_policy_is_refused_when_the_spec_is_parsed():
    """``probe`` (``needs_policy``) has nothing to fit on V0 rows: parse_prior refuses it at once, listing the
    learned providers it offers (those of the registry that need neither a policy nor a sampler)."""
    priors = pytest.importorskip("v05.priors")
    offered = [n for n, s in priors.PROVIDERS.items() if not s.needs_policy and not s.needs_sampler]
    assert "running_mean" in offered and "probe" not in offered
    with pytest.raises(ValueError, match=f"unknown prior 'probe'; .*learned: {', '.join(offered)}$"):
        parse_prior("probe")


def test_none_option_values_parse_to_none_and_run_in_the_cli(tmp_path):
    """`v05_eb:guard_level=none` parses to None (it used to reach the estimator as the string 'none' and crash)."""
    from v05.cli import main
    from v05.sim.specs import parse_value

    assert parse_value("none") is None and parse_value("Null") is None
    assert parse_spec("v05_eb:guard_level=none").option_dict() == {"guard_level": None}
    argv = ["simulate", "--population", "bimodal", "--n-prompts", "8", "--n-batches", "2", "--ks", "4", "--reps", "2",
            "--estimators", "v05_eb:guard_level=none,v05_eb:guard_level=0.01", "--allocators", "fixed",
            "--noise-sweep", "none", "--no-figure", "--quiet", "--json", str(tmp_path / "r.json")]  # fmt: skip
    assert main(argv) == 0
