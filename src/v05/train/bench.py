"""``v05 bench train`` and ``v05 bench efficiency``: trainer throughput against TRL, and sample efficiency.

- ``train``: rollouts/s of ``v05 train`` and of TRL's ``GRPOTrainer`` on the same tiny policy (the cached SFT warm
  start), task, prompts per step and k, one after the other in one process; and v05's overhead — prior, allocator and
  estimator time (embeddings cached) as a fraction of step time — for GRPO and for the V0.5 configs.
- ``efficiency``: GRPO k=4, GRPO k=16, V0.5 and ``v05_eb`` (plus every extra config asked for) trained at the same
  rollout budget for several seeds; the rollouts and the compute (token-passes, ``v05.train.compute``) each needs to
  reach the final eval pass rate of the *better* GRPO, as ratios to that GRPO's, and the paired difference to it.
  Curves are seed means interpolated on a common grid (the report's ``mean_curve``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from v05.report.runs import COMPUTE_KEY, ROLLOUTS_KEY, first_crossing, group_runs, load_runs, mean_curve, seed_mean
from v05.train.cli import require_trainer
from v05.train.demo import config_label, run_demo

logger = logging.getLogger(__name__)

EFFICIENCY_CONFIGS = ("demo-grpo4", "demo-grpo16", "demo-v05", "demo-v05-eb")
"""The methods the efficiency ratio is defined on (``rollout_ratio`` has ``v05`` and ``v05_eb``)."""


VALUE_KEYS = ("value/mae", "value/corr", "value/auc", "prior/auc", "prior/n0", "prior/tau2")
"""Value-estimate quality per method (mean over each seed's steps, then over seeds) in ``v05 bench efficiency``."""

WARMUP_STEPS = 2
"""Steps left out of the timing (first fits, allocator caches): the benchmark measures the steady state."""


def _step_times(run_dir: Path) -> dict[str, float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if r["step"] > WARMUP_STEPS]
    total = float(sum(r["time/step"] for r in steps))
    rollouts = float(sum(r["rollouts_step"] for r in steps))
    overhead = float(sum(r["time/prior"] + r["time/estimate"] for r in steps))
    return {"steps": len(steps), "rollouts": rollouts, "seconds": total, "rollouts_per_s": rollouts / total,
            "overhead_frac": overhead / total}  # fmt: skip


def bench_train(out: Path, *, steps: int = 30, configs: tuple[str, ...] = ("demo-grpo4", "demo-v05", "demo-v05-eb"),
                trl_steps: int = 10, overrides: tuple[str, ...] = ()) -> dict[str, Any]:  # fmt: skip
    """Time ``v05 train`` (each config, evals off) and TRL's GRPOTrainer at the first config's batch and k.

    v05's rollouts/s is measured over the training steps after the first ``WARMUP_STEPS`` (generate + verify + prior +
    allocate + estimate + update, the ``time/step`` of metrics.jsonl), TRL's over its optimizer steps 2..N
    (generation included). Both use one torch
    thread, the same warm-started tiny policy, 6 new tokens, the same prompts per step and k.
    """
    from v05.adapters.trl import trl_grpo_rollouts_per_s  # noqa: PLC0415
    from v05.tasks import make_task  # noqa: PLC0415
    from v05.train.config import load_config  # noqa: PLC0415
    from v05.train.loop import train  # noqa: PLC0415
    from v05.train.policy import load_policy, set_cpu_threads  # noqa: PLC0415
    from v05.train.warmstart import ensure_warm_start, render_all  # noqa: PLC0415

    out.mkdir(parents=True, exist_ok=True)
    common = [*overrides, f"train.steps={steps}", "train.max_rollouts=null", "eval.every=0", "eval.at_start=false",
              "eval.size=16", "run.progress=false", "run.tensorboard=false", "run.checkpoint_every=0"]  # fmt: skip
    v05_rows: dict[str, dict[str, float]] = {}
    first = load_config(configs[0], common)
    for name in configs:
        cfg = load_config(name, common)
        run_dir = out / name
        if run_dir.exists():
            shutil.rmtree(run_dir)
        train(cfg, run_dir)
        v05_rows[name] = _step_times(run_dir)
    set_cpu_threads(first.run.threads)
    warm = ensure_warm_start(first, progress=False)
    model, tokenizer = load_policy(dataclasses.replace(first.policy, name_or_path=str(warm)))
    task = make_task(first.task.name, **first.task.options)
    pool = list(task.train_prompts())
    texts = render_all(first, task, pool, tokenizer)
    by_text = {t: p for t, p in zip(texts, pool, strict=True)}

    def reward(prompts: list[str], completions: list[str], **_: Any) -> list[float]:
        return [float(r) for r in task.score([by_text[p] for p in prompts], completions).rewards]

    k = int(first.allocator.options.get("k", 4))
    trl = trl_grpo_rollouts_per_s(
        model, tokenizer, texts, reward, num_generations=k, batch_prompts=first.train.batch_size,
        max_new_tokens=first.generation.max_new_tokens, steps=trl_steps, seed=first.seed,
        output_dir=str(out / "trl"),
    )  # fmt: skip
    ref = v05_rows[configs[0]]
    return {
        "v05_rollouts_per_s": ref["rollouts_per_s"],
        "trl_rollouts_per_s": trl["rollouts_per_s"],
        "speedup_vs_trl": ref["rollouts_per_s"] / trl["rollouts_per_s"],
        "overhead_frac": ref["overhead_frac"],
        "configs": v05_rows,
        "trl": trl,
        "batch_prompts": first.train.batch_size,
        "k": k,
        "max_new_tokens": first.generation.max_new_tokens,
        "policy": "tiny-llama (SFT warm start)",
        "note": "v05 overhead = (time/prior + time/estimate) / time/step; time/estimate includes the allocator",
    }


def bench_efficiency(out: Path, *, seeds: tuple[int, ...] = (0, 1, 2), extra: tuple[str, ...] = (),
                     overrides: tuple[str, ...] = ()) -> dict[str, Any]:  # fmt: skip
    """Train the efficiency configs × seeds at one budget (reusing finished runs); ratios in rollouts and in compute.

    Per method: the rollouts its seed-mean eval curve needs to reach the better GRPO's final seed-mean eval pass
    rate, and the token-passes (``compute_total``) its seeds had spent after that many rollouts, each as a ratio to
    that GRPO's (None: never reached), and the
    paired difference to it — each seed's curve minus the reference's same-seed curve on a common rollout grid,
    averaged over the grid, then mean ± SE over seeds (runs of one seed share the warm start and the prompt order).
    """
    configs = (*EFFICIENCY_CONFIGS, *extra)
    run_demo(out, configs=configs, seeds=seeds, overrides=overrides)
    runs = load_runs([out / f"{config_label(c)}-s{s}" for s in seeds for c in configs])
    groups = group_runs(runs)
    curves = {name: mean_curve(group, ROLLOUTS_KEY) for name, group in groups.items()}
    compute_curves = {name: mean_curve(group, COMPUTE_KEY) for name, group in groups.items()}
    finals = {name: float(c.mean[-1]) for name, c in curves.items()}
    reference = max(("grpo4", "grpo16"), key=lambda n: finals[n])
    target = finals[reference]

    reach = {name: first_crossing(c.x, c.mean, target) for name, c in curves.items()}  # rollouts at the crossing
    # the same crossing in token-passes: each seed's compute after that many rollouts, averaged (the seeds' compute
    # curves end at different x, so a seed-mean curve over compute would be cut at the shortest seed's end)
    reach_c = {name: None if r is None else _compute_at(groups[name], r) for name, r in reach.items()}
    ref_rollouts, ref_compute = reach[reference], reach_c[reference]

    def ratio(value: float | None, ref: float | None) -> float | None:
        # undefined when the method never reaches the target, or the reference never improved on its start
        return None if value is None or not ref else value / ref

    others = [name for name in groups if name not in ("grpo4", "grpo16")]
    rollout_ratio = {name: ratio(reach[name], ref_rollouts) for name in others}
    compute_ratio = {name: ratio(reach_c[name], ref_compute) for name in others}
    per_seed = {
        name: {str(run.seed): [[float(x), float(y)] for x, y in zip(*run.series_vs(ROLLOUTS_KEY, "eval_pass_rate"),
                                                                     strict=True)] for run in group}
        for name, group in groups.items()
    }  # fmt: skip
    return {
        "reference": reference,
        "target_pass_rate": target,
        "reference_rollouts_to_target": ref_rollouts,
        "reference_compute_to_target": ref_compute,
        "rollout_ratio": rollout_ratio,
        "compute_ratio": compute_ratio,
        "paired_diff": {name: paired_difference(groups[name], groups[reference]) for name in groups},
        "final_eval_pass_rate": finals,
        "final_eval_se": {name: float(c.se[-1]) for name, c in curves.items()},
        "rollouts_per_prompt": {name: seed_mean(group, "rollouts_per_prompt") for name, group in groups.items()},
        "value_quality": {
            name: {key: seed_mean(group, key) for key in VALUE_KEYS if all(r.has(key) for r in group)}
            for name, group in groups.items()
        },
        "compute_per_rollout": {
            name: float(np.mean([r.last(COMPUTE_KEY) / r.last(ROLLOUTS_KEY) for r in group]))
            for name, group in groups.items()
        },
        "seeds": list(seeds),
        "budget_rollouts": int(max(float(c.x[-1]) for c in curves.values())),
        "curves": {
            name: {"rollouts": c.x.tolist(), "mean": c.mean.tolist(), "se": c.se.tolist()} for name, c in curves.items()
        },  # fmt: skip
        "compute_curves": {
            name: {"compute": c.x.tolist(), "mean": c.mean.tolist(), "se": c.se.tolist()}
            for name, c in compute_curves.items()
        },
        "per_seed_curves": per_seed,
        "note": "rollouts (compute: token-passes) to reach the better GRPO's final seed-mean eval pass rate on "
        "seed-mean curves, ÷ the reference's; < 1 is fewer. paired_diff: eval − reference, same seed, mean over a "
        "common rollout grid, then mean ± SE over seeds",
    }


def _compute_at(runs: list[Any], rollouts: float) -> float:
    """Token-passes after ``rollouts`` rollouts: each seed's (rollouts_total, compute_total) interpolated, averaged."""
    return float(np.mean([np.interp(rollouts, *r.series_vs(ROLLOUTS_KEY, COMPUTE_KEY)) for r in runs]))


def paired_difference(runs: list[Any], reference: list[Any]) -> dict[str, float | int | None]:
    """Eval − reference eval, seed by seed, averaged over the rollout grid both cover; mean ± SE over seeds.

        d_s = mean_{x ∈ grid_s} (y_s(x) − y^ref_s(x)),   grid_s = eval points of either run in the common range,
        mean = (1/n) Σ d_s,   se = std(d, ddof=1)/√n

    Runs of one seed share the warm start and the prompt order, so d_s cancels most of the seed-to-seed spread.
    Seeds missing from either group are left out.

    Returns:
        ``{"mean", "se", "n"}`` (None where no seed pairs up; se 0 with one seed).
    """
    ref = {r.seed: r for r in reference}
    diffs = []
    for run in runs:
        other = ref.get(run.seed)
        if other is None:
            continue
        x, y = run.series_vs(ROLLOUTS_KEY, "eval_pass_rate")
        xr, yr = other.series_vs(ROLLOUTS_KEY, "eval_pass_rate")
        if x.size == 0 or xr.size == 0:
            continue
        lo, hi = max(x[0], xr[0]), min(x[-1], xr[-1])
        grid = np.unique(np.concatenate([x, xr]))
        grid = grid[(grid >= lo) & (grid <= hi)]
        if grid.size:
            diffs.append(float(np.mean(np.interp(grid, x, y) - np.interp(grid, xr, yr))))
    if not diffs:
        return {"mean": None, "se": None, "n": 0}
    se = float(np.std(diffs, ddof=1) / np.sqrt(len(diffs))) if len(diffs) > 1 else 0.0
    return {"mean": float(np.mean(diffs)), "se": se, "n": len(diffs)}


def register_benches(bsub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``v05 bench train`` and ``v05 bench efficiency`` (torch imported only when they run)."""
    tr = bsub.add_parser("train", help="v05 train rollouts/s vs TRL GRPOTrainer, and v05's overhead share")
    tr.add_argument("--out", default="runs/bench-train", help="scratch folder for the runs")
    tr.add_argument("--steps", type=int, default=30, help="v05 training steps per config (default 30; 2 untimed)")
    tr.add_argument("--trl-steps", type=int, default=10, help="TRL optimizer steps (the first is not timed)")
    tr.add_argument("--configs", default="demo-grpo4,demo-v05,demo-v05-eb", help="configs to time (first = vs TRL)")
    tr.add_argument("--json", help="write the results here")
    tr.add_argument("overrides", nargs="*", metavar="key=value", help="overrides applied to every config")
    tr.set_defaults(func=_run_train)
    ef = bsub.add_parser("efficiency", help="rollouts V0.5 / v05_eb need to reach the better GRPO's final pass rate")
    ef.add_argument("--out", default="runs/bench-efficiency", help="folder of the runs (finished runs are reused)")
    ef.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default 0,1,2)")
    ef.add_argument("--extra", default="", help="extra configs to run and report (comma-separated)")
    ef.add_argument("--json", help="write the results here")
    ef.add_argument("overrides", nargs="*", metavar="key=value", help="overrides applied to every config")
    ef.set_defaults(func=_run_efficiency)


def _run_train(args: argparse.Namespace) -> int:
    require_trainer()
    configs = tuple(c for c in args.configs.split(",") if c)
    if not configs or args.steps <= WARMUP_STEPS or args.trl_steps < 2:
        raise ValueError(f"need at least one config, --steps > {WARMUP_STEPS} and --trl-steps >= 2")
    res = bench_train(
        Path(args.out), steps=args.steps, configs=configs, trl_steps=args.trl_steps, overrides=tuple(args.overrides)
    )
    print(json.dumps({k: v for k, v in res.items() if k not in ("configs", "trl")}, indent=2))  # the CLI's output
    for name, row in res["configs"].items():
        print(f"{name}: {row['rollouts_per_s']:.0f} rollouts/s, overhead {100 * row['overhead_frac']:.1f}%")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    return 0


def _run_efficiency(args: argparse.Namespace) -> int:
    require_trainer()
    try:
        seeds = tuple(int(s) for s in args.seeds.split(","))
    except ValueError:
        raise ValueError(f"--seeds must be comma-separated integers, got {args.seeds!r}") from None
    extra = tuple(c for c in args.extra.split(",") if c)
    res = bench_efficiency(Path(args.out), seeds=seeds, extra=extra, overrides=tuple(args.overrides))
    keys = ("reference", "target_pass_rate", "reference_rollouts_to_target", "rollout_ratio", "compute_ratio",
            "paired_diff", "final_eval_pass_rate", "final_eval_se", "compute_per_rollout", "seeds")  # fmt: skip
    print(json.dumps({k: res[k] for k in keys}, indent=2))  # the CLI's output
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    return 0


__all__ = ["EFFICIENCY_CONFIGS", "bench_efficiency", "bench_train", "register_benches"]
