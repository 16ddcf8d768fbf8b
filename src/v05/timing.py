"""Timing rounds: interleave the contenders of a benchmark, quote each figure as a median with its spread.

Every quoted timing of ``v05 bench`` is a median over interleaved rounds (each round times every contender once, in a
fixed order), reported with its spread (min–max and interquartile range over the rounds): one disturbed round moves
the median little, and a drift in machine speed hits every contender of a round alike. :class:`Phases` splits one
step's wall time by phase (the trainer's ``time/*`` metrics). numpy only.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

_T = TypeVar("_T")


@dataclass(frozen=True, kw_only=True, slots=True)
class Spread:
    """One benchmark figure over repeated rounds: the median it is quoted as, and how far the rounds spread."""

    values: tuple[float, ...]
    """the per-round values, in round order."""
    median: float
    """the median over rounds (the mean of the two middle values for an even count)."""
    low: float
    """the smallest round."""
    high: float
    """the largest round."""
    q1: float
    """the first quartile (linear interpolation between order statistics, numpy's default)."""
    q3: float
    """the third quartile."""

    def as_dict(self) -> dict[str, float | list[float]]:
        """``{"median", "min", "max", "iqr": [q1, q3], "rounds": [...]}`` for the JSON results."""
        return {"median": self.median, "min": self.low, "max": self.high, "iqr": [self.q1, self.q3],
                "rounds": list(self.values)}  # fmt: skip


def spread(values: Sequence[float]) -> Spread:
    """Median, min–max and interquartile range of per-round values.

        median = x₍ₖ₎ with k = (n + 1)/2 (n odd; the mean of the two middle order statistics for n even)
        Q₁, Q₃ = the 25% and 75% quantiles, interpolated linearly between order statistics

    With three rounds Q₁ and Q₃ fall halfway between the extremes and the median, so min–max is the spread to quote.

    Args:
        values: (R,) one figure per round (seconds, rollouts/s, a ratio).

    Returns:
        The :class:`Spread` (``values`` kept in round order).

    Raises:
        ValueError: no values, or a non-finite one.
    """
    x = np.asarray(values, dtype=np.float64)  # (R,)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"need at least one round, got {x.size} values")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"round values must be finite, got {x.tolist()}")
    q1, median, q3 = np.quantile(x, [0.25, 0.5, 0.75])
    return Spread(values=tuple(float(v) for v in x), median=float(median), low=float(x.min()), high=float(x.max()),
                  q1=float(q1), q3=float(q3))  # fmt: skip


def interleave(sides: Mapping[str, Callable[[], _T]], repeats: int) -> list[dict[str, _T]]:
    """Run every side once per round, in the mapping's order, for ``repeats`` rounds: A, B, A, B, … (not A, A, B, B).

    A slow spell of the machine (another job, thermal throttling) then lands on adjacent measurements of every
    side, so per-round ratios cancel most of it and the median over rounds discounts a disturbed round.

    Args:
        sides: name → a callable that takes one measurement (it owns its own clock).
        repeats: rounds (≥ 1).

    Returns:
        (repeats,) one ``{name: measurement}`` per round, in round order.

    Raises:
        ValueError: ``repeats`` < 1 or no sides.
    """
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an integer >= 1, got {repeats!r}")
    if not sides:
        raise ValueError("need at least one side to time")
    return [{name: measure() for name, measure in sides.items()} for _ in range(repeats)]


def ratio_spread(rounds: Sequence[Mapping[str, float]], numerator: str, denominator: str) -> Spread:
    """Spread of the per-round ratio ``numerator / denominator`` (each round's two measurements are adjacent in time).

        ρ_r = x_r / y_r,   quoted as median_r ρ_r

    (not median x ÷ median y, which would pair measurements from different rounds).
    """
    return spread([r[numerator] / r[denominator] for r in rounds])


class Phases:
    """Wall-clock seconds of a step by phase; a phase entered inside another counts as its own, not the outer one's.

    >>> phases = Phases(("update",))
    >>> with phases("update"):
    ...     pass
    >>> sorted(phases.seconds)
    ['update']
    """

    def __init__(self, names: Sequence[str] = ()) -> None:
        """Start every phase of ``names`` at 0 s (a phase not named is added when first entered)."""
        self.seconds: dict[str, float] = dict.fromkeys(names, 0.0)
        self._inner: list[float] = []  # per open phase: the seconds its nested phases took

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        """Time the block as phase ``name`` (less the nested phases' seconds, which are theirs)."""
        start = time.perf_counter()
        self._inner.append(0.0)
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            nested = self._inner.pop()
            self.seconds[name] = self.seconds.get(name, 0.0) + elapsed - nested
            if self._inner:
                self._inner[-1] += elapsed


__all__ = ["Phases", "Spread", "interleave", "ratio_spread", "spread"]
