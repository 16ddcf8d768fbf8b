"""``v05 bench train`` and ``v05 bench trl-parity``: v05's trainer against TRL's, in throughput and in learning.

Registration imports neither torch nor TRL (``v05 --help`` stays light); each command imports its bench
(:mod:`v05.adapters.trl_bench`, :mod:`v05.adapters.trl_parity`: the trainer's and the trl extras) when it runs.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import ModuleType

from v05.train.cli import require_trainer


def _benches() -> tuple[ModuleType, ModuleType]:
    """The two benches, ``(v05.adapters.trl_bench, v05.adapters.trl_parity)``, imported when one runs.

    They need the ``[trl]`` extra on the trainer's (``[train]``: torch, transformers), which registering the commands
    must not; :func:`v05.train.cli.require_trainer` names the trainer's extra first.
    """
    require_trainer()
    from v05.adapters import trl_bench, trl_parity  # noqa: PLC0415 (the [trl] extra, with the trainer's [train])

    return trl_bench, trl_parity


def register_bench(bsub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``v05 bench train`` and ``trl-parity`` (torch and TRL imported only when they run)."""
    tr = bsub.add_parser("train", help="v05 train rollouts/s vs TRL GRPOTrainer, and v05's overhead share")
    tr.add_argument("--out", default="runs/bench-train", help="scratch folder for the runs")
    tr.add_argument(
        "--window-s",
        type=float,
        default=30.0,
        help="seconds each side is timed per round, after its untimed first steps (default 30)",
    )
    tr.add_argument("--repeats", type=int, default=3, help="interleaved rounds (default 3; medians are reported)")
    tr.add_argument("--configs", default="demo-grpo4,demo-v05,demo-v05-eb", help="configs to time (first = vs TRL)")
    tr.add_argument("--json", help="write the results here")
    tr.add_argument("--policy", default="tiny",
                    help="the model: tiny (its SFT warm start) or smollm2 (SmolLM2-135M-Instruct; default tiny)")
    tr.add_argument("--lora", type=int, default=None, metavar="RANK", help="train a LoRA adapter of this rank")
    tr.add_argument("overrides", nargs="*", metavar="key=value", help="overrides applied to every config")
    tr.set_defaults(func=_run_train)
    tp = bsub.add_parser(
        "trl-parity",
        help="v05-recommended in TRL's trainer and in v05 train, each against TRL's own GRPO k = 4 (3 seeds)",
        description="Train GRPO k = 4 and v05-recommended at k = 1 and 2 with TRL and with v05 train from one warm "
        "start per seed (hard arithmetic, tiny policy) at equal rollouts; write per runner, configuration and seed "
        "the final eval, the paired difference to TRL's GRPO k = 4 and the rollout ratio. Finished runs are kept "
        "under --out and not trained again.",
    )
    tp.add_argument("--out", default="runs/trl-parity", help="folder of the runs (resumable)")
    tp.add_argument("--json", help="write the results here (e.g. benchmarks/results/trl/parity.json)")
    tp.add_argument("--seeds", default="30,31,32", help="comma-separated seeds (default 30,31,32: never used before)")
    tp.add_argument("--budget", type=int, default=38_400, help="rollouts per run (default 38,400, the demo budget)")
    tp.add_argument("--eval-every", type=int, default=3_200, help="rollouts between evaluations (default 3,200)")
    tp.add_argument("--configs", default="grpo4,rec_k1,rec_k2", help="configurations (grpo4 is the reference)")
    tp.set_defaults(func=_run_trl_parity)


def _run_train(args: argparse.Namespace) -> int:
    trl_bench, _ = _benches()
    configs = tuple(c for c in args.configs.split(",") if c)
    res = trl_bench.bench_train(Path(args.out), window_s=args.window_s, repeats=args.repeats, configs=configs,
                                overrides=tuple(args.overrides), policy=args.policy, lora=args.lora)  # fmt: skip
    print(json.dumps({k: v for k, v in res.items() if k not in ("configs", "trl")}, indent=2))  # the CLI's output
    for name, row in res["configs"].items():
        rate = row["spread"]["rollouts_per_s"]
        print(f"{name}: {row['rollouts_per_s']:.0f} rollouts/s ({rate['min']:.0f}–{rate['max']:.0f}), "
              f"overhead {100 * row['overhead_frac']:.1f}%")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    return 0


def _run_trl_parity(args: argparse.Namespace) -> int:
    _, trl_parity = _benches()
    try:
        seeds = tuple(int(s) for s in args.seeds.split(",") if s.strip())
    except ValueError:
        raise ValueError(f"--seeds must be comma-separated integers, got {args.seeds!r}") from None
    command = " ".join(["v05 bench trl-parity", *(["--json", args.json] if args.json else [])])
    res = trl_parity.bench_trl_parity(Path(args.out), seeds=seeds, budget=args.budget, eval_every=args.eval_every,
                                      configs=tuple(c for c in args.configs.split(",") if c),
                                      command=command)  # fmt: skip
    for name, by_runner in res["summary"].items():  # the CLI's output: one line per configuration and runner
        for runner in ("trl", "v05"):
            row = by_runner.get(runner)
            if row is not None:
                diff, ratio = row["paired_diff_mean"], row["rollout_ratio"]
                print(f"{name} [{runner}]: final {row['final_mean']:.3f}, vs TRL grpo4 "
                      f"{'n/a' if diff is None else f'{100 * diff:+.2f} pts'}, rollout ratio "
                      f"{'never' if ratio is None else f'{ratio:.2f}x'}")  # fmt: skip
        gap = by_runner["runner_gap"]
        if gap["mean"] is not None:
            print(f"{name}: v05 - TRL {100 * gap['mean']:+.2f} pts (agree: {gap['agree']})")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(res, indent=2))
    return 0


__all__ = ["register_bench"]
