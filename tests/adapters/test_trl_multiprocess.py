"""V05GRPOTrainer on 2 processes (gloo, CPU): the prior is computed once, on the main process, and broadcast.

The test runs this file as a script in a fresh interpreter, which imports TRL once and forks 2 ranks
(``torch.multiprocessing``, before any torch op, so no thread pool is forked); each rank joins a gloo process group
through a file (no port), which accelerate then adopts (WORLD_SIZE/RANK set as torchrun sets them), trains 2 steps
of the tiny char-level Llama and pickles what it saw into the folder given on the command line; the test compares
the two ranks.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("trl")

import torch  # noqa: E402

import v05.adapters.trl as trl_adapter  # noqa: E402
import v05.round as round_module  # noqa: E402
from tests.adapters.test_trl import arithmetic_setup, config, odd_first_char  # noqa: E402
from tests.adapters.test_trl_spo import DrawRecording  # noqa: E402
from v05.priors import make_provider  # noqa: E402
from v05.round import state_to_json  # noqa: E402

PER_RANK = {4: 6, 1: 3}  # rollouts per rank and step by K: at K = 4, 12 a step = 3 groups, the middle one straddling
# the two ranks; at K = 1, 6 one-rollout groups a step (of the 8 prompts)
MODES = {"4": 4, "1": 1, "spo": 1}  # the test's modes → K; "spo": K = 1 with v05_sampler="spo" (6 of the 8 drawn)
REPO = Path(__file__).resolve().parents[2]


class RankSkewedSpy:
    """A running_mean provider that records its calls and shifts its prediction by −0.3·rank.

    The shift stands for per-process numerics (an embedding model on each GPU, its own cache, its own history): if
    each rank ran its own provider, the ranks' priors, advantages and estimator states would drift apart.
    """

    def __init__(self, rank: int) -> None:
        self.inner = make_provider("running_mean")
        self.name = self.inner.name
        self.rank = rank
        self.calls: list[str] = []

    def predict(self, prompt_ids, texts, *, policy="default"):
        self.calls.append("predict")
        pred = self.inner.predict(prompt_ids, texts, policy=policy)
        return dataclasses.replace(pred, mean=np.clip(pred.mean - 0.3 * self.rank, -1.0, 1.0))

    def update(self, prompt_ids, texts, scores, counts, *, policy="default", step=None):
        self.calls.append("update")
        self.inner.update(prompt_ids, texts, scores, counts, policy=policy, step=step)

    def calibration(self, policy="default"):
        return self.inner.calibration(policy)

    def state_dict(self):
        return self.inner.state_dict()

    def load_state_dict(self, state):
        self.inner.load_state_dict(state)


def _rank(rank: int, out_dir: Path, mode: str) -> None:
    """One rank: 2 training steps of v05_eb + the spy prior at K = ``MODES[mode]`` (``"spo"``: with the spo sampler);
    pickles priors, advantages, state, calls, metrics and the sampler's draws."""
    k = MODES[mode]
    torch.set_num_threads(1)
    world = 2
    os.environ |= {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(world)}
    torch.distributed.init_process_group(
        "gloo", init_method=(out_dir / "process_group").as_uri(), rank=rank, world_size=world
    )
    spies: list[RankSkewedSpy] = []

    def make_spy(name, **options):
        spies.append(RankSkewedSpy(rank))
        return spies[-1]

    round_module.make_provider = make_spy  # the adapter's round builds its provider through this name
    model, tokenizer, dataset, _, _ = arithmetic_setup()
    args = config(
        out_dir / "trl",
        v05_estimator="v05_eb",
        per_device_train_batch_size=PER_RANK[k],
        num_generations=k,
        save_strategy="steps",
        save_steps=2,
        save_only_model=True,
        ddp_backend="gloo",
        **({"v05_sampler": "spo"} if mode == "spo" else {}),
    )
    trainer = DrawRecording(
        model=model, reward_funcs=odd_first_char, args=args, train_dataset=dataset, processing_class=tokenizer
    )
    trainer.train()
    record = {
        "rank": trainer.accelerator.process_index,
        "world": trainer.accelerator.num_processes,
        "calls": [call for spy in spies for call in spy.calls],
        "has_provider": trainer.v05_provider is not None,
        "batches": [
            (b.prior, b.estimate.advantages, b.rewards, b.prompt_ids, b.process_slice, handed)
            for b, handed in trainer.scored
        ],
        "state": state_to_json(trainer.v05_state),
        "provider_state": spies[0].state_dict() if spies else None,
        "metrics": [{k: v for k, v in row.items() if k.startswith("v05/")} for row in trainer.state.log_history],
        "draws": [rows.tolist() for _, rows, _ in trainer.draws],
        "ids": list(dataset["prompt_id"]),
    }
    with open(out_dir / f"rank{rank}.pkl", "wb") as fh:
        pickle.dump(record, fh)
    torch.distributed.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip the teardown: freeing DDP's reducer can deadlock in ~ProcessGroupGloo (torch 2.13: it joins the gloo
    # run-loop thread while holding the GIL that thread waits for); it hung one of this test's early runs.
    os._exit(0)


