"""The per-step metrics row and the held-out evaluation of the trainer."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from v05.engines.hf import HFEngine
from v05.groups import segment_count, segment_mean
from v05.priors import get_provider_spec
from v05.priors.base import auc_score
from v05.rewards import to_pass_rate
from v05.train.checkpoint import Counters
from v05.train.compute import ComputeMeter
from v05.train.config import TrainConfig


def group_pass_rates(rewards: np.ndarray, group: np.ndarray, reward_range: str) -> np.ndarray:
    """(G,) observed pass rate of each group from its rewards on the run's scale."""
    return segment_mean(to_pass_rate(np.asarray(rewards, np.float64), reward_range), group)  # type: ignore[arg-type]


def value_quality(predicted: np.ndarray, observed: np.ndarray) -> dict[str, float]:
    r"""How well a value estimate made before the rollouts matched the step's outcomes (the POISE paper's analysis).

        value/mae = mean |p̂_g − p_g|,   value/corr = Pearson r(p̂, p),   value/auc = AUC(p̂ for 1[p_g ≥ 0.5])

    Args:
        predicted: (G,) predicted pass rates in [0, 1] (prior, probe or critic) for the step's groups.
        observed: (G,) the groups' observed pass rates.

    Returns:
        The three numbers (NaN where undefined: fewer than 2 groups, a constant input, or one class only).
    """
    p, o = np.asarray(predicted, np.float64), np.asarray(observed, np.float64)
    if len(p) < 2:
        return {"value/mae": float(np.mean(np.abs(p - o))) if len(p) else float("nan"),
                "value/corr": float("nan"), "value/auc": float("nan")}  # fmt: skip
    corr = float(np.corrcoef(p, o)[0, 1]) if p.std() > 0 and o.std() > 0 else float("nan")
    return {"value/mae": float(np.mean(np.abs(p - o))), "value/corr": corr, "value/auc": auc_score(p, o >= 0.5)}


def step_metrics(
    cfg: TrainConfig,
    c: Counters,
    alloc: Any,
    rewards: np.ndarray,
    group: np.ndarray,
    est: Any,
    upd: dict[str, float],
    scores: list[Any],
    rollouts_all: Any,
    provider: Any,
    timing: dict[str, float],
    value_g: np.ndarray | None = None,
    compute: ComputeMeter | None = None,
) -> dict[str, Any]:
    """One metrics.jsonl row.

    Counters (cumulative ``rollouts_total``, ``tokens_total`` generated tokens, ``compute_total`` token-passes and
    ``compute_user``, what a TRL/verl user pays, with their prefill/decode/update splits: :mod:`v05.train.compute`),
    pass rates, the k histogram, advantage and prior statistics, the update's diagnostics, the allocator's
    statistics, the step's token-passes by part (:meth:`v05.train.compute.ComputeMeter.metrics`) and the step time
    split.
    """
    n_drawn = int(alloc.n_rollouts)
    passed = np.concatenate([sc.rewards for sc in scores]) if scores else np.zeros(0)  # task rewards in [0, 1]
    train_pass = float(passed.mean()) if n_drawn else float("nan")
    c.train_last = train_pass
    k = alloc.counts[alloc.counts > 0]
    row: dict[str, Any] = {
        "step": c.step,
        "rollouts_total": c.rollouts_total,
        "tokens_total": c.tokens_total,
        "compute_total": c.compute_total,
        **c.compute_totals(),
        "prompts_total": c.prompts_total,
        "train_pass_rate": train_pass,
        "wall_time": c.wall_time,
        "rollouts_step": n_drawn,
        "prompts_sampled": int(k.size),
        "groups_kept": int(alloc.kept.sum()),
        "rollouts_per_prompt": float(k.mean()) if k.size else float("nan"),
        "k_hist": np.bincount(k).tolist() if k.size else [],
        "verifier_failures": int(sum(s.failures for s in scores)),
        "verifier_errors": int(sum(s.errors.sum() for s in scores)),
        "verifier_timeouts": int(sum(s.timeouts.sum() for s in scores)),
        "verifier_failures_total": c.verifier_failures,
        "no_answer_frac": float(np.mean(np.concatenate([s.no_answer for s in scores]))) if scores else float("nan"),
        "truncated_frac": float(np.mean(rollouts_all.truncated)) if len(rollouts_all) else float("nan"),
        "response_length": float(np.mean(rollouts_all.lengths)) if len(rollouts_all) else float("nan"),
        "tokens_step": int(rollouts_all.lengths.sum()) if len(rollouts_all) else 0,
    }
    if compute is not None:
        row |= compute.metrics()
    if est is not None and len(rewards):
        n_g = segment_count(group)
        lo = np.full(len(n_g), np.inf)
        hi = np.full(len(n_g), -np.inf)
        np.minimum.at(lo, group, rewards)
        np.maximum.at(hi, group, rewards)
        zero = np.zeros(len(n_g), bool)
        np.logical_or.at(zero, group, np.abs(est.advantages) > 1e-12)
        row["all_equal_frac"] = float(np.mean(hi == lo))
        row["zero_adv_frac"] = float(np.mean(~zero))
        row["adv_abs_mean"] = float(np.mean(np.abs(est.advantages)))
        if est.weight is not None:
            row["mean_weight"] = float(np.mean(est.weight))
        if est.reject is not None:
            row["estimator_reject_rate"] = float(np.mean(est.reject))
        if est.n0 is not None:
            row["estimator_n0"] = float(np.mean(est.n0))
    for key, value in alloc.stats.items():
        row[key if key not in row else f"alloc/{key}"] = value
    if provider is not None:
        cal = provider.calibration()
        row |= {"prior/tau2": cal.tau2, "prior/auc": cal.auc, "prior/n0": cal.n0, "prior/n": cal.n}
        if get_provider_spec(cfg.prior.name).needs_sampler:  # the oracle bound's uncounted extra rollouts so far
            row["prior/oracle_rollouts"] = provider.oracle_rollouts_
    if value_g is not None and len(rewards):
        row |= value_quality(value_g, group_pass_rates(rewards, group, cfg.train.reward_range))
    row |= upd
    row |= {f"time/{k}": v for k, v in timing.items()}
    return row


def evaluate(cfg: TrainConfig, model: Any, tokenizer: Any, task: Any, held_out: list, texts: list[str]) -> dict:
    """Held-out pass rates: one sampled rollout per prompt (the same seed every time) and one greedy."""
    gen = cfg.generation
    ones = [1] * len(texts)
    sampled = HFEngine(model, tokenizer, gen, seed=cfg.eval.seed).generate(texts, ones)
    out = {"eval_pass_rate": float(task.score(held_out, list(sampled.texts)).rewards.mean())}
    if cfg.eval.greedy:
        greedy = HFEngine(model, tokenizer, dataclasses.replace(gen, temperature=0.0), seed=cfg.eval.seed)
        greedy_texts = list(greedy.generate(texts, ones).texts)
        out["eval_greedy_pass_rate"] = float(task.score(held_out, greedy_texts).rewards.mean())
    return out


__all__ = ["evaluate", "group_pass_rates", "step_metrics", "value_quality"]
