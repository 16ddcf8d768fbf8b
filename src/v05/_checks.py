"""Input validation shared by the public entry points (private; callers validate once, at entry).

Every check raises ``ValueError`` whose message names the argument and the offending value, so the CLI can turn it
into a one-line error. Private helpers downstream trust their inputs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

import numpy as np

from v05._types import FloatArray, IntArray

RewardRange = Literal["pm1", "01"]
REWARD_RANGES: dict[str, tuple[float, float]] = {"pm1": (-1.0, 1.0), "01": (0.0, 1.0)}


def as_float_1d(x: object, name: str, *, allow_empty: bool = False) -> FloatArray:
    """Return ``x`` as a float64 1-D array; reject other ranks, non-numbers, NaN and inf."""
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError, OverflowError) as err:
        raise ValueError(f"{name} must be numeric, got {type(x).__name__}: {err}") from None
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.size == 0 and not allow_empty:
        raise ValueError(f"{name} is empty: an empty batch has no advantages to compute")
    bad = ~np.isfinite(arr)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{name} contains {int(bad.sum())} non-finite value(s) (first: {float(arr[i])!r} at index {i})"
        )
    return arr


def as_index_1d(x: object, name: str, *, allow_empty: bool = False) -> IntArray:
    """Return ``x`` as an int64 1-D array of non-negative integers (floats must be whole numbers)."""
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.size == 0 and not allow_empty:
        raise ValueError(f"{name} is empty")
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            raise ValueError(
                f"{name} must hold integers, got non-integer values such as {arr[arr != np.round(arr)][:3]}"
            )
    elif arr.dtype.kind not in "iub" and arr.size:
        raise ValueError(f"{name} must hold integers, got dtype {arr.dtype}")
    out = arr.astype(np.int64)
    if out.size and out.min() < 0:
        raise ValueError(f"{name} must be non-negative, got {int(out.min())}")
    return out


def reward_range_text(value: object) -> object:
    """A reward range as written in YAML: ``01`` is read as the integer 1 by YAML and Hydra/OmegaConf dotlists.

    Returns ``"01"`` for the integer 1 and any other value unchanged (the range check then accepts or refuses it).
    """
    return "01" if isinstance(value, int) and not isinstance(value, bool) and value == 1 else value


def check_reward_range(reward_range: str) -> tuple[float, float]:
    """Return ``(lo, hi)`` for a declared reward range; unknown names (and non-strings) list the valid ones."""
    if not isinstance(reward_range, str) or reward_range not in REWARD_RANGES:
        raise ValueError(f"unknown reward_range {reward_range!r}; valid: {', '.join(REWARD_RANGES)}")
    return REWARD_RANGES[reward_range]


def check_in_range(x: FloatArray, name: str, reward_range: str) -> None:
    """Reject values outside the declared reward range (``pm1`` → [−1, 1], ``01`` → [0, 1])."""
    lo, hi = check_reward_range(reward_range)
    bad = (x < lo) | (x > hi)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{name} outside the declared reward_range {reward_range!r} [{lo:g}, {hi:g}]: "
            f"{float(x[i])!r} at index {i} ({int(bad.sum())} value(s) out of range)"
        )


def check_same_length(arrays: Sequence[np.ndarray], names: Sequence[str]) -> None:
    """Reject arrays whose lengths differ, naming each length."""
    lengths = {n: len(a) for a, n in zip(arrays, names, strict=True)}
    if len(set(lengths.values())) > 1:
        desc = ", ".join(f"{n}: {k}" for n, k in lengths.items())
        raise ValueError(f"length mismatch ({desc})")


def as_real(value: object, name: str) -> float:
    """Return a real scalar parameter as a float; reject bools, strings, None, containers (ints too big give inf).

    A 0-d numpy array counts as a scalar. NaN and ±inf are returned as they are (range checks reject them).
    """
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.integer | np.floating):
        raise ValueError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    try:
        return float(value)
    except OverflowError:  # an int beyond the float range
        return float("inf") if value > 0 else float("-inf")


def check_positive(value: float, name: str, *, strict: bool = True) -> None:
    """Reject a scalar parameter that is not a finite, (strictly) positive number."""
    x = as_real(value, name)
    if not np.isfinite(x) or x < 0 or (strict and x == 0):
        raise ValueError(f"{name} must be {'>' if strict else '>='} 0 and finite, got {value!r}")


def check_probability(value: float, name: str) -> None:
    """Reject a scalar that is not a number in [0, 1]."""
    if not (0.0 <= as_real(value, name) <= 1.0):
        raise ValueError(f"{name} must lie in [0, 1], got {value!r}")


def as_keys(keys: object, name: str, n: int) -> np.ndarray:
    """Return (n,) stable prompt keys as an array: integers or strings, finite, one dtype (never NaN or None).

    A NaN key never equals itself, so a state keyed by it could never be found again; mixed or unorderable keys
    (None, objects) cannot be sorted into the keyed store.
    """
    arr = np.asarray(keys)
    if arr.ndim != 1 or len(arr) != n:
        raise ValueError(f"{name} must have shape ({n},), one key per group, got shape {arr.shape}")
    if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite integers or strings, got {arr[~np.isfinite(arr)][:3]}")
    if arr.dtype.kind == "O":
        kinds = {_key_kind(k) for k in arr}
        if len(kinds) > 1 or None in kinds:
            raise ValueError(f"{name} must be all integers or all strings, got {arr[:3].tolist()}")
    elif arr.dtype.kind not in "iufUS":
        raise ValueError(f"{name} must be integers or strings, got dtype {arr.dtype}")
    return arr


def _key_kind(key: object) -> type | None:
    if isinstance(key, str):
        return str
    if isinstance(key, int | np.integer) and not isinstance(key, bool | np.bool_):
        return int
    return None


MAX_INT = 2**62
"""The largest integer a count, size or step option may take: int64 arrays of such counts, and their sums over a
few prompts, do not overflow."""


def check_int(value: object, name: str, minimum: int, *, hint: str = "") -> None:
    """Reject a config value that is not an integer in [``minimum``, :data:`MAX_INT`] (bools and floats too)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}{hint}")
    if value > MAX_INT:
        raise ValueError(f"{name} must be at most 2**62, got {value!r}{hint}")


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def error_line(err: BaseException) -> str:
    """``TypeName: first sentence of the message``, colour codes removed, for one-line errors.

    torch's refusal ("Weights only load failed. ... you have two options ...") is cut to its first sentence, so a
    message never relays advice to load the file unsafely.
    """
    lines = [ln.strip() for ln in _ANSI.sub("", str(err)).splitlines() if ln.strip()]
    return f"{type(err).__name__}: {lines[0].split('. ')[0]}" if lines else type(err).__name__
