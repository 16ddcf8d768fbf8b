"""The fuzz contract: only documented exceptions, never a silent NaN/inf, a case counter for the session summary."""

from __future__ import annotations

import dataclasses
import math
import shutil
import tempfile
import warnings
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

CASES: Counter[str] = Counter()
"""Generated cases run per fuzz test module (reported by ``tests/fuzz/conftest.py`` as ``fuzz: N cases``)."""


def tick(module: str) -> None:
    """Count one generated case of ``module`` (call it first thing in each test body)."""
    CASES[module.rsplit(".", 1)[-1]] += 1


def non_finite(value: Any, where: str = "output", *, allow_nan: tuple[str, ...] = ()) -> str | None:
    """The path of the first non-finite float in ``value`` (arrays, dataclasses, mappings, sequences), else None.

    ``allow_nan`` names fields documented to be NaN in some cases (e.g. ``auc`` with one class).
    """
    if isinstance(value, bool | np.bool_ | str | bytes) or value is None:
        return None
    if isinstance(value, float | np.floating):
        return None if math.isfinite(value) else f"{where} = {value!r}"
    if isinstance(value, int | np.integer):
        return None
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "fc":
            bad = ~np.isfinite(value)
            if bad.any():
                return f"{where} has {int(bad.sum())} non-finite value(s), e.g. {value[bad].ravel()[0]!r}"
        elif value.dtype.kind == "O":
            for i, v in enumerate(value.ravel()):
                found = non_finite(v, f"{where}[{i}]", allow_nan=allow_nan)
                if found:
                    return found
        return None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            if f.name in allow_nan:
                continue
            found = non_finite(getattr(value, f.name), f"{where}.{f.name}", allow_nan=allow_nan)
            if found:
                return found
        return None
    if isinstance(value, Mapping):
        for k, v in value.items():
            if str(k) in allow_nan:
                continue
            found = non_finite(v, f"{where}[{k!r}]", allow_nan=allow_nan)
            if found:
                return found
        return None
    if isinstance(value, list | tuple):
        for i, v in enumerate(value):
            found = non_finite(v, f"{where}[{i}]", allow_nan=allow_nan)
            if found:
                return found
    return None


def call(
    fn: Callable[..., Any],
    *args: Any,
    raises: tuple[type[BaseException], ...] = (ValueError,),
    allow_nan: tuple[str, ...] = (),
    **kwargs: Any,
) -> tuple[Any, BaseException | None]:
    """Call ``fn``; a documented exception is returned, anything else propagates (the fuzz failure).

    When ``fn`` returns, every float in its result must be finite (``allow_nan``: documented NaN fields).
    A documented exception must carry a one-line, non-empty message (the CLI prints it as is).

    Returns:
        ``(result, None)`` or ``(None, error)``.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            out = fn(*args, **kwargs)
        except raises as err:
            message = str(err).strip()
            assert message, f"{type(err).__name__} with an empty message"
            assert "\n" not in message, f"a multi-line {type(err).__name__}: {message!r}"
            return None, err
    found = None if "output" in allow_nan else non_finite(out, allow_nan=allow_nan)
    assert found is None, f"silent non-finite output: {found}"
    return out, None


def fuzz_settings(max_examples: int) -> Any:
    """Hypothesis settings of a fuzz test: ``max_examples`` cases, no deadline, no health checks, no database.

    Under the ``ci`` profile (tests/conftest.py) the cases are derandomised, so every run checks the same ones.
    """
    from hypothesis import HealthCheck, settings

    return settings(max_examples=max_examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)


def scratch_dirs(prefix: str) -> tuple[Callable[[], Path], Any]:
    """``(fresh_dir, fixture)`` for a fuzz module's scratch files: ``fresh_dir()`` makes a new empty directory under
    one root per module; bind the fixture at module level (autouse) and the root is removed when the module ends."""
    root = Path(tempfile.mkdtemp(prefix=prefix))

    def fresh_dir() -> Path:
        return Path(tempfile.mkdtemp(dir=root))

    @pytest.fixture(scope="module", autouse=True)
    def remove_scratch():
        yield
        shutil.rmtree(root, ignore_errors=True)

    return fresh_dir, remove_scratch
