import numpy as np
import pytest
import torch

from v05.engines import GenerationConfig, HFEngine, Rollouts
from v05.engines.logprobs import sequence_logprobs
from v05.priors.embeddings import Embedder
from v05.train.features import (
    FeatureConfig,
    PolicyFeatureBackend,
    capture_layer,
    prompt_features,
    recompute_pass,
)
from v05.train.policy import PolicyConfig, load_policy

torch.set_num_threads(1)

# 5, 1 and 11 prompt tokens with <bos>: left padding in every batch, and a prompt shorter than n_prompt
PROMPTS = ["1+2=", "", "12345+678="]
COUNTS = [5, 4, 5]
GROUP = np.repeat(np.arange(3), COUNTS)  # (14,)
SMALL = FeatureConfig(layer=0, n_prompt=3, n_response=4)


@pytest.fixture(scope="module")
def policy():
    return load_policy(PolicyConfig(seed=0))  # 2 decoder layers, H = 128


@pytest.fixture(scope="module")
def rollouts(policy):
    model, tok = policy
    r = HFEngine(model, tok, GenerationConfig(max_new_tokens=8), seed=1).generate(PROMPTS, COUNTS)
    assert r.truncated.any() and (~r.truncated).any()  # full-length and early-EOS responses (lengths 4 and 5)
    return r


def run(policy, r, *, group, config=SMALL, batch_size=256, temperature=0.7):
    model, tok = policy
    return recompute_pass(
        model, r, group=group, config=config, temperature=temperature, tokenizer=tok, batch_size=batch_size
    )


def unpadded_states(model, r, i, layer):
    """(p + n, H) output_hidden_states[layer + 1] of rollout i run alone, without padding; and p."""
    prompt = r.prompt_ids[i][r.prompt_mask[i].bool()]
    x = torch.cat([prompt, r.response_ids[i, : int(r.response_mask[i].sum())]])[None]  # (1, p + n)
    with torch.no_grad():
        hidden = model(x, output_hidden_states=True).hidden_states  # (L + 1) × (1, p + n, H)
    return hidden[layer + 1][0], len(prompt)


@pytest.mark.parametrize("batch_size", [256, 4])
@pytest.mark.parametrize("shared", [False, True])
def test_old_logprobs_equal_sequence_logprobs(policy, rollouts, shared, batch_size):
    """recompute_pass's log-probs equal sequence_logprobs under no_grad (1e-5), plain or shared-prefix, any batching."""
    model, _ = policy
    with torch.no_grad():
        expected, _ = sequence_logprobs(
            model, rollouts.prompt_ids, rollouts.prompt_mask, rollouts.response_ids, rollouts.response_mask,
            temperature=0.7,
        )  # fmt: skip
    logp, features = run(policy, rollouts, group=GROUP if shared else None, batch_size=batch_size)
    torch.testing.assert_close(logp, expected, atol=1e-5, rtol=0)
    assert logp.shape == rollouts.response_ids.shape and not logp.requires_grad
    assert features.prompt.shape == features.response.shape == (14, 128) and features.scalars.shape == (14, 3)
    assert features.prompt.dtype == features.response.dtype == features.scalars.dtype == np.float32


def test_features_equal_a_hand_computed_reference(policy, rollouts):
    """Features are means of output_hidden_states[layer + 1] at the last 3 prompt / last 4 response tokens (1e-5).

    The entropy scalars of tag-free responses are (mean over all, 0, mean over all) of sequence_logprobs' entropies.
    """
    model, _ = policy
    _, features = run(policy, rollouts, group=None)
    with torch.no_grad():
        _, entropy = sequence_logprobs(
            model, rollouts.prompt_ids, rollouts.prompt_mask, rollouts.response_ids, rollouts.response_mask,
            temperature=0.7, with_entropy=True,
        )  # fmt: skip
    for i in range(len(rollouts)):
        states, p = unpadded_states(model, rollouts, i, layer=0)
        n = int(rollouts.lengths[i])
        h_p = states[max(0, p - 3) : p].mean(0)  # the <bos>-only prompt (p = 1) averages one token
        h_r = states[p + max(0, n - 4) : p + n].mean(0)
        np.testing.assert_allclose(features.prompt[i], h_p.numpy(), atol=1e-5, rtol=0)
        np.testing.assert_allclose(features.response[i], h_r.numpy(), atol=1e-5, rtol=0)
        mean_all = float(entropy[i, :n].mean())
        np.testing.assert_allclose(features.scalars[i], [mean_all, 0.0, mean_all], atol=1e-5, rtol=0)


def test_shared_prefix_and_plain_layouts_give_the_same_features(policy, rollouts):
    """The shared-prefix pass (prompt once per group, micro-batches that split groups) reproduces the plain features."""
    _, plain = run(policy, rollouts, group=None)
    _, shared = run(policy, rollouts, group=GROUP, batch_size=4)
    for name in ("prompt", "response", "scalars"):
        np.testing.assert_allclose(getattr(shared, name), getattr(plain, name), atol=1e-5, rtol=0)


