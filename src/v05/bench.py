"""``v05 bench``: speed benchmarks (never timed unit tests).

- ``core``: every estimator on a ragged batch (default 1,048,576 rollouts in 65,536 groups) side by side with three
  anchors on the same data: plain numpy GRPO (two bincounts, no validation), and — when verl is installed — verl's
  loop-based ``compute_grpo_outcome_advantage`` and its vectorised ``compute_grpo_vectorized_outcome_advantage``;
  plus the cold import time of ``v05``. The fair anchor for speed is the vectorised verl and the bare numpy form;
  the loop form is what verl's default ``grpo`` runs.
- ``priors``: prompts/s of the default prior backend (embed + predict; ``v05.priors.evaluate.benchmark_throughput``).
- ``train`` / ``efficiency``: the trainer against TRL, and sample efficiency at equal rollouts (:mod:`v05.train.bench`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from v05.registry import ESTIMATORS, estimate


def ragged_batch(n_rollouts: int, n_groups: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """±1 rewards (N,) in ``n_groups`` ragged groups (sizes 1..2N/G), shuffled, every group non-empty."""
    if n_groups < 1 or n_rollouts < 1:
        raise ValueError(f"n_rollouts and n_groups must be >= 1, got {n_rollouts} and {n_groups}")
    if n_groups > n_rollouts:
        raise ValueError(f"n_groups ({n_groups}) must not exceed n_rollouts ({n_rollouts})")
    extra = rng.multinomial(n_rollouts - n_groups, np.full(n_groups, 1.0 / n_groups))
    group = rng.permutation(np.repeat(np.arange(n_groups), 1 + extra))
    rewards = np.where(rng.random(n_rollouts) < 0.5, 1.0, -1.0)
    return rewards, group.astype(np.int64)


def best_time(fn: Callable[[], object], repeats: int) -> float:
    """Minimum wall time of ``repeats`` calls (seconds)."""
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def import_time(repeats: int = 5) -> float:
    """Median cold ``import v05`` time in a fresh interpreter (seconds)."""
    code = "import time; t = time.perf_counter(); import v05; print(time.perf_counter() - t)"
    runs = [
        float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
        for _ in range(repeats)
    ]
    return statistics.median(runs)


def numpy_grpo(rewards: np.ndarray, group: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """The bare-numpy anchor: GRPO advantages with bincount means and unbiased stds, no input validation.

    (Single-rollout groups get nan std here and A = 0/nan: the anchor times the arithmetic only.)
    """
    n_g = np.bincount(group)
    mean_g = np.bincount(group, weights=rewards) / n_g
    dev = rewards - mean_g[group]
    std_g = np.sqrt(np.bincount(group, weights=dev * dev) / np.maximum(n_g - 1, 1))
    return dev / (std_g[group] + eps)


def bench_core(
    n_rollouts: int = 1 << 20, n_groups: int = 1 << 16, repeats: int = 3, seed: int = 0, *, verl_loop: bool = True
) -> dict[str, object]:
    """Time every registered estimator and the anchors (numpy GRPO; verl's loop and vectorised GRPO if importable).

    Args:
        n_rollouts: N, rollouts in the batch.
        n_groups: G, ragged groups.
        repeats: timing repeats per estimator (the best is reported).
        seed: seed of the batch.
        verl_loop: also time verl's loop-based GRPO (once; ~35 s at the default size).

    Returns:
        ``seconds`` per estimator, ``anchors`` (seconds per anchor, None where verl is missing), ``ratio_to``
        (estimator seconds ÷ each anchor's), sizes and the cold import time.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    rng = np.random.default_rng(seed)
    rewards, group = ragged_batch(n_rollouts, n_groups, rng)
    prior = rng.uniform(-1, 1, n_groups)
    rows: dict[str, float] = {}
    for name, spec in ESTIMATORS.items():
        kw: dict[str, object] = {"prior": prior} if spec.uses_prior else {}
        if spec.needs_truth:
            kw["mu"] = prior
        if spec.keyed:
            kw["prompt_ids"] = np.arange(n_groups)
        if spec.needs_values:
            kw["values"] = prior[group]  # per-rollout values on the ±1 scale
        rows[name] = best_time(lambda name=name, kw=kw: estimate(name, rewards, group, **kw), repeats)
    anchors: dict[str, float | None] = {
        "numpy_grpo": best_time(lambda: numpy_grpo(rewards, group), repeats),
        "verl_grpo_vectorized": None,
        "verl_grpo_loop": None,
    }
    try:
        import torch
        from verl.trainer.ppo.core_algos import (
            compute_grpo_outcome_advantage,
            compute_grpo_vectorized_outcome_advantage,
        )
    except ImportError:
        pass
    else:
        tok = torch.from_numpy(rewards).float().unsqueeze(-1)
        mask = torch.ones_like(tok)
        anchors["verl_grpo_vectorized"] = best_time(
            lambda: compute_grpo_vectorized_outcome_advantage(tok, mask, group), repeats
        )
        if verl_loop:
            anchors["verl_grpo_loop"] = best_time(lambda: compute_grpo_outcome_advantage(tok, mask, group), 1)
    return {
        "n_rollouts": n_rollouts,
        "n_groups": n_groups,
        "seconds": rows,
        "anchors": anchors,
        "ratio_to": {a: None if t is None else {k: v / t for k, v in rows.items()} for a, t in anchors.items()},
        "import_seconds": import_time(),
    }


def _run_core(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    res = bench_core(args.n_rollouts, args.n_groups, args.repeats, verl_loop=not args.no_verl_loop)
    anchors: dict[str, float | None] = res["anchors"]  # type: ignore[assignment]
    table = Table(title=f"estimators on {res['n_rollouts']:,} rollouts / {res['n_groups']:,} ragged groups")
    table.add_column("estimator")
    table.add_column("seconds", justify="right")
    for a in anchors:
        table.add_column(f"÷ {a}", justify="right")
    for name, sec in res["seconds"].items():  # type: ignore[union-attr]
        ratios = [("n/a" if t is None else f"{sec / t:.3g}×") for t in anchors.values()]
        table.add_row(name, f"{sec:.4f}", *ratios)
    console = Console()
    console.print(table)
    for a, t in anchors.items():
        console.print(f"{a}: {'n/a (verl not installed or skipped)' if t is None else f'{t:.4f} s'}")
    console.print(f"cold `import v05`: {res['import_seconds']:.3f} s (target < 0.3 s)")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    return 0


def _run_priors(args: argparse.Namespace) -> int:
    from rich.console import Console

    from v05.priors.evaluate import benchmark_throughput

    res = benchmark_throughput(n_prompts=args.n_prompts)
    Console().print_json(json.dumps(res))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    return 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``v05 bench core|priors``."""
    p = sub.add_parser("bench", help="speed benchmarks (estimators vs verl; prior throughput)")
    bsub = p.add_subparsers(dest="bench", metavar="BENCH")
    bsub.required = True
    core = bsub.add_parser("core", help="estimator speed vs numpy and verl GRPO (loop and vectorised), import time")
    core.add_argument("--n-rollouts", type=int, default=1 << 20, help="rollouts in the batch (default 1,048,576)")
    core.add_argument("--n-groups", type=int, default=1 << 16, help="ragged groups in the batch (default 65,536)")
    core.add_argument("--repeats", type=int, default=3, help="timing repeats per estimator (best is reported)")
    core.add_argument("--no-verl-loop", action="store_true", help="skip verl's loop GRPO (~35 s at the default size)")
    core.add_argument("--json", help="write the results to this JSON file")
    core.set_defaults(func=_run_core)
    pri = bsub.add_parser("priors", help="prompts/s of the default prior backend (embed + predict)")
    pri.add_argument("--n-prompts", type=int, default=512, help="new prompts to embed and predict (default 512)")
    pri.add_argument("--json", help="write the results to this JSON file")
    pri.set_defaults(func=_run_priors)
    from v05.train.bench import register_benches  # noqa: PLC0415 (numpy at import; torch only when they run)

    register_benches(bsub)
