"""``v05 demo`` (what ``make demo`` runs): GRPO k=16, GRPO k=4, V0.5 and ``v05-recommended`` at one rollout budget.

The four packaged configs share the task, the tiny policy and its SFT warm start (trained once, cached), and stop at
the same number of rollouts consumed. By default they start from the ``hard`` warm start (~15 % sampled pass rate):
the regime in which ``v05 bench matrix`` found that the prior pays most (``docs/results-prior-pay.md``); at ~40 %
(``easy``) it saves less. Each run is a normal run directory under ``--out``; a finished run is reused
and an interrupted one resumed, so ``make demo`` can be re-run cheaply. The report compares eval pass rate against
rollouts consumed (the headline axis) and prints the final table.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from v05.report.html import render_table, write_report
from v05.report.runs import load_runs
from v05.train.cli import require_trainer

logger = logging.getLogger(__name__)

DEMO_CONFIGS = ("demo-grpo16", "demo-grpo4", "demo-v05", "v05-recommended")
"""The demo's methods, in the order they run: two GRPOs, the paper's V0.5 and the configuration we recommend."""

DEMO_REGIMES: dict[str, tuple[str, ...]] = {
    "easy": (),
    "hard": ("warmup.sft.target_pass_rate=0.15", "warmup.sft.eval_every=20"),
}
"""The warm-start regimes (overrides before the user's): ``easy``, the packaged configs as they are (SFT stops at
the best validation pass rate, ~40 %); ``hard``, SFT stopped at ~15 % sampled pass rate, where most GRPO groups are
all-fail (the standard grid's ``arithmetic-hard`` task setting)."""

DEMO_REGIME = "hard"
"""The demo's default regime: the one where users need a cheaper baseline, and where the prior pays."""


def run_demo(
    out: Path, *, configs: tuple[str, ...] = DEMO_CONFIGS, seeds: tuple[int, ...] = (0,), quick: bool = False,
    overrides: tuple[str, ...] = (), regime: str = DEMO_REGIME,
) -> Path:  # fmt: skip
    """Train every config × seed into ``out/<label>-s<seed>`` (reusing finished runs) and write ``out/report``.

    A config given as a file is labelled by its file name without ``.yaml`` (``path/my.yaml`` → ``out/my-s0``).
    ``regime`` names the warm start (:data:`DEMO_REGIMES`); its overrides come before ``overrides``.

    Returns:
        The path of ``report.html``.

    Raises:
        ValueError: an unknown regime; two configs share a label (two files of one name in different folders); a
            finished run in ``out`` of another config (another regime, say), which is never reused as this one.
    """
    from v05.train.config import config_changes, load_config  # noqa: PLC0415 (the trainer: torch, on a demo run)
    from v05.train.loop import train  # noqa: PLC0415
    from v05.train.rundir import latest_checkpoint  # noqa: PLC0415

    if regime not in DEMO_REGIMES:
        raise ValueError(f"unknown regime {regime!r}; valid: {', '.join(DEMO_REGIMES)}")
    labels = [config_label(name) for name in configs]
    if len(set(labels)) != len(labels):
        raise ValueError(f"configs {', '.join(configs)} share a run label ({', '.join(labels)}): rename a file")
    out.mkdir(parents=True, exist_ok=True)
    run_dirs = []
    for seed in seeds:
        for name, label in zip(configs, labels, strict=True):
            cfg = load_config(name, (*DEMO_REGIMES[regime], *overrides, f"seed={seed}"), quick=quick)
            run_dir = out / f"{label}-s{seed}"
            run_dirs.append(run_dir)
            if (run_dir / "final").is_dir():
                changed = config_changes(load_config(str(run_dir / "config.yaml")), cfg)
                if changed:
                    raise ValueError(
                        f"{run_dir} is a finished run of another config (it differs in "
                        f"{', '.join(sorted(changed))}): pass another --out, or delete it to train it again"
                    )
                logger.info("%s: finished run found, reused", run_dir)
                continue
            resume = latest_checkpoint(run_dir) is not None
            logger.info("%s: %s", run_dir, "resuming" if resume else "training")
            result = train(cfg, run_dir, resume=resume)
            if result.interrupted:
                raise KeyboardInterrupt(f"demo interrupted during {run_dir} (checkpoint saved; re-run to resume)")
    return write_report(load_runs(run_dirs), out / "report", title="v05 demo: eval pass rate vs rollouts consumed")


def config_label(config: str) -> str:
    """The run-directory label of a config: a packaged name as is, a file by its name without ``.yaml``/``.yml``."""
    path = Path(config)
    if path.suffix in (".yaml", ".yml") or len(path.parts) > 1:
        return path.stem
    return config


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``v05 demo``."""
    p = sub.add_parser(
        "demo",
        help="train GRPO k=16, GRPO k=4, V0.5 and v05-recommended at one rollout budget; write the report (make demo)",
        description="The main job: trains the packaged demo configs (tiny policy on the embedded arithmetic task, "
        "SFT warm start cached) at the same total rollout budget and writes a report comparing them.",
    )
    p.add_argument("--out", default="runs/demo", help="output folder (one run directory per config and seed)")
    p.add_argument("--configs", default=",".join(DEMO_CONFIGS), help="comma-separated config names or files")
    p.add_argument("--seeds", default="0", help="comma-separated seeds (default: 0)")
    p.add_argument("--regime", default=DEMO_REGIME, choices=list(DEMO_REGIMES),
                   help="the warm start: hard (~15%%: most GRPO groups fail; default) or easy (~40%%)")  # fmt: skip
    p.add_argument("--quick", action="store_true", help="shrink every run to a smoke run")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="overrides applied to every config")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    require_trainer()
    try:
        seeds = tuple(int(s) for s in args.seeds.split(","))
    except ValueError:
        raise ValueError(f"--seeds must be comma-separated integers, got {args.seeds!r}") from None
    configs = tuple(c.strip() for c in args.configs.split(",") if c.strip())
    report = run_demo(Path(args.out), configs=configs, seeds=seeds, quick=args.quick, overrides=tuple(args.overrides),
                      regime=args.regime)  # fmt: skip
    summary = json.loads((report.parent / "summary.json").read_text(encoding="utf-8"))
    print(render_table(summary))  # the CLI's output: the final table and where the report is
    print(f"report: {report}")
    return 0


__all__ = ["DEMO_CONFIGS", "DEMO_REGIME", "DEMO_REGIMES", "config_label", "register", "run_demo"]
