"""``policy.lora``: a peft LoRA adapter trains, the base weights stay frozen, the export merges it."""

from __future__ import annotations

import pytest
import torch

from v05.train import policy as policy_mod
from v05.train.config import load_config
from v05.train.loop import _optimizer
from v05.train.policy import LoraConfig, PolicyConfig, load_policy, merged_policy, resolve_dtype


def test_only_the_adapter_trains_and_the_export_is_the_merged_model():
    """Rank 4 on the tiny Llama's 4 attention projections × 2 layers: 8 × 4·(128 + 128) = 8,192 trainable numbers,
    all LoRA; an optimizer step of the trainer's AdamW moves them and leaves every base weight as it was; the
    adapter starts as the base model (B = 0); the merged export is a plain Llama with the adapted model's logits."""
    base, tokenizer = load_policy(PolicyConfig(device="cpu"))  # float32 on CPU without LoRA (auto)
    ids = tokenizer("12+7=", return_tensors="pt").input_ids
    with torch.no_grad():
        base_logits = base(ids).logits
    model, _ = load_policy(PolicyConfig(device="cpu", dtype="float32", lora=LoraConfig(r=4, alpha=8.0)))
    trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
    assert all("lora_" in n for n in trainable) and sum(p.numel() for p in trainable.values()) == 8 * 4 * 256
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, base_logits)  # B = 0: the adapter starts as the base
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    lora_before = {n: p.detach().clone() for n, p in trainable.items()}
    cfg = load_config("demo-grpo4", ["optim.warmup_steps=0"])
    optimizer, _ = _optimizer(cfg, model)
    for _ in range(2):  # B moves at the first step; A (whose gradient is B-weighted) at the second
        optimizer.zero_grad()
        model(ids).logits.logsumexp(-1).mean().backward()
        optimizer.step()
    assert all(torch.equal(p, frozen[n]) for n, p in model.named_parameters() if n in frozen)
    assert all(not torch.equal(p, lora_before[n]) for n, p in trainable.items())
    merged = merged_policy(model)
    assert type(merged).__name__ == "LlamaForCausalLM" and not any("lora_" in n for n, _ in merged.named_parameters())
    with torch.no_grad():
        torch.testing.assert_close(merged(ids).logits, model(ids).logits, atol=1e-5, rtol=1e-5)
        assert not torch.allclose(merged(ids).logits, base_logits)
    assert any("lora_" in n for n, _ in model.named_parameters())  # merging worked on a copy


def test_bad_lora_settings_fail_in_one_line():
    """A non-positive rank or unknown target modules are one-line ValueErrors; a LoRA override from the CLI parses."""
    with pytest.raises(ValueError, match="policy.lora.r=0 must be a positive integer"):
        LoraConfig(r=0)
    with pytest.raises(ValueError, match="policy.lora: "):
        load_policy(PolicyConfig(device="cpu", lora=LoraConfig(target_modules=("nope_proj",))))
    cfg = load_config("demo-grpo4", ["policy.lora={r: 2, alpha: 4, target_modules: [q_proj]}"])
    assert cfg.policy.lora == LoraConfig(r=2, alpha=4.0, target_modules=("q_proj",))


@pytest.mark.parametrize("native", [True, False])
def test_auto_dtype_puts_a_lora_base_in_bf16_where_the_cpu_has_it(monkeypatch, native):
    """``dtype=auto`` on CPU: a LoRA policy's frozen base is bfloat16 where the CPU multiplies bf16 natively and its
    adapter stays float32 (peft's adapter autocast); without LoRA, or without native bf16, every weight is float32."""
    monkeypatch.setattr(policy_mod, "cpu_has_native_bf16", lambda: native)
    cpu = torch.device("cpu")
    assert resolve_dtype("auto", cpu) == torch.float32
    assert resolve_dtype("auto", cpu, lora=True) == (torch.bfloat16 if native else torch.float32)
    assert resolve_dtype("float32", cpu, lora=True) == torch.float32
    model, _ = load_policy(PolicyConfig(device="cpu", lora=LoraConfig(r=4, alpha=8.0)))
    base = {p.dtype for p in model.parameters() if not p.requires_grad}
    adapter = {p.dtype for p in model.parameters() if p.requires_grad}
    assert base == {torch.bfloat16 if native else torch.float32} and adapter == {torch.float32}
    full, _ = load_policy(PolicyConfig(device="cpu"))
    assert {p.dtype for p in full.parameters()} == {torch.float32}
