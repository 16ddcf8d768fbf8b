"""The report's PNG figures: one line per method (mean over seeds) with a ± SE band, one colour per method throughout.

Matplotlib with the Agg backend, imported lazily; figures are closed after saving, never shown. Per-step training
metrics (train pass rate, grad norm, entropy, k, zero-advantage and all-equal fractions) are smoothed per seed with a
trailing moving average of :data:`SMOOTH_WINDOW` logged steps before averaging (:func:`v05.report.runs.moving_average`);
eval curves are not smoothed. A figure whose metrics no run logs is skipped, and the skip is reported.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from v05.report.runs import COMPUTE_KEY, COMPUTE_USER_KEY, EVAL_KEY, ROLLOUTS_KEY, Run, mean_curve

SMOOTH_WINDOW = 5
"""Trailing moving-average window (logged steps) for per-step training metrics."""
DPI = 110


@dataclass(frozen=True, kw_only=True, slots=True)
class Plot:
    """One figure of the report: written (``path``) or skipped (``path`` is None, the reason in ``notes``)."""

    filename: str
    """e.g. ``eval_vs_rollouts.png``."""
    title: str
    """Heading shown above the figure."""
    caption: str
    """What is drawn and how."""
    path: Path | None
    """The PNG, or None if the figure was skipped."""
    notes: tuple[str, ...] = ()
    """Why it was skipped, or methods left out of a panel (e.g. seeds with no common x range)."""


def method_colors(names: Sequence[str]) -> dict[str, str]:
    """One colour per method, fixed by its position, shared by every figure (tab10, or tab20 beyond 10 methods)."""
    if len(names) <= 10:
        return {name: f"C{i}" for i, name in enumerate(names)}
    import matplotlib  # noqa: PLC0415

    cmap = matplotlib.colormaps["tab20"]
    return {name: matplotlib.colors.to_hex(cmap(i % 20)) for i, name in enumerate(names)}


def _label(name: str, n_seeds: int) -> str:
    return f"{name} ({n_seeds} seed{'s' if n_seeds != 1 else ''})"


def _logs(groups: dict[str, list[Run]], pairs: Sequence[tuple[str, str]]) -> bool:
    return any(run.series_vs(x, y)[0].size for runs in groups.values() for run in runs for x, y in pairs)


def _has_k_hist(groups: dict[str, list[Run]]) -> bool:
    return any(isinstance(m.get("k_hist"), list) for runs in groups.values() for run in runs for m in run.metrics)


def _draw_curves(
    ax: Any,
    groups: dict[str, list[Run]],
    colors: dict[str, str],
    x_key: str,
    y_key: str,
    *,
    smooth: int = 1,
    x_scale: float = 1.0,
    markers: bool = False,
) -> list[str]:
    """Mean ± SE per method on ``ax``; returns notes about methods that could not be drawn."""
    notes, drawn = [], 0
    for name, runs in groups.items():
        try:
            curve = mean_curve(runs, x_key, y_key, smooth=smooth)
        except ValueError as err:
            notes.append(f"{name}: not drawn ({err})")
            continue
        if curve.n_seeds == 0:
            continue
        x = curve.x / x_scale
        marker = "o" if markers or x.size == 1 else None
        ax.plot(x, curve.mean, color=colors[name], marker=marker, ms=3, lw=1.6, label=_label(name, curve.n_seeds))
        ax.fill_between(x, curve.mean - curve.se, curve.mean + curve.se, color=colors[name], alpha=0.2, lw=0)
        drawn += 1
    if drawn:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, f"no run logs {y_key}", ha="center", va="center", transform=ax.transAxes)
    ax.grid(True, alpha=0.3)
    return notes


def _draw_k_hist(ax: Any, groups: dict[str, list[Run]], colors: dict[str, str]) -> None:
    """Fraction of prompts at each k, summed over all steps and seeds of a method (grouped bars)."""
    hists = {}
    for name, runs in groups.items():
        rows = [m["k_hist"] for run in runs for m in run.metrics if isinstance(m.get("k_hist"), list)]
        if rows:
            total = np.zeros(max(len(r) for r in rows))  # (K_max + 1,)
            for r in rows:
                total[: len(r)] += np.asarray(r, dtype=np.float64)
            if total.sum() > 0:
                hists[name] = (total / total.sum(), sum(1 for run in runs if any("k_hist" in m for m in run.metrics)))
    if not hists:
        ax.text(0.5, 0.5, "no run logs k_hist", ha="center", va="center", transform=ax.transAxes)
        return
    width = 0.8 / len(hists)
    for i, (name, (frac, n)) in enumerate(hists.items()):
        k = np.arange(frac.size)
        ax.bar(k - 0.4 + width * (i + 0.5), frac, width=width, color=colors[name], label=_label(name, n))
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel("rollouts for a prompt, k")
    ax.set_ylabel("fraction of prompts (all steps)")
    ax.set_title("k over the whole run")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)


def _eval_figure(x_key: str, xlabel: str, *, x_scale: float = 1.0) -> Callable[..., list[str]]:
    def draw(fig: Any, groups: dict[str, list[Run]], colors: dict[str, str], target: float | None) -> list[str]:
        ax = fig.subplots()
        notes = _draw_curves(ax, groups, colors, x_key, EVAL_KEY, x_scale=x_scale, markers=True)
        if target is not None:
            ax.axhline(target, color="k", ls="--", lw=0.8, label=f"target {target:.3f}")
            ax.legend(fontsize=8)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("eval pass rate (mean ± SE over seeds)")
        return notes

    return draw


def _step_figure(y_key: str, ylabel: str, *, x_key: str = "step", xlabel: str = "step") -> Callable[..., list[str]]:
    def draw(fig: Any, groups: dict[str, list[Run]], colors: dict[str, str], target: float | None) -> list[str]:
        ax = fig.subplots()
        notes = _draw_curves(ax, groups, colors, x_key, y_key, smooth=SMOOTH_WINDOW)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"{ylabel} (moving average of {SMOOTH_WINDOW} steps)")
        return notes

    return draw


def _draw_k(fig: Any, groups: dict[str, list[Run]], colors: dict[str, str], target: float | None) -> list[str]:
    left, right = fig.subplots(1, 2)
    notes = _draw_curves(left, groups, colors, "step", "rollouts_per_prompt", smooth=SMOOTH_WINDOW)
    left.set_xlabel("step")
    left.set_ylabel(f"mean rollouts per prompt (moving average of {SMOOTH_WINDOW} steps)")
    left.set_title("mean k per step")
    _draw_k_hist(right, groups, colors)
    return notes


def _draw_zero(fig: Any, groups: dict[str, list[Run]], colors: dict[str, str], target: float | None) -> list[str]:
    notes = []
    for ax, key, title in zip(
        fig.subplots(1, 2),
        ("zero_adv_frac", "all_equal_frac"),
        ("groups with all-zero advantages", "groups with all-equal rewards"),
        strict=True,
    ):
        notes += _draw_curves(ax, groups, colors, "step", key, smooth=SMOOTH_WINDOW)
        ax.set_xlabel("step")
        ax.set_ylabel(f"fraction (moving average of {SMOOTH_WINDOW} steps)")
        ax.set_ylim(bottom=0.0)
        ax.set_title(title)
    return notes


def _draw_value(fig: Any, groups: dict[str, list[Run]], colors: dict[str, str], target: float | None) -> list[str]:
    """Value-estimate quality (prior, probe or critic) against each step's observed group pass rates."""
    notes = []
    for ax, key, title in zip(
        fig.subplots(1, 2), ("value/mae", "value/auc"), ("MAE |p̂ − p| per group", "AUC of p̂ for p ≥ 0.5"), strict=True
    ):
        notes += _draw_curves(ax, groups, colors, "step", key, smooth=SMOOTH_WINDOW)
        ax.set_xlabel("step")
        ax.set_ylabel(f"{key} (moving average of {SMOOTH_WINDOW} steps)")
        ax.set_title(title)
    return notes


