"""Faults injected mid-run into ``v05 train`` (issue 15 item 2): each is survived, or stops the run cleanly.

A verifier that raises, hangs or returns garbage → reward 0, counted, the run goes on. A rollout engine that raises →
retried with backoff; every retry failing → the step is not taken, the last complete step is checkpointed, RunStopped.
A prior that raises or returns NaN → the running mean stands in for that step, counted (and resumes exactly). A full
disk or an unwritable run directory while checkpointing, a metrics append that fails → RunStopped, the previous
checkpoint valid. An out-of-memory in the update → RunStopped naming ``train.micro_batch_size``, which a resume may
change. Every "the run goes on / resumes" claim is checked against an uninterrupted run of the same config.
"""

from __future__ import annotations

import errno
import math
import os
import time

import numpy as np
import pytest
import safetensors.torch
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

import v05.tasks.arithmetic as arithmetic
import v05.train.loop as loop
import v05.train.rundir as rundir
from tests.train._rows import comparable, rows_of
from v05.priors.history import HistoryProvider
from v05.train.config import load_config
from v05.train.loop import RunStopped, train
from v05.train.rundir import latest_checkpoint, load_checkpoint

PRIOR = ["estimator.name=v05_eb", "estimator.options={scale: none}", "prior.name=history"]


def steps_of(run_dir) -> list[dict]:
    return [r for r in rows_of(run_dir) if r["step"] > 0]


def same_rows(a, b, ignore: tuple[str, ...] = ()) -> None:
    """Metrics rows equal but for timings (and ``ignore``), step by step."""
    ra, rb = rows_of(a), rows_of(b)
    assert [r["step"] for r in ra] == [r["step"] for r in rb]
    for x, y in zip(ra, rb, strict=True):
        cx, cy = comparable(x), comparable(y)
        for key in ignore:
            cx.pop(key, None), cy.pop(key, None)
        assert cx == cy, x["step"]


def same_weights(a, b) -> None:
    wa, wb = load_file(a / "final" / "model.safetensors"), load_file(b / "final" / "model.safetensors")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def intact(run_dir, step: int) -> None:
    """The newest checkpoint is ``step``, complete and loadable; no temporary folder is left behind."""
    ckpt = latest_checkpoint(run_dir)
    assert ckpt is not None and ckpt.name == f"step_{step:06d}"
    tensors, state = load_checkpoint(ckpt)
    assert state["counters"]["step"] == step and "optimizer" in tensors
    assert (ckpt / "policy" / "model.safetensors").is_file()
    assert not [p.name for p in (run_dir / "checkpoints").iterdir() if p.name.startswith((".tmp", ".trash"))]


# -- the verifier ----------------------------------------------------------------------------------------------
def test_a_verifier_that_raises_hangs_or_returns_garbage_scores_zero_and_the_run_goes_on(
    tmp_path, tiny_overrides, monkeypatch
):
    """Every third verifier call raises, hangs (past a 0.05 s timeout) or returns a string: all three kinds are
    counted per step, no rollout is rewarded, and the run finishes its steps with finite losses."""
    calls = []

    def faulty(prompt, answer):
        calls.append(1)
        kind = len(calls) % 3
        if kind == 0:
            raise ZeroDivisionError("verifier bug")
        if kind == 1:
            time.sleep(0.5)  # the per-call timeout (0.05 s) stops it
        return "garbage"

    cfg = load_config(None, [*tiny_overrides, "task.options.verify_timeout_s=0.05", "train.steps=2"])
    loop.ensure_warm_start(cfg, progress=False)  # the session's warm start is trained with the real verifier
    monkeypatch.setattr(arithmetic, "_verify_integer", faulty)
    started = time.perf_counter()
    res = train(cfg, tmp_path / "run")
    rows = steps_of(tmp_path / "run")
    assert res.steps == 2 and len(rows) == 2
    assert all(r["verifier_errors"] > 0 and r["verifier_timeouts"] > 0 for r in rows)
    assert all(r["verifier_errors"] + r["verifier_timeouts"] == r["verifier_failures"] for r in rows)
    assert all(r["train_pass_rate"] == 0.0 and math.isfinite(r["loss"]) for r in rows)
    n_timeouts = sum(r["verifier_timeouts"] for r in rows)
    assert time.perf_counter() - started < 0.5 * n_timeouts  # the hangs were cut short, not waited out


# -- the rollout engine ----------------------------------------------------------------------------------------
def fail_engine(monkeypatch, *, calls_to_fail: set[int] | None = None, from_call: int | None = None) -> list[int]:
    """Make the run's rollout engine (not the eval's) raise, before sampling so its RNG is untouched, on the given
    calls of its ``generate`` (one call per step with the fixed allocator)."""
    real_engine, seen = loop._engine, []

    def engine(cfg, model, tokenizer):
        eng = real_engine(cfg, model, tokenizer)
        real = eng.generate

        def generate(prompts, counts):
            seen.append(1)
            n = len(seen)
            if (calls_to_fail and n in calls_to_fail) or (from_call is not None and n >= from_call):
                raise RuntimeError("inference server dropped the connection")
            return real(prompts, counts)

        eng.generate = generate
        return eng

    monkeypatch.setattr(loop, "_engine", engine)
    return seen


