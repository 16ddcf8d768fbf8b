"""Differential tests against verl 0.9.1's estimators (run when verl is installed; `make test` installs it)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")

from v05 import compute_advantages  # noqa: E402


def _verl(fn, rewards, group, **kw):
    """Call a verl outcome estimator with one-token responses (float64) and return per-rollout advantages."""
    n = len(rewards)
    t = torch.zeros((n, 3), dtype=torch.float64)
    t[:, 1] = torch.from_numpy(rewards)  # the reward sits on a token; verl sums over the response
    mask = torch.ones((n, 3), dtype=torch.float64)
    adv, _ = fn(token_level_rewards=t, response_mask=mask, index=np.asarray(group), **kw)
    return adv[:, 0].numpy()


def _ragged(seed, *, min_size=2):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(min_size, 17, size=rng.integers(5, 40))
    group = rng.permutation(np.repeat(np.arange(len(sizes)), sizes))
    binary = seed % 2 == 0
    rewards = rng.choice([-1.0, 1.0], size=len(group)) if binary else rng.uniform(-1, 1, size=len(group))
    return rewards, group


@pytest.mark.parametrize("seed", range(10))
def test_grpo_and_drgrpo_match_verl(seed):
    """grpo = verl GRPO (unbiased std, ε = 1e-6) and drgrpo = verl GRPO without std, to 1e-6, on ragged batches."""
    r, g = _ragged(seed)
    np.testing.assert_allclose(
        compute_advantages("grpo", r, g), _verl(core_algos.compute_grpo_outcome_advantage, r, g), atol=1e-6
    )
    np.testing.assert_allclose(
        compute_advantages("drgrpo", r, g),
        _verl(core_algos.compute_grpo_outcome_advantage, r, g, norm_adv_by_std_in_grpo=False),
        atol=1e-6,
    )


@pytest.mark.parametrize("seed", range(10))
def test_rloo_matches_verl(seed):
    """rloo = verl RLOO to 1e-6 on ragged batches with groups of ≥ 2."""
    r, g = _ragged(seed)
    np.testing.assert_allclose(
        compute_advantages("rloo", r, g), _verl(core_algos.compute_rloo_outcome_advantage, r, g), atol=1e-6
    )


def test_singleton_groups_deliberately_differ_from_verl():
    """Documented deviation: verl gives a singleton mean 0 / std 1 (A = r); v05 gives A = 0. Other groups agree."""
    r, g = np.array([1.0, -1.0, 1.0, 0.6]), np.array([0, 0, 1, 2])
    ours = compute_advantages("grpo", r, g)
    theirs = _verl(core_algos.compute_grpo_outcome_advantage, r, g)
    np.testing.assert_allclose(ours[:2], theirs[:2], atol=1e-6)
    np.testing.assert_allclose(theirs[2:], [1.0 / (1 + 1e-6), 0.6 / (1 + 1e-6)], atol=1e-6)
    np.testing.assert_array_equal(ours[2:], [0.0, 0.0])
    r_loo = _verl(core_algos.compute_rloo_outcome_advantage, r, g)
    np.testing.assert_allclose(r_loo[2:], [1.0, 0.6])
    np.testing.assert_array_equal(compute_advantages("rloo", r, g)[2:], [0.0, 0.0])


@pytest.mark.parametrize("seed", range(6))
def test_reinforce_pp_matches_verl_on_one_token_responses(seed):
    """reinforce_pp = verl's REINFORCE++ (γ = 1) where every response is one token (verl whitens per token)."""
    from verl.trainer.config import AlgoConfig  # noqa: PLC0415

    r, g = _ragged(seed, min_size=1)
    t = torch.from_numpy(r).reshape(-1, 1)
    adv, _ = core_algos.compute_reinforce_plus_plus_outcome_advantage(
        token_level_rewards=t, response_mask=torch.ones_like(t), config=AlgoConfig(gamma=1.0)
    )
    np.testing.assert_allclose(compute_advantages("reinforce_pp", r, g), adv[:, 0].numpy(), atol=1e-6)
