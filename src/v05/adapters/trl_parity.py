"""``v05 bench trl-parity``: v05-recommended run by TRL's trainer and by ``v05 train`` against TRL's GRPO k = 4.

Do the two runners learn the same (issue 27)?

Per seed, one warm start (the hard arithmetic regime of the evidence grid: add/sub with 1-3 digit operands, SFT to
~15 % on the validation split) and three configurations at one rollout budget, each trained by both runners:

- ``grpo4``: GRPO, k = 4 × 32 prompts a step (TRL: its own ``GRPOTrainer``; v05: ``demo-grpo4``), group-std scaled;
- ``rec_k1``: ``v05-recommended`` as it was until 2026-12-04 — ``v05_eb`` fusing the ``combined`` prior (refitted
  every 4 updates, n0 fed) with the rollouts, no scaling, ±1 rewards — at k = 1 × 64 (TRL:
  :class:`~v05.adapters.trl.V05GRPOTrainer`);
- ``rec_k2``: the same at k = 2 × 64.

Matched between the runners (from the v05 config): learning rate and its 10-step warm-up then constant, AdamW betas,
ε and weight decay, gradient clipping, one optimizer step per generation batch (on-policy: the PPO ratio is 1, so
the clip ranges do nothing), token-mean loss over the step's batch (TRL's ``dapo``), no KL, temperature 1, top-p 1,
completion length, the prompt pool and its rendering, the reward (the task's verifier; ±1 for the v05 estimators,
0/1 for TRL's GRPO, whose group-std scaling makes the scale irrelevant up to its ε). Evaluation is the same function
for both: v05's ``evaluate`` (one sampled rollout per eval-split prompt, its sampling seed fixed) at the start and
every ``eval_every`` rollouts.

Not matched (what can make the runners differ): the prompt order (TRL's sampler shuffles with the seed, v05 walks
epochs in its own order), the sampler of the rollouts (transformers' ``generate`` in TRL, v05's HF engine: the same
seed draws other rollouts), v05's dual clip (inactive on-policy) and TRL's ε = 1e-4 in its group std (v05: 1e-6).

Figures (per runner, configuration and seed): the final eval; the paired difference to TRL's GRPO k = 4 of the same
seed (mean over the eval points both cover); the rollout ratio (rollouts to reach that reference run's final eval,
over the reference's own). Per runner and configuration: means with 95 % Student-t intervals over seeds, the rollout
ratio of the seed-mean curves. Per configuration, the runner gap (v05 − TRL, paired by seed): the runners agree
when its 95 % interval contains 0. Each run's wall-clock seconds are kept (equal rollouts is not equal compute).
Runs are resumable: a finished run's curve is kept in ``OUT/<runner>/<config>-s<seed>.json`` and not trained again.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm
from transformers import TrainerCallback

from v05.adapters.trl_harness import trl_trainer
from v05.hardware import hardware_label
from v05.report.runs import (
    EVAL_KEY,
    ROLLOUTS_KEY,
    Run,
    load_run,
    mean_curve,
    mean_curve_crossing,
    paired_difference,
)
from v05.stats import crossing_ratio, first_crossing, mean_se, t_interval
from v05.tasks import make_task
from v05.train.config import TrainConfig, load_config
from v05.train.evaluation import evaluate
from v05.train.loop import train
from v05.train.policy import load_policy, set_cpu_threads
from v05.train.warmstart import ensure_warm_start, render_all, warm_policy

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ParityConfig:
    """One configuration of the parity bench.

    Attributes:
        config: the v05 config it starts from (``demo-grpo4``, or ``demo-v05-eb-k4`` for the recommended form).
        k: rollouts per prompt.
        prompts: prompts per step.
        v05: the ``V05GRPOConfig`` fields TRL's side sets; None: TRL's own GRPO.
        overrides: the v05 config's own overrides (before the task, seed, budget, k and prompts).
    """

    config: str
    k: int
    prompts: int
    v05: dict[str, Any] | None
    overrides: tuple[str, ...] = ()


_RECOMMENDED_V05 = ("prior.options={refit_every: 4}",)
"""``demo-v05-eb-k4`` + these (+ k and prompts) is ``v05-recommended`` as the parity bench measured it."""

_RECOMMENDED_TRL = {
    "v05_estimator": "v05_eb",
    "v05_estimator_options": {"scale": "none"},
    "v05_prior": "combined",
    "v05_prior_options": {"refit_every": 4},
    "v05_feed_n0": True,
    "v05_reward_range": "pm1",
}

CONFIGS: dict[str, ParityConfig] = {
    "grpo4": ParityConfig("demo-grpo4", 4, 32, None),
    "rec_k1": ParityConfig("demo-v05-eb-k4", 1, 64, _RECOMMENDED_TRL, _RECOMMENDED_V05),
    "rec_k2": ParityConfig("demo-v05-eb-k4", 2, 64, _RECOMMENDED_TRL, _RECOMMENDED_V05),
}
"""The configurations by name (module docstring). ``rec_k1``/``rec_k2`` are pinned to the form they measured,
``v05-recommended`` until 2026-12-04 (``v05_eb`` + ``combined``); the evidence grid's pick since then is the same
estimator with the ``history`` prior at 128 prompts a step."""

RUNNERS = ("trl", "v05")
REFERENCE = ("trl", "grpo4")
"""(runner, configuration) every paired difference and rollout ratio is measured against: TRL's own GRPO k = 4."""

