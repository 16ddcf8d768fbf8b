"""The grid file (``benchmarks/grids/*.yaml``): task settings × methods × seeds, and how it is tuned and attributed.

:func:`load_grid` reads and checks a grid file into a frozen :class:`Grid`: its task settings (:class:`GridTask`:
config overrides applied to every method, a regime and a pool), its methods (:class:`GridMethod`: a packaged config
or a YAML file plus overrides, optionally restricted to some task settings), its seeds and reference, the smoke
grid's choices (``quick:``), the store, an equal tuning budget (:class:`Tuning`) and an attribution table
(:class:`Attribution`). Every malformed entry is a ``ValueError`` naming it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml

from v05._checks import error_line
from v05.grid.sweep import Tuning, check_name, load_tuning, names_list

REGIMES = ("easy", "hard")
POOLS = ("revisited", "fresh", "mixed")
FAMILIES = ("grpo", "v05", "other")


_frozen = dataclasses.dataclass(frozen=True, kw_only=True, slots=True)


@_frozen
class GridTask:
    """One task setting: config overrides applied to every method (task, warm start, budget) and its regime."""

    name: str
    regime: str
    overrides: tuple[str, ...] = ()
    description: str = ""
    pool: str = "revisited"
    """the pool regime (:data:`POOLS`): ``revisited`` (a pool the budget visits many times per prompt), ``fresh`` (a
    pool at least as large as the prompts the budget draws) or ``mixed`` (domains and difficulties mixed)."""


@_frozen
class GridMethod:
    """One method: a packaged config name or a YAML file, plus overrides; ``family`` None: from the config.

    ``tasks`` restricts it to some task settings: its cells are planned there only, and every table of the other
    settings leaves it out.
    """

    name: str
    config: str
    overrides: tuple[str, ...] = ()
    family: str | None = None
    tasks: tuple[str, ...] = ()
    """the task settings it runs on (``tasks:`` in the grid file); empty: every task setting of the grid."""
    pick: str | None = None
    """``pick:`` in the grid file (no ``config``): the named tuning pick's method and overrides at the setting chosen
    for it per task setting, then these (:func:`v05.grid.cells.grid_cells`); on the grid's seeds once picked."""

    def runs_on(self, task: str) -> bool:
        """Whether the method has cells on the task setting ``task``."""
        return not self.tasks or task in self.tasks


@_frozen
class AttributionRow:
    """One line of the attribution table: what ``method`` adds over ``versus`` (paired, same seeds)."""

    factor: str
    method: str
    versus: str


@_frozen
class Attribution:
    """The attribution table of a grid (``attribution:``): named paired differences, and the oracle's headroom.

    ``control`` is the method every other is also paired with (``vs_running_mean_*``); ``oracle`` the bound and
    ``learned`` the learned priors whose best gain over ``control`` is set against the oracle's (``captured``).
    """

    rows: tuple[AttributionRow, ...]
    control: str | None = None
    oracle: str | None = None
    learned: tuple[str, ...] = ()


@_frozen
class Grid:
    """A declared grid: tasks × methods × seeds; ``quick`` holds the smoke grid's seeds, methods and overrides."""

    name: str
    path: Path
    seeds: tuple[int, ...]
    reference: str
    tasks: tuple[GridTask, ...]
    methods: tuple[GridMethod, ...]
    overrides: tuple[str, ...] = ()
    quick_seeds: tuple[int, ...] = (0,)
    quick_methods: tuple[str, ...] = ()
    quick_overrides: tuple[str, ...] = ()
    store: Path | None = None
    """where finished cells are kept for another machine or session to resume from (:func:`store_cell`)."""
    tuning: Tuning | None = None
    """the equal tuning budget (None: every method at its config's setting)."""
    attribution: Attribution | None = None
    """the attribution table (None: none)."""

    def for_quick(self) -> Grid:
        """The smoke grid: every task setting, the ``quick`` methods (the reference first) and seeds."""
        names = [self.reference, *(m for m in self.quick_methods if m != self.reference)]
        methods = tuple(m for name in names for m in self.methods if m.name == name)
        return dataclasses.replace(
            self, seeds=self.quick_seeds, methods=methods, overrides=(*self.overrides, *self.quick_overrides),
            store=None, tuning=None, attribution=None,
        )  # fmt: skip


