import logging

import numpy as np
import pytest
import torch

from v05.engines import GenerationConfig, HFEngine, Rollouts
from v05.train.policy import PolicyConfig, build_char_tokenizer, load_policy

torch.set_num_threads(1)

PROMPTS = ["1+2=", "hello", "12345+678="]


@pytest.fixture(scope="module")
def policy():
    return load_policy(PolicyConfig(seed=0))


def engine(policy, seed=0, **kwargs):
    model, tok = policy
    return HFEngine(model, tok, GenerationConfig(**kwargs), seed=seed)


def assert_same(a: Rollouts, b: Rollouts, *, logp_atol: float = 0.0):
    np.testing.assert_array_equal(a.prompt_index, b.prompt_index)
    for name in ("prompt_ids", "prompt_mask", "response_ids", "response_mask"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    torch.testing.assert_close(a.old_logp, b.old_logp, atol=logp_atol, rtol=0)
    assert a.texts == b.texts
    np.testing.assert_array_equal(a.lengths, b.lengths)
    np.testing.assert_array_equal(a.truncated, b.truncated)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"temperature": -0.1}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_k": -1}, "top_k"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"batch_size": 0}, "batch_size"),
    ],
)
def test_bad_generation_config_names_the_field(kwargs, field):
    """Invalid sampling parameters raise ValueError naming the field."""
    with pytest.raises(ValueError, match=field):
        GenerationConfig(**kwargs)


def test_rollouts_layout_for_ragged_counts(policy):
    """counts [3, 0, 2] give 5 rollouts laid out as repeat(arange(3), counts), left-padded prompts, consistent masks."""
    _, tok = policy
    r = engine(policy, max_new_tokens=6).generate(PROMPTS, [3, 0, 2])
    np.testing.assert_array_equal(r.prompt_index, [0, 0, 0, 2, 2])
    p = len(tok(PROMPTS[2])["input_ids"])  # 11: <bos> + 10 chars, the longest requested prompt
    assert r.prompt_ids.shape == r.prompt_mask.shape == (5, p)
    assert r.response_ids.shape[0] == 5 and 1 <= r.response_ids.shape[1] <= 6
    assert r.response_ids.shape == r.response_mask.shape == r.old_logp.shape
    assert r.old_logp.dtype == torch.float32 and len(r) == 5
    short = tok(PROMPTS[0])["input_ids"]  # 5 tokens, left-padded to 11
    assert r.prompt_ids[0].tolist() == [tok.pad_token_id] * (p - len(short)) + short
    assert r.prompt_mask[0].tolist() == [0] * (p - len(short)) + [1] * len(short)
    assert r.prompt_mask[3].all()
    np.testing.assert_array_equal(r.lengths, r.response_mask.sum(1).numpy())
    assert r.lengths.dtype == np.int64 and r.truncated.dtype == np.bool_
    m = r.response_mask.bool()
    assert (r.old_logp[m] < 0).all() and (r.old_logp[~m] == 0).all()


def test_eos_is_kept_and_followed_by_padding(policy):
    """A response ends at its first EOS (mask 1); later positions are pad with mask 0; no EOS ⇔ truncated at R."""
    _, tok = policy
    r = engine(policy, seed=1, max_new_tokens=8).generate(["1+2=", "12345+678="], [128, 128])
    eos, pad = tok.eos_token_id, tok.pad_token_id
    early = np.flatnonzero(~r.truncated)
    assert len(early) > 0 and r.truncated.any()  # about 1 % EOS per token for a random model: ~20 of 256
    for i in range(len(r)):
        n = int(r.lengths[i])
        mask = r.response_mask[i].tolist()
        assert mask == [1] * n + [0] * (r.response_ids.shape[1] - n)  # contiguous
        ids = r.response_ids[i].tolist()
        assert eos not in ids[: n - 1]
        if r.truncated[i]:
            assert n == 8 and ids[-1] != eos
        else:
            assert ids[n - 1] == eos and all(t == pad for t in ids[n:])
        assert r.texts[i] == tok.decode(ids[:n], skip_special_tokens=True)
    assert r.texts[early[0]] == tok.decode(r.response_ids[early[0], : r.lengths[early[0]] - 1])


