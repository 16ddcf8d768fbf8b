"""Choice by name, the one way every registry of v05 does it (estimators, allocators, priors, heads, backends, tasks).

A registry is a plain dict, name → factory, written out in its module (nothing registers itself at import time).
:func:`lookup` turns an unknown name into one line listing the valid ones; :func:`check_options` refuses keyword
options an entry does not have, in one line listing the ones it has; :func:`build` also turns a factory's
``TypeError`` on bad keyword options into one line naming the entry. numpy-free, torch-free.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

_T = TypeVar("_T")


def lookup(table: Mapping[str, _T], name: object, what: str) -> _T:
    """``table[name]``; ``ValueError("unknown <what> 'name'; valid: a, b, ...")`` for any other name (or a non-string).

    >>> lookup({"a": 1}, "b", "thing")
    Traceback (most recent call last):
    ...
    ValueError: unknown thing 'b'; valid: a
    """
    try:
        return table[name]  # type: ignore[index]
    except (KeyError, TypeError):  # TypeError: an unhashable name
        raise ValueError(f"unknown {what} {name!r}; valid: {', '.join(table)}") from None


def check_options(options: Iterable[str], valid: Iterable[str], what: str, name: str) -> None:
    """``ValueError("<what> 'name' has no option(s) x, y; valid: a, b")`` for any option not in ``valid``.

    >>> check_options(["k", "kk"], ["k", "batch_size"], "allocator", "fixed")
    Traceback (most recent call last):
    ...
    ValueError: allocator 'fixed' has no option(s) kk; valid: k, batch_size
    """
    valid = list(valid)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ValueError(f"{what} {name!r} has no option(s) {', '.join(unknown)}; valid: {', '.join(valid) or 'none'}")


def build(table: Mapping[str, Callable[..., _T]], name: object, what: str, **options: Any) -> _T:
    """``table[name](**options)`` after :func:`lookup`; bad keyword options become one ``ValueError`` line.

    A ``TypeError`` (an unknown or missing keyword) becomes ``ValueError("bad options for <what> 'name': ...")``; a
    factory's own ``ValueError`` passes through.
    """
    factory = lookup(table, name, what)
    try:
        return factory(**options)
    except TypeError as err:
        raise ValueError(f"bad options for {what} {name!r}: {err}") from None


__all__ = ["build", "check_options", "lookup"]