def _draw_prior(fig: Any, groups: dict[str, list[Run]], colors: dict[str, str], target: float | None) -> list[str]:
    """The prior's online calibration: AUC on the step's groups, its error variance τ² and the weight n0."""
    notes = []
    for ax, key, title in zip(
        fig.subplots(1, 3),
        ("prior/auc", "prior/tau2", "prior/n0"),
        ("AUC of the prior for p ≥ 0.5", "τ² (prior error variance)", "n0 (the prior's weight in rollouts)"),
        strict=True,
    ):
        notes += _draw_curves(ax, groups, colors, "step", key, smooth=SMOOTH_WINDOW)
        ax.set_xlabel("step")
        ax.set_ylabel(f"{key} (moving average of {SMOOTH_WINDOW} steps)")
        ax.set_title(title)
    return notes


@dataclass(frozen=True, kw_only=True, slots=True)
class _Spec:
    filename: str
    title: str
    caption: str
    needs: tuple[tuple[str, str], ...]  # (x, y) pairs; drawn if any run logs any of them
    draw: Callable[..., list[str]]
    size: tuple[float, float] = (7.5, 4.8)
    k_hist: bool = False  # also drawn if any run logs k_hist


SPECS = (
    _Spec(
        filename="eval_vs_rollouts.png",
        title="Eval pass rate vs rollouts consumed",
        caption="The headline: equal rollouts consumed is the budget. Mean ± SE over seeds; dashed: the target.",
        needs=((ROLLOUTS_KEY, EVAL_KEY),),
        draw=_eval_figure(ROLLOUTS_KEY, "rollouts consumed"),
    ),
    _Spec(
        filename="eval_vs_compute.png",
        title="Eval pass rate vs compute",
        caption="Equal rollouts is not equal compute: the x-axis is token-passes (a forward of one token by one "
        "model counts 1, its backward 2; policy, critic, reference and probe passes, generation included).",
        needs=((COMPUTE_KEY, EVAL_KEY),),
        draw=_eval_figure(COMPUTE_KEY, "token-passes (millions)", x_scale=1e6),
    ),
    _Spec(
        filename="eval_vs_compute_user.png",
        title="Eval pass rate vs compute as a TRL/verl user pays it",
        caption="The same rollouts in the token-passes a TRL or verl user would pay: every rollout's prompt through "
        "every update pass (this trainer runs a group's prompt once), prefill shared within a group (vLLM's prefix "
        "cache), decode as generated.",
        needs=((COMPUTE_USER_KEY, EVAL_KEY),),
        draw=_eval_figure(COMPUTE_USER_KEY, "token-passes, as a TRL/verl user pays them (millions)", x_scale=1e6),
    ),
    _Spec(
        filename="eval_vs_steps.png",
        title="Eval pass rate vs step",
        caption="Methods that spend more rollouts per step look better here than at equal rollouts.",
        needs=(("step", EVAL_KEY),),
        draw=_eval_figure("step", "step"),
    ),
    _Spec(
        filename="eval_vs_wall_time.png",
        title="Eval pass rate vs wall time",
        caption="Wall-clock time since the start of each run (includes evaluation and any prior model).",
        needs=(("wall_time", EVAL_KEY),),
        draw=_eval_figure("wall_time", "wall time (minutes)", x_scale=60.0),
    ),
    _Spec(
        filename="train_pass_rate.png",
        title="Train pass rate vs rollouts consumed",
        caption=f"Pass rate of the training rollouts, trailing moving average of {SMOOTH_WINDOW} steps per seed.",
        needs=((ROLLOUTS_KEY, "train_pass_rate"),),
        draw=_step_figure("train_pass_rate", "train pass rate", x_key=ROLLOUTS_KEY, xlabel="rollouts consumed"),
    ),
    _Spec(
        filename="grad_norm.png",
        title="Gradient norm",
        caption=f"Gradient norm per step, moving average of {SMOOTH_WINDOW} steps.",
        needs=(("step", "grad_norm"),),
        draw=_step_figure("grad_norm", "grad norm"),
    ),
    _Spec(
        filename="entropy.png",
        title="Policy entropy",
        caption=f"Mean token entropy of the rollouts, moving average of {SMOOTH_WINDOW} steps.",
        needs=(("step", "entropy"),),
        draw=_step_figure("entropy", "entropy"),
    ),
    _Spec(
        filename="rollouts_per_prompt.png",
        title="Rollouts per prompt",
        caption="Left: mean k per step. Right: the distribution of k over all steps and seeds (from k_hist).",
        needs=(("step", "rollouts_per_prompt"),),
        draw=_draw_k,
        size=(12.0, 4.8),
        k_hist=True,
    ),
    _Spec(
        filename="zero_adv.png",
        title="Groups without a learning signal",
        caption="Fraction of groups whose advantages are all zero, and of groups whose rewards are all equal.",
        needs=(("step", "zero_adv_frac"), ("step", "all_equal_frac")),
        draw=_draw_zero,
        size=(12.0, 4.8),
    ),
    _Spec(
        filename="value_quality.png",
        title="Value-estimate quality",
        caption="The method's value estimate made before the rollouts (prior, probe or critic) against the step's "
        "observed group pass rates, as in the POISE paper's analysis.",
        needs=(("step", "value/mae"), ("step", "value/auc")),
        draw=_draw_value,
        size=(12.0, 4.8),
    ),
    _Spec(
        filename="prior.png",
        title="The prior online",
        caption="Where a method uses a prior: its AUC for p ≥ 0.5 on each step's groups, its calibrated error "
        "variance τ² and the weight n0 = σ̄²/τ² it gets in rollouts (the provider's online calibration).",
        needs=(("step", "prior/auc"), ("step", "prior/tau2"), ("step", "prior/n0")),
        draw=_draw_prior,
        size=(15.0, 4.8),
    ),
)
"""Every figure of the report, in display order."""


