"""Claims about the provider registry (``v05.priors.registry``): each entry is a spec that builds its provider, and
the capabilities a spec declares (what a runner must give it) are what the provider does."""

import numpy as np
import pytest

from v05.priors import PROVIDERS, ProviderSpec, get_provider_spec, make_provider, provider_spec
from v05.priors.compose import BaseProvider
from v05.priors.registry import EMBEDDING_PROVIDERS

TEXT_OPTIONS = {"backend": "tfidf", "cache_dir": False, "min_online": 8}
"""Options that keep an embedding provider cheap (TF-IDF, no disk cache) for the ones that take them."""


def _options(spec: ProviderSpec) -> dict[str, object]:
    return dict(TEXT_OPTIONS) if spec.reads_text else {}


@pytest.mark.parametrize("name", list(PROVIDERS))
def test_every_entry_is_a_spec_whose_class_builds_the_named_provider(name):
    """PROVIDERS[name] is a ProviderSpec; make_provider(name) builds exactly its class, with no options, and the
    provider calls itself ``name`` (so its saved state loads back under the same entry)."""
    spec = PROVIDERS[name]
    assert isinstance(spec, ProviderSpec) and issubclass(spec.cls, BaseProvider)
    assert get_provider_spec(name) is spec
    prov = make_provider(name)
    assert type(prov) is spec.cls and prov.name == name
    assert spec.feeds_n0  # every provider's n0 is a pseudo-count in rollouts today


@pytest.mark.parametrize("name", list(PROVIDERS))
def test_a_provider_needs_a_policy_or_a_sampler_exactly_when_it_can_be_bound_to_one(name):
    """``needs_policy`` ⇔ the class has ``bind_policy``; ``needs_sampler`` ⇔ it has ``bind_sampler``: a runner that
    reads the spec binds what the provider takes, and never misses one. A provider that starts from another
    (``starts_from``: ``spo``) passes ``bind_policy`` on to its start, and needs it exactly when the start does
    (:func:`provider_spec`)."""
    spec = PROVIDERS[name]
    if spec.starts_from:
        assert hasattr(spec.cls, "bind_policy") and not spec.needs_policy
        assert provider_spec(name, {"start_from": "probe"}).needs_policy
        assert not provider_spec(name, {"start_from": "combined"}).needs_policy
    else:
        assert spec.needs_policy == hasattr(spec.cls, "bind_policy")
    assert spec.needs_sampler == hasattr(spec.cls, "bind_sampler")
    assert not (spec.needs_policy and spec.reads_text)  # a policy reader reads the rendered prompt, not the text


def _ids_only_sampler(ids: list[str], draw: int) -> tuple[np.ndarray, np.ndarray]:
    """A fake oracle sampler: successes out of 8 set by the key alone."""
    return np.array([float(int(i[2:]) % 9) for i in ids]), np.full(len(ids), 8.0)


def _fed(name: str) -> BaseProvider:
    """The provider after two updates on 120 prompts whose score follows a topic word of their text."""
    spec = PROVIDERS[name]
    prov = make_provider(name, **_options(spec))
    if spec.needs_sampler:
        prov.bind_sampler(_ids_only_sampler)
    rng = np.random.default_rng(0)
    topic = rng.integers(0, 3, 120)
    ids = [f"id{i}" for i in range(120)]
    texts = [f"problem {i} about {('primes', 'sums', 'areas')[t]}" for i, t in enumerate(topic)]
    scores = np.where(topic == 0, -0.8, 0.4)
    for half in (slice(0, 60), slice(60, 120)):
        prov.predict(ids[half], texts[half])
        prov.update(ids[half], texts[half], scores[half], np.full(60, 8.0))
    return prov


@pytest.mark.parametrize("name", [n for n, s in PROVIDERS.items() if not s.needs_policy])
def test_a_provider_reads_the_text_exactly_when_its_spec_says_reads_text(name):
    """Metamorphic: two identically fed providers predict the same seen keys, one given the topic texts ('primes':
    hard) and one given texts of the other topic. The predictions differ iff ``reads_text`` (so verl and the
    offline evaluation supply texts exactly to the providers that use them); ``probe`` reads the policy instead."""
    spec = PROVIDERS[name]
    ids = ["id0", "id1", "id2", "id3"]
    hard, easy = ["about primes"] * 4, ["about sums"] * 4
    a, b = _fed(name).predict(ids, hard), _fed(name).predict(ids, easy)
    differs = not (np.array_equal(a.mean, b.mean) and np.array_equal(a.tau2, b.tau2))
    assert differs == spec.reads_text
    assert (name in EMBEDDING_PROVIDERS) == spec.reads_text


def test_an_unknown_name_lists_the_valid_ones():
    """get_provider_spec('nope') is a ValueError naming every registered provider, in registry order."""
    with pytest.raises(ValueError, match="^unknown prior provider 'nope'; valid: " + ", ".join(PROVIDERS) + "$"):
        get_provider_spec("nope")
    with pytest.raises(ValueError, match="^unknown prior provider"):
        get_provider_spec(["unhashable"])  # type: ignore[arg-type]
