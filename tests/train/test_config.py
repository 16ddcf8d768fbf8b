"""Configs: packaged names resolve, overrides merge, bad values fail naming the field, the CLI exits 2 on bad input."""

from __future__ import annotations

import subprocess
import sys

import pytest

from v05.cli import main
from v05.tasks import make_task
from v05.train.config import TrainConfig, load_config, packaged_configs, quick_config, to_yaml
from v05.train.policy import build_char_tokenizer
from v05.train.warmstart import render_all, warm_start_dir

DEMO = ("demo-grpo4", "demo-grpo16", "demo-v05", "demo-v05-eb", "demo-dapo")


def test_packaged_configs_resolve_and_check():
    """Every packaged config loads and passes the checks; the demo ones share the budget and the warm start."""
    names = packaged_configs()
    assert set(DEMO) | {"gsm8k-qwen0.5b-v05", "gym-chain-sum-qwen0.5b"} <= set(names)
    demo = [load_config(n) for n in DEMO]
    assert len({c.train.max_rollouts for c in demo}) == 1 and all(c.warmup.enabled for c in demo)
    assert len({warm_start_dir(c) for c in demo}) == 1  # one cached warm start for all
    v05 = load_config("demo-v05")
    assert (v05.estimator.name, v05.allocator.name, v05.prior.name) == ("v05", "osla", "v0")
    assert v05.allocator.options == {"k_init": 4, "k_max": 16, "c": 0.0039}
    eb = load_config("demo-v05-eb")
    assert (eb.estimator.name, eb.allocator.name, eb.prior.name) == ("v05_eb", "osla", "combined")
    # OSLA buys extras for exactly the prompts whose prior v05_eb drops: its guard, at one level
    assert eb.allocator.options["test"] == "eb_guard"
    assert eb.allocator.options["guard_level"] == eb.estimator.options["guard_level"]


def test_overrides_merge_and_yaml_round_trips(tmp_path):
    """Dotted overrides win over the file; the resolved YAML loads back to the same config."""
    cfg = load_config("demo-grpo4", ["train.steps=7", "allocator.options.k=8", "optim.lr=3e-5"])
    assert cfg.train.steps == 7 and cfg.allocator.options == {"k": 8} and cfg.optim.lr == 3e-5
    path = tmp_path / "c.yaml"
    path.write_text(to_yaml(cfg))
    assert load_config(str(path)) == cfg
    assert isinstance(cfg, TrainConfig)


def test_quick_shrinks_any_config():
    """--quick keeps the method and shrinks steps, batch, eval and the warm-up."""
    q = quick_config(load_config("demo-v05"))
    assert q.train.steps <= 6 and q.train.batch_size <= 16 and q.eval.size <= 64
    assert q.warmup.sft.max_steps <= 200 and (q.estimator, q.allocator, q.prior) == (
        load_config("demo-v05").estimator,
        load_config("demo-v05").allocator,
        load_config("demo-v05").prior,
    )
    assert q.warmup.sft.eval_every == 100  # the packaged 100 kept, a longer interval capped, a shorter one kept:
    assert quick_config(load_config("demo-v05", ["warmup.sft.eval_every=400"])).warmup.sft.eval_every == 100
    assert quick_config(load_config("demo-v05", ["warmup.sft.eval_every=5"])).warmup.sft.eval_every == 5


@pytest.mark.parametrize(("name", "k", "prompts"), [("v05-recommended", 1, 16), ("demo-grpo4", 4, 4),
                                                    ("demo-grpo16", 16, 1), ("demo-v05", 4, 4)])  # fmt: skip
