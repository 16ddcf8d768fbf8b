"""Claims about PPO's critic: GAE, whitening, the clipped value loss (all against verl 0.9.1) and the value model."""

from __future__ import annotations

import pytest
import torch

from v05.train.critic import Critic, CriticConfig, gae, outcome_token_rewards, value_loss, whiten
from v05.train.loss import AGG_MODES, loss_norm
from v05.train.policy import PolicyConfig, load_policy


def _random_batch(seed, n=6, t=7, dtype=torch.float64):
    """Random rewards/values and a right-padded mask with one interior masked token and one all-masked row."""
    gen = torch.Generator().manual_seed(seed)
    rewards = torch.randn(n, t, generator=gen, dtype=dtype)
    values = torch.randn(n, t, generator=gen, dtype=dtype)
    lengths = torch.randint(1, t + 1, (n,), generator=gen)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).long()
    mask[0, :] = 1
    mask[0, 2] = 0  # an interior masked token (an observation token in verl's multi-turn terms)
    mask[-1, :] = 0  # an empty response
    return rewards, values, mask


def test_gae_hand_computed_three_tokens():
    """One sequence, T = 3, rewards r = (0, 0, 1), V = (0.5, 0.6, 0.7), γ = 0.9, λ = 0.8 (γλ = 0.72):
        δ_2 = r_2 + γ·0 − V_2 = 1 − 0.7 = 0.3;                   A_2 = δ_2 = 0.3
        δ_1 = r_1 + γV_2 − V_1 = 0.63 − 0.6 = 0.03;             A_1 = δ_1 + γλA_2 = 0.03 + 0.216 = 0.246
        δ_0 = r_0 + γV_1 − V_0 = 0.54 − 0.5 = 0.04;             A_0 = δ_0 + γλA_1 = 0.04 + 0.17712 = 0.21712
        returns = A + V = (0.71712, 0.846, 1.0)
    With a masked middle token (mask 1, 0, 1) it is skipped: δ_0 = 0 + γV_2 − V_0 = 0.13, A_0 = 0.13 + 0.72·0.3 =
    0.346; position 1 carries A_2 = 0.3 (its reward is ignored)."""
    r = torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64)
    v = torch.tensor([[0.5, 0.6, 0.7]], dtype=torch.float64)
    adv, ret = gae(r, v, torch.ones(1, 3), gamma=0.9, lam=0.8)
    torch.testing.assert_close(adv, torch.tensor([[0.21712, 0.246, 0.3]], dtype=torch.float64))
    torch.testing.assert_close(ret, torch.tensor([[0.71712, 0.846, 1.0]], dtype=torch.float64))
    adv, _ = gae(r + torch.tensor([[0.0, 5.0, 0.0]]), v, torch.tensor([[1, 0, 1]]), gamma=0.9, lam=0.8)
    torch.testing.assert_close(adv, torch.tensor([[0.346, 0.3, 0.3]], dtype=torch.float64))


def test_gae_with_defaults_is_outcome_minus_value():
    """γ = λ = 1 and the outcome on the last valid token: A_t = R − V_t on valid tokens, 0 on trailing padding."""
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    v = torch.tensor([[0.1, 0.2, 0.3, 9.0], [0.4, -0.5, 9.0, 9.0]])
    adv, ret = gae(outcome_token_rewards(torch.tensor([1.0, -1.0]), mask), v, mask)
    torch.testing.assert_close(adv, torch.tensor([[0.9, 0.8, 0.7, 0.0], [-1.4, -0.5, 0.0, 0.0]]))
    torch.testing.assert_close(ret[mask.bool()], torch.tensor([1.0, 1.0, 1.0, -1.0, -1.0]))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(("gamma", "lam"), [(1.0, 1.0), (0.99, 0.95), (0.5, 0.0)])