@pytest.mark.parametrize("mode", list(MODES))
def test_two_processes_share_the_main_process_prior(tmp_path, mode):
    """2 ranks × 2 steps (gloo), at K = 4, at one rollout per prompt, and at one with the spo sampler: predict/update
    run on rank 0 only; both ranks hold the same prior, full-batch advantages, estimator state and v05/* metrics
    although each rank's provider would predict differently; each rank hands TRL its own slice; rank 0's checkpoint
    holds the provider and estimator states. With the sampler, rank 0 draws each generation batch and both ranks
    yield the same rows: the gathered batch is the draw, rank 0's rows first."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    env |= {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    proc = subprocess.Popen(
        [sys.executable, __file__, str(tmp_path), mode],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, so a hung rank is killed with the launcher
    )
    try:
        output, _ = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        pytest.fail(f"the 2-process run did not finish in 240 s:\n{output[-6000:]}")
    assert proc.returncode == 0, output[-6000:]
    r0, r1 = (pickle.loads((tmp_path / f"rank{r}.pkl").read_bytes()) for r in (0, 1))
    k = MODES[mode]
    per_rank = PER_RANK[k]

    assert (r0["rank"], r1["rank"], r0["world"]) == (0, 1, 2)
    draws = len(r0["draws"])  # the sampler's predicts (before, between and after the 2 steps' predict/update)
    assert sorted(r0["calls"]) == sorted(["predict", "update"] * 2 + ["predict"] * draws) and r0["has_provider"]
    assert (draws >= 2) == (mode == "spo") and r0["draws"] == r1["draws"]  # the ranks yield the same rows
    assert r1["calls"] == [] and not r1["has_provider"]
    assert len(r0["batches"]) == len(r1["batches"]) == 2
    for b0, b1 in zip(r0["batches"], r1["batches"], strict=True):
        (prior0, adv0, rewards0, keys0, slice0, handed0), (prior1, adv1, rewards1, keys1, slice1, handed1) = b0, b1
        assert len(adv0) == 2 * per_rank and keys0 == keys1 and len(keys0) == 2 * per_rank // k
        np.testing.assert_array_equal(rewards0, rewards1)
        np.testing.assert_array_equal(prior0, prior1)  # rank 0's spy prediction (skew 0), bit for bit
        np.testing.assert_array_equal(adv0, adv1)
        assert (slice0, slice1) == (slice(0, per_rank), slice(per_rank, 2 * per_rank))  # TRL's process_slice
        np.testing.assert_allclose(np.concatenate([handed0, handed1]), adv0, atol=1e-6)  # float32 round trip
    for (_, _, _, keys, _, _), rows in zip(r0["batches"], r0["draws"], strict=False):
        assert list(keys) == [r0["ids"][i] for i in rows]  # the gathered batch is rank 0's draw, in order
    assert r0["state"] is not None and r0["state"]["type"] == "PriorErrorState"
    assert r0["state"] == r1["state"]
    assert sum(r0["state"]["data"]["count"]) == 2 * 2 * per_rank // k  # 2 steps × 3 (K = 4) or 6 (K = 1) groups
    assert r0["metrics"] == r1["metrics"] and any("v05/prior_tau2" in row for row in r0["metrics"])

    saved = json.loads((tmp_path / "trl" / "checkpoint-2" / trl_adapter.STATE_FILE).read_text())
    assert saved["estimator_state"] == json.loads(json.dumps(r0["state"]))
    assert saved["provider"] == json.loads(json.dumps(r0["provider_state"])) and saved["prior"] == "running_mean"


if __name__ == "__main__":
    torch.multiprocessing.start_processes(
        _rank, args=(Path(sys.argv[1]), sys.argv[2]), nprocs=2, start_method="fork"
    )