def test_a_transient_engine_fault_is_retried_and_the_run_equals_a_clean_one(tmp_path, tiny_overrides, monkeypatch):
    """generate raises once at step 2: retried after the backoff, the step counts one retry, and every metric and
    the final weights equal a run without the fault."""
    cfg = load_config(None, [*tiny_overrides, "run.retry_backoff_s=0.0"])
    train(cfg, tmp_path / "clean")
    fail_engine(monkeypatch, calls_to_fail={2})
    res = train(cfg, tmp_path / "faulty")
    assert res.steps == 3
    assert [r["engine_retries"] for r in steps_of(tmp_path / "faulty")] == [0, 1, 0]
    same_rows(tmp_path / "clean", tmp_path / "faulty", ignore=("engine_retries",))
    same_weights(tmp_path / "clean", tmp_path / "faulty")


def test_an_engine_that_keeps_failing_stops_the_run_cleanly_and_resume_equals_a_clean_run(
    tmp_path, tiny_overrides, monkeypatch
):
    """generate raises from step 2 on: after 2 retries the run stops with RunStopped naming the step; step 1 is
    checkpointed then (checkpoint_every=0 would otherwise save only at the end), the queue is put back, and a
    resume with a healthy engine ends exactly where an uninterrupted run does."""
    cfg = load_config(None, [*tiny_overrides, "run.retry_backoff_s=0.0", *PRIOR])
    train(cfg, tmp_path / "clean")
    seen = fail_engine(monkeypatch, from_call=2)
    with pytest.raises(RunStopped, match=r"step 2: the rollout engine failed 3 time\(s\).*step 1 is intact") as err:
        train(cfg, tmp_path / "cut")
    assert err.value.step == 1 and err.value.checkpoint == 1 and len(seen) == 4  # step 1, then 3 tries
    intact(tmp_path / "cut", 1)
    monkeypatch.undo()
    train(cfg, tmp_path / "cut", resume=True)
    same_rows(tmp_path / "clean", tmp_path / "cut")
    same_weights(tmp_path / "clean", tmp_path / "cut")


# -- the prior -------------------------------------------------------------------------------------------------
def test_a_prior_that_raises_falls_back_to_the_running_mean_for_that_step(tmp_path, tiny_overrides, monkeypatch):
    """The history prior raises at step 2 only: that step's 8 prompts get the running mean (counted), the other
    steps use the prior, and the run finishes."""
    real, calls = HistoryProvider.predict, []

    def predict(self, ids, texts, *, policy="default"):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("prior service unavailable")
        return real(self, ids, texts, policy=policy)

    monkeypatch.setattr(HistoryProvider, "predict", predict)
    cfg = load_config(None, [*tiny_overrides, *PRIOR])
    assert train(cfg, tmp_path / "run").steps == 3
    rows = steps_of(tmp_path / "run")
    assert [r["prior_fallbacks"] for r in rows] == [0, 8, 0]
    assert rows[-1]["prior_fallbacks_total"] == 8 and all(math.isfinite(r["loss"]) for r in rows)


def nan_first_prompt(monkeypatch) -> None:
    """The history prior returns NaN for the first prompt of every call."""
    real = HistoryProvider.predict

    def predict(self, ids, texts, *, policy="default"):
        pred = real(self, ids, texts, policy=policy)
        pred.mean[0] = np.nan
        return pred

    monkeypatch.setattr(HistoryProvider, "predict", predict)


def test_a_prior_returning_nan_is_replaced_per_prompt_and_the_run_resumes_exactly(
    tmp_path, tiny_overrides, monkeypatch
):
    """NaN for one prompt per step: that prompt alone gets the running mean, every step; killed after the step-2
    checkpoint and resumed, the run equals the uninterrupted one (the fallback's state is checkpointed)."""
    nan_first_prompt(monkeypatch)
    cfg = load_config(None, [*tiny_overrides, *PRIOR, "train.steps=4", "run.checkpoint_every=2"])
    train(cfg, tmp_path / "full")
    assert [r["prior_fallbacks"] for r in steps_of(tmp_path / "full")] == [1, 1, 1, 1]

    def die_at_3(row):
        if row["step"] == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(cfg, tmp_path / "cut", log=die_at_3)
    train(cfg, tmp_path / "cut", resume=True)
    same_rows(tmp_path / "full", tmp_path / "cut")
    same_weights(tmp_path / "full", tmp_path / "cut")


def test_a_prior_whose_update_raises_is_counted_and_the_run_goes_on(tmp_path, tiny_overrides, monkeypatch):
    """provider.update raises every step: counted once per step, the run finishes."""

    def update(self, *args, **kwargs):
        raise OSError("embedding cache unwritable")

    monkeypatch.setattr(HistoryProvider, "update", update)
    cfg = load_config(None, [*tiny_overrides, *PRIOR])
    assert train(cfg, tmp_path / "run").steps == 3
    assert [r["prior_update_errors_total"] for r in steps_of(tmp_path / "run")] == [1, 2, 3]


