import copy
import dataclasses
import importlib.util
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from v05.engines import GenerationConfig, HFEngine
from v05.engines import vllm as vllm_engine
from v05.engines.logprobs import sequence_logprobs
from v05.engines.vllm import VLLMEngine, recompute_old_logp, request_seeds, rollouts_from_outputs
from v05.train.policy import PolicyConfig, load_policy

torch.set_num_threads(1)

PROMPTS = ["1+2=", "hello", "12345+678="]


@pytest.fixture(scope="module")
def policy():
    return load_policy(PolicyConfig(seed=0))


def completion(index, tokens, logprobs=None):
    """A ``vllm.CompletionOutput``-shaped object; ``logprobs`` as vLLM returns them with ``logprobs=0``."""
    lps = (
        None if logprobs is None else [{t: SimpleNamespace(logprob=lp)} for t, lp in zip(tokens, logprobs, strict=True)]
    )
    return SimpleNamespace(index=index, token_ids=list(tokens), logprobs=lps)


class FakeLLM:
    """Stands in for ``vllm.LLM``: scripted completions, recorded calls, a model object for ``apply_model``."""

    def __init__(self, script, *, missing=(), in_process=True):
        self.script = script  # (request position, sample index) -> token ids
        self.calls = []
        self.events = []
        self.model = FakeVLLMModel(missing)
        if not in_process:  # a multiprocess engine core: LLMEngine has no model_executor attribute
            self.llm_engine = SimpleNamespace()

    def generate(self, requests, params, use_tqdm=True):
        self.calls.append((requests, params))
        self.events.append("generate")
        out = []
        for j, (req, p) in enumerate(zip(requests, params, strict=True)):
            comps = [completion(k, self.script(j, k), [-0.5] * len(self.script(j, k))) for k in range(p.n)]
            out.append(SimpleNamespace(prompt_token_ids=req["prompt_token_ids"], outputs=comps[::-1]))  # unordered
        return out

    def apply_model(self, fn):
        return [fn(self.model)]

    def reset_prefix_cache(self):
        self.events.append("reset_prefix_cache")

    def sleep(self, level):
        self.events.append(f"sleep{level}")

    def wake_up(self, tags=None):
        self.events.append(f"wake_up{tags}")


class FakeVLLMModel(torch.nn.Module):
    """vLLM's model side of ``load_weights``: records the names it receives, returns the loaded parameter names."""

    def __init__(self, missing):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.missing = set(missing)
        self.received = []
        for name in self.missing:
            self.register_parameter(name, torch.nn.Parameter(torch.zeros(1)))

    def load_weights(self, weights):
        self.received.append([name for name, _ in weights])
        return {"w"}


def fake_engine(policy, script, *, seed=0, recompute=True, **gen):
    model, tok = policy
    llm = FakeLLM(script)
    engine = VLLMEngine._from_llm(llm, SimpleNamespace, model, tok, GenerationConfig(**gen), seed=seed,
                                  recompute_logprobs=recompute)  # fmt: skip
    return engine, llm


def test_importing_the_module_does_not_import_vllm():
    """``v05.engines.vllm`` imports without vLLM (doctest collection and CPU CI): vllm is imported only when an
    engine is built."""
    assert vllm_engine.VLLMEngine is VLLMEngine
    if importlib.util.find_spec("vllm") is None:
        assert "vllm" not in sys.modules


def test_without_cuda_or_vllm_the_engine_raises_the_install_hint(policy, monkeypatch):
    """Building the engine without CUDA, or with CUDA but without vllm, raises ValueError with the install hint."""
    model, tok = policy
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=r"needs a CUDA GPU and `pip install 'v05\[vllm\]'`.*separate environment"):
        VLLMEngine(model, tok, GenerationConfig())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    with pytest.raises(ValueError, match="vLLM brings its own torch build"):
        VLLMEngine(model, tok, GenerationConfig())


def test_bad_arguments_are_rejected_before_vllm_is_built(policy):
    """gpu_memory_utilization, seed and max_new_tokens are checked first, naming the argument."""
    model, tok = policy
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        VLLMEngine(model, tok, GenerationConfig(), gpu_memory_utilization=0.0)
    with pytest.raises(ValueError, match="seed"):
        VLLMEngine(model, tok, GenerationConfig(), seed=-1)
    with pytest.raises(ValueError, match="max_new_tokens"):
        VLLMEngine(model, tok, GenerationConfig(max_new_tokens=128))