def test_gae_and_whiten_match_verl(seed, gamma, lam):
    """gae equals verl 0.9.1's compute_gae_advantage_return before its whitening (returns, and masked positions
    included), and whiten(gae) equals its whitened advantages, on random batches with interior and full masking."""
    pytest.importorskip("verl")
    from verl.trainer.ppo.core_algos import compute_gae_advantage_return

    r, v, mask = _random_batch(seed)
    adv, ret = gae(r, v, mask, gamma=gamma, lam=lam)
    verl_adv, verl_ret = compute_gae_advantage_return(r, v, mask, gamma, lam)
    torch.testing.assert_close(ret, verl_ret, rtol=0, atol=1e-12)
    torch.testing.assert_close(whiten(adv, mask), verl_adv, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("shift_mean", [True, False])
def test_whiten_matches_verl_masked_whiten(shift_mean):
    """whiten equals verl's masked_whiten (unbiased masked variance, ε = 1e-8) with either shift_mean."""
    pytest.importorskip("verl")
    from verl.utils.torch_functional import masked_whiten

    _, x, mask = _random_batch(11)
    torch.testing.assert_close(
        whiten(x, mask, shift_mean=shift_mean), masked_whiten(x, mask, shift_mean=shift_mean), rtol=1e-7, atol=1e-9
    )
    one = torch.zeros_like(mask)
    one[0, 0] = 1
    with pytest.raises(ValueError, match="at least 2"):
        whiten(x, one)  # one token has no unbiased variance (verl raises too)


@pytest.mark.parametrize("agg", AGG_MODES)
def test_value_loss_matches_verl(agg):
    """value_loss equals verl 0.9.1's compute_value_loss (loss and vf_clipfrac) for every aggregation mode, with V
    spread so that both branches of the max are active."""
    pytest.importorskip("verl")
    from verl.trainer.ppo.core_algos import compute_value_loss

    _, old, mask = _random_batch(3)
    gen = torch.Generator().manual_seed(5)
    values = old + 0.4 * torch.randn(old.shape, generator=gen, dtype=old.dtype)
    returns = torch.randn(old.shape, generator=gen, dtype=old.dtype)
    loss, frac = value_loss(values, old, returns, mask, clip_range=0.2, agg=agg)
    verl_loss, verl_frac = compute_value_loss(values, returns, old, mask, 0.2, loss_agg_mode=agg)
    torch.testing.assert_close(loss, verl_loss, rtol=1e-7, atol=1e-9)
    torch.testing.assert_close(frac, verl_frac.to(frac.dtype), rtol=1e-7, atol=1e-9)
    assert 0 < frac < 1


@pytest.mark.parametrize("agg", AGG_MODES)
def test_value_loss_micro_batches_sum_to_the_batch(agg):
    """With the mini-batch's LossNorm, the two halves' losses sum to the whole batch's loss in every mode."""
    _, old, mask = _random_batch(4)
    values, returns = old + 0.3, old - 0.1
    whole, _ = value_loss(values, old, returns, mask, agg=agg)
    norm = loss_norm([mask[:3], mask[3:]])
    first, second = slice(0, 3), slice(3, None)
    halves = sum(value_loss(values[s], old[s], returns[s], mask[s], agg=agg, norm=norm)[0] for s in (first, second))
    torch.testing.assert_close(halves, whole)


def test_outcome_token_rewards_sit_on_the_last_valid_token():
    """The reward goes to the last unmasked position (also with an interior hole); an empty row gets nothing."""
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 1, 1], [0, 0, 0, 0], [1, 1, 1, 1]])
    out = outcome_token_rewards(torch.tensor([1, 2, 3, 4]), mask)
    expected = torch.zeros(4, 4)
    expected[0, 2], expected[1, 3], expected[3, 3] = 1.0, 2.0, 4.0
    torch.testing.assert_close(out, expected)


@pytest.fixture(scope="module")
def policy():
    model, _ = load_policy(PolicyConfig())
    return model


def _batch():
    prompt_ids = torch.tensor([[0, 1, 20, 21], [1, 22, 23, 24]])  # left-padded (0 = <pad>)
    prompt_mask = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
    response_ids = torch.tensor([[30, 31, 2], [32, 2, 0]])
    response_mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    return prompt_ids, prompt_mask, response_ids, response_mask