def test_quick_on_a_real_checkpoint_plans_a_minute_or_two(name, k, prompts):
    """--quick on a real checkpoint (SmolLM2, ~2 s a rollout on CPU; v05-recommended used to plan 1,536 rollouts,
    ~50 min) runs ≤ 2 steps of ⌊16 / k⌋ prompts (≤ 32 rollouts), ≤ 16 new tokens, eval on ≤ 8 prompts at the start
    and the end, and ≤ 2 SFT steps of ≤ 8 examples checked on ≤ 8 validation prompts; the method is kept, and the tiny
    policy's quick config (pinned by the golden quick runs) is not touched."""
    real = load_config(name, ["policy.name_or_path=smollm2-135m-instruct"], quick=True)
    tiny = load_config(name, quick=True)
    assert (real.estimator, real.allocator, real.prior) == (tiny.estimator, tiny.allocator, tiny.prior)
    assert real.allocator.options.get("k", real.allocator.options.get("k_init")) == k
    t = real.train
    assert (t.steps, t.batch_size) == (2, prompts) and t.max_rollouts in (None, 32) and t.steps * prompts * k <= 32
    assert real.generation.max_new_tokens <= 16 and real.eval.size == 8 and real.eval.every == 3
    w = real.warmup
    assert (w.sft.max_steps, w.sft.batch_size, w.sft.eval_every, w.eval_size, w.n_examples) == (2, 8, 2, 8, 64)
    evals = 2 * real.eval.size * (2 if real.eval.greedy else 1)  # at the start and after the last step
    assert t.steps * prompts * k + evals + w.eval_size <= 80  # rollout-sized units: ~1-2 min at ~1-2 s each
    full = load_config(name)
    assert (tiny.train.steps, tiny.train.batch_size) == (6, min(full.train.batch_size, 16)) and tiny.eval.size == 64
    assert tiny.warmup.sft.max_steps == 200 and tiny.generation == full.generation


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (["train.stepz=3"], "stepz"),
        (["train.steps=abc"], "train.steps"),
        (["train.steps=0"], "train.steps"),
        (["estimator.name=gpro"], "estimator.name"),
        (["estimator.name=v05"], "prior.name"),
        (["allocator.name=osla", "allocator.options={k_init: 4}"], "prior.name"),
        (["allocator.options={kk: 4}"], "allocator.options"),
        (["allocator.options={batch_size: 4}"], "allocator.options.batch_size"),
        (["estimator.options={state: 1}"], "estimator.options"),
        (["estimator.name=oracle"], "estimator.name"),
        (["prior.name=magic"], "prior.name"),
        (["task.name=chess"], "task.name"),
        (["loss.agg=sum"], "loss.agg"),
        (["optim.lr=-1"], "optim.lr"),
        (["train.recompute_old_logp=sometimes"], "train.recompute_old_logp"),
        (["prior.input=html"], "prior.input"),
        (["warmup.per_seed=maybe"], "warmup.per_seed"),
        (["train.reward_range=2"], "train.reward_range"),
        (["steps"], "key=value"),
        (["allocator.rejects=keep"], "allocator.rejects"),
        (["prior.name=combined", "prior.options={max_pool_kernel: -1}"], "max_pool_kernel"),
        (["prior.name=combined", "prior.options={refit_every: 0}"], "refit_every"),
        (["estimator.name=gae", "estimator.options={gamma: 0.9}"], "critic.*"),  # gae's options are the critic's
        (["estimator.name=gae", "allocator.name=osla", "prior.name=running_mean"], "allocator.name"),
    ],
)
def test_bad_configs_name_the_field(overrides, field):
    """Each bad value raises ValueError whose one-line message names the offending field."""
    with pytest.raises(ValueError) as err:
        load_config(None, overrides)
    assert field in str(err.value) and "\n" not in str(err.value)


def test_unknown_config_name_lists_the_known_ones():
    """A name that is neither a file nor packaged lists the packaged configs."""
    with pytest.raises(ValueError, match="demo-v05"):
        load_config("demo-nope")


