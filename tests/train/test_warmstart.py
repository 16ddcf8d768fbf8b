"""The SFT warm start selects on the validation split, never on the eval split; demo run directories stay in --out."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace as dataclasses_replace
from pathlib import Path

import pytest
import torch

from v05.grid.spec import load_grid
from v05.grid.store import warm_start_digest
from v05.tasks import make_task
from v05.train import demo as demo_module
from v05.train import warmstart
from v05.train.config import load_config, to_yaml
from v05.train.demo import DEMO_CONFIGS, DEMO_REGIMES, config_label, run_demo
from v05.train.loop import TrainResult
from v05.train.policy import load_policy
from v05.train.sft import SFTResult

GRIDS = Path(__file__).resolve().parents[2] / "benchmarks" / "grids"


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


@pytest.mark.parametrize("grid", ["standard.yaml", "prior-pay.yaml"])
def test_demo_hard_regime_is_the_grids_arithmetic_hard_setting(grid):
    """`v05 demo --regime hard` warm-starts as the matrix's arithmetic-hard task setting does, so the demo shows the
    regime the matrix measured (one definition drifting from the other would compare two warm starts)."""
    task = {t.name: t for t in load_grid(GRIDS / grid).tasks}["arithmetic-hard"]
    assert DEMO_REGIMES["hard"] == task.overrides and task.regime == "hard"
    assert DEMO_REGIMES["easy"] == {t.name: t for t in load_grid(GRIDS / grid).tasks}["arithmetic-easy"].overrides


def test_make_demo_shows_the_recommended_config_beside_both_grpos_and_the_papers_v05_from_the_hard_warm_start():
    """`make demo` (`v05 demo` without options) trains GRPO k = 16, GRPO k = 4, V0.5 and v05-recommended from the
    ~15 % warm start (the hard regime, where k = 1 pays), all four at one rollout budget; v05-recommended is the
    evidence grid's pick, `v05_eb` with the `history` prior."""
    parser = argparse.ArgumentParser()
    demo_module.register(parser.add_subparsers())
    args = parser.parse_args(["demo"])
    assert args.regime == "hard" and tuple(args.configs.split(",")) == DEMO_CONFIGS
    assert DEMO_CONFIGS == ("demo-grpo16", "demo-grpo4", "demo-v05", "v05-recommended")
    cfgs = [load_config(name, DEMO_REGIMES["hard"]) for name in DEMO_CONFIGS]
    assert {c.train.max_rollouts for c in cfgs} == {38_400}
    assert {c.warmup.sft.target_pass_rate for c in cfgs} == {0.15}
    assert [(c.estimator.name, c.prior.name) for c in cfgs][2:] == [("v05", "v0"), ("v05_eb", "running_mean")]


def test_demo_regime_reaches_every_run_and_a_finished_run_of_another_regime_is_refused(tmp_path, monkeypatch):
    """--regime hard trains every config from the 15 % warm start; a finished easy run in --out is not reused as the
    hard one (it names the differing field), and an unknown regime is one ValueError."""
    seen = []

    def fake_train(cfg, run_dir, *, resume=False):
        seen.append(cfg.warmup.sft.target_pass_rate)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(to_yaml(cfg))
        (run_dir / "final").mkdir()
        return TrainResult(run_dir, 1, 1, 0.0)

    monkeypatch.setattr("v05.train.loop.train", fake_train)
    monkeypatch.setattr(demo_module, "write_report", lambda runs, out, title: out / "report.html")
    monkeypatch.setattr(demo_module, "load_runs", lambda dirs: list(dirs))
    run_demo(tmp_path / "hard", configs=("demo-grpo4", "demo-v05"))  # the default regime is the hard one
    assert seen == [0.15, 0.15]
    run_demo(tmp_path / "hard", configs=("demo-grpo4", "demo-v05"), regime="hard")  # finished, same config: reused
    assert seen == [0.15, 0.15]
    run_demo(tmp_path / "easy", configs=("demo-grpo4",), regime="easy")
    assert seen[-1] != 0.15
    with pytest.raises(ValueError, match="another config.*warmup.sft.target_pass_rate"):
        run_demo(tmp_path / "easy", configs=("demo-grpo4",))
    with pytest.raises(ValueError, match="unknown regime 'medium'"):
        run_demo(tmp_path / "easy", regime="medium")


