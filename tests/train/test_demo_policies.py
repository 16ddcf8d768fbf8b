"""``v05 demo --policy``: the demo policies' plans, the SmolLM2 demo and ``benchmarks/grids/lm.yaml`` kept identical."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import pytest

from v05.cli import main
from v05.grid.cells import grid_cells
from v05.grid.spec import load_grid
from v05.train import demo as demo_module
from v05.train.config import load_config, to_yaml
from v05.train.demo import (
    DEMO_CONFIGS,
    DEMO_POLICIES,
    DEMO_REGIMES,
    SMOLLM2_DEMO,
    TINY_DEMO,
    DemoPolicy,
    demo_policy,
    run_demo,
)
from v05.train.loop import TrainResult

LM_GRID = Path(__file__).resolve().parents[2] / "benchmarks" / "grids" / "lm.yaml"
ROLLOUTS_PER_STEP = 64


def _smollm2_configs() -> list:
    return [load_config(name, SMOLLM2_DEMO.run_overrides(name, "hard")) for name in DEMO_CONFIGS]


def test_demo_policies_are_a_registry_with_the_tiny_policy_as_make_demos_default():
    """`make demo` (`v05 demo` without options) still trains the tiny policy with the packaged configs as they are;
    `--policy smollm2` is one registry entry, not a branch."""
    assert DEMO_POLICIES == {"tiny": TINY_DEMO, "smollm2": SMOLLM2_DEMO}
    assert all(isinstance(p, DemoPolicy) for p in DEMO_POLICIES.values())
    parser = argparse.ArgumentParser()
    demo_module.register(parser.add_subparsers())
    assert parser.parse_args(["demo"]).policy == "tiny"
    assert parser.parse_args(["demo", "--policy", "smollm2"]).policy == "smollm2"
    for name in DEMO_CONFIGS:
        assert TINY_DEMO.run_overrides(name, "hard") == DEMO_REGIMES["hard"]
        assert TINY_DEMO.run_overrides(name, "easy") == ()
    with pytest.raises(AttributeError):
        SMOLLM2_DEMO.budget = ()  # type: ignore[misc]  # frozen


def test_smollm2_demo_plan_is_the_real_model_with_lora_chat_sft_and_one_budget():
    """Every method of `v05 demo --policy smollm2`: SmolLM2-135M-Instruct from the wheel with a LoRA adapter, the
    2-digit add/sub task in chat form, the chat-form SFT of the adapter stopped at 15 % (lr 1e-3, 16 a step), short
    completions, 768 rollouts, 64 rollouts a step (the budget's unit: ~20-70 s on 2 cores), eval by rollouts."""
    cfgs = _smollm2_configs()
    for cfg in cfgs:
        assert cfg.policy.name_or_path == "smollm2-135m-instruct" and cfg.policy.gguf_file is None
        assert cfg.policy.lora is not None and (cfg.policy.lora.r, cfg.policy.lora.alpha) == (8, 16.0)
        assert cfg.policy.dtype == "auto"  # bf16 base on an AMX CPU (LoRA)
        assert cfg.task.name == "arithmetic" and cfg.task.template == "chat"
        opts = cfg.task.options
        assert opts["max_digits"] == 2 and list(opts["mix"]) == [0.5, 0.5, 0.0] and opts["held_out_first"]
        assert opts["n_train"] >= cfg.train.max_rollouts  # a fresh pool: k = 1 draws one prompt a rollout
        assert cfg.warmup.enabled and cfg.warmup.sft.target_pass_rate == 0.15
        assert (cfg.warmup.sft.lr, cfg.warmup.sft.batch_size) == (1.0e-3, 16)  # the LoRA adapter's SFT
        assert cfg.warmup.sft.max_steps * cfg.warmup.sft.batch_size <= cfg.warmup.n_examples
        assert cfg.generation.max_new_tokens == 8
        assert cfg.generation.batch_size == 64  # 512 put the 256-prompt eval in one batch: 16.8 GB resident
        assert cfg.train.max_rollouts == 768 and cfg.eval.every_rollouts == 384 and not cfg.eval.greedy
        assert cfg.eval.size == 128
    by_name = dict(zip(DEMO_CONFIGS, cfgs, strict=True))
    for name in ("demo-grpo16", "demo-grpo4", "v05-recommended"):
        cfg = by_name[name]
        assert cfg.train.batch_size * cfg.allocator.options["k"] == ROLLOUTS_PER_STEP, name
    v05 = by_name["demo-v05"]  # OSLA: k_init 4 a prompt before its extras
    assert v05.allocator.name == "osla" and v05.train.batch_size * v05.allocator.options["k_init"] == ROLLOUTS_PER_STEP
    assert [(c.estimator.name, c.prior.name) for c in cfgs] == [
        ("grpo", None), ("grpo", None), ("v05", "v0"), ("v05_eb", "running_mean")
    ]  # fmt: skip


def _fake_demo(monkeypatch) -> list:
    seen = []

    def fake_train(cfg, run_dir, *, resume=False):
        seen.append(cfg)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(to_yaml(cfg))
        (run_dir / "final").mkdir()
        return TrainResult(run_dir, 1, 1, 0.0)

    monkeypatch.setattr("v05.train.loop.train", fake_train)
    monkeypatch.setattr(demo_module, "write_report", lambda runs, out, title: out / "report.html")
    monkeypatch.setattr(demo_module, "load_runs", lambda dirs: list(dirs))
    return seen


def test_run_demo_trains_the_chosen_policy_and_the_users_overrides_come_last(tmp_path, monkeypatch):
    """`--policy smollm2` reaches every run (and the user's overrides win over it); the default stays tiny."""
    seen = _fake_demo(monkeypatch)
    run_demo(tmp_path / "lm", policy="smollm2", overrides=("train.max_rollouts=128",))
    assert [c.policy.name_or_path for c in seen] == ["smollm2-135m-instruct"] * 4
    assert [c.train.batch_size for c in seen] == [4, 16, 16, 64]
    assert {c.train.max_rollouts for c in seen} == {128}
    assert sorted(p.name for p in (tmp_path / "lm").iterdir()) == sorted(f"{n}-s0" for n in DEMO_CONFIGS)
    run_demo(tmp_path / "tiny", configs=("demo-grpo4",))
    assert seen[-1].policy.name_or_path == "tiny-llama" and seen[-1].train.batch_size == 32


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--policy", "gpt5"], "unknown policy 'gpt5'; valid: tiny, smollm2"),
        (["--policy", "smollm2", "--regime", "easy"], "unknown regime 'easy'; valid: hard"),
    ],
)
def test_bad_policy_or_a_regime_the_policy_lacks_is_one_line_before_any_run(tmp_path, argv, message, capsys,
                                                                            monkeypatch):  # fmt: skip
    """`v05 demo --policy gpt5` (or a regime the policy does not offer) is one error line, exit code 2, nothing
    trained."""
    seen = _fake_demo(monkeypatch)
    assert main(["demo", "--out", str(tmp_path / "d"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert seen == [] and not (tmp_path / "d").exists()
    with pytest.raises(ValueError, match="unknown policy"):
        demo_policy("gpt5")


def test_lm_grid_task_setting_is_the_smollm2_demos_on_a_fresh_pool():
    """benchmarks/grids/lm.yaml's task setting is `v05 demo --policy smollm2`'s (hard regime) override for override,
    so the grid measures what the demo shows; its pool is fresh at the grid's budget; its GRPO is the demo's."""
    grid = load_grid(LM_GRID)
    (task,) = grid.tasks
    assert task.overrides == SMOLLM2_DEMO.setting("hard")
    assert task.pool == "fresh" and task.regime == "hard"
    methods = {m.name: m for m in grid.methods}
    assert set(methods) == {"grpo4", "rec_k1", "rec_k2", "rm_k1", "comb_k1", "spo", "sel_history"}
    assert grid.reference == "grpo4"
    assert methods["grpo4"].config == "demo-grpo4"
    assert methods["grpo4"].overrides == SMOLLM2_DEMO.methods["demo-grpo4"]
    assert grid.seeds == (0, 1, 2)


def test_lm_grid_cells_spend_64_rollouts_a_step_up_to_3072_with_an_eval_every_768(tmp_path):
    """Every one of the 21 cells loads; each method spends 64 rollouts a step up to 3,072 rollouts (a pool of at
    least that many prompts), evaluated every 768; rm_k1 is v05-recommended (the selection grid's pick since
    2026-12-06) as `v05 demo --policy smollm2` runs it, field for field; rec_k1 and rec_k2 are the former pick
    (v05_eb + history) at k = 1 and 2, comb_k1 the learned `combined` prior at k = 1, spo SPO (its tracker, batch
    normalisation and weighted draw) at k = 1, and sel_history the selection grid's picked selector (prior_select by
    the `history` prior, k = 1 x 64 from a 4x pool)."""
    grid = load_grid(LM_GRID)
    cells = grid_cells(grid, tmp_path)
    assert len(cells) == 21
    for cell in cells:
        cfg = cell.cfg
        assert cfg.train.max_rollouts == 3072 and cfg.eval.every_rollouts == 768, cell.method.name
        assert cfg.train.batch_size * cfg.allocator.options["k"] == ROLLOUTS_PER_STEP, cell.method.name
        assert cfg.task.options["n_train"] >= cfg.train.max_rollouts
        assert cfg.policy.name_or_path == "smollm2-135m-instruct" and cfg.policy.lora is not None
    by = {c.method.name: c.cfg for c in cells if c.seed == 0}
    demo_rec = load_config("v05-recommended", [*SMOLLM2_DEMO.setting("hard"), *SMOLLM2_DEMO.methods["v05-recommended"],
                                               *grid.overrides, "seed=0", "name=rm_k1"])  # fmt: skip
    assert dataclasses.replace(by["rm_k1"], run=demo_rec.run) == demo_rec
    for name in ("rec_k1", "rec_k2"):
        assert (by[name].estimator.name, by[name].prior.name) == ("v05_eb", "history")
    assert by["rec_k1"].allocator.options["k"] == 1 and by["rec_k2"].allocator.options["k"] == 2
    assert (by["comb_k1"].estimator.name, by["comb_k1"].prior.name, by["comb_k1"].allocator.options["k"]) == (
        "v05_eb", "combined", 1
    )  # fmt: skip
    assert (by["grpo4"].estimator.name, by["grpo4"].allocator.options["k"]) == ("grpo", 4)
    assert (by["spo"].estimator.name, by["spo"].prior.name, by["spo"].allocator.name) == ("spo", "spo", "spo")
    sel = by["sel_history"]
    assert (sel.estimator.name, sel.prior.name, sel.allocator.name, sel.allocator.options["k"]) == (
        "v05_eb", "history", "prior_select", 1
    )  # fmt: skip
    assert sel.allocator.pool_factor is None and sel.allocator.rejects == "drop"  # the selection grid's 4x pool
    picked = json.loads((LM_GRID.parents[1] / "results/matrix/selection.json").read_text())["picks"]["selector"]
    assert (picked["method"], picked["setting"]) == ("sel_history", "default")


@pytest.mark.slow
def test_smollm2_demo_end_to_end_on_the_real_weights(tmp_path, monkeypatch):
    """`v05 demo --policy smollm2` on the real weights, shrunk (2 SFT steps, 16 rollouts a method, 8 eval prompts):
    every method trains a LoRA run from the chat SFT warm start and the report is written (minutes: slow)."""
    monkeypatch.setenv("V05_WARM_START_DIR", str(tmp_path / "warm"))
    over = ("warmup.sft.max_steps=2", "warmup.sft.eval_every=1", "warmup.eval_size=8", "train.max_rollouts=16",
            "eval.size=8", "run.progress=false", "run.tensorboard=false")  # fmt: skip
    report = run_demo(tmp_path / "demo", configs=("demo-grpo4", "v05-recommended"), policy="smollm2", overrides=over)
    assert report.is_file()
    for name in ("demo-grpo4", "v05-recommended"):
        assert (tmp_path / "demo" / f"{name}-s0" / "final").is_dir()