def test_same_seed_same_rollouts_and_global_rng_untouched(policy):
    """Two engines with one seed sample identical rollouts; another seed differs; the global RNG is not consumed."""
    before = torch.get_rng_state()
    a = engine(policy, seed=5).generate(PROMPTS, [4, 4, 4])
    b = engine(policy, seed=5).generate(PROMPTS, [4, 4, 4])
    c = engine(policy, seed=6).generate(PROMPTS, [4, 4, 4])
    assert torch.equal(torch.get_rng_state(), before)
    assert_same(a, b)
    assert a.texts != c.texts


def test_state_dict_round_trip_reproduces_the_next_batch(policy):
    """Loading a saved engine state into a fresh engine (other seed) reproduces the next batch exactly."""
    first = engine(policy, seed=2)
    first.generate(PROMPTS, [2, 2, 2])
    state = first.state_dict()
    expected = first.generate(PROMPTS, [3, 1, 2])
    resumed = engine(policy, seed=99)
    resumed.load_state_dict(state)
    assert_same(resumed.generate(PROMPTS, [3, 1, 2]), expected)
    assert set(state) == {"seed", "cpu", "cuda"} and state["cuda"] is None
    with pytest.raises(ValueError, match="missing"):
        resumed.load_state_dict({"cpu": state["cpu"]})


def test_temperature_zero_is_greedy_and_independent_of_micro_batching(policy):
    """T = 0 decodes greedily: two seeds and two micro-batch sizes give the same responses (log-probs up to float
    rounding, since the micro-batches are padded differently)."""
    a = engine(policy, seed=0, temperature=0.0).generate(PROMPTS, [2, 1, 2])
    b = engine(policy, seed=1, temperature=0.0, batch_size=2).generate(PROMPTS, [2, 1, 2])
    assert_same(a, b, logp_atol=1e-5)
    assert_same(a, engine(policy, seed=0, temperature=0.0).generate(PROMPTS, [2, 1, 2]))
    assert a.texts[0] == a.texts[1]


def test_micro_batches_are_stitched_like_one_batch(policy):
    """batch_size=3 over 7 rollouts gives the same layout (N, P) and valid masks as one call."""
    r = engine(policy, batch_size=3, max_new_tokens=5).generate(PROMPTS, [2, 3, 2])
    assert r.prompt_ids.shape[0] == 7 and r.response_ids.shape == (7, 5)
    np.testing.assert_array_equal(r.prompt_index, [0, 0, 1, 1, 1, 2, 2])
    np.testing.assert_array_equal(r.lengths, r.response_mask.sum(1).numpy())


def test_select_and_concat(policy):
    """select keeps P and R; concat pads prompts on the left and responses on the right; select + concat round trip."""
    r = engine(policy, max_new_tokens=4).generate(PROMPTS, [3, 0, 2])
    sub = r.select([4, 0])
    np.testing.assert_array_equal(sub.prompt_index, [2, 0])
    assert torch.equal(sub.response_ids, r.response_ids[[4, 0]]) and sub.texts == (r.texts[4], r.texts[0])
    assert_same(r.select(np.array([True, False, False, True, True])), r.select([0, 3, 4]))
    assert_same(Rollouts.concat([r.select([0, 1]), r.select([2, 3, 4])]), r)
    other = engine(policy, max_new_tokens=7).generate(["7="], [2])  # shorter prompt, longer responses
    both = Rollouts.concat([r, other], pad_id=0)
    p, r_len = r.prompt_ids.shape[1], max(r.response_ids.shape[1], other.response_ids.shape[1])
    assert both.prompt_ids.shape == (7, p) and both.response_ids.shape == (7, r_len)
    q = other.prompt_ids.shape[1]
    assert torch.equal(both.prompt_ids[5:, p - q :], other.prompt_ids) and not both.prompt_mask[5:, : p - q].any()
    assert torch.equal(both.response_ids[:5, : r.response_ids.shape[1]], r.response_ids)
    assert not both.response_mask[:5, r.response_ids.shape[1] :].any()
    np.testing.assert_array_equal(both.prompt_index, [0, 0, 0, 2, 2, 0, 0])  # kept as given
    with pytest.raises(ValueError, match="empty"):
        Rollouts.concat([])
    with pytest.raises(ValueError, match="out of range"):
        r.select([5])