def pyplot() -> Any:
    """Pyplot on matplotlib's Agg backend (no display), imported on first use: ``import v05.report`` stays light."""
    import matplotlib  # noqa: PLC0415 (lazy: keeps `import v05.report` light)

    matplotlib.use("Agg")
    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # font-cache chatter under the CLI's INFO logging
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt


def write_plots(groups: dict[str, list[Run]], out_dir: str | Path, *, target: float | None = None) -> list[Plot]:
    """Draw every figure of :data:`SPECS` into ``out_dir`` (created if needed).

    Args:
        groups: method name -> its seeds (:func:`v05.report.runs.group_runs`); the order fixes the colours.
        out_dir: where the PNGs go.
        target: eval pass rate drawn as a dashed line on the eval figures (None: no line).

    Returns:
        One :class:`Plot` per figure, in display order; skipped figures have ``path=None`` and say why.
    """
    plt = pyplot()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    colors = method_colors(list(groups))
    plots = []
    for spec in SPECS:
        if not (_logs(groups, spec.needs) or (spec.k_hist and _has_k_hist(groups))):
            logged = " or ".join(y if x in ("step", ROLLOUTS_KEY) else f"{y} with {x}" for x, y in spec.needs) + (
                " or k_hist" if spec.k_hist else ""
            )
            plots.append(
                Plot(
                    filename=spec.filename,
                    title=spec.title,
                    caption=spec.caption,
                    path=None,
                    notes=(f"skipped: no run logs {logged}",),
                )
            )
            continue
        fig = plt.figure(figsize=spec.size)
        try:
            notes = spec.draw(fig, groups, colors, target)
            fig.suptitle(spec.title, fontsize=12)
            fig.tight_layout()
            path = out / spec.filename
            fig.savefig(path, dpi=DPI)
        finally:
            plt.close(fig)
        plots.append(
            Plot(filename=spec.filename, title=spec.title, caption=spec.caption, path=path, notes=tuple(notes))
        )
    return plots


__all__ = ["SMOOTH_WINDOW", "SPECS", "Plot", "method_colors", "pyplot", "write_plots"]