def test_request_seeds_give_every_rollout_of_a_call_its_own_seed():
    """counts [2, 3, 1] → offsets [0, 2, 5] from one base (vLLM adds the sample index k < count); the base is a pure
    function of (seed, call) and differs between calls."""
    s = request_seeds(7, 0, [2, 3, 1])
    assert s.dtype == np.int64 and (s - s[0]).tolist() == [0, 2, 5]
    per_rollout = [int(s_i) + k for s_i, n in zip(s, [2, 3, 1], strict=True) for k in range(n)]
    assert len(set(per_rollout)) == 6 and 0 <= min(per_rollout) and max(per_rollout) < 2**31
    np.testing.assert_array_equal(request_seeds(7, 0, [2, 3, 1]), s)
    assert request_seeds(7, 1, [2, 3, 1])[0] != s[0] and request_seeds(8, 0, [2, 3, 1])[0] != s[0]
    assert request_seeds(7, 0, []).shape == (0,)


def test_rollouts_from_outputs_hand_case():
    """Two requests (counts 2, 1; a zero-count prompt between them) → 3 rollouts in request order, completions sorted
    by sample index; prompts left-padded, responses right-padded and cut after the first EOS (id 2, kept)."""
    outputs = [
        SimpleNamespace(
            outputs=[completion(1, [8, 2, 9], [-0.5, -0.25, -9.0]), completion(0, [9, 9, 9], [-1, -2, -3])]
        ),
        SimpleNamespace(outputs=[completion(0, [2], [-0.125])]),
    ]
    r = rollouts_from_outputs(outputs, [[1, 5, 6], [1, 7]], [2, 1], prompt_index=np.array([0, 0, 2]), eos_ids=[2],
                              pad_id=0, decode=lambda ids: ["-".join(map(str, x)) for x in ids])  # fmt: skip
    np.testing.assert_array_equal(r.prompt_index, [0, 0, 2])
    assert r.prompt_ids.tolist() == [[1, 5, 6], [1, 5, 6], [0, 1, 7]]
    assert r.prompt_mask.tolist() == [[1, 1, 1], [1, 1, 1], [0, 1, 1]]
    assert r.response_ids.tolist() == [[9, 9, 9], [8, 2, 0], [2, 0, 0]]  # the 9 after EOS in sample 1 is dropped
    assert r.response_mask.tolist() == [[1, 1, 1], [1, 1, 0], [1, 0, 0]]
    assert r.old_logp.dtype == torch.float32
    assert r.old_logp.tolist() == [[-1.0, -2.0, -3.0], [-0.5, -0.25, 0.0], [-0.125, 0.0, 0.0]]
    assert r.texts == ("9-9-9", "8-2", "2")
    np.testing.assert_array_equal(r.lengths, [3, 2, 1])
    np.testing.assert_array_equal(r.truncated, [True, False, False])


def test_rollouts_from_outputs_without_logprobs_and_mismatches():
    """Without vLLM log-probs old_logp is 0; a request with fewer completions than asked, or a wrong number of
    rollouts, is a ValueError; no requests give an empty (0, 0) batch."""
    outputs = [SimpleNamespace(outputs=[completion(0, [4, 2])])]
    kw = {"eos_ids": [2], "pad_id": 0, "decode": lambda ids: [str(x) for x in ids]}
    r = rollouts_from_outputs(outputs, [[1]], [1], prompt_index=np.array([0]), **kw)
    assert r.old_logp.tolist() == [[0.0, 0.0]] and not r.truncated[0]
    with pytest.raises(ValueError, match="returned 1 completions, expected 2"):
        rollouts_from_outputs(outputs, [[1]], [2], prompt_index=np.array([0, 0]), **kw)
    with pytest.raises(ValueError, match="do not fit"):
        rollouts_from_outputs(outputs, [[1]], [1], prompt_index=np.array([0, 0]), **kw)
    empty = rollouts_from_outputs([], [], [], prompt_index=np.zeros(0, np.int64), **kw)
    assert len(empty) == 0 and empty.response_ids.shape == (0, 0)


