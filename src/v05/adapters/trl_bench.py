"""``v05 bench train``: rollouts/s of ``v05 train`` and of TRL's ``GRPOTrainer`` on the same policy, task and k.

The policy is the tiny one from its cached SFT warm start, or ``--policy smollm2`` (SmolLM2-135M-Instruct as it
comes, optionally with ``--lora``); both sides use the same task, prompts per step and k, each side is timed over a
fixed wall-clock window and the sides are interleaved for several rounds in one process (median ratio and its
spread); and v05's overhead — prior, allocator and estimator time (embeddings cached) as a fraction of step time —
for GRPO and for the V0.5 configs.

It sits at the adapters' level, beside :mod:`v05.adapters.trl_parity`: it drives the trainer (:mod:`v05.train`) and
TRL's side (:mod:`v05.adapters.trl_harness`); its parser is :mod:`v05.adapters.cli`'s.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from v05.adapters.trl_harness import trl_grpo_rollouts_per_s
from v05.tasks import make_task
from v05.timing import Spread, interleave, spread
from v05.train.config import load_config
from v05.train.loop import train
from v05.train.policy import load_policy, set_cpu_threads
from v05.train.warmstart import ensure_warm_start, render_all, warm_policy

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
        generated tokens/s = Σ tokens_step / Σ time/generate,   update s/rollout = Σ time/update / Σ rollouts_step

    ``rows`` are the run's metrics rows (``step``, ``time/step``, ``rollouts_step``, ``time/prior``, ``time/estimate``;
    ``tokens_step`` (EOS included), ``time/generate`` and ``time/update`` where logged: the last three are NaN
    without them).
    """
    steps = [r for r in rows if r["step"] > WARMUP_STEPS]
    total = float(sum(r["time/step"] for r in steps))
    rollouts = float(sum(r["rollouts_step"] for r in steps))
    overhead = float(sum(r["time/prior"] + r["time/estimate"] for r in steps))
    nan = float("nan")
    has = all("tokens_step" in r and "time/generate" in r and "time/update" in r for r in steps)
    generate = float(sum(r["time/generate"] for r in steps)) if has else nan
    return {"steps": len(steps), "rollouts": rollouts, "seconds": total, "rollouts_per_s": rollouts / total,
            "overhead_frac": overhead / total,
            "generate_tokens_per_s": float(sum(r["tokens_step"] for r in steps)) / generate if has else nan,
            "update_s_per_rollout": float(sum(r["time/update"] for r in steps)) / rollouts if has else nan}  # fmt: skip


class _WindowFull(Exception):
    """Raised by the ``log`` of a timed v05 run once its steps fill the window: ends ``train`` after that step."""


def _v05_window(cfg: Any, run_dir: Path, window_s: float) -> dict[str, float]:
    """Train ``cfg`` from its warm start until the steps after the first ``WARMUP_STEPS`` sum to ``window_s`` s.

    The clock is the loop's own ``time/step`` (generate + verify + prior + allocate + estimate + update); setup,
    metrics writing and the untimed first steps fall outside it. The run stops without a final checkpoint.
    """
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


V05_RATES = ("rollouts_per_s", "overhead_frac", "generate_tokens_per_s", "update_s_per_rollout")
"""Per-config figures of the v05 side (medians over rounds, with spreads): :func:`_step_times`."""


def _summary(rounds: list[dict[str, dict[str, float]]], configs: tuple[str, ...], first: Any) -> dict[str, Any]:
    """Medians over rounds (the quoted figures) with their spreads, and the per-round timings."""

    def over(side: str, key: str) -> Spread:
        return spread([r[side][key] for r in rounds])

    ref = f"v05:{configs[0]}"
    speedup = spread([r[ref]["rollouts_per_s"] / r["trl"]["rollouts_per_s"] for r in rounds])
    v05, trl, overhead = over(ref, "rollouts_per_s"), over("trl", "rollouts_per_s"), over(ref, "overhead_frac")
    per_config = {
        name: {key: over(f"v05:{name}", key).median for key in V05_RATES}
        | {"spread": {key: over(f"v05:{name}", key).as_dict() for key in V05_RATES},
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


__all__ = ["MIN_WINDOW_S", "POLICIES", "UNBOUNDED_STEPS", "WARMUP_STEPS", "bench_train"]
