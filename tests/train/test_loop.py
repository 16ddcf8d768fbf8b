"""The training loop end to end: every estimator and allocator runs, resume reproduces, signals checkpoint."""

from __future__ import annotations

import math
import os
import signal

import numpy as np
import pytest
from safetensors.torch import load_file

from tests.train._rows import comparable, rows_of
from v05.priors import PROVIDERS
from v05.priors.oracle import OracleProvider
from v05.registry import ALLOCATORS, ESTIMATORS
from v05.train.config import load_config
from v05.train.loop import train

CONTRACT = ("step", "rollouts_total", "train_pass_rate")
PER_STEP = ("tokens_total", "wall_time", "rollouts_per_prompt", "k_hist", "zero_adv_frac", "all_equal_frac",
            "grad_norm", "entropy", "clip_frac", "kl", "verifier_failures", "time/generate", "time/verify",
            "time/prior", "time/estimate", "time/update")  # fmt: skip


def _needs_prior(estimator: str, allocator: str) -> bool:
    return ESTIMATORS[estimator].uses_prior or ALLOCATORS[allocator].uses_prior


def method_overrides(estimator: str, allocator: str) -> list[str]:
    """Overrides that make a valid config for the pair, read from the registries' specs: the allocator's base group
    size 4, a prior where the estimator or the allocator reads one, and no std scaling for an estimator whose
    baseline comes from outside the group (``single_rollout``; the paper's V0.5 setting)."""
    e, a = ESTIMATORS[estimator], ALLOCATORS[allocator]
    out = [f"estimator.name={estimator}", f"allocator.name={allocator}", f"allocator.options={{{a.k_option}: 4}}"]
    if _needs_prior(estimator, allocator):
        out.append("prior.name=running_mean")
    if allocator == "osla":
        out.append("allocator.options.k_max=8")
    if e.single_rollout and "scale" in e.options:
        out.append("estimator.options={scale: none}")
    return out


PAIRS = [(e, "fixed") for e, s in ESTIMATORS.items() if not s.needs_truth]  # needs_truth: simulation only
PAIRS += [("grpo", a) for a in ALLOCATORS if a != "fixed"]
PAIRS += [("v05", "osla"), ("v05_eb", "osla")]


@pytest.mark.parametrize(("estimator", "allocator"), PAIRS)
def test_every_estimator_and_allocator_trains_a_few_steps(tmp_path, tiny_overrides, estimator, allocator):
    """A 3-step run per registered estimator (fixed k) and per allocator (grpo): rewards flow (some success), the
    update's gradient is finite, eval runs at steps 0, 2 and 3, and every step line has the contract keys."""
    cfg = load_config(None, [*tiny_overrides, *method_overrides(estimator, allocator)])
    res = train(cfg, tmp_path / "run")
    rows = rows_of(tmp_path / "run")
    steps = [r for r in rows if r["step"] > 0]
    assert res.steps == 3 and [r["step"] for r in steps] == [1, 2, 3]
    assert all(all(k in r for k in CONTRACT + PER_STEP) for r in steps)
    assert sum(r["train_pass_rate"] for r in steps) > 0  # the warm start solves some prompts: rewards flow
    assert all(math.isfinite(r["grad_norm"]) and math.isfinite(r["loss"]) for r in steps)
    assert [r["step"] for r in rows if "eval_pass_rate" in r] == [0, 2, 3]
    assert steps[-1]["rollouts_total"] == sum(r["rollouts_step"] for r in steps) == res.rollouts_total
    if allocator == "osla":
        assert all("reject_rate" in r and "mean_weight" in r for r in steps)
    if allocator == "prior_select":
        assert all("predicted_signal" in r and "explored" in r for r in steps)
    if _needs_prior(estimator, allocator):
        assert all("prior/tau2" in r for r in steps)
    assert (tmp_path / "run" / "config.yaml").exists() and (tmp_path / "run" / "final" / "config.json").exists()


