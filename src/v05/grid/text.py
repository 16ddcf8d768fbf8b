"""How the grid's pages write numbers: values, ratios, intervals and paired differences in points.

One formatter per kind, shared by :mod:`v05.grid.render` and :mod:`v05.grid.selection`, so a number reads the same
in every table: a ratio ``0.62×``, its bootstrap interval ``[0.48, never]`` (an end that a resample never reaches),
a paired difference in points ``+2.5 [+1.1, +3.9]`` (a fraction × 100, its 95 % interval).
"""

from __future__ import annotations

from collections.abc import Sequence


def fmt(value: float | None, spec: str = ".3f", *, never: str = "never") -> str:
    """``value`` in ``spec``, or ``never`` for None."""
    return never if value is None else format(value, spec)


def ci_text(ci: Sequence[float | None] | None) -> str:
    """A ratio's interval ``[lo, hi]`` (an end None: ``never``), or ``—`` without one."""
    if ci is None:
        return "—"
    lo, hi = ci
    return f"[{fmt(lo, '.2f')}, {fmt(hi, '.2f')}]"


def ratio(value: float | None, ci: Sequence[float | None] | None = None, *, missing: str = "never") -> str:
    """A ratio ``0.62×``, then its interval if given (:func:`ci_text`); ``missing`` for None.

    >>> ratio(0.617, [0.48, None]), ratio(None), ratio(None, missing="pending")
    ('0.62× [0.48, never]', 'never', 'pending')
    """
    if value is None:
        return missing
    return f"{value:.2f}×" + (f" {ci_text(ci)}" if ci else "")


def points(
    mean: float | None, ci: Sequence[float] | None = None, se: float | None = None, *, missing: str = "—"
) -> str:
    """A difference of fractions in points with its 95 % interval (``± SE``, labelled, where only an SE is known).

    >>> points(0.025, [0.011, 0.039]), points(-0.004, None, 0.005), points(None)
    ('+2.5 [+1.1, +3.9]', '-0.4 (± 0.5 SE)', '—')
    """
    if mean is None:
        return missing
    if ci:
        return f"{100 * mean:+.1f} [{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}]"
    return f"{100 * mean:+.1f}" + ("" if se is None else f" (± {100 * se:.1f} SE)")


__all__ = ["ci_text", "fmt", "points", "ratio"]