def load_grid(path: str | Path) -> Grid:
    """Read and check a grid file.

    Format (every key but ``name``, ``tasks``, ``methods`` optional)::

        name: standard
        seeds: [0, 1, 2]
        reference: grpo4                      # a method name; default grpo4
        overrides: [eval.every=25]            # applied to every cell, first
        tasks:
          arithmetic-easy: {regime: easy, overrides: []}
          arithmetic-hard: {regime: hard, overrides: [warmup.sft.target_pass_rate=0.15]}

    Methods:
          grpo4: demo-grpo4                   # a packaged config or a YAML file
          grpo8: {config: demo-grpo4, overrides: [allocator.options.k=8]}
          grpo16: {config: demo-grpo16, tasks: [arithmetic-hard]}   # only on these task settings
        quick: {seeds: [0], methods: [grpo4, grpo8], overrides: [train.max_rollouts=768]}
        store: ../results/matrix/standard       # finished cells kept here (relative to the grid file)
        tuning:                                 # an equal tuning budget (see Tuning)
          seed: 100
          methods: [grpo4, ppo]
          settings: {lr-half: {overrides: [optim.lr=5.0e-5]}, batch-half: {batch_scale: 0.5}}

    Raises:
        ValueError: a missing or malformed entry; the message names it.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"grid file {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise ValueError(f"{path}: not valid YAML ({error_line(err)})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping with name, tasks and methods")
    unknown = sorted(
        set(data)
        - {"name", "description", "seeds", "reference", "overrides", "tasks", "methods", "quick", "store", "tuning",
           "attribution"}
    )
    if unknown:
        raise ValueError(f"{path}: unknown key(s) {', '.join(unknown)}")

    def strings(value: object, where: str) -> tuple[str, ...]:
        if value is None:
            return ()
        if not isinstance(value, list) or not all(isinstance(v, str) and "=" in v for v in value):
            raise ValueError(f"{path}: {where} must be a list of key=value strings, got {value!r}")
        return tuple(value)

    def seeds(value: object, where: str) -> tuple[int, ...]:
        if not isinstance(value, list) or not value or not all(type(v) is int for v in value):
            raise ValueError(f"{path}: {where} must be a non-empty list of integers, got {value!r}")
        if len(set(value)) != len(value):
            raise ValueError(f"{path}: {where} repeats a seed: {value}")
        return tuple(value)

    tasks_raw, methods_raw = data.get("tasks"), data.get("methods")
    if not isinstance(tasks_raw, dict) or not tasks_raw:
        raise ValueError(f"{path}: tasks must be a non-empty mapping of task setting names")
    if not isinstance(methods_raw, dict) or not methods_raw:
        raise ValueError(f"{path}: methods must be a non-empty mapping of method names")
    tasks = []
    for name, spec in tasks_raw.items():
        spec = spec or {}
        if not isinstance(spec, dict) or set(spec) - {"regime", "pool", "overrides", "description"}:
            raise ValueError(f"{path}: task {name!r} takes regime, pool, overrides and description, got {spec!r}")
        regime = spec.get("regime", "easy")
        if regime not in REGIMES:
            raise ValueError(f"{path}: task {name!r} regime must be one of {', '.join(REGIMES)}, got {regime!r}")
        pool = spec.get("pool", "revisited")
        if pool not in POOLS:
            raise ValueError(f"{path}: task {name!r} pool must be one of {', '.join(POOLS)}, got {pool!r}")
        tasks.append(
            GridTask(
                name=check_name(name, path),
                regime=regime,
                pool=pool,
                description=str(spec.get("description", "")),
                overrides=strings(spec.get("overrides"), f"tasks.{name}.overrides"),
            )
        )
    task_names = [t.name for t in tasks]
    methods = [_load_method(name, spec, path, task_names, strings) for name, spec in methods_raw.items()]
    names = [m.name for m in methods]
    reference = data.get("reference", "grpo4")
    if reference not in names:
        raise ValueError(f"{path}: reference {reference!r} is not one of the methods ({', '.join(names)})")
    if methods[names.index(reference)].tasks:
        raise ValueError(f"{path}: the reference {reference!r} must run on every task setting (no tasks:)")
    quick = data.get("quick") or {}
    if not isinstance(quick, dict) or set(quick) - {"seeds", "methods", "overrides"}:
        raise ValueError(f"{path}: quick takes seeds, methods and overrides, got {quick!r}")
    quick_methods = quick.get("methods", [reference])
    if not names_list(quick_methods) or set(quick_methods) - set(names):
        raise ValueError(f"{path}: quick.methods must list methods of the grid, got {quick_methods!r}")
    seeds_main = seeds(data.get("seeds", [0, 1, 2]), "seeds")
    tuning = load_tuning(data.get("tuning"), path, names, seeds_main, strings)
    picked = () if tuning is None else (*tuning.recommend, *(m for _, c in tuning.picks for m in c))
    partial = sorted({m.name for m in methods if m.tasks} & set(picked))
    if partial:  # a pick averages a candidate's tuning scores over every task setting
        raise ValueError(f"{path}: tuning.recommend/picks candidate(s) {', '.join(partial)} must run on every task "
                         "setting (no tasks:)")  # fmt: skip
    pick_names = [] if tuning is None else [n for n, _ in tuning.picks]
    for m in methods:
        if m.pick is not None and (m.pick not in pick_names or m.name in (tuning.methods if tuning else ())):
            raise ValueError(f"{path}: method {m.name!r} derives from pick {m.pick!r}: it must name one of "
                             f"tuning.picks ({', '.join(pick_names) or 'none'}) and not be tuned itself")  # fmt: skip
    return Grid(
        name=str(data.get("name") or path.stem),
        path=path,
        seeds=seeds_main,
        reference=reference,
        tasks=tuple(tasks),
        methods=tuple(methods),
        overrides=strings(data.get("overrides"), "overrides"),
        quick_seeds=seeds(quick.get("seeds", [0]), "quick.seeds"),
        quick_methods=tuple(quick_methods),
        quick_overrides=strings(quick.get("overrides"), "quick.overrides"),
        store=None if data.get("store") is None else path.parent / str(data["store"]),
        tuning=tuning,
        attribution=_load_attribution(data.get("attribution"), path, [*names, *pick_names]),
    )


def _load_method(name: object, spec: object, path: Path, tasks: list[str], strings: Any) -> GridMethod:
    """One entry of ``methods:``: a config name, or ``{config | pick, overrides, family, tasks}``."""
    if isinstance(spec, str):
        spec = {"config": spec}
    if not isinstance(spec, dict) or ("config" in spec) == ("pick" in spec) or set(spec) - {
            "config", "pick", "overrides", "family", "tasks"}:  # fmt: skip
        raise ValueError(f"{path}: method {name!r} needs config or pick (and may have overrides, family, tasks), "
                         f"got {spec!r}")  # fmt: skip
    family = spec.get("family")
    if family is not None and family not in FAMILIES:
        raise ValueError(f"{path}: method {name!r} family must be one of {', '.join(FAMILIES)}, got {family!r}")
    only = spec.get("tasks", [])
    if not names_list(only) or ("tasks" in spec and not only) or set(only) - set(tasks) or len(set(only)) != len(only):
        raise ValueError(f"{path}: method {name!r} tasks must list distinct task settings of the grid "
                         f"({', '.join(tasks)}), got {only!r}")  # fmt: skip
    config = str(spec.get("config", ""))
    if config.endswith((".yaml", ".yml")) and not Path(config).is_absolute():
        config = str((path.parent / config).resolve()) if (path.parent / config).is_file() else config
    return GridMethod(
        name=check_name(name, path),
        config=config,
        family=family,
        overrides=strings(spec.get("overrides"), f"methods.{name}.overrides"),
        tasks=tuple(only),
        pick=None if spec.get("pick") is None else str(spec["pick"]),
    )


def _load_attribution(raw: object, path: Path, methods: list[str]) -> Attribution | None:
    """The grid's ``attribution:`` entry: ``{control, oracle, learned: [...], rows: [{factor, method, versus}]}``."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) - {"control", "oracle", "learned", "rows"}:
        raise ValueError(f"{path}: attribution takes control, oracle, learned and rows, got {raw!r}")
    known = set(methods)
    for key in ("control", "oracle"):
        if raw.get(key) is not None and raw[key] not in known:
            raise ValueError(f"{path}: attribution.{key} {raw[key]!r} is not a method of the grid")
    learned = raw.get("learned", [])
    if not names_list(learned) or set(learned) - known:
        raise ValueError(f"{path}: attribution.learned must list methods of the grid, got {learned!r}")
    rows = []
    for i, row in enumerate(raw.get("rows") or []):
        if not isinstance(row, dict) or set(row) != {"factor", "method", "versus"}:
            raise ValueError(f"{path}: attribution.rows[{i}] must be {{factor, method, versus}}, got {row!r}")
        if row["method"] not in known or row["versus"] not in known:
            raise ValueError(f"{path}: attribution.rows[{i}] names a method the grid lacks: {row!r}")
        rows.append(AttributionRow(factor=str(row["factor"]), method=row["method"], versus=row["versus"]))
    return Attribution(rows=tuple(rows), control=raw.get("control"), oracle=raw.get("oracle"), learned=tuple(learned))


__all__ = [
    "FAMILIES",
    "POOLS",
    "REGIMES",
    "Attribution",
    "AttributionRow",
    "Grid",
    "GridMethod",
    "GridTask",
    "load_grid",
]
