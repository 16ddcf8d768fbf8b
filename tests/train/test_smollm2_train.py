"""SmolLM2-135M-Instruct trained by ``v05 train`` on its real weights: one RL step of 4 rollouts, save and resume.

Kept short (1 prompt × k = 4 rollouts of 4 new tokens a step, chat-rendered arithmetic, no warm start, no eval) so
that it runs in the default suite.
"""

from __future__ import annotations

import shutil

import pytest
from safetensors.torch import load_file

from tests.train._rows import comparable, rows_of
from v05.train.config import load_config
from v05.train.loop import train

SMOLLM2 = [
    "policy.name_or_path=smollm2-135m-instruct",
    "task.name=arithmetic",
    "task.options={n_train: 20, n_eval: 8, n_val: 8, max_digits: 1, mix: [1.0, 0.0, 0.0]}",
    "generation.max_new_tokens=4",
    "warmup.enabled=false",
    "train.batch_size=1",
    "allocator.options.k=4",
    "train.max_rollouts=null",
    "eval.every=0",
    "eval.at_start=false",
    "run.progress=false",
    "run.tensorboard=false",
]


@pytest.fixture(scope="module", autouse=True)
def model_cache(tmp_path_factory):
    """One dequantised copy of the GGUF for the module (the first load writes it; 540 MB, removed after the module)."""
    mp = pytest.MonkeyPatch()
    folder = tmp_path_factory.mktemp("models")
    mp.setenv("V05_MODEL_CACHE", str(folder))
    yield
    mp.undo()
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("lora", ["'policy.lora={r: 4, alpha: 8}'", None])
def test_smollm2_rl_step_then_resume_equals_the_uninterrupted_run(tmp_path, lora):
    """Two RL steps of 4 rollouts each, checkpointed after step 1; a run killed at step 2 and resumed logs the same
    metrics and ends with the same trainable weights as the uninterrupted run, LoRA adapter or full fine-tune; each
    step generated, scored and updated 4 rollouts, and the update moved the weights (v05_eb against a running mean:
    all-fail groups still carry an advantage, as the model as it comes fails most prompts)."""
    over = [*SMOLLM2, "train.steps=2", "run.checkpoint_every=1", "estimator.name=v05_eb", "prior.name=running_mean"]
    if lora is not None:
        over.append(lora.strip("'"))
    cfg = load_config("demo-grpo4", over)
    full = train(cfg, tmp_path / "full")
    assert full.steps == 2 and full.rollouts_total == 8
    rows = [r for r in rows_of(tmp_path / "full") if r["step"] > 0]
    assert [r["rollouts_total"] for r in rows] == [4, 8]
    ckpt = "checkpoints/step_{:06d}/policy/model.safetensors"
    first, last = (load_file(tmp_path / "full" / ckpt.format(s)) for s in (1, 2))
    # a full fine-tune's checkpoint is 1.6 GB (weights and Adam's moments): keep the disk peak to one run's (CI's
    # disk once ran out here)
    shutil.rmtree(tmp_path / "full" / "checkpoints")
    shutil.rmtree(tmp_path / "full" / "final")

    def die_at_2(row):
        if row["step"] == 2:
            raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        train(cfg, tmp_path / "cut", log=die_at_2)
    resumed = train(cfg, tmp_path / "cut", resume=True)
    assert resumed.steps == 2
    for ra, rb in zip(rows_of(tmp_path / "full"), rows_of(tmp_path / "cut"), strict=True):
        assert comparable(ra) == comparable(rb), ra["step"]
    again = load_file(tmp_path / "cut" / ckpt.format(2))
    assert last.keys() == again.keys() and all(bool((last[k] == again[k]).all()) for k in last)
    assert any(not bool((first[k] == last[k]).all()) for k in last)  # step 2's update moved the weights