TASK_OVERRIDES = (
    "task.name=arithmetic",
    "task.options={mix: [0.5, 0.5, 0.0], held_out_first: true}",
    "warmup.sft.target_pass_rate=0.15",
    "warmup.sft.eval_every=20",
    "eval.greedy=false",
    "run.progress=false",
    "run.tensorboard=false",
)
"""The evidence grid's arithmetic-hard-revisited setting (benchmarks/grids/evidence.yaml), shared by every run."""


def parity_config(name: str, seed: int, budget: int, eval_every: int) -> TrainConfig:
    """The v05 config of configuration ``name`` at ``seed``, ``budget`` rollouts, evaluated every ``eval_every``."""
    spec = CONFIGS[name]
    return load_config(
        spec.config,
        [*spec.overrides, *TASK_OVERRIDES, f"seed={seed}", f"train.max_rollouts={budget}",
         f"eval.every_rollouts={eval_every}", f"allocator.options.k={spec.k}", f"train.batch_size={spec.prompts}"],
    )  # fmt: skip


class _EvalEvery(TrainerCallback):
    """v05's ``evaluate`` after every optimizer step that completes a multiple of ``every`` rollouts (and the last)."""

    def __init__(self, measure: Callable[[], dict[str, float]], per_step: int, every: int, steps: int) -> None:
        self.measure, self.per_step, self.every, self.steps = measure, per_step, every, steps
        self.rows: list[dict[str, Any]] = []

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        rollouts = state.global_step * self.per_step
        if rollouts % self.every == 0 or state.global_step == self.steps:
            self.rows.append({"step": state.global_step, ROLLOUTS_KEY: rollouts, **self.measure()})