def test_last_layer_is_read_before_the_final_norm(policy, rollouts):
    """The hook sees the decoder layer's output: hidden_states[layer + 1], except the last layer (pre-norm)."""
    model, _ = policy
    i = 9  # the longest prompt and a full-length response: no padding in this row
    assert rollouts.prompt_mask[i].all() and rollouts.response_mask[i].all()
    x = torch.cat([rollouts.prompt_ids[i : i + 1], rollouts.response_ids[i : i + 1]], 1)  # (1, P + R)
    with torch.no_grad(), capture_layer(model, 0) as first, capture_layer(model, -1) as last:
        hidden = model(x, output_hidden_states=True).hidden_states  # 3 × (1, T, H)
    torch.testing.assert_close(first[0], hidden[1], atol=1e-6, rtol=0)
    assert not torch.allclose(last[0], hidden[-1], atol=1e-3)
    with torch.no_grad():
        torch.testing.assert_close(model.model.norm(last[0]), hidden[-1], atol=1e-5, rtol=1e-5)
    # so features of layer -1 are the mean of the pre-norm states
    _, features = run(
        policy, rollouts.select([i]), group=None, config=FeatureConfig(layer=-1, n_prompt=3, n_response=4)
    )
    p = rollouts.prompt_ids.shape[1]
    np.testing.assert_allclose(features.prompt[0], last[0][0, p - 3 : p].mean(0).numpy(), atol=1e-5, rtol=0)
    np.testing.assert_allclose(features.response[0], last[0][0, -4:].mean(0).numpy(), atol=1e-5, rtol=0)


def handmade(tok, responses, *, eos):
    """Rollouts of the prompt "1+2=" with the given response texts (char tokens), EOS appended where eos[i]."""
    rows = [
        tok(t, add_special_tokens=False)["input_ids"] + ([tok.eos_token_id] if e else [])
        for t, e in zip(responses, eos, strict=True)
    ]
    r = max(map(len, rows))
    ids = torch.tensor([row + [tok.pad_token_id] * (r - len(row)) for row in rows])  # (N, R)
    mask = torch.tensor([[1] * len(row) + [0] * (r - len(row)) for row in rows])  # (N, R)
    prompt = torch.tensor(tok(["1+2="] * len(rows))["input_ids"])  # (N, 5)
    n = len(rows)
    return Rollouts(
        prompt_index=np.zeros(n, np.int64), prompt_ids=prompt, prompt_mask=torch.ones_like(prompt),
        response_ids=ids, response_mask=mask, old_logp=torch.zeros(ids.shape), texts=tuple(responses),
        lengths=mask.sum(1).numpy(), truncated=~np.array(eos),
    )  # fmt: skip


def test_think_truncation_and_span_entropies(policy):
    """</think> ends the response feature; reasoning/answer scalars average the entropies of the tokens in the tags.

    Char tokens, so token k is character k and the EOS follows the text. Expected token sets, by hand:
      "ab</think>c<answer>7</answer>"  keep [0, 10)   reasoning {0, 1} (no <think>: from the start)  answer {19}
      "<think>xy</think>zz"            keep [0, 17)   reasoning {7, 8}    answer {17, 18, EOS 19} (after </think>)
      "plain"                          keep all 6     reasoning {} → 0    answer = all 6 (no tags at all)
      "<think><answer>1</answer></think><answer>22</answer>"   keep [0, 33)   reasoning [7, 25)   answer {41, 42}
      "q</think>" (no EOS)             keep all 9     reasoning {0}       answer {} → 0 (nothing after </think>)
    """
    model, tok = policy
    texts = ["ab</think>c<answer>7</answer>", "<think>xy</think>zz", "plain",
             "<think><answer>1</answer></think><answer>22</answer>", "q</think>"]  # fmt: skip
    r = handmade(tok, texts, eos=[True, True, True, True, False])
    keep = [10, 17, 6, 33, 9]
    reasoning = [[0, 1], [7, 8], [], list(range(7, 25)), [0]]
    answer = [[19], [17, 18, 19], list(range(6)), [41, 42], []]
    config = FeatureConfig(layer=0, n_prompt=3, n_response=4)
    logp, features = recompute_pass(
        model, r, group=np.zeros(5, np.int64), config=config, temperature=1.0, tokenizer=tok
    )
    with torch.no_grad():
        expected, entropy = sequence_logprobs(
            model, r.prompt_ids, r.prompt_mask, r.response_ids, r.response_mask, with_entropy=True
        )
    torch.testing.assert_close(logp, expected, atol=1e-5, rtol=0)
    for i in range(len(texts)):
        h = entropy[i].numpy()
        mean = [
            float(h[: r.lengths[i]].mean()),
            *(float(h[idx].mean()) if idx else 0.0 for idx in (reasoning[i], answer[i])),
        ]
        np.testing.assert_allclose(features.scalars[i], mean, atol=1e-6, rtol=0)
        states, p = unpadded_states(model, r, i, layer=0)
        h_r = states[p + keep[i] - 4 : p + keep[i]].mean(0)  # the 4 tokens before the end of the last </think>
        np.testing.assert_allclose(features.response[i], h_r.numpy(), atol=1e-5, rtol=0)


