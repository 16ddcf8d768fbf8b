"""train.forward: the shared-prefix forward equals the per-rollout one (engines.logprobs)."""

import warnings

import numpy as np
import pytest
import torch

from v05.engines import GenerationConfig, HFEngine
from v05.engines.logprobs import sequence_logprobs
from v05.train.forward import prefix_rows, shared_prefix_logprobs
from v05.train.policy import LoraConfig, PolicyConfig, load_policy

torch.set_num_threads(1)

# different prompt lengths (5, 1, 11 tokens with <bos>): left padding in every batch
PROMPTS = ["1+2=", "", "12345+678="]


@pytest.fixture(scope="module")
def policy():
    return load_policy(PolicyConfig(seed=0))


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_shared_prefix_forward_equals_the_per_rollout_forward(policy, temperature):
    """Running each distinct prompt once (its KV cache gathered to the group's rollouts) gives the per-rollout
    forward's log-probs, entropies and parameter gradients up to float rounding — with left padding of three prompt
    lengths, early EOS, and groups listed out of order (rows 2, 0, 1)."""
    model, tok = policy
    r = HFEngine(model, tok, GenerationConfig(max_new_tokens=6), seed=3).generate(PROMPTS, [3, 4, 5])
    perm = np.r_[np.arange(7, 12), np.arange(0, 7)]  # the third prompt's rollouts first
    r = r.select(perm)
    group = r.prompt_index
    first, rows = prefix_rows(group)
    assert first.tolist() == [0, 5, 8] and rows[:5].tolist() == [0] * 5
    full = sequence_logprobs(model, r.prompt_ids, r.prompt_mask, r.response_ids, r.response_mask,
                             temperature=temperature, with_entropy=True)  # fmt: skip
    shared = shared_prefix_logprobs(model, r.prompt_ids[first], r.prompt_mask[first], r.response_ids,
                                    r.response_mask, rows, temperature=temperature, with_entropy=True)  # fmt: skip
    torch.testing.assert_close(shared[0], full[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(shared[1], full[1], atol=1e-5, rtol=0)
    params = [p for p in model.parameters() if p.requires_grad]
    g_full = torch.autograd.grad(full[0].sum(), params)
    g_shared = torch.autograd.grad(shared[0].sum(), params)
    for a, b in zip(g_full, g_shared, strict=True):
        torch.testing.assert_close(b, a, atol=1e-4, rtol=1e-4)


def test_shared_prefix_single_token_responses_and_bad_rows(policy):
    """R = 1 (only the first response token, from the prefix's last logits) matches; rows out of range raise."""
    model, tok = policy
    r = HFEngine(model, tok, GenerationConfig(max_new_tokens=1), seed=4).generate(PROMPTS, [2, 2, 2])
    first, rows = prefix_rows(r.prompt_index)
    with torch.no_grad():
        full, _ = sequence_logprobs(model, r.prompt_ids, r.prompt_mask, r.response_ids, r.response_mask)
        shared, _ = shared_prefix_logprobs(model, r.prompt_ids[first], r.prompt_mask[first], r.response_ids,
                                           r.response_mask, rows)  # fmt: skip
    torch.testing.assert_close(shared, full, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="rows"):
        shared_prefix_logprobs(model, r.prompt_ids[first], r.prompt_mask[first], r.response_ids, r.response_mask,
                               rows + 5)  # fmt: skip


def test_shared_prefix_on_a_lora_policy_passes_the_cache_by_the_models_own_keyword():
    """peft's wrapper takes ``**kwargs``: the cache keyword is read from the model under it (``cache`` on this
    transformers), not the deprecated ``past_key_values`` (a FutureWarning every step, and gone in 5.40)."""
    model, tok = load_policy(PolicyConfig(seed=0, device="cpu", dtype="float32", lora=LoraConfig(r=2, alpha=4.0)))
    r = HFEngine(model, tok, GenerationConfig(max_new_tokens=3), seed=5).generate(PROMPTS, [1, 2, 1])
    first, rows = prefix_rows(r.prompt_index)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*past_key_values", category=FutureWarning)
        shared, _ = shared_prefix_logprobs(model, r.prompt_ids[first], r.prompt_mask[first], r.response_ids,
                                           r.response_mask, rows)  # fmt: skip
    full, _ = sequence_logprobs(model, r.prompt_ids, r.prompt_mask, r.response_ids, r.response_mask)
    torch.testing.assert_close(shared, full, atol=1e-5, rtol=0)