PRIOR_OPTIONS: dict[str, list[str]] = {
    "v0": ["prior.options={backend: tfidf, min_context: 8}"],
    "combined": ["prior.options={backend: tfidf, min_context: 8}"],
    "probe": ["prior.options={context_size: 64, min_context: 4, head_options: {n_components: 4}}",
              "poise.features={layer: -1, n_prompt: 4}"],
    "oracle": ["prior.options={rollouts: 4}"],
}  # fmt: skip
"""Overrides a prior needs to run in seconds (a small text backend, a small context); every other gets none."""


@pytest.mark.parametrize("prior", list(PROVIDERS))
def test_every_prior_trains_a_few_steps(tmp_path, tiny_overrides, prior):
    """A 2-step v05_eb run per registered prior provider: the provider itself answers every step (no guard
    fallback: a policy or sampler its spec asks for was bound), its calibration is logged finite, and the oracle's
    extra rollouts are logged exactly for a provider that ``needs_sampler``."""
    over = [*tiny_overrides, "train.steps=2", "eval.every=0", "eval.at_start=false", "estimator.name=v05_eb",
            "estimator.options={scale: none}", f"prior.name={prior}", *PRIOR_OPTIONS.get(prior, [])]  # fmt: skip
    res = train(load_config(None, over), tmp_path / "run")
    steps = [r for r in rows_of(tmp_path / "run") if r["step"] > 0]
    assert res.steps == 2 and [r["step"] for r in steps] == [1, 2]
    assert all(r["prior_fallbacks"] == 0 for r in steps)
    assert all(math.isfinite(r["prior/tau2"]) and math.isfinite(r["grad_norm"]) for r in steps)
    assert all(("prior/oracle_rollouts" in r) == PROVIDERS[prior].needs_sampler for r in steps)



def test_the_candidate_pools_prior_spread_is_logged_over_every_candidate(tmp_path, tiny_overrides, monkeypatch):
    """pool_prior_var: the variance of the prior's pass rates over the step's whole candidate pool (prior_select:
    4 × 8 = 32 candidates, 8 selected), here the oracle's measured p̂ = (s + ½)/(m + 1) recorded as the provider
    returns them; the selected prompts' alone would give another number (selection by p(1 − p) keeps the middle of
    the pool). prior_select's own pool_prior_mean (on the reward scale) is the allocator's, untouched."""
    seen: list[np.ndarray] = []
    parts = OracleProvider._parts

    def record(self, ids, texts, policy):
        value, n0 = parts(self, ids, texts, policy)
        seen.append((np.asarray(value) + 1.0) / 2.0)
        return value, n0

    monkeypatch.setattr(OracleProvider, "_parts", record)
    over = [*tiny_overrides, "train.steps=2", "eval.every=0", "eval.at_start=false", "estimator.name=v05_eb",
            "estimator.options={scale: none}", "prior.name=oracle", "prior.options={rollouts: 4}",
            "allocator.name=prior_select", "allocator.options={k: 1}"]  # fmt: skip
    train(load_config(None, over), tmp_path / "run")
    steps = [r for r in rows_of(tmp_path / "run") if r["step"] > 0]
    assert [len(p) for p in seen] == [32, 32]
    for row, p in zip(steps, seen, strict=True):
        assert row["pool_prior_var"] == pytest.approx(p.var())
        assert row["pool_prior_mean"] == pytest.approx(2.0 * p.mean() - 1.0)  # the allocator's, on the ±1 scale


def test_equal_budget_stops_at_max_rollouts(tmp_path, tiny_overrides):
    """train.max_rollouts is the budget: the run stops at the first step whose total reaches it."""
    cfg = load_config(None, [*tiny_overrides, "train.steps=50", "train.max_rollouts=80", "allocator.options={k: 4}"])
    res = train(cfg, tmp_path / "run")
    assert res.rollouts_total == 96 and res.steps == 3  # 32 rollouts per step: 32, 64, 96 ≥ 80


