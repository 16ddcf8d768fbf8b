"""``v05 bench train``, ``matrix`` and ``trl-parity``: throughput against TRL, the evidence grid, runner parity.

- ``train``: rollouts/s of ``v05 train`` and of TRL's ``GRPOTrainer`` on the same policy (the tiny one from its cached
  SFT warm start, or ``--policy smollm2``: SmolLM2-135M-Instruct as it comes, optionally with ``--lora``), task,
  prompts per step and k, each side timed over a fixed wall-clock window and the sides interleaved for
  several rounds in one process (median ratio and its spread); and v05's overhead — prior, allocator and estimator
  time (embeddings cached) as a fraction of step time — for GRPO and for the V0.5 configs.
- ``matrix``: a declared grid of task settings × methods × seeds at one budget (:mod:`v05.train.matrix`): sample
  efficiency in rollouts and in compute against the reference GRPO, paired differences, the paper's diagnostics.
- ``trl-parity``: :mod:`v05.train.trl_parity`.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from v05.timing import Spread, interleave, spread
from v05.train.cli import require_trainer

logger = logging.getLogger(__name__)

WARMUP_STEPS = 2
"""Steps at the start of each timed side left out of its clock (first fits, allocator caches, TRL's first step)."""

UNBOUNDED_STEPS = 1_000_000
"""The step cap of a timed side: its wall-clock window, not a step count, ends it."""

MIN_WINDOW_S = 1.0
"""The shortest ``--window-s`` accepted (quote figures from windows of >= 30 s)."""

POLICIES: dict[str, tuple[str, ...]] = {
    "tiny": (),
    "smollm2": (
        "policy.name_or_path=smollm2-135m-instruct",
        "warmup.enabled=false",
        "generation.max_new_tokens=16",
        "train.batch_size=8",
    ),
}
"""``v05 bench train --policy``: overrides applied before the user's. ``smollm2`` is SmolLM2-135M-Instruct as it comes
(no warm start: throughput does not need one), chat-rendered prompts, 16 new tokens, 8 prompts a step."""


def _step_times(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Throughput and overhead share of one v05 run over its metrics rows after the first ``WARMUP_STEPS``.

        rollouts/s = Σ rollouts_step / Σ time/step,   overhead = Σ (time/prior + time/estimate) / Σ time/step

    ``rows`` are the run's metrics rows (``step``, ``time/step``, ``rollouts_step``, ``time/prior``, ``time/estimate``).
    """
    steps = [r for r in rows if r["step"] > WARMUP_STEPS]
    total = float(sum(r["time/step"] for r in steps))
    rollouts = float(sum(r["rollouts_step"] for r in steps))
    overhead = float(sum(r["time/prior"] + r["time/estimate"] for r in steps))
    return {"steps": len(steps), "rollouts": rollouts, "seconds": total, "rollouts_per_s": rollouts / total,
            "overhead_frac": overhead / total}  # fmt: skip


class _WindowFull(Exception):
    """Raised by the ``log`` of a timed v05 run once its steps fill the window: ends ``train`` after that step."""


def _v05_window(cfg: Any, run_dir: Path, window_s: float) -> dict[str, float]:
    """Train ``cfg`` from its warm start until the steps after the first ``WARMUP_STEPS`` sum to ``window_s`` s.

    The clock is the loop's own ``time/step`` (generate + verify + prior + allocate + estimate + update); setup,
    metrics writing and the untimed first steps fall outside it. The run stops without a final checkpoint.
    """
    from v05.train.loop import train  # noqa: PLC0415

    rows: list[dict[str, Any]] = []

    def log(row: dict[str, Any]) -> None:
        rows.append(row)
        if sum(r["time/step"] for r in rows if r["step"] > WARMUP_STEPS) >= window_s:
            raise _WindowFull

    if run_dir.exists():
        shutil.rmtree(run_dir)
    with contextlib.suppress(_WindowFull):
        train(cfg, run_dir, log=log)
    return _step_times(rows)


def _trl_window(cfg: Any, out: Path, window_s: float) -> Callable[[], dict[str, float]]:
    """A measurement of TRL's GRPOTrainer at ``cfg``'s policy (warm start), task, prompts per step and k."""
    from v05.adapters.trl import trl_grpo_rollouts_per_s  # noqa: PLC0415
    from v05.tasks import make_task  # noqa: PLC0415
    from v05.train.policy import load_policy, set_cpu_threads  # noqa: PLC0415
    from v05.train.warmstart import ensure_warm_start, render_all, warm_policy  # noqa: PLC0415

    set_cpu_threads(cfg.run.threads)
    policy = warm_policy(cfg, ensure_warm_start(cfg, progress=False)) if cfg.warmup.enabled else cfg.policy
    model, tokenizer = load_policy(policy)  # what the v05 side trains: the warm start, or the model as it comes
    task = make_task(cfg.task.name, **cfg.task.options)
    pool = list(task.train_prompts())
    texts = render_all(cfg, task, pool, tokenizer)
    by_text = {t: p for t, p in zip(texts, pool, strict=True)}

    def reward(prompts: list[str], completions: list[str], **_: Any) -> list[float]:
        return [float(r) for r in task.score([by_text[p] for p in prompts], completions).rewards]

    def measure() -> dict[str, float]:
        return trl_grpo_rollouts_per_s(
            model, tokenizer, texts, reward, num_generations=_k(cfg), batch_prompts=cfg.train.batch_size,
            max_new_tokens=cfg.generation.max_new_tokens, steps=UNBOUNDED_STEPS, seed=cfg.seed,
            output_dir=str(out / "trl"), window_s=window_s, warmup_steps=WARMUP_STEPS,
        )  # fmt: skip

    return measure


def _k(cfg: Any) -> int:
    return int(cfg.allocator.options.get("k", 4))


def _load_average() -> float | None:
    """The 1-minute load average (None where the OS has none): a busy machine shows up in the results."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def bench_train(out: Path, *, window_s: float = 30.0, repeats: int = 3,
                configs: tuple[str, ...] = ("demo-grpo4", "demo-v05", "demo-v05-eb"),
                overrides: tuple[str, ...] = (), policy: str = "tiny",
                lora: int | None = None) -> dict[str, Any]:  # fmt: skip
    """Time ``v05 train`` (each config, evals off) against TRL's GRPOTrainer at the first config's batch and k.

    Every side trains from the same warm start for a fixed wall-clock window: the steps after its first
    ``WARMUP_STEPS`` are timed until they sum to ``window_s`` (v05: the loop's ``time/step``; TRL: optimizer step
    begin → end, generation included). The sides run interleaved, ``repeats`` rounds of (first config, TRL, the
    other configs), so each round's v05/TRL ratio compares adjacent windows:

        ρ_r = (rollouts/s of v05, round r) / (rollouts/s of TRL, round r),   speedup_vs_trl = median_r ρ_r

    Rates and overhead shares are medians over rounds too, each with its spread (:func:`v05.timing.spread`). Both
    use the same torch threads, policy, max new tokens, prompts per step and k. ``policy`` names the model
    (:data:`POLICIES`); ``lora`` (a rank) trains a LoRA adapter of that rank (alpha = 2 × rank) on both sides.

    Raises:
        ValueError: ``window_s`` < ``MIN_WINDOW_S``, ``repeats`` < 1, no configs, an unknown ``policy`` or a ``lora``
            rank < 1.
    """
    from v05.train.config import load_config  # noqa: PLC0415

    if not window_s >= MIN_WINDOW_S:
        raise ValueError(f"window_s must be >= {MIN_WINDOW_S} s (figures to quote: >= 30), got {window_s}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an integer >= 1, got {repeats!r}")
    if not configs:
        raise ValueError("need at least one config (the first is timed against TRL)")
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    if lora is not None and (isinstance(lora, bool) or not isinstance(lora, int) or lora < 1):
        raise ValueError(f"lora must be a rank >= 1, got {lora!r}")
    out.mkdir(parents=True, exist_ok=True)
    adapter = () if lora is None else (f"policy.lora={{r: {lora}, alpha: {2 * lora}}}",)
    common = [*POLICIES[policy], *adapter, *overrides, f"train.steps={UNBOUNDED_STEPS}", "train.max_rollouts=null",
              "eval.every=0", "eval.at_start=false", "eval.size=16", "run.progress=false", "run.tensorboard=false",
              "run.checkpoint_every=0"]  # fmt: skip
    cfgs = {name: load_config(name, common) for name in configs}
    first = cfgs[configs[0]]
    v05 = {f"v05:{name}": functools.partial(_v05_window, cfgs[name], out / name, window_s) for name in configs}
    ref = f"v05:{configs[0]}"
    sides = {ref: v05[ref], "trl": _trl_window(first, out, window_s), **{s: m for s, m in v05.items() if s != ref}}
    load_before, t0 = _load_average(), time.perf_counter()
    rounds = interleave(sides, repeats)  # (repeats,) {side: timing}
    wall_s, load_after = time.perf_counter() - t0, _load_average()
    return _summary(rounds, configs, first) | {
        "policy": first.policy.name_or_path + (" (SFT warm start)" if first.warmup.enabled else " (as it comes)"),
        "lora_rank": lora,
        "order": list(sides), "window_s": window_s, "repeats": repeats, "warmup_steps": WARMUP_STEPS,
        "wall_s": wall_s, "load_average_1min": [load_before, load_after],
    }  # fmt: skip


def _summary(rounds: list[dict[str, dict[str, float]]], configs: tuple[str, ...], first: Any) -> dict[str, Any]:
    """Medians over rounds (the quoted figures) with their spreads, and the per-round timings."""

    def over(side: str, key: str) -> Spread:
        return spread([r[side][key] for r in rounds])

    ref = f"v05:{configs[0]}"
    speedup = spread([r[ref]["rollouts_per_s"] / r["trl"]["rollouts_per_s"] for r in rounds])
    v05, trl, overhead = over(ref, "rollouts_per_s"), over("trl", "rollouts_per_s"), over(ref, "overhead_frac")
    per_config = {
        name: {key: over(f"v05:{name}", key).median for key in ("rollouts_per_s", "overhead_frac")}
        | {"spread": {key: over(f"v05:{name}", key).as_dict() for key in ("rollouts_per_s", "overhead_frac")},
           "rounds": [r[f"v05:{name}"] for r in rounds]}
        for name in configs
    }  # fmt: skip
    return {
        "rollouts_per_s": {"v05": v05.median, "trl": trl.median},
        "v05_overhead_share": overhead.median,
        "v05_rollouts_per_s": v05.median,
        "trl_rollouts_per_s": trl.median,
        "speedup_vs_trl": speedup.median,
        "overhead_frac": overhead.median,
        "spread": {
            "v05_rollouts_per_s": v05.as_dict(),
            "trl_rollouts_per_s": trl.as_dict(),
            "speedup_vs_trl": speedup.as_dict(),
            "overhead_frac": overhead.as_dict(),
        },
        "configs": per_config,
        "trl": {
            "rollouts_per_s": trl.median,
            "spread": {"rollouts_per_s": trl.as_dict()},
            "rounds": [r["trl"] for r in rounds],
        },
        "batch_prompts": first.train.batch_size,
        "k": _k(first),
        "max_new_tokens": first.generation.max_new_tokens,
        "note": "medians over interleaved rounds (spread: min, max, IQR, per-round values); speedup_vs_trl = median "
        "of per-round v05/TRL ratios; v05 overhead = (time/prior + time/estimate) / time/step, time/estimate "
        "includes the allocator",
    }


def register_benches(bsub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``v05 bench train``, ``matrix`` and ``trl-parity`` (torch and TRL imported only when they run)."""
    tr = bsub.add_parser("train", help="v05 train rollouts/s vs TRL GRPOTrainer, and v05's overhead share")
    tr.add_argument("--out", default="runs/bench-train", help="scratch folder for the runs")
    tr.add_argument(
        "--window-s",
        type=float,
        default=30.0,
        help=f"seconds each side is timed per round after {WARMUP_STEPS} untimed steps (default 30)",
    )
    tr.add_argument("--repeats", type=int, default=3, help="interleaved rounds (default 3; medians are reported)")
    tr.add_argument("--configs", default="demo-grpo4,demo-v05,demo-v05-eb", help="configs to time (first = vs TRL)")
    tr.add_argument("--json", help="write the results here")
    tr.add_argument("--policy", default="tiny", help=f"the model: {', '.join(POLICIES)} (default tiny)")
    tr.add_argument("--lora", type=int, default=None, metavar="RANK", help="train a LoRA adapter of this rank")
    tr.add_argument("overrides", nargs="*", metavar="key=value", help="overrides applied to every config")
    tr.set_defaults(func=_run_train)
    mx = bsub.add_parser(
        "matrix",
        help="every method of a grid × task settings × seeds at one budget: report + JSON",
        description="Train a declared grid (benchmarks/grids/*.yaml) of task settings × methods × "
        "seeds at one budget per task (finished cells reused, interrupted ones resumed) and write "
        "OUT/index.html, a report per task, OUT/matrix.json and, if asked, --json and --doc.",
    )
    mx.add_argument("grid", help="the grid file, e.g. benchmarks/grids/standard.yaml")
    mx.add_argument("--out", default=None, help="folder of the cells and the report (default runs/matrix-GRIDNAME)")
    mx.add_argument("--json", help="also write the results JSON here")
    mx.add_argument("--doc", help="write the results page (markdown, e.g. docs/results.md)")
    mx.add_argument(
        "--readme", help="replace the generated section between its markers in this file (docs/results-summary.md)"
    )
    mx.add_argument("--quick", action="store_true", help="the grid's smoke version (quick methods/seeds, tiny runs)")
    mx.add_argument("--workers", type=int, default=1, help="cells trained at once, one process each (default 1)")
    mx.add_argument("--tasks", default="", help="only these task settings (comma-separated): run the grid in parts")
    mx.add_argument("--report-only", action="store_true", help="train nothing; report the finished cells")
    mx.add_argument("--store", default=None,
                    help="keep finished cells here and resume from them on another machine (default: the grid's "
                         "store:, none for --quick); 'none' keeps nothing")  # fmt: skip
    mx.add_argument("--recommended", default=None,
                    help="write the tuning sweep's pick (tuning.recommend) here as a config, once the sweep has "
                         "finished (e.g. src/v05/train/configs/v05-recommended.yaml)")  # fmt: skip
    mx.set_defaults(func=_run_matrix)
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
    require_trainer()
    configs = tuple(c for c in args.configs.split(",") if c)
    res = bench_train(Path(args.out), window_s=args.window_s, repeats=args.repeats, configs=configs,
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
    require_trainer()
    from v05.train.trl_parity import bench_trl_parity  # noqa: PLC0415 (the trl extra, imported when it runs)

    try:
        seeds = tuple(int(s) for s in args.seeds.split(",") if s.strip())
    except ValueError:
        raise ValueError(f"--seeds must be comma-separated integers, got {args.seeds!r}") from None
    command = " ".join(["v05 bench trl-parity", *(["--json", args.json] if args.json else [])])
    res = bench_trl_parity(Path(args.out), seeds=seeds, budget=args.budget, eval_every=args.eval_every,
                           configs=tuple(c for c in args.configs.split(",") if c), command=command)  # fmt: skip
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


def _run_matrix(args: argparse.Namespace) -> int:
    require_trainer()
    from v05.train.matrix import bench_matrix, headline_rows  # noqa: PLC0415 (the trainer's extra: torch)

    if args.workers < 1:
        raise ValueError(f"--workers must be >= 1, got {args.workers}")
    out = args.out or f"runs/matrix-{Path(args.grid).stem}{'-quick' if args.quick else ''}"
    command = " ".join(["v05 bench matrix", args.grid, *(["--quick"] if args.quick else []),
                        *(f"--{k} {v}" for k, v in (("json", args.json), ("doc", args.doc),
                                                    ("recommended", args.recommended)) if v)])  # fmt: skip
    res = bench_matrix(args.grid, out, quick=args.quick, workers=args.workers, json_path=args.json, doc=args.doc,
                       readme=args.readme, command=command, train_cells=not args.report_only,
                       tasks=[t for t in args.tasks.split(",") if t], store=args.store,
                       recommended=args.recommended)  # fmt: skip
    for name, task in res["results"]["tasks"].items():  # the CLI's output: one line per method and task
        print(f"{name} ({task['regime']}, warm start {task['warm_start_eval']:.3f}, ref {task['reference']}):")
        for row in headline_rows(task):
            print("  " + " | ".join(row))
    if res["report"] is not None:
        print(f"report: {res['report']}")
    for label, err in res["failures"].items():
        print(f"FAILED {label}: {err}")
    return 1 if res["failures"] else 0


__all__ = ["bench_train", "register_benches"]
