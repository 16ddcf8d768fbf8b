"""The soak run behind tests/train/test_soak.py: ``python -m tests.train._soak PRIOR OUT.json RUN_DIR [STEPS]``.

One ``v05 train`` run of a tiny random policy (no warm start: the prior machinery is what is soaked, not learning)
over a pool of 20,000 arithmetic prompts, 2 prompts × 2 rollouts a step, checkpoints every half run. Writes its
measurements as JSON: resident memory (``/proc/self/statm``), step wall time (the loop's ``time/step``) and the
process's CPU time from one logged step to the next along the run, the checkpoints' state.json
sizes, and the sizes of the prior's buffers in the final state.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch

from v05.train.config import load_config
from v05.train.loop import train

POOL = 20_000
PRIOR_OPTIONS = {"history": [], "combined": ["prior.options={backend: tfidf}"]}


def rss_mib() -> float:
    """Resident set size of this process now (not the peak), MiB."""
    with open("/proc/self/statm", encoding="ascii") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def overrides(prior: str, steps: int) -> list[str]:
    return [
        "task.name=arithmetic",
        f"task.options={{n_train: {POOL}, n_eval: 30, n_val: 20, mix: [0.5, 0.5, 0.0]}}",
        "generation.max_new_tokens=2", "warmup.enabled=false", "train.batch_size=2", f"train.steps={steps}",
        "allocator.options={k: 2}", "estimator.name=v05_eb", "estimator.options={scale: none}",
        f"prior.name={prior}", *PRIOR_OPTIONS[prior], "eval.every=0", "eval.at_start=false", "eval.size=4",
        "run.progress=false", "run.tensorboard=false", f"run.checkpoint_every={steps // 2}", "run.keep_checkpoints=2",
    ]  # fmt: skip


def main(prior: str, out: Path, run_dir: Path, steps: int) -> None:
    torch.set_num_threads(1)
    rss, times, cpu = [], [], []
    last = [time.process_time()]

    def log(row: dict) -> None:
        rss.append(rss_mib())
        times.append(row["time/step"])
        now = time.process_time()  # this process's CPU time: what another process's load does not inflate
        cpu.append(now - last[0])
        last[0] = now

    train(load_config(None, overrides(prior, steps)), run_dir, log=log)
    ckpts = sorted((run_dir / "checkpoints").glob("step_*"))
    state = json.loads((ckpts[-1] / "state.json").read_text())
    prov = state["provider"]
    sizes = {"online_rows": len(prov["online"]["vbar"]),
             "history_prompts": sum(len(h["keys"]) for h in prov["history"].values())}  # fmt: skip
    if "buffers" in prov:
        sizes["buffer_rows"] = sum(len(b["scores"]) for b in prov["buffers"].values())
        sizes["buffer_capacity"] = sum(int(b["capacity"]) for b in prov["buffers"].values())
    out.write_text(json.dumps({
        "prior": prior, "steps": len(times), "rss_mib": rss, "step_s": times, "step_cpu_s": cpu,
        "state_bytes": {c.name: (c / "state.json").stat().st_size for c in ckpts}, "sizes": sizes,
        "prompts_sampled": len(times) * 2, "pool": POOL,
    }))  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else 3000)