def test_resume_reproduces_the_uninterrupted_run(tmp_path, tiny_overrides):
    """Kill after the step-2 checkpoint (an exception at step 3), resume: the metrics (but wall times) and the final
    weights equal an uninterrupted run's, and no step is lost or repeated in metrics.jsonl."""
    over = [*tiny_overrides, "train.steps=4", "run.checkpoint_every=2", "estimator.name=v05_eb",
            "estimator.options={scale: none}", "prior.name=history", "allocator.name=osla",
            "allocator.options={k_init: 4, k_max: 8}"]  # fmt: skip
    cfg = load_config(None, over)
    full = train(cfg, tmp_path / "full")

    def die_at_3(row):
        if row["step"] == 3:
            raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        train(cfg, tmp_path / "cut", log=die_at_3)
    assert [r["step"] for r in rows_of(tmp_path / "cut")][-1] == 3  # step 3 was logged, but not checkpointed
    resumed = train(cfg, tmp_path / "cut", resume=True)
    assert resumed.steps == full.steps == 4 and resumed.rollouts_total == full.rollouts_total
    a, b = rows_of(tmp_path / "full"), rows_of(tmp_path / "cut")
    assert [r["step"] for r in b] == [0, 1, 2, 3, 4]
    for ra, rb in zip(a, b, strict=True):
        assert comparable(ra) == comparable(rb), ra["step"]
    wa = load_file(tmp_path / "full" / "checkpoints" / "step_000004" / "policy" / "model.safetensors")
    wb = load_file(tmp_path / "cut" / "checkpoints" / "step_000004" / "policy" / "model.safetensors")
    assert wa.keys() == wb.keys() and all(bool((wa[k] == wb[k]).all()) for k in wa)


def test_sigint_saves_a_checkpoint_then_resume_finishes(tmp_path, tiny_overrides):
    """SIGINT during step 2 finishes the step, saves a checkpoint and returns interrupted; --resume runs steps 3–4."""
    cfg = load_config(None, [*tiny_overrides, "train.steps=4"])

    def interrupt_at_2(row):
        if row["step"] == 2:
            os.kill(os.getpid(), signal.SIGINT)

    before = signal.getsignal(signal.SIGINT)  # default_int_handler, or SIG_IGN under nohup/CI
    res = train(cfg, tmp_path / "run", log=interrupt_at_2)
    assert res.interrupted and res.steps == 2
    assert (tmp_path / "run" / "checkpoints" / "latest").read_text() == "step_000002"
    assert signal.getsignal(signal.SIGINT) == before  # handlers restored
    done = train(cfg, tmp_path / "run", resume=True)
    assert not done.interrupted and done.steps == 4
    assert [r["step"] for r in rows_of(tmp_path / "run")] == [0, 1, 2, 3, 4]


def test_existing_run_needs_resume_and_resume_needs_the_same_config(tmp_path, tiny_overrides):
    """Training into a used run directory, resuming without a checkpoint or with another config is refused."""
    cfg = load_config(None, [*tiny_overrides, "train.steps=1", "eval.every=0", "eval.at_start=false"])
    with pytest.raises(ValueError, match="no checkpoint"):
        train(cfg, tmp_path / "run", resume=True)
    train(cfg, tmp_path / "run")
    with pytest.raises(ValueError, match="--resume"):
        train(cfg, tmp_path / "run")
    other = load_config(None, [*tiny_overrides, "train.steps=2", "eval.every=0", "eval.at_start=false"])
    with pytest.raises(ValueError, match="config differs"):
        train(other, tmp_path / "run", resume=True)