def test_zero_counts_give_an_empty_batch(policy):
    """All-zero counts (or no prompts) return N = 0 rollouts without calling generate."""
    for prompts, counts in ((PROMPTS, [0, 0, 0]), ([], [])):
        r = engine(policy).generate(prompts, counts)
        assert len(r) == 0 and r.response_ids.shape[0] == 0 and r.texts == ()


@pytest.mark.parametrize(("prompts", "counts", "match"), [(PROMPTS, [1, 2], "entries"), (PROMPTS, [1, -1, 0], "neg")])
def test_bad_requests_are_value_errors(policy, prompts, counts, match):
    """Mismatched lengths and negative counts raise ValueError."""
    with pytest.raises(ValueError, match=match):
        engine(policy).generate(prompts, counts)


def test_long_prompts_keep_their_end_and_warn_once(policy, caplog):
    """A prompt longer than max positions − max_new_tokens keeps its last tokens, with one warning per engine."""
    _, tok = policy
    eng = engine(policy, max_new_tokens=8)
    long = "0123456789" * 20  # 201 tokens with <bos>; the tiny model has 128 positions
    with caplog.at_level(logging.WARNING, logger="v05.engines.hf"):
        r = eng.generate([long], [1])
        eng.generate([long], [1])
    assert r.prompt_ids.shape[1] == 120
    assert r.prompt_ids[0].tolist() == tok(long)["input_ids"][-120:]
    assert sum("truncated" in rec.message for rec in caplog.records) == 1


def test_model_mode_is_restored(policy):
    """generate runs the model in eval mode and puts it back in the mode it found."""
    model, _ = policy
    model.train()
    engine(policy).generate(PROMPTS[:1], [1])
    assert model.training
    model.eval()
    engine(policy).generate(PROMPTS[:1], [1])
    assert not model.training
    model.train()


def test_max_new_tokens_must_leave_room_for_a_prompt(policy):
    """max_new_tokens ≥ the model's positions is rejected when the engine is built."""
    with pytest.raises(ValueError, match="max_new_tokens"):
        engine(policy, max_new_tokens=128)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_engine_rng_state_round_trip():
    """On CUDA the state holds the CUDA generator; a restored engine reproduces the next batch exactly."""
    policy = load_policy(PolicyConfig(device="cuda", dtype="float32"))
    first = engine(policy, seed=3)
    first.generate(PROMPTS, [2, 2, 2])
    state = first.state_dict()
    assert state["cuda"] is not None
    expected = first.generate(PROMPTS, [8, 8, 8])
    resumed = engine(policy, seed=4)
    resumed.load_state_dict(state)
    assert_same(resumed.generate(PROMPTS, [8, 8, 8]), expected)
    assert_same(
        engine(policy, seed=3).generate(PROMPTS, [4, 4, 4]), engine(policy, seed=3).generate(PROMPTS, [4, 4, 4])
    )


def test_chat_template_prompts_are_encoded_without_added_special_tokens(policy):
    """With a chat template the prompt text already carries its special tokens, so no <bos> is added."""
    model, _ = policy
    tok = build_char_tokenizer()
    tok.chat_template = "{% for m in messages %}<bos>{{ m['content'] }}{% endfor %}"
    text = tok.apply_chat_template([{"role": "user", "content": "1+2="}], tokenize=False)
    r = HFEngine(model, tok, GenerationConfig(max_new_tokens=2)).generate([text], [1])
    assert r.prompt_ids[0].tolist() == tok(text, add_special_tokens=False)["input_ids"]
    assert r.prompt_ids[0].tolist().count(tok.bos_token_id) == 1
