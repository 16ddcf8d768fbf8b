"""Spec strings ``name[:options]`` for the simulator's estimators, allocators and priors, and comma lists of them.

Options are ``key=value`` pairs separated by commas (``oracle:noise=0.2,bias=0.1``) or one bare value
(``oracle_noise:0.3``). In a comma list, a piece of the form ``key=value`` with no ``:`` continues the previous
spec, so ``context_mean,oracle:noise=0.2,bias=0.1`` is two specs. Values become None (``none``), bool, int, float or
str.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_OPTION = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")

OptionValue = bool | int | float | str | None


@dataclass(frozen=True, kw_only=True, slots=True)
class Spec:
    """A parsed ``name[:options]`` string.

    Attributes:
        text: the spec as written (whitespace stripped); the label used in records.
        name: the part before ``:``.
        value: a bare option (``oracle_noise:0.3`` → ``"0.3"``), or None.
        options: ``key=value`` options in the order given.
    """

    text: str
    name: str
    value: str | None = None
    options: tuple[tuple[str, OptionValue], ...] = ()

    def option_dict(self) -> dict[str, OptionValue]:
        """The ``key=value`` options as a dict."""
        return dict(self.options)


def parse_value(text: str) -> OptionValue:
    """``"none"``/``"null"`` → None, ``"true"``/``"false"`` → bool, then int, then float, else the string itself."""
    low = text.strip().lower()
    if low in ("none", "null"):
        return None
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text.strip()


def parse_spec(text: str, *, what: str = "spec") -> Spec:
    """Parse one ``name[:value]`` or ``name[:key=value,...]`` string.

    Raises:
        ValueError: empty text, a bad name, or malformed options.
    """
    text = text.strip()
    name, sep, rest = text.partition(":")
    name = name.strip()
    if not _NAME.match(name):
        raise ValueError(f"bad {what} {text!r}: expected name[:options] with a name like 'v05_eb'")
    if not sep:
        return Spec(text=text, name=name)
    rest = rest.strip()
    if not rest:
        raise ValueError(f"bad {what} {text!r}: nothing after ':'")
    if "=" not in rest:
        return Spec(text=text, name=name, value=rest)
    options: list[tuple[str, OptionValue]] = []
    for piece in rest.split(","):
        key, eq, val = piece.partition("=")
        if not eq or not _NAME.match(key.strip()) or not val.strip():
            raise ValueError(f"bad {what} {text!r}: option {piece!r} is not key=value")
        options.append((key.strip(), parse_value(val)))
    return Spec(text=text, name=name, options=tuple(options))


def split_specs(text: str, *, what: str = "spec") -> tuple[str, ...]:
    """Split a comma list of specs, re-joining ``key=value`` continuation pieces to the spec before them.

    >>> split_specs("context_mean,oracle:noise=0.2,bias=0.1,oracle_noise:0.3")
    ('context_mean', 'oracle:noise=0.2,bias=0.1', 'oracle_noise:0.3')
    """
    out: list[str] = []
    for piece in (p.strip() for p in str(text).split(",")):
        if not piece:
            raise ValueError(f"empty {what} in list {text!r}")
        if _OPTION.match(piece) and ":" not in piece and out and ":" in out[-1]:
            out[-1] = f"{out[-1]},{piece}"
        else:
            out.append(piece)
    if not out:
        raise ValueError(f"no {what} given")
    return tuple(out)


__all__ = ["OptionValue", "Spec", "parse_spec", "parse_value", "split_specs"]