def test_cli_bad_input_exits_2_with_one_line(tmp_path, capsys):
    """`v05 train` with a bad override, or --resume without a checkpoint, exits 2 with one error line."""
    assert main(["train", "--config", "demo-grpo4", "--out", str(tmp_path / "r"), "train.steps=abc"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "train.steps" in err[0]
    assert main(["train", "--config", "demo-grpo4", "--out", str(tmp_path / "r2"), "--resume"]) == 2
    assert "no checkpoint" in capsys.readouterr().err


def test_train_help_lists_every_option(capsys):
    """`v05 train --help` prints the whole config schema with defaults and docstrings, and the packaged names."""
    with pytest.raises(SystemExit) as done:
        main(["train", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    for key in ("train.max_rollouts", "allocator.pool_factor", "loss.clip_high", "warmup.sft.target_pass_rate",
                "prior.feed_n0", "eval.every", "run.checkpoint_every", "generation.max_new_tokens"):  # fmt: skip
        assert key in out, key
    assert "demo-v05" in out


def test_missing_trainer_dependency_names_the_extra():
    """Without omegaconf (the train extra), `v05 train` says which extra to install in one line, exit 2."""
    code = (
        "import sys; sys.modules['omegaconf'] = None; from v05.cli import main; "
        "sys.exit(main(['train', '--config', 'demo-grpo4', '--out', '/tmp/x']))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "pip install 'v05[train]'" in proc.stderr and "Traceback" not in proc.stderr


def test_reward_range_01_is_read_as_text_from_yaml_and_overrides(tmp_path):
    """``01`` is the integer 1 to YAML and to the dotlist parser; train.reward_range=01 still means "01"."""
    assert load_config(None, ["train.reward_range=01"]).train.reward_range == "01"
    path = tmp_path / "c.yaml"
    path.write_text("train: {reward_range: 01}\n")
    assert load_config(str(path)).train.reward_range == "01"
    assert load_config(str(path), ["train.reward_range=pm1"]).train.reward_range == "pm1"
    with pytest.raises(ValueError, match="reward_range"):
        load_config(None, ["train.reward_range=2"])


def test_v05_eb_with_the_papers_osla_test_warns(caplog):
    """v05_eb + OSLA's paper test (or a guard level other than the estimator's) buys extras for prompts whose prior
    v05_eb keeps: a warning names the pairing; every packaged config is paired (no warning)."""
    with caplog.at_level("WARNING", logger="v05.train.config"):
        load_config("demo-v05-eb", ["allocator.options.test=v05"])
    assert "pair them with allocator.options.test=eb_guard" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="v05.train.config"):
        load_config("demo-v05-eb", ["estimator.options.guard_level=0.05"])
    assert "pair them" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="v05.train.config"):
        for name in packaged_configs():
            load_config(name)
    assert "pair them" not in caplog.text


def test_warm_start_differs_per_seed_unless_shared():
    """warmup.per_seed (default): seeds 0 and 1 train different warm starts (the policy init and the SFT order are
    offset by the seed); every method of one seed shares one; per_seed=false shares one across seeds."""
    dirs = {(name, seed): warm_start_dir(load_config(name, [f"seed={seed}"])) for name in DEMO for seed in (0, 1)}
    assert dirs[("demo-grpo4", 0)] != dirs[("demo-grpo4", 1)]
    assert len({d for (_, seed), d in dirs.items() if seed == 1}) == 1
    shared = [warm_start_dir(load_config("demo-grpo4", [f"seed={s}", "warmup.per_seed=false"])) for s in (0, 1)]
    assert shared[0] == shared[1] == dirs[("demo-grpo4", 0)]


SPELL = ["task.name=reasoning_gym", "task.options.dataset=spell_backward", "task.options.size_train=20",
         "task.options.size_eval=5", "task.options.size_val=5"]  # fmt: skip


def test_tiny_policy_resolves_reasoning_gym_to_the_compact_form(tmp_path):
    """With the tiny policy a reasoning_gym task without prompt_form gets 'compact', written to the config YAML and
    the warm-start key; an explicit value is kept; a hub policy and the arithmetic task are left as they are."""
    cfg = load_config("demo-grpo4", SPELL)
    assert cfg.task.options["prompt_form"] == "compact" and "prompt_form: compact" in to_yaml(cfg)
    path = tmp_path / "c.yaml"
    path.write_text(to_yaml(cfg))
    assert load_config(str(path)) == cfg
    full = load_config("demo-grpo4", [*SPELL, "task.options.prompt_form=full"])
    assert full.task.options["prompt_form"] == "full" and warm_start_dir(full) != warm_start_dir(cfg)
    quick = load_config("demo-grpo4", SPELL, quick=True)
    assert quick.task.options["prompt_form"] == "compact"
    hub = load_config("gym-chain-sum-qwen0.5b")
    assert "prompt_form" not in hub.task.options  # GymTask's default: the full question
    hub_spell = load_config("demo-grpo4", [*SPELL, "policy.name_or_path=Qwen/Qwen2.5-0.5B-Instruct"])
    assert "prompt_form" not in hub_spell.task.options
    assert load_config("demo-grpo4").task.options == {}


def test_prompts_too_long_for_the_tiny_context_raise_one_line():
    """render_all refuses prompts whose tokens + max_new_tokens exceed the tiny policy's positions, at the exact
    boundary: the longest compact prompt is <bos> + word + '=' (len + 2 tokens), so it fits in len + 2 + n_new."""
    base = load_config("demo-grpo4", SPELL)
    task = make_task(base.task.name, **base.task.options)
    pool, tokenizer = list(task.train_prompts()), build_char_tokenizer()
    fit = max(len(p.question) for p in pool) + 2 + base.generation.max_new_tokens
    ok = load_config("demo-grpo4", [*SPELL, f"policy.max_position_embeddings={fit}"])
    assert render_all(ok, task, pool, tokenizer)[0] == pool[0].question + "="
    short = load_config("demo-grpo4", [*SPELL, f"policy.max_position_embeddings={fit - 1}"])
    with pytest.raises(ValueError, match=f"max_new_tokens=6 > policy.max_position_embeddings={fit - 1}") as err:
        render_all(short, task, pool, tokenizer)
    assert "\n" not in str(err.value) and "prompt_form=compact" in str(err.value)
    # the full question ('Question: Spell this word backward ...') does not fit the default 128 with 64 new tokens
    long_cfg = load_config("demo-grpo4", [*SPELL, "task.options.prompt_form=full", "generation.max_new_tokens=64"])
    long_task = make_task(long_cfg.task.name, **long_cfg.task.options)
    with pytest.raises(ValueError, match="cannot fit the prompts: 'Question: Spell"):
        render_all(long_cfg, long_task, list(long_task.train_prompts()), tokenizer)
    hub = load_config("demo-grpo4", [*SPELL, "task.options.prompt_form=full", "generation.max_new_tokens=64",
                                     "policy.name_or_path=some/hub-model"])  # fmt: skip
    assert len(render_all(hub, long_task, list(long_task.train_prompts()), tokenizer)) == len(long_task.train_prompts())