@pytest.mark.parametrize("rejects", ["drop", "return"])
def test_selection_rejects_are_dropped_or_handed_back(tmp_path, tiny_overrides, monkeypatch, rejects):
    """DPS selects 8 of a pool of 32 candidates per step. ``allocator.rejects=drop`` (the default, as DPS's own
    dataloader): the 24 unselected are used up, nothing goes back and every pool is the epoch's next 32 prompts;
    ``return``: the 24 go back to the queue's front and open the next step's pool."""
    from v05.train.prompts import PromptQueue

    pools: list[list[int]] = []
    given: list[list[int]] = []
    real_take, real_give = PromptQueue.take, PromptQueue.give_back

    def take(self, k):
        out = real_take(self, k)
        pools.append([int(i) for i in out])
        return out

    def give_back(self, indices):
        given.append([int(i) for i in indices])
        return real_give(self, indices)

    monkeypatch.setattr(PromptQueue, "take", take)
    monkeypatch.setattr(PromptQueue, "give_back", give_back)
    cfg = load_config(None, [*tiny_overrides, "allocator.name=dps", "allocator.options={k: 4}",
                             f"allocator.rejects={rejects}"])  # fmt: skip
    train(cfg, tmp_path / "run")
    rows = [r for r in rows_of(tmp_path / "run") if r["step"] > 0]
    assert [r["prompts_sampled"] for r in rows] == [8, 8, 8] and len(pools) == 3 and len(given) == 3
    assert all(len(set(p)) == 32 for p in pools)
    if rejects == "drop":
        assert given == [[], [], []]
        assert not set(pools[0]) & set(pools[1][: 50 - 32])  # the rest of the 50-prompt first epoch: fresh only
    else:
        assert [len(g) for g in given] == [24, 24, 24]
        assert pools[1][:24] == given[0] and pools[2][:24] == given[1]
        assert set(given[0]) <= set(pools[0])


def test_shared_prefix_update_matches_the_per_rollout_update(tmp_path, tiny_overrides):
    """train.share_prompt_prefix (default) only changes how the forward is computed: the first step's loss, grad norm
    and entropy equal the per-rollout forward's up to float rounding."""
    rows = {}
    for share in (True, False):
        cfg = load_config(None, [*tiny_overrides, "train.steps=1", f"train.share_prompt_prefix={share}"])
        train(cfg, tmp_path / str(share))
        rows[share] = next(r for r in rows_of(tmp_path / str(share)) if r["step"] == 1)
    for key in ("loss", "grad_norm", "entropy", "pg_loss"):
        assert rows[True][key] == pytest.approx(rows[False][key], rel=1e-4, abs=1e-6), key


def test_vllm_engine_without_a_gpu_is_a_clear_error(tmp_path, tiny_overrides):
    """generation.engine=vllm on a machine without CUDA (or without vllm) stops with the install hint, not a
    traceback from deep inside vLLM."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the vLLM path is exercised by tests/engines/test_vllm.py")
    cfg = load_config(None, [*tiny_overrides, "generation.engine=vllm"])
    with pytest.raises(ValueError, match="CUDA"):
        train(cfg, tmp_path / "run")


def test_value_quality_hand_case_and_prior_runs_log_it(tmp_path, tiny_overrides):
    """p̂ = (0.2, 0.8, 0.5) against p = (0, 1, 0.5): MAE (0.2 + 0.2 + 0)/3, Pearson r = 1 (p̂ = 0.2 + 0.6p), AUC for
    p ≥ 0.5 = 1. A run with a prior logs value/mae, value/corr, value/auc for the prior's predictions every step."""
    from v05.train.evaluation import value_quality

    q = value_quality(np.array([0.2, 0.8, 0.5]), np.array([0.0, 1.0, 0.5]))
    assert q["value/mae"] == pytest.approx(0.4 / 3) and q["value/corr"] == pytest.approx(1.0) and q["value/auc"] == 1
    cfg = load_config(None, [*tiny_overrides, "estimator.name=v05", "prior.name=running_mean",
                             "estimator.options={scale: none}"])  # fmt: skip
    train(cfg, tmp_path / "run")
    rows = [r for r in rows_of(tmp_path / "run") if r["step"] > 0]
    assert all("value/mae" in r and 0 <= r["value/mae"] <= 1 for r in rows)


@pytest.mark.parametrize(("prior", "mode", "want"), [("history", "auto", "question"), ("history", "prompt", "prompt"),
                                                     ("probe", "auto", "prompt")])  # fmt: skip
