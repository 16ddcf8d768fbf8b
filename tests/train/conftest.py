"""Shared fixtures for trainer tests: a tiny task and a warm start that makes rewards non-trivial in seconds."""

from __future__ import annotations

import pytest
import torch

torch.set_num_threads(1)

# 1-digit sums only: 100 distinct questions (50 train, 30 eval, the 20 left validate the warm start); the tiny
# policy learns them to ~40% in ~300 SFT steps
TINY_TASK = [
    "task.name=arithmetic",
    "task.options={n_train: 50, n_eval: 30, n_val: 20, max_digits: 1, mix: [1.0, 0.0, 0.0]}",
    "generation.max_new_tokens=4",
]


@pytest.fixture(scope="session")
def warm_cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A warm-start cache folder shared by the session (the first run trains it, ~4 s; the rest load it)."""
    return str(tmp_path_factory.mktemp("warm_start"))


@pytest.fixture
def tiny_overrides(warm_cache: str) -> list[str]:
    """Overrides for a seconds-long run: tiny task, cached SFT warm start, 3 steps of 8 prompts, small eval."""
    return [
        *TINY_TASK,
        "warmup.enabled=true",
        f"warmup.cache_dir={warm_cache}",
        "warmup.sft={lr: 2.0e-3, batch_size: 64, warmup_steps: 10, target_pass_rate: 0.3, eval_every: 25, "
        "max_steps: 400}",
        "warmup.n_examples=2000",
        "warmup.eval_size=40",
        "train.batch_size=8",
        "train.steps=3",
        "eval.every=2",
        "eval.size=16",
        "run.progress=false",
        "run.tensorboard=false",
        "run.checkpoint_every=0",
    ]