def test_a_lora_warm_start_is_its_adapter_and_rl_trains_on_from_it(tmp_path, monkeypatch, tiny_overrides):
    """With ``policy.lora`` the warm-up trains the adapter on the frozen base and keeps the adapter only (no model
    weights: a grid's store can hold it); RL's policy is the base with that adapter, trainable, and computes exactly
    the warmed-up model's logits (not the base's: the adapter was not dropped; not a fresh B = 0 one)."""
    over = [*tiny_overrides, f"warmup.cache_dir={tmp_path}", "policy.dtype=float32", "policy.lora={r: 4, alpha: 8}",
            "warmup.sft={lr: 1.0e-2, batch_size: 16, warmup_steps: 1, target_pass_rate: 1.0, eval_every: 3, "
            "max_steps: 3}"]  # fmt: skip
    cfg = load_config(None, over)
    ids = torch.tensor([[1, 5, 6, 7, 8]])
    seen = {}
    real_sft = warmstart.sft_warmup

    def recording_sft(model, *args, **kwargs):
        base = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n}
        result = real_sft(model, *args, **kwargs)
        with torch.no_grad():
            seen["logits"] = model(ids).logits
        seen["base_kept"] = all(torch.equal(p, base[n]) for n, p in model.named_parameters() if n in base)
        return result

    monkeypatch.setattr(warmstart, "sft_warmup", recording_sft)
    target = warmstart.ensure_warm_start(cfg, progress=False)
    assert seen["base_kept"]  # only the adapter trained
    files = {p.name for p in target.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "sft.json"} <= files
    assert not files & {"model.safetensors", "config.json"}
    assert warm_start_digest(cfg) is not None  # the store pairs cells on the adapter's bytes
    policy = warmstart.warm_policy(cfg, target)
    assert policy.adapter == str(target) and policy.name_or_path == cfg.policy.name_or_path
    model, _ = load_policy(policy)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    base, _ = load_policy(cfg.policy)  # the same base with a fresh adapter
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, seen["logits"])
        assert not torch.allclose(base(ids).logits, seen["logits"])
    other = dataclasses_replace(policy, lora=dataclasses_replace(policy.lora, r=8))
    with pytest.raises(ValueError, match="policy.adapter=.*r, alpha, target modules"):
        load_policy(other)
    with pytest.raises(ValueError, match="policy.adapter=.*needs policy.lora"):
        dataclasses_replace(policy, lora=None)


def test_a_missing_adapter_folder_is_one_line_naming_the_field(tmp_path):
    """`policy.adapter` names a local folder: one that does not exist is refused when the config is checked."""
    with pytest.raises(ValueError, match=r"^policy.adapter: no such directory"):
        load_config(None, ["policy.lora={r: 4, alpha: 8}", f"policy.adapter={tmp_path / 'nope'}"])


def test_an_adapter_with_a_warm_up_is_refused_not_ignored(tmp_path):
    """The warm-up trains its own adapter on the base and RL trains on from that one: a user's `policy.adapter` beside
    `warmup.enabled` would be dropped without a word, so the config is refused in one line naming the field."""
    (tmp_path / "adapter_config.json").write_text("{}")
    adapter = ["policy.lora={r: 4, alpha: 8}", f"policy.adapter={tmp_path}"]
    with pytest.raises(ValueError, match=r"^policy.adapter: the SFT warm-up .* warmup.enabled=false"):
        load_config(None, [*adapter, "warmup.enabled=true"])
    assert load_config(None, adapter).policy.adapter == str(tmp_path)  # without the warm-up it is the policy