def test_prior_reads_the_problem_text(tmp_path, tiny_overrides, monkeypatch, prior, mode, want):
    """A text prior sees the bare problem ("3+4"), as V0 was trained, not the rendered prompt ("3+4=", or a chat
    template on a real model); the probe prior, which reads the policy, sees what the policy sees; prior.input
    overrides."""
    import v05.round as round_module

    seen: list[str] = []
    real = round_module.make_provider

    def spy(name, **options):
        provider = real(name, **options)
        predict = provider.predict

        def recording(ids, texts, *args, **kwargs):
            seen.extend(texts)
            return predict(ids, texts, *args, **kwargs)

        provider.predict = recording
        return provider

    monkeypatch.setattr(round_module, "make_provider", spy)
    over = [*tiny_overrides, "train.steps=1", "estimator.name=v05_eb", "estimator.options={scale: none}",
            f"prior.name={prior}", f"prior.input={mode}"]  # fmt: skip
    if prior == "probe":
        over += ["prior.options={context_size: 64, min_context: 4, head_options: {n_components: 4}}",
                 "poise.features={layer: -1, n_prompt: 4}"]  # fmt: skip
    train(load_config(None, over), tmp_path / "run")
    assert len(seen) == 8
    assert all(t.endswith("=") for t in seen) == (want == "prompt")


def test_eval_split_validation_evaluates_the_validation_prompts(tmp_path, tiny_overrides, monkeypatch):
    """eval.split=validation (the tuning sweep's) evaluates the task's validation split, the default its eval split;
    neither is ever the other."""
    import v05.train.loop as loop_module
    from v05.tasks import make_task

    seen: dict[str, list[str]] = {}
    real = loop_module.evaluate

    def spy(cfg, model, tokenizer, task, held_out, texts):
        seen.setdefault(cfg.eval.split, []).extend(p.key for p in held_out)
        return real(cfg, model, tokenizer, task, held_out, texts)

    monkeypatch.setattr(loop_module, "evaluate", spy)
    for split in ("eval", "validation"):
        train(load_config(None, [*tiny_overrides, "train.steps=1", "eval.size=null", f"eval.split={split}"]),
              tmp_path / split)  # fmt: skip
    cfg = load_config(None, tiny_overrides)
    task = make_task(cfg.task.name, **cfg.task.options)
    assert set(seen["validation"]) == {p.key for p in task.validation_prompts()}
    assert set(seen["eval"]) == {p.key for p in task.eval_prompts()}
    with pytest.raises(ValueError, match="eval.split"):
        load_config(None, [*tiny_overrides, "eval.split=test"])


def test_the_oracle_prior_draws_uncounted_rollouts_apart_from_the_steps_own(tmp_path, tiny_overrides):
    """The oracle bound: its m extra rollouts per prompt are logged apart (prior/oracle_rollouts), never counted in
    rollouts_total, and drawn from their own stream, so the first step samples the same rollouts as a run without
    it (its first update differs only through the baseline)."""
    over = [*tiny_overrides, "estimator.name=v05_eb", "estimator.options={scale: none}", "allocator.options={k: 1}",
            "train.steps=3", "train.batch_size=16"]  # fmt: skip
    train(load_config(None, [*over, "prior.name=oracle", "prior.options={rollouts: 8}"]), tmp_path / "oracle")
    train(load_config(None, [*over, "prior.name=running_mean"]), tmp_path / "mean")
    oracle = [r for r in rows_of(tmp_path / "oracle") if r["step"] > 0]
    mean = [r for r in rows_of(tmp_path / "mean") if r["step"] > 0]
    assert [r["rollouts_total"] for r in oracle] == [16, 32, 48]
    assert [r["prior/oracle_rollouts"] for r in oracle] == [128, 256, 384]
    first = ("train_pass_rate", "tokens_total")
    assert [oracle[0][k] for k in first] == [mean[0][k] for k in first]
    assert all(r["prior_fallbacks"] == 0 for r in oracle)