def test_empty_responses_still_give_prompt_features(policy, rollouts):
    """With R = 0 the prompts still run: (N, 0) log-probs, the usual prompt features, zero response features."""
    r0 = Rollouts(
        prompt_index=rollouts.prompt_index, prompt_ids=rollouts.prompt_ids, prompt_mask=rollouts.prompt_mask,
        response_ids=rollouts.response_ids[:, :0], response_mask=rollouts.response_mask[:, :0],
        old_logp=rollouts.old_logp[:, :0], texts=("",) * len(rollouts), lengths=np.zeros(len(rollouts), np.int64),
        truncated=rollouts.truncated,
    )  # fmt: skip
    _, full = run(policy, rollouts, group=None)
    for group in (None, GROUP):
        logp, features = run(policy, r0, group=group)
        assert logp.shape == (len(rollouts), 0)
        np.testing.assert_allclose(features.prompt, full.prompt, atol=1e-5, rtol=0)
        assert not features.response.any() and not features.scalars.any()


def test_groups_must_share_their_prompt(policy, rollouts):
    """A group id that covers two different prompts is an error (the shared prefix would be wrong)."""
    with pytest.raises(ValueError, match="different prompts"):
        run(policy, rollouts, group=np.zeros(len(rollouts), np.int64))
    with pytest.raises(ValueError, match="group must be"):
        run(policy, rollouts, group=GROUP[:3])
    with pytest.raises(ValueError, match="temperature"):
        run(policy, rollouts, group=None, temperature=0.0)


def test_prompt_features_equal_the_prompt_part_of_recompute_pass(policy, rollouts):
    """One prefill per prompt, encoded as HFEngine encodes it, gives the rollouts' prompt features."""
    model, tok = policy
    _, features = run(policy, rollouts, group=GROUP)
    first = np.flatnonzero(np.r_[True, GROUP[1:] != GROUP[:-1]])  # (3,) first rollout of each prompt
    got = prompt_features(model, tok, PROMPTS, config=SMALL, batch_size=2)
    assert got.shape == (3, 128) and got.dtype == np.float32
    np.testing.assert_allclose(got, features.prompt[first], atol=1e-5, rtol=0)
    assert prompt_features(model, tok, [], config=SMALL).shape == (0, 128)


def test_policy_backend_follows_the_live_weights():
    """encode gives (Q, H) float64, never caches, and changes when the weights change."""
    model, tok = load_policy(PolicyConfig(seed=0))
    backend = PolicyFeatureBackend(model=model, tokenizer=tok, config=FeatureConfig(layer=-1, n_prompt=3))
    assert backend.id == "policy-layer1-last3" and backend.cacheable is False and backend.truncated == 0
    assert Embedder(backend=backend, cache_dir=None).directory is None  # no disk cache
    before = backend.encode(PROMPTS)
    assert before.shape == (3, 128) and before.dtype == np.float64
    np.testing.assert_array_equal(backend.encode(PROMPTS), before)  # deterministic for fixed weights
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight.mul_(1.5)
    assert np.abs(backend.encode(PROMPTS) - before).max() > 1e-3
    backend.encode(["9" * 200])  # longer than max_position_embeddings = 128: keeps the last 128 tokens
    assert backend.truncated == 1


def test_capture_layer_removes_its_hook_and_checks_the_layer(policy):
    """No hook is left behind (also after an exception); a bad index names the valid range."""
    model, _ = policy
    layer = model.model.layers[1]
    before = len(layer._forward_hooks)
    with capture_layer(model, 1) as states:
        assert len(layer._forward_hooks) == before + 1
        model(torch.tensor([[1, 20, 21]]))
    assert len(states) == 1 and states[0].shape == (1, 3, 128) and not states[0].requires_grad
    assert len(layer._forward_hooks) == before
    with pytest.raises(RuntimeError, match="boom"), capture_layer(model, -1):
        raise RuntimeError("boom")
    assert len(layer._forward_hooks) == before
    for bad in (2, -3):
        with pytest.raises(ValueError, match=r"2 decoder layers: valid -2 … 1"), capture_layer(model, bad):
            pass
    with pytest.raises(ValueError, match="Linear has no decoder layer list"), capture_layer(torch.nn.Linear(2, 2), 0):
        pass


def test_feature_config_validation():
    """Non-positive pooling lengths and empty tags are rejected with a fix."""
    with pytest.raises(ValueError, match="n_response"):
        FeatureConfig(n_response=0)
    with pytest.raises(ValueError, match="tags"):
        FeatureConfig(answer_tags=("<answer>", ""))
    with pytest.raises(ValueError, match="layer"):
        FeatureConfig(layer=1.5)
