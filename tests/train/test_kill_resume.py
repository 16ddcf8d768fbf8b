"""Kill and resume under stress: SIGKILL at any moment of a run, several times, then ``v05 train --resume``.

Every run here is a real process killed by a real SIGKILL. A helper process (the "zygote", below) imports torch and
the trainer once, then forks one child per run segment; the child runs ``v05 train`` (``v05.cli.main``) and dies
with ``SIGKILL`` at a chosen moment: a test-side patch of the function doing the write kills the process half-way
through it (half a metrics line, half a ``tensors.pt``, half a ``state.json`` / ``latest``, a renamed checkpoint
whose ``latest`` was not written yet, half the exported policy, ...), or the test kills the child after a random
delay (seeded). Nothing in ``src`` is patched for good: the patches live in the forked child only.

After every kill the run directory must be sound (:func:`checkpoint_problems`): ``latest`` names a complete
checkpoint, no ``step_*`` folder lacks its policy weights, ``tensors.pt`` or ``state.json`` (a ``.tmp_step_*``
folder may be left), and at most the last metrics line is torn. At the end, metrics.jsonl holds steps 0..N once
each, every line JSON, rows equal to the uninterrupted run's (but timings), and the final and last checkpoint's
weights (and the checkpoint's state.json, but wall time) are bit-identical to the uninterrupted run's on CPU.

Two cases get a test of their own: a kill inside the ``rmtree`` that prunes (or replaces) a checkpoint must not
leave a partial ``step_*`` folder, and a kill before the first checkpoint must leave a run that ``--resume``
continues: it starts over (it once could neither be resumed nor restarted).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from safetensors.torch import load_file

import v05
from tests.train._rows import comparable, rows_of
from v05.train.rundir import latest_checkpoint, load_checkpoint

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the runs are forked children (POSIX only)")

STEPS = 5
COMMON = [f"train.steps={STEPS}", "run.checkpoint_every=1", "run.keep_checkpoints=2"]
METHODS = {
    "grpo": ["estimator.name=grpo", "allocator.name=fixed", "allocator.options={k: 4}"],
    "v05_osla_v0": ["estimator.name=v05", "estimator.options={scale: none}", "allocator.name=osla",
                    "allocator.options={k_init: 4, k_max: 8}", "prior.name=v0",
                    "prior.options={backend: tfidf, min_context: 8}"],
    "poise": ["estimator.name=poise", "allocator.name=fixed", "allocator.options={k: 2}", "poise.bootstrap_steps=1",
              "poise.pca_prompt=8", "poise.pca_response=8", "poise.features={layer: -1, n_prompt: 4, n_response: 4}"],
    "ppo": ["estimator.name=gae", "allocator.name=fixed", "allocator.options={k: 1}", "train.batch_size=16"],
}  # fmt: skip
PARTS = ("policy/model.safetensors", "tensors.pt", "state.json")
SEGMENT_TIMEOUT = 300.0

ZYGOTE = r'''
"""Import the trainer once, then fork one child per job line on stdin; report {"pid"} then {"status"}."""
import json, os, shutil, signal, sys, time, traceback
from pathlib import Path

os.environ["OPENBLAS_NUM_THREADS"] = "1"
import torch

torch.set_num_threads(1)
import safetensors.torch
import v05.cli
import v05.train.checkpoint
import v05.train.config
import v05.train.loop
import v05.train.policy
from v05.train import rundir

# what every run imports or builds lazily, once here rather than in every child (speed only; the children would
# do the same themselves)
v05.cli.build_parser()
v05.train.config.load_config(None, [])
for name in ("omegaconf._impl", "sklearn.feature_extraction.text", "sklearn.decomposition", "sklearn.linear_model",
             "sklearn.metrics", "sklearn.model_selection", "sklearn.svm"):
    try:
        __import__(name)
    except ImportError:
        pass
try:
    from transformers.conversion_mapping import get_checkpoint_conversion_mapping

    get_checkpoint_conversion_mapping("llama")  # builds and caches transformers' table of checkpoint renames
except ImportError:
    pass


def die():
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)


def install(plan):
    """Patch the function named by plan["at"] to SIGKILL the process at its plan["nth"] matching call."""
    at, nth, hits = plan["at"], plan["nth"], [0]

    def due():
        hits[0] += 1
        return hits[0] == nth

    if at in ("metrics_torn", "after_metrics"):
        write = rundir.MetricsLog.write

        def patched_write(self, metrics):
            if at == "metrics_torn" and due():  # half a line reaches the file, then the process dies
                line = json.dumps(rundir._jsonable(metrics)) + "\n"
                self._fh.write(line[: len(line) // 2])
                self._fh.flush()
                die()
            write(self, metrics)
            if at == "after_metrics" and due():
                die()

        rundir.MetricsLog.write = patched_write
    elif at in ("state_write", "latest_write", "metrics_rewrite", "after_latest"):
        name = {"state_write": "state.json", "latest_write": "latest", "metrics_rewrite": "metrics.jsonl",
                "after_latest": "latest"}[at]
        atomic = rundir.atomic_write_text

        def patched_atomic(path, text):
            if Path(path).name == name and at != "after_latest" and due():  # half of the temporary file
                with open(Path(path).with_name(f".{Path(path).name}.tmp"), "w", encoding="utf-8") as fh:
                    fh.write(text[: len(text) // 2])
                die()
            atomic(path, text)
            if Path(path).name == name and at == "after_latest" and due():
                die()

        rundir.atomic_write_text = patched_atomic
    elif at == "tensors_write":
        save = torch.save

        def patched_save(obj, f, *args, **kwargs):
            save(obj, f, *args, **kwargs)
            if Path(str(f)).name == "tensors.pt" and due():
                os.truncate(f, os.path.getsize(f) // 2)
                die()

        torch.save = patched_save
    elif at == "policy_write":
        save_model = safetensors.torch.save_model

        def patched_save_model(model, filename, *args, **kwargs):
            save_model(model, filename, *args, **kwargs)
            if Path(filename).parent.parent.name.startswith(".tmp_step_") and due():
                os.truncate(filename, os.path.getsize(filename) // 2)
                die()

        safetensors.torch.save_model = patched_save_model
    elif at == "after_rename":
        replace = os.replace

        def patched_replace(src, dst, *args, **kwargs):
            replace(src, dst, *args, **kwargs)
            if Path(src).name.startswith(".tmp_step_") and due():  # the checkpoint is in place, latest is not
                die()

        os.replace = patched_replace
    elif at == "export":
        save_policy = v05.train.policy.save_policy

        def patched_save_policy(model, tokenizer, path):
            save_policy(model, tokenizer, path)
            if Path(path).name == "final" and due():
                os.truncate(Path(path) / "model.safetensors", os.path.getsize(Path(path) / "model.safetensors") // 2)
                die()

        v05.train.policy.save_policy = patched_save_policy
    elif at == "rmtree_checkpoint":  # SIGKILL right after rmtree's first unlink inside a complete checkpoint
        rmtree, unlink = shutil.rmtree, os.unlink

        def killing_unlink(*args, **kwargs):
            unlink(*args, **kwargs)
            die()

        def patched_rmtree(path, *args, **kwargs):
            folder = Path(path)  # step_* itself, or wherever the trainer moved it to delete it
            if all((folder / part).is_file() for part in ("policy/model.safetensors", "tensors.pt", "state.json")):
                if due():
                    os.unlink = killing_unlink
            rmtree(path, *args, **kwargs)

        shutil.rmtree = patched_rmtree
    else:
        raise ValueError(f"unknown kill point {at!r}")


def child(job):
    fd = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    code = 3
    try:
        if job["plan"]:
            install(job["plan"])
        argv = ["train", "--out", job["run_dir"], *(["--resume"] if job["resume"] else []), *job["overrides"]]
        code = v05.cli.main(argv)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


for line in sys.stdin:
    job = json.loads(line)
    pid = os.fork()
    if pid == 0:
        child(job)
    print(json.dumps({"pid": pid}), flush=True)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"status": os.waitstatus_to_exitcode(status)}), flush=True)
'''


class Zygote:
    """The forking helper process: :meth:`run` runs one segment of a run and returns its exit status (−9: killed)."""

    def __init__(self, script: Path) -> None:
        src = str(Path(v05.__file__).resolve().parents[1])  # the v05 this test imports, whatever sys.path says
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]),
                   OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
                   TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")  # fmt: skip
        self.proc = subprocess.Popen(  # noqa: S603 - our own interpreter and script
            [sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0, env=env
        )
        self.segments = 0

    def _line(self, timeout: float, pid: int | None) -> dict:
        out, deadline = b"", time.monotonic() + timeout
        while not out.endswith(b"\n"):
            ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                if pid is not None:
                    os.kill(pid, signal.SIGKILL)
                raise AssertionError(f"a run segment hung for {timeout:.0f} s (killed)")
            byte = self.proc.stdout.read(1)
            if not byte:
                raise AssertionError(f"the zygote died (exit {self.proc.wait()})")
            out += byte
        return json.loads(out)

    def run(self, run_dir: Path, overrides: list[str], *, resume: bool, plan: dict | None = None,
            kill_after: float | None = None) -> tuple[int, str]:  # fmt: skip
        """Run one segment; ``plan`` kills it inside a write, ``kill_after`` after that many seconds (if alive)."""
        self.segments += 1
        log = run_dir.parent / f"{run_dir.name}.{self.segments}.log"
        job = {"run_dir": str(run_dir), "overrides": overrides, "resume": resume, "plan": plan, "log": str(log)}
        self.proc.stdin.write((json.dumps(job) + "\n").encode())
        self.proc.stdin.flush()
        pid = self._line(60.0, None)["pid"]
        if kill_after is not None:
            ready, _, _ = select.select([self.proc.stdout], [], [], kill_after)
            if not ready:  # still running: a zombie (already exited) ignores the signal
                os.kill(pid, signal.SIGKILL)
        status = self._line(SEGMENT_TIMEOUT, pid)["status"]
        return status, (log.read_text(errors="replace") if log.exists() else "")

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


@pytest.fixture(scope="module")
def zygote(tmp_path_factory: pytest.TempPathFactory):
    script = tmp_path_factory.mktemp("zygote") / "zygote.py"
    script.write_text(ZYGOTE, encoding="utf-8")
    z = Zygote(script)
    yield z
    z.close()


# -- checks --------------------------------------------------------------------------------------------------------
def _loads(folder: Path) -> bool:
    try:
        load_checkpoint(folder)
    except ValueError:
        return False
    return True


def checkpoint_problems(run_dir: Path) -> list[str]:
    """What is wrong with a run directory after a kill: incomplete ``step_*`` folders, a dangling ``latest``, a torn
    metrics line that is not the last line (empty: sound)."""
    problems: list[str] = []
    root = run_dir / "checkpoints"
    complete = set()
    for folder in sorted(root.glob("step_*")) if root.exists() else ():
        missing = [part for part in PARTS if not (folder / part).is_file()]
        if missing:
            loads = " (load_checkpoint still loads it)" if _loads(folder) else ""
            problems.append(f"{folder.name} lacks {', '.join(missing)}{loads}")
            continue
        try:
            load_checkpoint(folder)
            load_file(folder / PARTS[0])
        except Exception as err:  # noqa: BLE001 - report any unreadable part
            problems.append(f"{folder.name} does not load: {err}")
            continue
        complete.add(folder.name)
    pointer = root / "latest"
    if pointer.exists():
        name = pointer.read_text(encoding="utf-8")
        if name not in complete:
            problems.append(f"latest names {name!r}, not a complete checkpoint ({sorted(complete)})")
        elif latest_checkpoint(run_dir) != root / name:
            problems.append(f"latest_checkpoint() is {latest_checkpoint(run_dir)}, latest names {name!r}")
    metrics = run_dir / "metrics.jsonl"
    lines = metrics.read_text(encoding="utf-8").splitlines() if metrics.exists() else []
    for i, line in enumerate(lines[:-1]):
        try:
            json.loads(line)
        except ValueError:
            problems.append(f"metrics.jsonl line {i + 1} of {len(lines)} is torn: {line[:40]!r}")
    return problems


def last_line_torn(run_dir: Path) -> bool:
    lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    try:
        json.loads(lines[-1])
    except ValueError:
        return True
    return False


def latest_name(run_dir: Path) -> str:
    return (run_dir / "checkpoints" / "latest").read_text(encoding="utf-8")


def assert_same_run(ref: Path, run: Path) -> None:
    """The killed-and-resumed run equals the uninterrupted one: metrics (but timings), weights, checkpoint state."""
    assert checkpoint_problems(run) == []
    lines = (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines]  # no torn line
    assert [r["step"] for r in rows] == list(range(STEPS + 1))  # none lost, none repeated
    for a, b in zip(rows_of(ref), rows, strict=True):
        assert comparable(a) == comparable(b), a["step"]
    last = f"step_{STEPS:06d}"
    assert latest_name(run) == latest_name(ref) == last
    for rel in ("final/model.safetensors", f"checkpoints/{last}/policy/model.safetensors"):
        wa, wb = load_file(ref / rel), load_file(run / rel)
        assert wa.keys() == wb.keys() and all(bool((wa[k] == wb[k]).all()) for k in wa), rel
    sa, sb = (json.loads((d / "checkpoints" / last / "state.json").read_text()) for d in (ref, run))
    sa["counters"].pop("wall_time"), sb["counters"].pop("wall_time")
    assert sa == sb


def killed(zygote: Zygote, run: Path, over: list[str], **kw) -> None:
    """Run one segment that must die by SIGKILL, then check the run directory."""
    status, log = zygote.run(run, over, **kw)
    assert status == -signal.SIGKILL, f"segment {kw} ended with {status}, not SIGKILL:\n{log[-3000:]}"
    assert checkpoint_problems(run) == [], kw


def finished(zygote: Zygote, run: Path, over: list[str], *, resume: bool) -> float:
    t0 = time.monotonic()
    status, log = zygote.run(run, over, resume=resume)
    assert status == 0, log[-3000:]
    return time.monotonic() - t0


# -- the stress runs -----------------------------------------------------------------------------------------------
# kill plans of the deterministic run (steps 0..5, a checkpoint every step, two kept): where each kill lands
SCRIPTED = [
    # (kill point, nth matching call in the segment, latest after the kill, what the kill leaves behind)
    ("metrics_torn", 3, "step_000001", "half of step 2's metrics line"),
    ("tensors_write", 1, "step_000001", "a half tensors.pt in .tmp_step_000002"),
    ("metrics_rewrite", 1, "step_000001", "half a rewritten metrics.jsonl (its temporary file)"),
    ("after_rename", 2, "step_000002", "step_000003 in place, latest not yet moved"),
    ("state_write", 1, "step_000002", "half a state.json in .tmp_step_000003, a stale step_000003 beside it"),
    ("latest_write", 2, "step_000003", "half a latest (its temporary file), step_000004 in place"),
    ("policy_write", 2, "step_000004", "half the policy weights in .tmp_step_000005"),
    ("after_latest", 1, "step_000005", "the last checkpoint, before pruning and the final export"),
    ("export", 1, "step_000005", "half of final/model.safetensors"),
]
RANDOM_KILLS = 3


@pytest.mark.parametrize("method", list(METHODS))
def test_sigkill_anywhere_then_resume_reproduces_the_uninterrupted_run(tmp_path, tiny_overrides, zygote, method):
    """Per method: 9 SIGKILLs at scripted moments (in a metrics append, in each part of a checkpoint write, between
    the checkpoint's rename and ``latest``, before pruning, in the final export, in the resume's metrics rewrite),
    then another run killed once after a metrics line and 3 times at random moments; each followed by ``--resume``.
    After every kill the run directory is sound; both runs end equal to the uninterrupted run."""
    over = [*tiny_overrides, *COMMON, *METHODS[method]]
    ref = tmp_path / "uninterrupted"
    finished(zygote, ref, over, resume=False)

    run = tmp_path / "scripted"
    for i, (at, nth, latest, _) in enumerate(SCRIPTED):
        killed(zygote, run, over, resume=i > 0, plan={"at": at, "nth": nth})
        assert latest_name(run) == latest, (at, latest_name(run))
        if at == "metrics_torn":
            assert last_line_torn(run)
        if at == "tensors_write":
            assert (run / "checkpoints" / ".tmp_step_000002" / "tensors.pt").is_file()
        if at == "after_rename":
            assert (run / "checkpoints" / "step_000003" / "state.json").is_file()
    finished(zygote, run, over, resume=True)
    assert_same_run(ref, run)

    run = tmp_path / "random"
    t0 = time.monotonic()
    killed(zygote, run, over, resume=False, plan={"at": "after_metrics", "nth": 3})  # after step 2's line
    span = time.monotonic() - t0  # about a resumed segment's life: setup, the steps left, the export
    rng = np.random.default_rng(sorted(METHODS).index(method))
    hit = 0
    for _ in range(RANDOM_KILLS):
        status, log = zygote.run(run, over, resume=True, kill_after=float(rng.uniform(0.0, span)))
        assert status in (0, -signal.SIGKILL), log[-3000:]
        hit += status == -signal.SIGKILL
        assert checkpoint_problems(run) == []
    finished(zygote, run, over, resume=True)
    assert_same_run(ref, run)
    print(f"{method}: {len(SCRIPTED) + 1 + hit} SIGKILLs ({hit} of {RANDOM_KILLS} random ones landed)")


def test_sigkill_before_the_first_checkpoint_then_resume_starts_over(tmp_path, tiny_overrides, zygote):
    """Killed in step 1's metrics append (the step-0 eval row is written, no checkpoint yet), ``--resume`` must
    continue the run, i.e. start it over, and end equal to the uninterrupted run."""
    over = [*tiny_overrides, *COMMON, *METHODS["grpo"]]
    run = tmp_path / "run"
    killed(zygote, run, over, resume=False, plan={"at": "metrics_torn", "nth": 2})
    assert not (run / "checkpoints").exists()
    status, log = zygote.run(run, over, resume=True)
    fresh, fresh_log = zygote.run(run, over, resume=False) if status else (0, "")
    assert status == 0, f"--resume: {log.strip()[-300:]}\nwithout --resume (exit {fresh}): {fresh_log.strip()[-300:]}"
    ref = tmp_path / "uninterrupted"
    finished(zygote, ref, over, resume=False)
    assert_same_run(ref, run)


@pytest.mark.parametrize("case", ["prune", "replace"])
def test_sigkill_inside_checkpoint_deletion_leaves_no_partial_checkpoint(tmp_path, tiny_overrides, zygote, case):
    """SIGKILL right after ``shutil.rmtree``'s first unlink in a checkpoint being deleted. ``prune``: the step-3
    save deletes step_000001 (two are kept); ``replace``: step_000002 was renamed in but ``latest`` not moved, so the
    resume re-saves step 2 and deletes the old step_000002 first. No ``step_*`` folder may be left lacking a part
    (``load_checkpoint`` would still load one without its weights), and the resume ends equal to the uninterrupted
    run. (A save in place, ``rmtree(step_*)``, fails this; a folder renamed out of ``step_*`` before it is deleted
    passes.)"""
    over = [*tiny_overrides, *COMMON, *METHODS["grpo"]]
    run = tmp_path / "run"
    if case == "replace":
        killed(zygote, run, over, resume=False, plan={"at": "after_rename", "nth": 2})
        assert latest_name(run) == "step_000001" and (run / "checkpoints" / "step_000002").is_dir()
    killed(zygote, run, over, resume=case == "replace", plan={"at": "rmtree_checkpoint", "nth": 1})
    finished(zygote, run, over, resume=True)
    ref = tmp_path / "uninterrupted"
    finished(zygote, ref, over, resume=False)
    assert_same_run(ref, run)
