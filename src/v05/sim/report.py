"""Rendering of simulator results: a rich table and claims panel, the JSON file, and the PNG figure.

The only module of :mod:`v05.sim` that prints (through a ``rich`` Console handed in by the CLI) or draws
(matplotlib with the Agg backend, imported lazily).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from v05.sim.runner import SimResult

CONTRACT_KEYS = (
    "estimator",
    "allocator",
    "prior",
    "k",
    "mse",
    "rollouts_per_prompt",
    "zero_adv_frac",
    "grad_weight_var",
)
"""Keys every JSON record carries (the ``v05 simulate`` interface contract)."""


METHOD_LABEL = {"exact": "exact", "exact_given_state": "exact|state", "monte_carlo": "MC"}


def _f(x: object, digits: int = 4) -> str:
    return "—" if x is None else f"{float(x):.{digits}f}"  # type: ignore[arg-type]


def render_table(result: SimResult, console: Console, *, prior: str | None = None) -> None:
    """Print one row per record of the headline prior (the sweep priors are summarised in the claims)."""
    prior = prior or result.config.priors[0]
    rows = [r for r in result.records if r["prior"] == prior]
    grpo = {r["k"]: r["mse"] for r in rows if r["estimator"] == "grpo" and r["allocator"] == "fixed"}
    table = Table(title=f"v05 simulate — {result.population}, prior {prior}", header_style="bold", pad_edge=False)
    for col, just in (
        ("estimator", "left"),
        ("alloc", "left"),
        ("k", "right"),
        ("roll/p", "right"),
        ("MSE", "right"),
        ("±SE", "right"),
        ("÷grpo", "right"),
        ("zero-A", "right"),
        ("VarΣA", "right"),
        ("reject", "right"),
        ("how", "left"),
    ):
        table.add_column(col, justify=just, no_wrap=True)  # type: ignore[arg-type]
    order = {a: i for i, a in enumerate(result.config.allocators)}
    rows.sort(key=lambda r: (order.get(r["allocator"], 99), r["k"], r.get("equal_budget_to") is not None))
    last = None
    for r in rows:
        if last is not None and (r["allocator"], r["k"]) != last:
            table.add_section()
        last = (r["allocator"], r["k"])
        ratio = r["mse"] / grpo[r["k"]] if r["k"] in grpo and r["allocator"] == "fixed" else None
        alloc = r["allocator"] + ("=" if r.get("equal_budget_to") else "")
        table.add_row(
            r["estimator"],
            alloc,
            str(r["k"]),
            f"{r['rollouts_per_prompt']:.2f}",
            f"{r['mse']:.4f}",
            f"{r['mse_se']:.4f}" if r["mse_se"] else "",
            _f(ratio, 3),
            f"{r['zero_adv_frac']:.3f}",
            f"{r['grad_weight_var']:.3f}",
            _f(r["reject_rate"], 3),
            METHOD_LABEL.get(r["method"], r["method"]),
        )
    console.print(table)
    console.print(
        "[dim]roll/p: rollouts spent per prompt in the loss; alloc 'fixed=': fixed k at OSLA's realised budget. "
        "how: exact = binomial expectation, exact|state = exact given the state from earlier steps, MC = Monte Carlo. "
        "MSE: baseline vs true μ, mean over prompts of the per-rollout squared error (exact binomial "
        "expectation where the method says so). Var ΣA: variance across steps of a group's summed advantage "
        "(0 by construction for GRPO/Dr.GRPO/RLOO: their advantages sum to zero in every group; dbb's are "
        "model_std-scaled). Pool allocators (dynamic_sampling, sara, dps, prior_select) keep different prompts "
        "(drawn from the context rows), so their MSE is not comparable row-by-row.[/dim]"
    )


def render_claims(claims: dict[str, Any], console: Console) -> None:
    """Print the claims summary (see :mod:`v05.sim.claims`)."""
    t = claims["targets"]

    def ok(flag: object) -> str:
        return "—" if flag is None else ("[green]met[/green]" if flag else "[red]NOT met[/red]")

    console.print(f"[bold]Claims[/bold] (prior {claims['prior']}):")
    console.print(
        f"  v05_eb@4 / grpo@4 = {_f(t['v05_eb_over_grpo_at_4'], 3)} (target ≤ {t['v05_eb_over_grpo_at_4_target']}:"
        f" {ok(t['v05_eb_over_grpo_at_4_ok'])})"
    )
    console.print(
        f"  worst v05_eb / grpo over k∈{{4,8,16}} = {_f(t['v05_eb_over_grpo_worst_k4_8_16'], 3)} at "
        f"k={t['v05_eb_over_grpo_worst_at_k']} (target ≤ {t['v05_eb_over_grpo_worst_target']}: "
        f"{ok(t['v05_eb_over_grpo_worst_ok'])})"
    )
    by_k = ", ".join(f"k={k}: {_f(v, 3)}" for k, v in t["v05_over_grpo_by_k"].items())
    console.print(f"  v05 (paper rule) / grpo: {by_k}")
    for e in claims.get("osla_equal_budget", []):
        console.print(
            f"  OSLA(k_init=4)+{e['estimator']}: {e['osla_rollouts_per_prompt']:.2f} rollouts/prompt, MSE "
            f"{e['osla_mse']:.4f} (rollout-weighted {_f(e['osla_mse_rollout_weighted'])}) vs fixed k={e['fixed_k']}: "
            f"same estimator {_f(e['fixed_same_estimator_mse'])}, grpo {_f(e['fixed_grpo_mse'])}"
        )
    q = Table(title="prior quality (oracle_noise:σ = true μ + N(0, σ²)); MSE ratios", header_style="bold")
    for col in ("prior", "v05@4÷grpo@16", "v05_eb@4÷grpo@16", "v05@4÷grpo@4", "OSLA roll/p", "OSLA+v05 MSE"):
        q.add_column(col, justify="left" if col == "prior" else "right", no_wrap=True)
    for row in claims["prior_quality"]:
        q.add_row(
            row["prior"],
            _f(row["v05_at_4_over_grpo_at_16"], 3),
            _f(row["v05_eb_at_4_over_grpo_at_16"], 3),
            _f(row["v05_at_4_over_grpo_at_4"], 3),
            _f(row["osla_rollouts_per_prompt"], 2),
            _f(row["osla_v05_mse"]),
        )
    console.print(q)
    quant = ", ".join(
        f"k={k}: {'✓' if v['one_flip_stays_accepted'] else '✗'} {_f(v['reject_exact_prior_near_deterministic'], 3)}"
        for k, v in claims["quantisation"].items()
    )
    console.print(f"  k ≥ 4 argument (one flip stays accepted; P(reject exact prior | |μ|≥0.8)): {quant}")
    quant_all = ", ".join(f"k={k}: {_f(v['reject_exact_prior_all'], 3)}" for k, v in claims["quantisation"].items())
    console.print(f"  P(reject exact prior), all prompts: {quant_all}")
    small = ", ".join(
        f"k={k}: reject {_f(v['v05_reject_rate'], 3)}, v05/grpo {_f(v['v05_over_grpo'], 3)}"
        for k, v in claims["small_k"].items()
    )
    console.print(f"  small k ({claims['prior']}): {small}")


def write_json(result: SimResult, claims: dict[str, Any], path: Path, *, extra: dict[str, Any] | None = None) -> None:
    """Write ``{"results": [...], "claims": {...}, "config": {...}, "notes": [...]}``."""
    cfg = result.config
    payload = {
        "results": list(result.records),
        "claims": claims,
        "population": result.population,
        "config": {
            "estimators": list(cfg.estimators),
            "allocators": list(cfg.allocators),
            "priors": list(cfg.priors),
            "ks": list(cfg.ks),
            "noise_sweep": list(cfg.noise_sweep),
            "reps": cfg.reps,
            "seed": cfg.seed,
        }
        | (extra or {}),
        "notes": list(result.notes),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1, default=_jsonable) + "\n", encoding="utf-8")


def _jsonable(x: object) -> object:
    if isinstance(x, np.generic):
        return x.item()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def plot(result: SimResult, claims: dict[str, Any], path: Path) -> None:
    """Draw the 2×2 figure: MSE vs rollouts per prompt, OSLA k histograms, prior quality, zero-advantage groups."""
    import matplotlib  # noqa: PLC0415 (lazy: only the figure needs it)

    matplotlib.use("Agg")
    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # font-cache chatter under the CLI's INFO logging
    import matplotlib.pyplot as plt  # noqa: PLC0415

    prior = claims["prior"]
    rows = [r for r in result.records if r["prior"] == prior]
    fig, axes = plt.subplots(2, 2, figsize=(13, 9.5))
    _panel_mse(axes[0, 0], rows, result.config.allocators)
    _panel_hist(axes[0, 1], result.records, prior)
    _panel_quality(axes[1, 0], claims["prior_quality"])
    _panel_zero(axes[1, 1], result.records, prior)
    fig.suptitle(f"v05 simulate — {result.population}, prior {prior}", fontsize=13)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _estimators(rows: Sequence[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(r["estimator"] for r in rows))


def _panel_mse(ax: Any, rows: Sequence[dict[str, Any]], allocators: Sequence[str]) -> None:
    for i, est in enumerate(_estimators(rows)):
        c = f"C{i}"
        fixed = sorted(
            (r["rollouts_per_prompt"], r["mse"]) for r in rows if r["estimator"] == est and r["allocator"] == "fixed"
        )
        if fixed:
            ax.plot(*zip(*fixed, strict=True), "-", color=c, marker="o", ms=4, label=f"{est} fixed k")
        osla = sorted(
            (r["rollouts_per_prompt"], r["mse"])
            for r in rows
            if r["estimator"] == est and r["allocator"].startswith("osla")
        )
        if osla:
            ax.plot(*zip(*osla, strict=True), ":", color=c, marker="^", ms=8, mfc="none", label=f"{est} + OSLA")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("rollouts spent per prompt (OSLA: realised mean; x-axis = equal budget)")
    ax.set_ylabel("baseline MSE vs μ")
    ax.set_title("MSE vs rollouts per prompt (same prompts; dbb: prompts recur)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)


def _panel_hist(ax: Any, records: Sequence[dict[str, Any]], prior: str) -> None:
    shown = 0
    priors = [prior] + [p for p in ("oracle_noise:0.1", "oracle_noise:0.5", "oracle_noise:1") if p != prior]
    width = 0.8 / len(priors)
    for i, p in enumerate(priors):
        r = next(
            (
                r
                for r in records
                if r["allocator"] == "osla" and r["k"] == 4 and r["prior"] == p and r["estimator"] in ("v05", "grpo")
            ),
            None,
        )
        if r is None:
            continue
        ks = np.array([int(k) for k in r["k_hist"]])
        counts = np.array(list(r["k_hist"].values()), np.float64)
        ax.bar(
            ks - 0.4 + width * (i + 0.5),
            counts / counts.sum(),
            width=width,
            label=f"{p} (mean {r['rollouts_per_prompt']:.1f})",
        )
        shown += 1
    ax.set_xlabel("realised k (OSLA, k_init = 4, k_max = 16)")
    ax.set_ylabel("fraction of prompts")
    ax.set_title("OSLA budget per prompt: worse priors buy more rollouts")
    if shown:
        ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)


def _panel_quality(ax: Any, quality: Sequence[dict[str, Any]]) -> None:
    pts = [q for q in quality if q["sigma"] is not None]
    if not pts:
        ax.text(0.5, 0.5, "no prior sweep (--noise-sweep)", ha="center", transform=ax.transAxes)
        return
    s = [q["sigma"] for q in pts]
    for key, label, style in (
        ("v05_at_4_over_grpo_at_16", "MSE v05@4 ÷ GRPO@16", "o-"),
        ("v05_eb_at_4_over_grpo_at_16", "MSE v05_eb@4 ÷ GRPO@16", "s-"),
        ("v05_at_4_over_grpo_at_4", "MSE v05@4 ÷ GRPO@4", "^--"),
    ):
        y = [q[key] for q in pts]
        if any(v is not None for v in y):
            ax.plot(s, [np.nan if v is None else v for v in y], style, label=label)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_yscale("log")
    ax.set_xlabel("prior noise σ (oracle_noise: V = μ + N(0, σ²), clipped)")
    ax.set_ylabel("MSE ratio (< 1: fused k = 4 wins)")
    ax.set_title("Prior quality: when does k = 4 with a prior beat GRPO?")
    ax.grid(True, which="both", alpha=0.3)
    k = [q["osla_rollouts_per_prompt"] for q in pts]
    if any(v is not None for v in k):
        ax2 = ax.twinx()
        ax2.plot(s, [np.nan if v is None else v for v in k], "d:", color="C3", label="OSLA rollouts/prompt")
        ax2.set_ylabel("OSLA rollouts per prompt", color="C3")
        ax2.set_ylim(0, 17)
        ax2.legend(fontsize=8, loc="lower right")
    ax.legend(fontsize=8, loc="upper left")


def _panel_zero(ax: Any, records: Sequence[dict[str, Any]], prior: str) -> None:
    allocs = list(dict.fromkeys(r["allocator"] for r in records))
    for i, alloc in enumerate(allocs):
        pts = sorted(
            (r["rollouts_per_prompt"], r["zero_adv_frac"])
            for r in records
            if r["estimator"] == "grpo"
            and r["allocator"] == alloc
            and r["prior"] == prior
            and not r.get("equal_budget_to")
        )
        if pts:
            ax.plot(*zip(*pts, strict=True), "o-", color=f"C{i}", label=alloc)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("rollouts spent per prompt in the loss")
    ax.set_ylabel("fraction of kept groups with all-zero GRPO advantages")
    ax.set_title("No-signal groups by allocator (GRPO; prior-based baselines: ~0)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)


__all__ = ["CONTRACT_KEYS", "plot", "render_claims", "render_table", "write_json"]
