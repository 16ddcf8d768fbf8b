"""The tuning block of a grid file (``tuning:``): its settings (:class:`GridSetting`) and sweep (:class:`Tuning`).

:func:`load_tuning` reads and checks the block for :func:`v05.grid.spec.load_grid`; :func:`check_name` and
:func:`names_list` are the name checks every part of a grid file shares. Every malformed entry is a ``ValueError``
naming it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from v05.train.config import EVAL_SPLITS

_frozen = dataclasses.dataclass(frozen=True, kw_only=True, slots=True)


@_frozen
class GridSetting:
    """One setting of the tuning sweep: config overrides and a batch scale.

    ``batch_scale`` multiplies ``train.batch_size`` and the allocator's batch-like options (``batch_size``,
    ``extra_budget``, ``gen_batch_size``) of each tuned method, so the rollouts per step scale alike whatever the
    method's k (a k = 1 method at 128 prompts and GRPO k = 4 at 32 both halve to 64 rollouts a step).
    """

    name: str
    overrides: tuple[str, ...] = ()
    batch_scale: float = 1.0


@_frozen
class Tuning:
    """An equal tuning budget: every tuned method runs every setting on one tuning seed (not among the grid's seeds).

    Each tuned method is then run on the grid's seeds at the setting with the best tuning score (``rule``;
    ``mean_eval``: the mean eval pass rate over the tuning run's evaluations after the start, an area under its
    curve), so no method is judged on the seed that picked its setting. ``settings`` starts with ``default`` (no
    override).
    """

    seed: int
    methods: tuple[str, ...]
    settings: tuple[GridSetting, ...]
    rule: str = "mean_eval"
    recommend: tuple[str, ...] = ()
    """candidates for the recommended configuration (tuned methods): :func:`recommendation` picks one."""
    picks: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """other named picks by the same rule, each among its own candidates (the selection grid's ``selector``); a
    method may derive from one (``GridMethod.pick``) and an attribution row may name one for its picked method."""
    split: str = "validation"
    """the split the tuning runs evaluate and are scored on (``eval.split``): ``validation`` (model selection, so
    the eval split judges only the comparison seeds); ``eval`` only reproduces the grids tuned before it existed."""


TUNING_RULES = ("mean_eval", "final")


def names_list(value: object) -> bool:
    """Whether ``value`` is a YAML list of names (strings), so it can be compared as a set."""
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def load_tuning(raw: object, path: Path, methods: list[str], seeds: tuple[int, ...], strings: Any) -> Tuning | None:
    """The grid's ``tuning:`` entry (see :class:`Tuning`); None when absent."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) - {"seed", "methods", "settings", "rule", "recommend", "picks", "split"}:
        raise ValueError(f"{path}: tuning takes seed, methods, settings, rule, recommend, picks and split, got {raw!r}")
    split = raw.get("split", "validation")
    if split not in EVAL_SPLITS:
        raise ValueError(f"{path}: tuning.split must be one of {', '.join(EVAL_SPLITS)}, got {split!r}")
    seed = raw.get("seed", 100)
    if type(seed) is not int or seed in seeds:
        raise ValueError(f"{path}: tuning.seed must be an integer not among the grid's seeds {list(seeds)}, got {seed}")
    tuned = raw.get("methods")
    if not names_list(tuned) or not tuned or set(tuned) - set(methods) or len(set(tuned)) != len(tuned):
        raise ValueError(f"{path}: tuning.methods must list distinct methods of the grid, got {tuned!r}")
    rule = raw.get("rule", "mean_eval")
    if rule not in TUNING_RULES:
        raise ValueError(f"{path}: tuning.rule must be one of {', '.join(TUNING_RULES)}, got {rule!r}")
    settings_raw = raw.get("settings")
    if not isinstance(settings_raw, dict) or not settings_raw:
        raise ValueError(f"{path}: tuning.settings must map setting names to {{overrides, batch_scale}}")
    settings = [GridSetting(name="default")]
    for name, spec in settings_raw.items():
        if name == "default" or not isinstance(spec, dict) or set(spec) - {"overrides", "batch_scale"}:
            raise ValueError(
                f"{path}: tuning setting {name!r} takes overrides and batch_scale (and 'default' is implicit), "
                f"got {spec!r}"
            )
        scale = spec.get("batch_scale", 1.0)
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < scale <= 16:
            raise ValueError(f"{path}: tuning setting {name!r} batch_scale must lie in (0, 16], got {scale!r}")
        settings.append(GridSetting(name=check_name(name, path), overrides=strings(spec.get("overrides"),
                                    f"tuning.settings.{name}.overrides"), batch_scale=float(scale)))  # fmt: skip
    recommend, picks = raw.get("recommend", []), raw.get("picks", {})
    if not isinstance(picks, dict) or any(not isinstance(v, list) or not v for v in picks.values()) or set(
            picks) & set(methods):  # fmt: skip
        raise ValueError(f"{path}: tuning.picks must map a pick's name (not a method's) to a list of tuned methods, "
                         f"got {picks!r}")  # fmt: skip
    for key, candidates in (("recommend", recommend), *((f"picks.{n}", v) for n, v in picks.items())):
        if not isinstance(candidates, list) or set(candidates) - set(tuned):
            raise ValueError(f"{path}: tuning.{key} must list tuned methods, got {candidates!r}")
    return Tuning(seed=seed, methods=tuple(tuned), settings=tuple(settings), rule=rule, recommend=tuple(recommend),
                  picks=tuple((check_name(n, path), tuple(v)) for n, v in picks.items()), split=split)  # fmt: skip


def check_name(name: object, path: Path) -> str:
    """``name`` as a string usable in a run directory (no spaces, slashes or leading dot), else a ``ValueError``."""
    text = str(name)
    if not text or any(c in text for c in "/\\ ") or text.startswith("."):
        raise ValueError(f"{path}: {text!r} is not a usable name (no spaces, slashes or leading dot)")
    return text


__all__ = ["TUNING_RULES", "GridSetting", "Tuning", "check_name", "load_tuning", "names_list"]
