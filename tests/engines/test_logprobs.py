import math

import numpy as np
import pytest
import torch

from v05.engines import GenerationConfig, HFEngine
from v05.engines.logprobs import sequence_logprobs
from v05.train.policy import PolicyConfig, load_policy

torch.set_num_threads(1)

# different prompt lengths (5, 1, 11 tokens with <bos>): left padding in every batch
PROMPTS = ["1+2=", "", "12345+678="]


@pytest.fixture(scope="module")
def policy():
    return load_policy(PolicyConfig(seed=0))


def logprobs(model, r, **kwargs):
    return sequence_logprobs(model, r.prompt_ids, r.prompt_mask, r.response_ids, r.response_mask, **kwargs)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_matches_the_engines_old_logp(policy, temperature):
    """On the engine's own rollouts (left padding, early EOS), one forward reproduces old_logp to 1e-4."""
    model, tok = policy
    eng = HFEngine(model, tok, GenerationConfig(temperature=temperature, max_new_tokens=8), seed=1)
    r = eng.generate(PROMPTS, [64, 64, 64])
    assert r.truncated.any() and (~r.truncated).any()  # both full-length and early-EOS responses
    assert len(set(r.prompt_mask.sum(1).tolist())) == 3
    with torch.no_grad():
        logp, entropy = logprobs(model, r, temperature=temperature)
    assert entropy is None
    torch.testing.assert_close(logp, r.old_logp, atol=1e-4, rtol=0)


def test_greedy_rollouts_are_scored_at_temperature_one(policy):
    """For T = 0 (greedy) the engine records log π at T = 1, and the greedy token is the argmax."""
    model, tok = policy
    r = HFEngine(model, tok, GenerationConfig(temperature=0.0, max_new_tokens=6)).generate(PROMPTS, [1, 1, 1])
    with torch.no_grad():
        logp, entropy = logprobs(model, r, with_entropy=True)
    torch.testing.assert_close(logp, r.old_logp, atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match="temperature"):
        logprobs(model, r, temperature=0.0)


def test_padding_invariance_and_entropy_against_an_unpadded_forward(policy):
    """A rollout scored inside a padded batch equals a plain forward of its unpadded tokens (logp and entropy)."""
    model, tok = policy
    r = HFEngine(model, tok, GenerationConfig(max_new_tokens=6), seed=3).generate(PROMPTS, [2, 2, 2])
    with torch.no_grad():
        logp, entropy = logprobs(model, r, temperature=0.7, with_entropy=True)
        for i in (0, 2, 4):
            prompt = r.prompt_ids[i][r.prompt_mask[i].bool()]
            n = int(r.lengths[i])
            x = torch.cat([prompt, r.response_ids[i, :n]])[None]  # (1, p + n), no padding at all
            logits = model(x).logits[0, len(prompt) - 1 : len(prompt) + n - 1] / 0.7  # (n, V)
            logp_v = torch.log_softmax(logits, -1)
            expected = logp_v.gather(-1, r.response_ids[i, :n, None]).squeeze(-1)
            torch.testing.assert_close(logp[i, :n], expected, atol=1e-5, rtol=0)
            torch.testing.assert_close(entropy[i, :n], -(logp_v.exp() * logp_v).sum(-1), atol=1e-5, rtol=0)
    m = r.response_mask.bool()
    assert (entropy[m] > 0).all() and (entropy[m] <= math.log(len(tok)) + 1e-5).all() and (entropy[~m] == 0).all()


def test_gradients_flow_only_through_unmasked_tokens(policy):
    """With grad enabled the log-probs are differentiable; masked positions are exactly 0 and carry no gradient."""
    model, tok = policy
    r = HFEngine(model, tok, GenerationConfig(max_new_tokens=4), seed=4).generate(PROMPTS, [2, 1, 1])
    model.zero_grad(set_to_none=True)
    logp, _ = logprobs(model, r)
    assert logp.requires_grad
    (logp * r.response_mask).sum().backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None for g in grads) and sum(g.abs().sum() for g in grads) > 0
    model.zero_grad(set_to_none=True)
    with torch.no_grad():
        assert not logprobs(model, r)[0].requires_grad


def test_shape_errors_are_value_errors(policy):
    """Mismatched ids/masks raise ValueError; an empty response gives (N, 0) outputs."""
    model, _ = policy
    ids = torch.ones((2, 3), dtype=torch.long)
    with pytest.raises(ValueError, match="shape"):
        sequence_logprobs(model, ids, ids[:, :2], ids, ids)
    logp, entropy = sequence_logprobs(model, ids, ids, ids[:, :0], ids[:, :0], with_entropy=True)
    assert logp.shape == entropy.shape == (2, 0)
    np.testing.assert_array_equal(logp.numpy(), np.zeros((2, 0)))