def test_recompute_old_logp_reproduces_the_hf_engines_log_probs(policy):
    """Differential: on HFEngine rollouts (T = 0.7, ragged counts), the policy's recomputed log-probs equal the
    engine's own old_logp (the same definition, log_softmax(logits / T)), in micro-batches of 2; greedy (T = 0) is
    scored at T = 1 as HFEngine does."""
    model, tok = policy
    for temperature in (0.7, 0.0):
        ro = HFEngine(model, tok, GenerationConfig(temperature=temperature, max_new_tokens=6), seed=1).generate(
            PROMPTS, [3, 0, 2]
        )
        blank = dataclasses.replace(ro, old_logp=torch.zeros_like(ro.old_logp))
        again = recompute_old_logp(model, blank, temperature, batch_size=2)
        torch.testing.assert_close(again.old_logp, ro.old_logp, atol=1e-5, rtol=0)
        assert again.response_ids is blank.response_ids and model.training
    with pytest.raises(ValueError, match="temperature"):
        recompute_old_logp(model, ro, -1.0)


def test_generate_with_a_stand_in_llm(policy):
    """generate sends one request per prompt with a non-zero count (token ids encoded as HFEngine encodes them; n =
    count; distinct seeds; top_k 0 → -1; every EOS a stop id; no vLLM detokenisation), and lays the rollouts out as
    repeat(arange(M), counts) with the policy's recomputed log-probs."""
    model, tok = policy
    eos = tok.eos_token_id
    engine, llm = fake_engine(policy, lambda j, k: [40 + j, 50 + k, eos], temperature=0.8, max_new_tokens=5)
    r = engine.generate(PROMPTS, [2, 0, 3])
    (requests, params), = llm.calls  # fmt: skip
    assert [q["prompt_token_ids"] for q in requests] == [tok(PROMPTS[0])["input_ids"], tok(PROMPTS[2])["input_ids"]]
    assert [p.n for p in params] == [2, 3] and params[1].seed - params[0].seed == 2
    assert {p.top_k for p in params} == {-1} and {p.max_tokens for p in params} == {5}
    assert params[0].stop_token_ids == [eos] and params[0].detokenize is False and params[0].logprobs is None
    np.testing.assert_array_equal(r.prompt_index, [0, 0, 2, 2, 2])
    assert r.response_ids[:, 1].tolist() == [50, 51, 50, 51, 52] and not r.truncated.any()
    assert r.texts[0] == tok.decode([40, 50, eos], skip_special_tokens=True)
    expected, _ = sequence_logprobs(model, r.prompt_ids, r.prompt_mask, r.response_ids, r.response_mask,
                                    temperature=0.8)  # fmt: skip
    torch.testing.assert_close(r.old_logp, expected, atol=1e-5, rtol=0)
    empty = engine.generate(PROMPTS, [0, 0, 0])
    assert len(empty) == 0 and len(llm.calls) == 1  # nothing sent to vLLM


def test_without_recompute_old_logp_is_vllms(policy):
    """recompute_logprobs=False keeps vLLM's reported log-probs (asked for with logprobs=0: the sampled token's)."""
    model, tok = policy
    engine, llm = fake_engine(policy, lambda j, k: [40, tok.eos_token_id], recompute=False)
    r = engine.generate(PROMPTS[:1], [2])
    assert llm.calls[0][1][0].logprobs == 0
    assert r.old_logp.tolist() == [[-0.5, -0.5], [-0.5, -0.5]]


def test_state_dict_round_trip_resumes_the_seed_stream(policy):
    """A fresh engine (another seed) loaded with a saved state sends the seeds the saved engine would send next; an
    HFEngine state is refused."""
    script = lambda j, k: [40]  # noqa: E731
    first, llm_a = fake_engine(policy, script, seed=3)
    first.generate(PROMPTS, [1, 1, 1])
    state = first.state_dict()
    assert state == {"seed": 3, "calls": 1}
    first.generate(PROMPTS, [2, 1, 2])
    resumed, llm_b = fake_engine(policy, script, seed=99)
    resumed.load_state_dict(state)
    resumed.generate(PROMPTS, [2, 1, 2])
    assert [p.seed for p in llm_b.calls[0][1]] == [p.seed for p in llm_a.calls[1][1]]
    with pytest.raises(ValueError, match="missing"):
        resumed.load_state_dict({"seed": 0, "cpu": torch.zeros(1), "cuda": None})
    with pytest.raises(ValueError, match="calls"):
        resumed.load_state_dict({"seed": 0, "calls": -1})


