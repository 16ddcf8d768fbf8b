"""``v05 bench``: speed benchmarks (never timed unit tests).

- ``core``: every estimator on a ragged batch (default 1,048,576 rollouts in 65,536 groups) side by side with three
  anchors on the same data: plain numpy GRPO (two bincounts, no validation), and — when verl is installed — verl's
  loop-based ``compute_grpo_outcome_advantage`` and its vectorised ``compute_grpo_vectorized_outcome_advantage``;
  plus the cold import time of ``v05``. The fair anchor for speed is the vectorised verl and the bare numpy form;
  the loop form is what verl's default ``grpo`` runs.
- ``priors``: prompts/s of the default prior backend (embed + predict; ``v05.priors.evaluate.benchmark_throughput``).

The other benches register beside these (``v05.cli.BENCHES``): ``train`` and ``trl-parity``, the trainer against TRL
(:mod:`v05.adapters.cli`), and ``matrix``, a results grid at equal rollouts (:mod:`v05.grid.cli`).

Every quoted timing is a median over interleaved rounds (each round times every contender once, in a fixed order),
reported with its spread (min–max and interquartile range over the rounds): one disturbed round moves the median
little, and a drift in machine speed hits every contender of a round alike.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from v05.priors import evaluate
from v05.registry import ESTIMATORS, estimate
from v05.timing import Spread, interleave, ratio_spread, spread


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


def wall_time(fn: Callable[[], object]) -> Callable[[], float]:
    """A measurement for :func:`interleave`: the wall time of one call of ``fn`` (seconds)."""

    def measure() -> float:
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t

    return measure


def import_time(repeats: int = 5) -> Spread:
    """Cold ``import v05`` time in a fresh interpreter (seconds), over ``repeats`` interpreters."""
    code = "import time; t = time.perf_counter(); import v05; print(time.perf_counter() - t)"
    runs = [
        float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
        for _ in range(repeats)
    ]
    return spread(runs)


def numpy_grpo(rewards: np.ndarray, group: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """The bare-numpy anchor: GRPO advantages with bincount means and unbiased stds, no input validation.

    (Single-rollout groups get nan std here and A = 0/nan: the anchor times the arithmetic only.)
    """
    n_g = np.bincount(group)
    mean_g = np.bincount(group, weights=rewards) / n_g
    dev = rewards - mean_g[group]
    std_g = np.sqrt(np.bincount(group, weights=dev * dev) / np.maximum(n_g - 1, 1))
    return dev / (std_g[group] + eps)


ANCHORS = ("numpy_grpo", "verl_grpo_vectorized", "verl_grpo_loop")
"""The reference implementations ``v05 bench core`` times beside the estimators (verl's only when importable)."""


def _anchor_calls(rewards: np.ndarray, group: np.ndarray, *, verl_loop: bool) -> dict[str, Callable[[], object]]:
    """The anchors that can run here: numpy GRPO always; verl's vectorised (and loop) GRPO when verl imports."""
    calls: dict[str, Callable[[], object]] = {"numpy_grpo": lambda: numpy_grpo(rewards, group)}
    try:
        import torch
        from verl.trainer.ppo.core_algos import (
            compute_grpo_outcome_advantage,
            compute_grpo_vectorized_outcome_advantage,
        )
    except ImportError:
        return calls
    tok = torch.from_numpy(rewards).float().unsqueeze(-1)  # (N, 1): one "token" per rollout
    mask = torch.ones_like(tok)
    calls["verl_grpo_vectorized"] = lambda: compute_grpo_vectorized_outcome_advantage(tok, mask, group)
    if verl_loop:
        calls["verl_grpo_loop"] = lambda: compute_grpo_outcome_advantage(tok, mask, group)
    return calls


def bench_core(
    n_rollouts: int = 1 << 20, n_groups: int = 1 << 16, repeats: int = 3, seed: int = 0, *, verl_loop: bool = True
) -> dict[str, object]:
    """Time every registered estimator and the anchors (numpy GRPO; verl's loop and vectorised GRPO if importable).

    Each of ``repeats`` rounds calls every estimator and then every anchor once (:func:`interleave`); a figure is
    the median over rounds, with its :class:`Spread`, and a ratio to an anchor is the median of the per-round ratios.

    Args:
        n_rollouts: N, rollouts in the batch.
        n_groups: G, ragged groups.
        repeats: rounds (≥ 1; quote figures from ≥ 3).
        seed: seed of the batch.
        verl_loop: also time verl's loop-based GRPO (~35 s a round at the default size).

    Returns:
        ``seconds`` (median per estimator) and ``seconds_spread``, ``anchors`` (median seconds per anchor, None
        where verl is missing or the loop is skipped) and ``anchors_spread``, ``ratio_to`` (median per-round
        estimator ÷ anchor), the sizes, ``repeats``, and the cold import time (``import_seconds``, ``import_spread``).

    Raises:
        ValueError: ``repeats`` < 1 or bad sizes.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    rng = np.random.default_rng(seed)
    rewards, group = ragged_batch(n_rollouts, n_groups, rng)
    prior = rng.uniform(-1, 1, n_groups)
    sides: dict[str, Callable[[], float]] = {}
    for name, spec in ESTIMATORS.items():
        # the prior doubles as the truth and, per rollout, as the probe's values (±1 scale)
        kw = spec.bind(prior=prior, mu=prior, prompt_ids=np.arange(n_groups), values=prior[group])
        sides[name] = wall_time(lambda name=name, kw=kw: estimate(name, rewards, group, **kw))
    anchors = {a: wall_time(fn) for a, fn in _anchor_calls(rewards, group, verl_loop=verl_loop).items()}
    rounds = interleave({**sides, **anchors}, repeats)  # (repeats,) {name: seconds}
    seconds = {name: spread([r[name] for r in rounds]) for name in sides}
    anchor_s = {a: spread([r[a] for r in rounds]) if a in anchors else None for a in ANCHORS}
    imports = import_time()
    return {
        "n_rollouts": n_rollouts,
        "n_groups": n_groups,
        "repeats": repeats,
        "seconds": {name: s.median for name, s in seconds.items()},
        "seconds_spread": {name: s.as_dict() for name, s in seconds.items()},
        "anchors": {a: None if s is None else s.median for a, s in anchor_s.items()},
        "anchors_spread": {a: None if s is None else s.as_dict() for a, s in anchor_s.items()},
        "ratio_to": {
            a: None if a not in anchors else {name: ratio_spread(rounds, name, a).median for name in sides}
            for a in ANCHORS
        },
        "import_seconds": imports.median,
        "import_spread": imports.as_dict(),
    }


def bench_priors(n_prompts: int = 512, *, repeats: int = 3, backend: str = "minilm") -> dict[str, object]:
    """Prompts/s of the default prior backend over ``repeats`` rounds, each from a fresh (memory-only) cache.

    Each round is one :func:`v05.priors.evaluate.benchmark_throughput` (load the encoder and fit the head on the
    context, untimed; then embed + predict ``n_prompts`` new prompts, then the same prompts again from the cache).

    Returns:
        The medians over rounds under ``benchmark_throughput``'s keys (``seconds``, ``prompts_per_s``,
        ``cached_seconds``, ``cached_prompts_per_s``, ``load_seconds``; ``n_prompts``, ``truncated``), ``repeats``,
        and ``spread``: the :class:`Spread` of each timed key.

    Raises:
        ValueError: ``repeats`` < 1, or more prompts than are bundled.
    """
    rounds = interleave({"priors": lambda: evaluate.benchmark_throughput(n_prompts, backend=backend)}, repeats)
    keys = ("seconds", "prompts_per_s", "cached_seconds", "cached_prompts_per_s", "load_seconds")
    stats = {key: spread([r["priors"][key] for r in rounds]) for key in keys}
    first = rounds[0]["priors"]
    return {
        "n_prompts": first["n_prompts"],
        "truncated": first["truncated"],
        "backend": backend,
        "repeats": repeats,
        **{key: s.median for key, s in stats.items()},
        "spread": {key: s.as_dict() for key, s in stats.items()},
    }


def _range(s: dict[str, object] | None) -> str:
    return "n/a" if s is None else f"{s['min']:.4g}–{s['max']:.4g}"


def _run_core(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    res = bench_core(args.n_rollouts, args.n_groups, args.repeats, verl_loop=not args.no_verl_loop)
    anchors: dict[str, float | None] = res["anchors"]  # type: ignore[assignment]
    spreads: dict[str, dict[str, object]] = res["seconds_spread"]  # type: ignore[assignment]
    ratio_to: dict[str, dict[str, float] | None] = res["ratio_to"]  # type: ignore[assignment]
    table = Table(
        title=f"estimators on {res['n_rollouts']:,} rollouts / {res['n_groups']:,} ragged groups: "
        f"median (min–max) over {res['repeats']} interleaved rounds"
    )
    table.add_column("estimator")
    table.add_column("seconds", justify="right")
    table.add_column("min–max", justify="right")
    for a in anchors:
        table.add_column(f"÷ {a}", justify="right")
    for name, sec in res["seconds"].items():  # type: ignore[union-attr]
        ratios = [("n/a" if r is None else f"{r[name]:.3g}×") for r in ratio_to.values()]
        table.add_row(name, f"{sec:.4f}", _range(spreads[name]), *ratios)
    console = Console()
    console.print(table)
    anchor_spread: dict[str, dict[str, object] | None] = res["anchors_spread"]  # type: ignore[assignment]
    for a, t in anchors.items():
        text = "n/a (verl not installed or skipped)" if t is None else f"{t:.4f} s ({_range(anchor_spread[a])})"
        console.print(f"{a}: {text}")
    imports: dict[str, object] = res["import_spread"]  # type: ignore[assignment]
    console.print(f"cold `import v05`: {res['import_seconds']:.3f} s ({_range(imports)}; target < 0.3 s)")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    return 0


def _run_priors(args: argparse.Namespace) -> int:
    from rich.console import Console

    res = bench_priors(args.n_prompts, repeats=args.repeats, backend=args.backend)
    Console().print_json(json.dumps(res))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    return 0


def register_bench(bsub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``v05 bench core`` and ``v05 bench priors`` to the ``v05 bench`` subcommands."""
    core = bsub.add_parser("core", help="estimator speed vs numpy and verl GRPO (loop and vectorised), import time")
    core.add_argument("--n-rollouts", type=int, default=1 << 20, help="rollouts in the batch (default 1,048,576)")
    core.add_argument("--n-groups", type=int, default=1 << 16, help="ragged groups in the batch (default 65,536)")
    core.add_argument("--repeats", type=int, default=3, help="interleaved rounds (default 3; the median is reported)")
    core.add_argument("--no-verl-loop", action="store_true", help="skip verl's loop GRPO (~35 s a round by default)")
    core.add_argument("--json", help="write the results to this JSON file")
    core.set_defaults(func=_run_core)
    pri = bsub.add_parser("priors", help="prompts/s of the default prior backend (embed + predict)")
    pri.add_argument("--n-prompts", type=int, default=512, help="new prompts to embed and predict (default 512)")
    pri.add_argument("--repeats", type=int, default=3, help="rounds, each from a fresh cache (default 3; median)")
    pri.add_argument("--backend", default="minilm", help="prior embedding backend (default minilm)")
    pri.add_argument("--json", help="write the results to this JSON file")
    pri.set_defaults(func=_run_priors)
