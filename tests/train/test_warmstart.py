"""The SFT warm start selects on the validation split, never on the eval split; demo run directories stay in --out."""

from __future__ import annotations

import json

import pytest

from v05.tasks import make_task
from v05.train import demo as demo_module
from v05.train import warmstart
from v05.train.config import load_config
from v05.train.demo import config_label, run_demo
from v05.train.loop import TrainResult
from v05.train.sft import SFTResult


def test_warm_start_stops_on_the_validation_split(tmp_path, monkeypatch, tiny_overrides):
    """Every prompt the warm-up samples to decide when to stop is a validation prompt: none is an eval or a train
    prompt (stopping on the eval split selected the warm start on the numbers the runs are judged by)."""
    cfg = load_config(None, [*tiny_overrides, f"warmup.cache_dir={tmp_path}"])
    sampled: list[str] = []
    real_engine = warmstart.HFEngine

    class SpyEngine(real_engine):  # type: ignore[misc, valid-type]
        def generate(self, prompts, counts):
            sampled.extend(prompts)
            return super().generate(prompts, counts)

    def one_eval(model, tokenizer, pairs, *, evaluate, config, progress):
        rate = evaluate(model)
        return SFTResult(steps=0, seconds=0.0, pass_rate=rate, reached=True, history=((0, rate),), losses=())

    monkeypatch.setattr(warmstart, "HFEngine", SpyEngine)
    monkeypatch.setattr(warmstart, "sft_warmup", one_eval)
    target = warmstart.ensure_warm_start(cfg, progress=False)
    task = make_task(cfg.task.name, **cfg.task.options)
    render = lambda ps: {f"{p.question}=" for p in ps}  # noqa: E731  (the tiny task's plain template)
    assert sampled and set(sampled) <= render(task.validation_prompts())
    assert not set(sampled) & (render(task.eval_prompts()) | render(task.train_prompts()))
    info = json.loads((target / "sft.json").read_text())
    assert info["split"] == "validation" and info["validation_size"] == len(task.validation_prompts()) == 20


def test_warm_start_without_a_validation_split_is_refused(tmp_path, tiny_overrides):
    """A task with an empty validation split cannot select a warm start: a one-line error says how to give it one."""
    over = [*tiny_overrides, f"warmup.cache_dir={tmp_path}",
            "task.options={n_train: 50, n_eval: 30, n_val: 0, max_digits: 1, mix: [1.0, 0.0, 0.0]}"]  # fmt: skip
    with pytest.raises(ValueError, match="validation split.*n_val"):
        warmstart.ensure_warm_start(load_config(None, over), progress=False)


def test_config_labels():
    """Packaged names stay as they are; files are labelled by their name without .yaml."""
    assert config_label("demo-grpo4") == "demo-grpo4"
    assert config_label("my.yaml") == "my" and config_label("/abs/dir/other.yml") == "other"
    assert config_label("configs/x") == "x"


def test_demo_writes_file_configs_under_out(tmp_path, monkeypatch):
    """`v05 demo --configs /some/dir/my.yaml --out OUT` trains into OUT/my-s0, not beside the file (it wrote
    /some/dir/my.yaml-s0 before); two files of one name are refused."""
    cfg_dir = tmp_path / "cfgs"
    cfg_dir.mkdir()
    (cfg_dir / "my.yaml").write_text("name: mine\ntrain: {steps: 1}\n")
    runs = []

    def fake_train(cfg, run_dir, *, resume=False):
        runs.append(run_dir)
        return TrainResult(run_dir, 1, 1, 0.0)

    monkeypatch.setattr("v05.train.loop.train", fake_train)
    monkeypatch.setattr(demo_module, "write_report", lambda runs, out, title: out / "report.html")
    monkeypatch.setattr(demo_module, "load_runs", lambda dirs: list(dirs))
    out = tmp_path / "out"
    run_demo(out, configs=(str(cfg_dir / "my.yaml"),))
    assert runs == [out / "my-s0"]
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "my.yaml").write_text("name: x\n")
    with pytest.raises(ValueError, match="share a run label"):
        run_demo(out, configs=(str(cfg_dir / "my.yaml"), str(tmp_path / "other" / "my.yaml")))