def test_separate_critic_values_shapes_grad_and_positions(policy):
    """separate mode: (N, R) values, 0 on masked tokens, gradient to its own trunk copy and head (not the policy);
    V_t depends on the prompt and response tokens before t only (it is read at the position predicting token t)."""
    critic = Critic.build(policy, CriticConfig(mode="separate"))
    assert critic.trunk is not policy.base_model
    torch.nn.init.normal_(critic.head.score.weight, std=0.1)  # a non-zero head, so positions matter
    batch = _batch()
    v = critic.values(*batch)
    assert v.shape == (2, 3) and v.dtype == torch.float32 and v[1, 2] == 0
    v.sum().backward()
    assert critic.head.score.weight.grad is not None
    assert next(critic.trunk.parameters()).grad is not None
    assert all(p.grad is None for p in policy.parameters())
    changed = batch[2].clone()
    changed[:, 1] = 40  # response token 1 changes: V_0, V_1 must not, V_2 must
    with torch.no_grad():
        v2 = critic.values(batch[0], batch[1], changed, batch[3])
    torch.testing.assert_close(v2[:, :2], v[:, :2].detach())
    assert not torch.allclose(v2[0, 2], v[0, 2])


def test_head_critic_reads_the_policy_hidden_states(policy):
    """head mode shares the policy trunk: values from the policy's output_hidden_states equal those from running the
    trunk, and the gradient reaches the policy's parameters; its optimizer steps the head only."""
    critic = Critic.build(policy, CriticConfig(mode="head"))
    assert critic.trunk is policy.base_model
    assert {id(p) for p in critic.parameters()} == {id(p) for p in critic.head.parameters()}
    torch.nn.init.normal_(critic.head.score.weight, std=0.1)
    prompt_ids, prompt_mask, response_ids, response_mask = _batch()
    attention = torch.cat([prompt_mask, response_mask], 1)
    out = policy(
        input_ids=torch.cat([prompt_ids, response_ids], 1),
        attention_mask=attention,
        position_ids=(attention.cumsum(-1) - 1).clamp(min=0),
        use_cache=False,
        output_hidden_states=True,
    )
    v = critic.values(prompt_ids, prompt_mask, response_ids, response_mask, hidden_states=out.hidden_states[-1])
    torch.testing.assert_close(v, critic.values(prompt_ids, prompt_mask, response_ids, response_mask))
    policy.zero_grad(set_to_none=True)
    v.sum().backward()
    assert policy.base_model.embed_tokens.weight.grad is not None
    policy.zero_grad(set_to_none=True)
    with pytest.raises(ValueError, match="head' mode only"):
        Critic.build(policy, CriticConfig()).values(*_batch(), hidden_states=out.hidden_states[-1])


def test_critic_state_round_trip(policy):
    """state_dict → load_state_dict into a fresh critic reproduces the values after an optimizer step; a state of
    the other mode is refused."""
    critic = Critic.build(policy, CriticConfig(mode="separate", lr=1e-2))
    batch = _batch()
    rewards = torch.tensor([1.0, -1.0])
    old = critic.values(*batch).detach()
    returns = gae(outcome_token_rewards(rewards, batch[3]), old, batch[3])[1]
    loss, _ = value_loss(critic.values(*batch), old, returns, batch[3])
    loss.backward()
    critic.optimizer.step()
    fresh = Critic.build(policy, CriticConfig(mode="separate", lr=1e-2))
    fresh.load_state_dict(critic.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(fresh.values(*batch), critic.values(*batch), rtol=0, atol=0)
    assert not torch.equal(critic.values(*batch).detach(), old)  # the step did move V
    with pytest.raises(ValueError, match="mode"):
        Critic.build(policy, CriticConfig(mode="head")).load_state_dict(critic.state_dict())


def test_config_and_input_validation():
    """Bad configs and shapes raise ValueError naming the problem."""
    with pytest.raises(ValueError, match="mode"):
        CriticConfig(mode="shared")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lam"):
        CriticConfig(lam=1.5)
    with pytest.raises(ValueError, match="clip_range"):
        value_loss(torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), clip_range=0.0)
    with pytest.raises(ValueError, match="2-D"):
        gae(torch.zeros(3), torch.zeros(3), torch.ones(3))
    with pytest.raises(ValueError, match="rewards"):
        outcome_token_rewards(torch.zeros(2, 1), torch.ones(2, 3))
