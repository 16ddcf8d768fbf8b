"""The prepared GPU check (`benchmarks/gpu/check.py`) runs only on a lent GPU; here its configs must stay loadable.

A renamed config key or task option would otherwise surface only on the device machine, where time is scarce.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import pytest

from v05.train.config import load_config

CHECK = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu" / "check.py"


@pytest.fixture(scope="module")
def check():
    spec = importlib.util.spec_from_file_location("gpu_check", CHECK)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module
    spec.loader.exec_module(module)
    return module


def _args(**kw) -> argparse.Namespace:
    return argparse.Namespace(model="tiny-llama", lm_model="smollm2-135m-instruct", device="cpu", dtype="bfloat16",
                              steps=5, **kw)  # fmt: skip


@pytest.mark.parametrize("engine", [None, "vllm"])
def test_train_overrides_load(check, engine):
    """Part 3's overrides (HF and vLLM engines) load: every key and option still exists."""
    cfg = load_config(None, check.train_overrides(_args(), engine))
    assert cfg.train.steps == 5 and cfg.allocator.options["k"] == 4


@pytest.mark.parametrize("lora", [True, False])
def test_lm_overrides_load_with_the_smollm2_shape(check, lora):
    """The lm parts run part 3 on SmolLM2's chat task: their later overrides win (batch, tokens, the whole options
    dict), LoRA only in lm_lora, and the architecture constant is SmolLM2-135M's."""
    cfg = load_config(None, check.lm_overrides(_args(), lora))
    assert cfg.task.template == "chat" and cfg.train.batch_size == 64 and cfg.generation.max_new_tokens == 8
    assert cfg.policy.name_or_path == "smollm2-135m-instruct" and cfg.task.options["n_train"] == 4000
    assert "n_val" not in cfg.task.options and cfg.task.options["max_digits"] == 2
    assert (cfg.policy.lora is not None) == lora
    assert check.PARTS[-2:] == ("lm_lora", "lm_full") and set(check.PARTS) <= set(check.PART_LIMITS_S)
    assert check.SMOLLM2_SHAPE["num_hidden_layers"] == 30 and check.SMOLLM2_SHAPE["hidden_size"] == 576