def train_trl(name: str, seed: int, budget: int, eval_every: int, out: Path) -> list[dict[str, Any]]:
    """Train configuration ``name`` with TRL from the seed's warm start; its eval rows (start included)."""
    spec, cfg = CONFIGS[name], parity_config(name, seed, budget, eval_every)
    set_cpu_threads(cfg.run.threads)
    warm = ensure_warm_start(cfg, progress=False)
    model, tokenizer = load_policy(warm_policy(cfg, warm))
    task = make_task(cfg.task.name, **cfg.task.options)
    pool, held_out = list(task.train_prompts()), list(task.eval_prompts())[: cfg.eval.size]
    texts, held_texts = render_all(cfg, task, pool, tokenizer), render_all(cfg, task, held_out, tokenizer)
    by_key = {p.key: p for p in pool}
    pm1 = spec.v05 is not None and spec.v05["v05_reward_range"] == "pm1"

    def verifier(prompts: list[str], completions: list[str], prompt_id: list[str], **_: Any) -> list[float]:
        r = task.score([by_key[k] for k in prompt_id], completions).rewards  # (N,) 0/1
        return (2.0 * r - 1.0 if pm1 else r).tolist()

    def measure() -> dict[str, float]:
        row = evaluate(cfg, model, tokenizer, task, held_out, held_texts)
        model.train()  # TRL reads the mode to tell training from evaluation batches
        return row

    per_step = spec.k * spec.prompts
    steps = budget // per_step
    callback = _EvalEvery(measure, per_step, eval_every, steps)
    opt, loss = cfg.optim, cfg.loss
    trainer = trl_trainer(
        model, tokenizer, texts, [p.key for p in pool], verifier, v05=spec.v05, callbacks=[callback],
        output_dir=str(out / "trl-scratch"), save_strategy="no", logging_steps=max(1, steps // 10),
        num_generations=spec.k, per_device_train_batch_size=per_step, max_steps=steps,
        max_completion_length=cfg.generation.max_new_tokens, temperature=cfg.generation.temperature, top_p=1.0,
        learning_rate=opt.lr, lr_scheduler_type="constant_with_warmup", warmup_steps=opt.warmup_steps,
        adam_beta1=opt.betas[0], adam_beta2=opt.betas[1], adam_epsilon=opt.eps, weight_decay=opt.weight_decay,
        max_grad_norm=opt.grad_clip, epsilon=loss.clip_low, epsilon_high=loss.clip_high, beta=0.0,
        num_iterations=cfg.train.ppo_epochs, loss_type="dapo", seed=seed,
    )  # fmt: skip
    start = {"step": 0, ROLLOUTS_KEY: 0, **measure()}
    trainer.train()
    return [start, *callback.rows]


def train_v05(name: str, seed: int, budget: int, eval_every: int, out: Path) -> list[dict[str, Any]]:
    """Train configuration ``name`` with ``v05 train`` from the seed's warm start; its eval rows (start included)."""
    run_dir = out / "v05-runs" / f"{name}-s{seed}"
    if run_dir.exists():  # an unfinished run: start it again (its result file is what marks a finished one)
        shutil.rmtree(run_dir)
    train(parity_config(name, seed, budget, eval_every), run_dir)
    rows = load_run(run_dir).metrics
    return [{"step": r["step"], ROLLOUTS_KEY: r[ROLLOUTS_KEY], EVAL_KEY: r[EVAL_KEY]} for r in rows if EVAL_KEY in r]


TRAINERS = {"trl": train_trl, "v05": train_v05}


def _run(runner: str, name: str, seed: int, rows: list[dict[str, Any]]) -> Run:
    return Run(path=Path(f"{runner}/{name}"), name=f"{runner}:{name}", seed=seed, config={}, metrics=rows)


def _ratio_vs(run: Run, reference: Run) -> float | None:
    """Rollouts ``run`` needs to reach ``reference``'s final eval, over the reference's own (None: never)."""
    x, y = run.series_vs(ROLLOUTS_KEY, EVAL_KEY)
    xr, yr = reference.series_vs(ROLLOUTS_KEY, EVAL_KEY)
    return crossing_ratio(first_crossing(x, y, float(yr[-1])), first_crossing(xr, yr, float(yr[-1])))


def _interval(values: Sequence[float]) -> list[float] | None:
    ci = t_interval(values)
    return None if ci is None else list(ci)


def parity_results(curves: dict[tuple[str, str, int], list[dict[str, Any]]], walls: dict[Any, float]) -> dict:
    """Rows per (runner, configuration, seed), summaries per runner and configuration, and the runner gaps."""
    runs = {key: _run(key[0], key[1], key[2], rows) for key, rows in curves.items()}
    ref = {seed: run for (runner, name, seed), run in runs.items() if (runner, name) == REFERENCE}
    rows = []
    for (runner, name, seed), run in sorted(runs.items()):
        d = paired_difference([run], [ref[seed]]) if seed in ref else {"mean": None}
        rows.append({"runner": runner, "config": name, "seed": seed, "final_eval": float(run.metrics[-1][EVAL_KEY]),
                     "paired_diff": d["mean"], "rollout_ratio": _ratio_vs(run, ref[seed]) if seed in ref else None,
                     "wall_s": walls.get((runner, name, seed))})  # fmt: skip
    summary: dict[str, Any] = {}
    names = sorted({n for _, n, _ in runs})
    for name in names:
        summary[name] = {}
        for runner in RUNNERS:
            group = [r for (rn, n, _), r in sorted(runs.items()) if (rn, n) == (runner, name)]
            if not group:
                continue
            finals = [float(r.metrics[-1][EVAL_KEY]) for r in group]
            d = paired_difference(group, list(ref.values()))
            seed_mean = _reach(group, list(ref.values()))
            summary[name][runner] = {
                "final_mean": mean_se(finals)[0], "final_ci95": _interval(finals),
                "paired_diff_mean": d["mean"], "paired_diff_ci95": d["ci95"], "rollout_ratio": seed_mean,
                "seeds": [r.seed for r in group],
                "wall_s_mean": mean_se([walls[(runner, name, r.seed)] for r in group
                                        if (runner, name, r.seed) in walls])[0],
            }  # fmt: skip
        pair_v05 = [r for (rn, n, _), r in sorted(runs.items()) if (rn, n) == ("v05", name)]
        pair_trl = [r for (rn, n, _), r in sorted(runs.items()) if (rn, n) == ("trl", name)]
        gap = paired_difference(pair_v05, pair_trl)
        summary[name]["runner_gap"] = {
            "mean": gap["mean"], "ci95": gap["ci95"], "n": gap["n"],
            "agree": None if gap["ci95"] is None else bool(gap["ci95"][0] <= 0.0 <= gap["ci95"][1]),
        }  # fmt: skip
    return {"rows": rows, "summary": summary}


def _reach(group: Sequence[Run], reference: Sequence[Run]) -> float | None:
    """Rollout ratio of the seed-mean curves: rollouts to reach the reference's seed-mean final, over its own."""
    rc = mean_curve(reference, ROLLOUTS_KEY)
    if not rc.n_seeds:
        return None
    target = float(rc.mean[-1])
    return crossing_ratio(mean_curve_crossing(group, target), mean_curve_crossing(reference, target))


def bench_trl_parity(
    out: Path,
    *,
    seeds: Sequence[int] = (30, 31, 32),
    budget: int = 38_400,
    eval_every: int = 3_200,
    configs: Sequence[str] = tuple(CONFIGS),
    command: str = "v05 bench trl-parity",
) -> dict[str, Any]:
    """Train every (runner, configuration, seed) not yet finished under ``out``; return the results (module doc).

    Raises:
        ValueError: an unknown configuration, no seeds, or a budget/eval interval that is not a positive multiple
            of every configuration's rollouts per step.
    """
    unknown = sorted(set(configs) - set(CONFIGS))
    if unknown or not configs:
        raise ValueError(f"unknown parity configuration(s) {unknown or configs}; valid: {', '.join(CONFIGS)}")
    if REFERENCE[1] not in configs:
        raise ValueError(f"--configs must include {REFERENCE[1]!r}, the reference every figure is measured against")
    if not seeds:
        raise ValueError("no seeds: give at least one (three for intervals)")
    for name in configs:
        per_step = CONFIGS[name].k * CONFIGS[name].prompts
        for label, value in (("budget", budget), ("eval_every", eval_every)):
            if value <= 0 or value % per_step:
                raise ValueError(f"{label}={value} must be a positive multiple of {name}'s {per_step} rollouts a step")
    jobs = [(runner, name, seed) for seed in seeds for name in configs for runner in RUNNERS]
    curves: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    walls: dict[tuple[str, str, int], float] = {}
    started = time.perf_counter()
    loads: dict[tuple[str, str, int], float | None] = {}
    for runner, name, seed in tqdm(jobs, desc="trl-parity", unit="run"):
        path = out / runner / f"{name}-s{seed}.json"
        if path.is_file():
            saved = json.loads(path.read_text())
            if saved.get("budget") == budget and saved.get("eval_every") == eval_every:
                curves[(runner, name, seed)], walls[(runner, name, seed)] = saved["rows"], saved["wall_s"]
                loads[(runner, name, seed)] = saved.get("load_1min")
                continue
        logger.info("trl-parity: %s %s seed %d", runner, name, seed)
        ensure_warm_start(parity_config(name, seed, budget, eval_every), progress=False)  # untimed, once a seed
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        t0 = time.perf_counter()
        rows = TRAINERS[runner](name, seed, budget, eval_every, out)
        wall = time.perf_counter() - t0
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"budget": budget, "eval_every": eval_every, "wall_s": wall, "load_1min": load,
                                   "rows": rows}))  # fmt: skip
        tmp.replace(path)
        curves[(runner, name, seed)], walls[(runner, name, seed)], loads[(runner, name, seed)] = rows, wall, load
    results = parity_results(curves, walls)
    for row in results["rows"]:  # a busy machine shows up beside its wall times
        row["load_1min"] = loads.get((row["runner"], row["config"], row["seed"]))
    return {
        "command": command,
        "hardware": hardware_label(),
        "elapsed_s": time.perf_counter() - started,
        "budget_rollouts": budget,
        "eval_every_rollouts": eval_every,
        "seeds": list(seeds),
        "reference": {"runner": REFERENCE[0], "config": REFERENCE[1]},
        "configs": {n: dataclasses.asdict(CONFIGS[n]) for n in configs},
        "task_overrides": list(TASK_OVERRIDES),
        "definitions": {
            "paired_diff": "eval pass rate minus TRL's GRPO k = 4 of the same seed, averaged over the eval points "
            "both cover (fraction, not points)",
            "rollout_ratio": "rollouts to reach the reference run's final eval over the reference's own "
            "(summary: of the seed-mean curves)",
            "runner_gap": "v05 train minus TRL for one configuration, paired by seed; agree: its 95 % t-interval "
            "contains 0",
        },
        **results,
    }


__all__ = ["CONFIGS", "REFERENCE", "RUNNERS", "ParityConfig", "bench_trl_parity", "parity_config", "parity_results"]