def test_sync_weights_pushes_every_parameter_by_name_and_drops_the_prefix_cache(policy):
    """sync_weights hands vLLM's model the policy's named parameters and resets the prefix cache; a vLLM parameter
    left without a weight fails the completeness check; a multiprocess engine core or a vLLM without apply_model is
    refused with the supported versions."""
    model, tok = policy
    engine, llm = fake_engine(policy, lambda j, k: [40])
    engine.sync_weights(model, check_complete=True)
    assert llm.model.received == [[name for name, _ in model.named_parameters()]]
    assert llm.events == ["reset_prefix_cache"] and engine.weight_syncs_ == 1
    partial = VLLMEngine._from_llm(FakeLLM(None, missing=["lm_bias"]), SimpleNamespace, model, tok, GenerationConfig())
    partial.sync_weights(model)  # not checked after construction: vLLM already holds complete weights
    with pytest.raises(ValueError, match="lm_bias"):
        partial.sync_weights(model, check_complete=True)
    remote = VLLMEngine._from_llm(FakeLLM(None, in_process=False), SimpleNamespace, model, tok, GenerationConfig())
    with pytest.raises(ValueError, match="VLLM_ENABLE_V1_MULTIPROCESSING"):
        remote.sync_weights(model)
    bare = VLLMEngine._from_llm(SimpleNamespace(), SimpleNamespace, model, tok, GenerationConfig())
    with pytest.raises(ValueError, match="apply_model.*supported: vLLM >= 0.10"):
        bare.sync_weights(model)


def test_sleep_then_sync_then_generate_wakes_each_memory_once(policy):
    """With sleep mode on: sleep (level 1) → sync wakes only the weights → generate wakes only the KV cache (waking an
    awake allocation twice is an error in vLLM's allocator); without sleep mode, sleep is a no-op."""
    model, _ = policy
    engine, llm = fake_engine(policy, lambda j, k: [40])
    engine.sleep()
    assert llm.events == []
    engine._sleep_mode = True  # as built with enable_sleep_mode=True
    engine.sleep()
    engine.sleep()
    engine.sync_weights(model)
    engine.generate(PROMPTS[:1], [1])
    engine.generate(PROMPTS[:1], [1])
    assert llm.events == ["sleep1", "wake_up['weights']", "reset_prefix_cache", "wake_up['kv_cache']", "generate",
                          "generate"]  # fmt: skip


@pytest.mark.gpu
def test_vllm_engine_on_cuda_matches_the_policy_before_and_after_a_weight_sync():
    """On a GPU with vLLM: rollouts have the HFEngine layout; vLLM's processed log-probs (T = 1, no truncation) agree
    with the policy's recomputed ones to bf16 precision; after perturbing the policy and syncing, vLLM's log-probs
    follow the new weights (closer to the new policy than to the old one)."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("needs vllm (pip install 'v05[vllm]' in an environment with vLLM's own torch build)")
    model, tok = load_policy(PolicyConfig(device="cuda", dtype="bfloat16"))
    gen = GenerationConfig(temperature=1.0, max_new_tokens=8)
    engine = VLLMEngine(model, tok, gen, seed=0, recompute_logprobs=False, gpu_memory_utilization=0.2)
    try:
        r = engine.generate(PROMPTS, [4, 0, 4])
        np.testing.assert_array_equal(r.prompt_index, [0] * 4 + [2] * 4)
        assert r.response_ids.shape[1] <= 8 and (r.lengths == r.response_mask.sum(1).numpy()).all()
        ends = r.response_ids[torch.arange(len(r)), torch.as_tensor(r.lengths) - 1]
        assert ((ends == tok.eos_token_id).numpy() == ~r.truncated).all()
        m = r.response_mask.bool()
        before = recompute_old_logp(model, r, 1.0).old_logp
        assert (r.old_logp[m] - before[m]).abs().mean() < 0.05  # bf16 logits: ~1e-2 per token
        old_model = copy.deepcopy(model)
        with torch.no_grad(), torch.random.fork_rng(devices=[model.device]):
            torch.manual_seed(0)
            for p in model.parameters():  # a large step: ~1 std of noise per parameter
                p.add_(torch.randn_like(p) * p.float().std().clamp_min(0.02).to(p.dtype))
        engine.sync_weights(model)
        r2 = engine.generate(PROMPTS, [4, 0, 4])
        m2 = r2.response_mask.bool()
        gap_new = (r2.old_logp[m2] - recompute_old_logp(model, r2, 1.0).old_logp[m2]).abs().mean()
        gap_old = (r2.old_logp[m2] - recompute_old_logp(old_model, r2, 1.0).old_logp[m2]).abs().mean()
        assert gap_new < 0.05 and gap_new < gap_old
        assert engine.state_dict() == {"seed": 0, "calls": 2}
    finally:
        engine.close()