# -- the disk --------------------------------------------------------------------------------------------------
def test_a_full_disk_while_checkpointing_keeps_the_previous_checkpoint_and_says_why(
    tmp_path, tiny_overrides, monkeypatch
):
    """tensors.pt of the step-2 checkpoint hits ENOSPC: RunStopped says so and that step 1 is intact, no temporary
    folder is left, and (space freed) a resume ends exactly where an uninterrupted run does."""
    cfg = load_config(None, [*tiny_overrides, "run.checkpoint_every=1"])
    train(cfg, tmp_path / "clean")
    real, saves = torch.save, []

    def save(obj, f, *args, **kwargs):
        if str(f).endswith("tensors.pt"):
            saves.append(1)
            if len(saves) == 2:
                with open(f, "wb") as fh:
                    fh.write(b"\0" * 100)  # a partial file, then the disk is full
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save)
    with pytest.raises(RunStopped, match="checkpoint of step 2 could not be written.*No space left.*step 1 is intact"):
        train(cfg, tmp_path / "cut")
    intact(tmp_path / "cut", 1)
    monkeypatch.setattr(torch, "save", real)
    train(cfg, tmp_path / "cut", resume=True)
    same_rows(tmp_path / "clean", tmp_path / "cut")
    same_weights(tmp_path / "clean", tmp_path / "cut")


def stops_with_step_1_intact(run_dir, overrides, reason):
    """Train with a checkpoint every step (a fault set up to strike at step 2): RunStopped gives ``reason`` (a regex)
    and says step 1 is intact, and step 1's checkpoint is."""
    cfg = load_config(None, [*overrides, "run.checkpoint_every=1"])
    with pytest.raises(RunStopped, match=f"{reason}.*step 1 is intact"):
        train(cfg, run_dir)
    intact(run_dir, 1)


def test_a_full_disk_in_the_policys_safetensors_write_stops_the_run_with_the_reason(
    tmp_path, tiny_overrides, monkeypatch
):
    """safetensors reports a full disk as its own SafetensorError, not OSError (seen in CI on a 540 MB full fine-tune
    checkpoint): the step-2 policy write hitting it still stops the run cleanly, saying why, with step 1 intact."""
    real, saves = safetensors.torch.save_model, []

    def save_model(model, filename, *args, **kwargs):
        saves.append(1)
        if len(saves) == 2:
            raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
        return real(model, filename, *args, **kwargs)

    monkeypatch.setattr(safetensors.torch, "save_model", save_model)
    stops_with_step_1_intact(tmp_path / "run", tiny_overrides, "step 2 could not be written.*safetensors.*No space")


def test_an_unwritable_run_directory_stops_the_run_with_the_reason(tmp_path, tiny_overrides, monkeypatch):
    """Renaming the step-2 checkpoint into place is refused (EACCES): RunStopped, step 1 intact."""
    real = os.replace

    def replace(src, dst, *args, **kwargs):
        if os.path.basename(dst) == "step_000002":
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(dst))
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(rundir.os, "replace", replace)
    stops_with_step_1_intact(tmp_path / "run", tiny_overrides, "Permission denied")


def test_a_failing_metrics_append_stops_the_run_with_the_reason(tmp_path, tiny_overrides, monkeypatch):
    """metrics.jsonl cannot be appended at step 2: RunStopped names the file; the step-1 checkpoint is intact."""
    real = rundir.MetricsLog.write

    def write(self, row):
        if row["step"] == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, row)

    monkeypatch.setattr(rundir.MetricsLog, "write", write)
    stops_with_step_1_intact(tmp_path / "run", tiny_overrides, "metrics.jsonl could not be appended at step 2")


# -- memory ----------------------------------------------------------------------------------------------------
def test_out_of_memory_in_the_update_names_micro_batch_size_and_a_resume_may_lower_it(
    tmp_path, tiny_overrides, monkeypatch
):
    """The update raises torch.OutOfMemoryError at step 2: RunStopped names train.micro_batch_size; the resume with
    a smaller micro-batch is accepted (any other change is still refused) and finishes the run."""
    real, calls = loop.update_policy, []

    def update_policy(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(*args, **kwargs)

    monkeypatch.setattr(loop, "update_policy", update_policy)
    cfg = load_config(None, [*tiny_overrides, "run.checkpoint_every=1"])
    with pytest.raises(RunStopped, match=r"step 2: out of memory.*train\.micro_batch_size \(now 256"):
        train(cfg, tmp_path / "run")
    intact(tmp_path / "run", 1)
    with pytest.raises(ValueError, match="config differs .* in optim.lr"):
        train(load_config(None, [*tiny_overrides, "run.checkpoint_every=1", "optim.lr=1e-3"]), tmp_path / "run",
              resume=True)  # fmt: skip
    smaller = load_config(None, [*tiny_overrides, "run.checkpoint_every=1", "train.micro_batch_size=4"])
    assert train(smaller, tmp_path / "run", resume=True).steps == 3
    assert "micro_batch_size: 4" in (tmp_path / "run" / "config.yaml").read_text()
