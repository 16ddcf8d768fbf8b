"""A cell's state, and the store: finished cells and warm starts kept (committed) so a grid runs in parts anywhere.

A cell is ``done`` (a finished run of its config: ``final/``, or restored from a store and checked by
:func:`stored_problem`), ``resume`` (a checkpoint) or ``new`` (:func:`cell_state`); a run directory holding another
config, or a restored cell that fails the check, is refused. The store (the grid's ``store:``) keeps each finished
cell as ``config.yaml``, ``metrics.jsonl.gz`` and ``stored.json`` (the warm start's weight digest and the hardware),
and each warm start once; a fresh ``--out`` restores the stored cells instead of training them, but only where the
warm start they would pair on (this machine's cached one, else the store's copy) has the same digest: cells pair only
when they start from the same weights. :func:`verify_stored` applies the same check to every restored cell of a
report (``--report-only``).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path

from v05.grid.cells import Cell
from v05.hardware import hardware_label
from v05.report.runs import METRICS_NAME
from v05.train.config import TrainConfig, load_config, to_yaml
from v05.train.rundir import latest_checkpoint
from v05.train.warmstart import warm_start_dir

logger = logging.getLogger(__name__)

STORED_NAME = "stored.json"
"""Marks a run directory restored from the store (its metrics and config, not its weights)."""


def is_finished(cell: Cell) -> bool:
    """Whether the cell's run directory holds a finished run of its config.

    Trained here: ``final/`` and the metrics. Restored from a store: ``stored.json`` and no :func:`stored_problem`
    (the metrics reach the run's end, the config is the cell's, the warm-start digest is the cached warm start's);
    a restored cell that fails the check is not finished (logged once with the reason).
    """
    if (cell.run_dir / "final").is_dir():
        return (cell.run_dir / METRICS_NAME).is_file()
    if not (cell.run_dir / STORED_NAME).is_file():
        return False
    problem = stored_problem(cell)
    if problem is not None and (cell.run_dir, problem) not in _warned:
        _warned.add((cell.run_dir, problem))
        logger.warning("%s is not a finished cell: %s", cell.run_dir, problem)
    return problem is None


_warned: set[tuple[Path, str]] = set()


def stored_problem(cell: Cell, store: Path | None = None) -> str | None:
    """Why the restored cell in ``cell.run_dir`` is not a complete run of the cell's config; None when it is.

    Checks that ``stored.json`` is a record with the warm start's digest, the metrics are there and their last rows
    reach the run's end (``train.steps`` or ``train.max_rollouts``), ``config.yaml`` loads to the cell's config, and
    the recorded digest is that of the warm start the cell would pair on (:func:`expected_digest`: this machine's
    cached one, else ``store``'s copy; not compared when neither exists).
    """
    run_dir = cell.run_dir
    try:
        info = json.loads((run_dir / STORED_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return f"{STORED_NAME} is missing or not JSON"
    if not isinstance(info, dict) or "warm_start" not in info:
        return f"{STORED_NAME} records no warm-start digest"
    if not (run_dir / "config.yaml").is_file() or not _same_config(run_dir / "config.yaml", cell.cfg):
        return "its config.yaml is missing or another config than the grid's cell"
    end = _last_rows(run_dir / METRICS_NAME)
    if end is None:
        return f"{METRICS_NAME} is missing, empty or torn"
    steps, rollouts = end
    train = cell.cfg.train
    if steps < train.steps and (train.max_rollouts is None or rollouts < train.max_rollouts):
        budget = f"{train.steps} steps" + ("" if train.max_rollouts is None else f" or {train.max_rollouts} rollouts")
        return f"its metrics end at step {steps}, {rollouts} rollouts, before the run's end ({budget})"
    expected = expected_digest(cell.cfg, store)
    if expected is not None and info["warm_start"] != expected:
        return (f"it was trained from warm start {info['warm_start']} but the warm start it pairs on "
                f"({warm_start_dir(cell.cfg).name}) is {expected}")  # fmt: skip
    return None


def _last_rows(metrics: Path, tail: int = 1 << 16) -> tuple[int, int] | None:
    """(the largest step, the largest rollouts_total) over the metrics file's last rows; None without a readable row.

    Reads the file's last ``tail`` bytes (the first line read may be cut, and is skipped); a row that is not JSON
    (a torn copy) makes it None.
    """
    try:
        with metrics.open("rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - tail))
            lines = f.read().splitlines()
    except OSError:
        return None
    rows = []
    for line in lines[1:] if size > tail else lines:
        try:
            rows.append(json.loads(line))
        except ValueError:
            return None
    rows = [r for r in rows if isinstance(r, dict)]
    if not rows:
        return None
    return max(int(r.get("step") or 0) for r in rows), max(int(r.get("rollouts_total") or 0) for r in rows)


def cell_state(cell: Cell) -> str:
    """``"done"`` (a finished run of this config), ``"resume"`` (a checkpoint), or ``"new"``.

    Raises:
        ValueError: the run directory holds a run of another config (the grid changed: delete it or use another
            ``--out``), or a restored cell that fails :func:`stored_problem` (an incomplete copy, or another warm
            start than this machine's).
    """
    saved = cell.run_dir / "config.yaml"
    if saved.is_file() and not _same_config(saved, cell.cfg):  # loaded: a field added since reads as its default
        raise ValueError(
            f"{cell.run_dir} holds a run of another config than the grid's cell {cell.task.name}/{cell.method.name}: "
            "delete it or pass another --out"
        )
    if (cell.run_dir / STORED_NAME).is_file() and not (cell.run_dir / "final").is_dir():
        problem = stored_problem(cell)
        if problem is not None:
            raise ValueError(f"{cell.run_dir} holds a restored cell that does not check: {problem}; delete it or "
                             "pass another --out")  # fmt: skip
    if is_finished(cell):
        return "done"
    return "resume" if latest_checkpoint(cell.run_dir) is not None else "new"


def warm_start_digest(cfg: TrainConfig) -> str | None:
    """SHA-256 (16 hex digits) of the cached warm start's weights, None without a warm-up or before it is trained.

    Cells pair only when they start from the same weights: SFT stops at another step on another CPU, so a stored cell
    is reused only where this machine's warm start has the same digest.
    """
    if not cfg.warmup.enabled:
        return None
    return _folder_digest(warm_start_dir(cfg))


def expected_digest(cfg: TrainConfig, store: Path | None = None) -> str | None:
    """The digest of the warm start a cell of ``cfg`` pairs on: this machine's cached one, else ``store``'s copy.

    None without a warm-up, or where neither is there (nothing to compare).
    """
    if not cfg.warmup.enabled:
        return None
    local = warm_start_digest(cfg)
    if local is not None or store is None:
        return local
    return _folder_digest(store / WARM_STORE / warm_start_dir(cfg).name)


_digests: dict[tuple[Path, tuple[tuple[str, int, int, int], ...]], str] = {}


def _folder_digest(folder: Path) -> str | None:
    """SHA-256 (16 hex digits) of a warm-start folder's weight files, None without any (cached by size and mtime)."""
    files = sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin"))
    if not files:
        return None
    key = (folder, tuple((f.name, (st := f.stat()).st_size, st.st_mtime_ns, st.st_ino) for f in files))
    if key not in _digests:
        digest = hashlib.sha256()
        for file in files:
            digest.update(file.read_bytes())
        _digests[key] = digest.hexdigest()[:16]
    return _digests[key]


def _stored(cell: Cell, store: Path) -> Path:
    return store / cell.task.name / cell.run_dir.name


def store_cell(cell: Cell, store: Path) -> Path:
    """Keep a finished cell in ``store``: ``config.yaml``, ``metrics.jsonl.gz`` and ``stored.json``.

    ``stored.json`` gives the warm start's digest and the hardware. The entry is written to a temporary folder and
    renamed, so a crash leaves the old entry or none.
    """
    dest = _stored(cell, store)
    tmp = dest.with_name(f".tmp_{dest.name}_{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    shutil.copyfile(cell.run_dir / "config.yaml", tmp / "config.yaml")
    with gzip.GzipFile(tmp / (METRICS_NAME + ".gz"), "wb", mtime=0) as f:  # mtime 0: the same bytes on every machine
        f.write((cell.run_dir / METRICS_NAME).read_bytes())
    info = {"warm_start": warm_start_digest(cell.cfg), "hardware": hardware_label()}
    (tmp / STORED_NAME).write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
    if dest.exists():
        if (dest / "config.yaml").is_file() and not _same_config(dest / "config.yaml", cell.cfg):
            logger.warning("store: %s held another config (the grid changed); replaced by this cell's", dest)
        shutil.rmtree(dest)
    os.replace(tmp, dest)
    return dest


WARM_STORE = "warm_start"
"""The store's folder of warm starts (the cache's layout: one folder per warm-start key)."""


def _copy_warm_start(src: Path, dest: Path) -> bool:
    """Copy the warm-start folder ``src`` to ``dest`` unless ``dest`` has one or ``src`` has none; whether it did.

    Via a temporary folder and a rename: a crash leaves no half-copied warm start.
    """
    if (dest / "sft.json").is_file() or not (src / "sft.json").is_file():
        return False
    tmp = dest.with_name(f".tmp_{dest.name}_{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp)
    os.replace(tmp, dest)
    return True


def restore_warm_starts(warm: Iterable[Path], store: Path) -> int:
    """Copy the store's warm starts that this machine's cache lacks into it; returns how many.

    SFT stops at another step on another CPU, so a grid resumed elsewhere starts from the stored weights, not from
    a fresh warm-up: its new cells then pair with the stored ones.
    """
    return sum(_copy_warm_start(store / WARM_STORE / folder.name, folder) for folder in warm)


def keep_warm_starts(warm: Iterable[Path], store: Path) -> None:
    """Copy each trained warm start into the store once (the store's copy, once written, is never replaced)."""
    for folder in warm:
        _copy_warm_start(folder, store / WARM_STORE / folder.name)


def _same_config(saved: Path, cfg: TrainConfig) -> bool:
    """Whether a stored ``config.yaml`` loads (with this version's defaults for fields added since) to ``cfg``."""
    key = saved.read_text(encoding="utf-8")  # loaded once per text: a report checks each cell several times
    if key not in _loaded:
        try:
            _loaded[key] = load_config(str(saved))
        except ValueError:  # a field removed or renamed since: another config
            _loaded[key] = None
    return _loaded[key] == cfg


_loaded: dict[str, TrainConfig | None] = {}


def restore_cells(cells: Sequence[Cell], store: Path) -> int:
    """Copy the stored cells that this ``--out`` lacks (state ``new``) into their run directories; returns how many.

    A stored cell of another config (the grid changed since) is left out and will be trained again; configs compare
    as loaded, so a field added to the trainer since (at its default) does not make a stored cell stale.

    Raises:
        ValueError: a stored cell started from another warm start than the one it pairs on (this machine's cached
            one, else the store's copy: :func:`expected_digest`); they would not pair: train the grid into another
            store. Without either (nothing to compare) it is restored unchecked.
    """
    restored = 0
    for cell in cells:
        src = _stored(cell, store)
        if not (src / STORED_NAME).is_file() or cell_state(cell) != "new":
            continue
        if not _same_config(src / "config.yaml", cell.cfg):
            logger.warning("store: %s holds another config than the grid's cell: it will be trained again", src)
            continue
        info = json.loads((src / STORED_NAME).read_text(encoding="utf-8"))
        expected = expected_digest(cell.cfg, store)
        if expected is not None and info.get("warm_start") != expected:
            where = "this machine's" if warm_start_digest(cell.cfg) is not None else "the store's copy's"
            raise ValueError(
                f"store: {src} was trained from warm start {info.get('warm_start')} but {where} is {expected} "
                f"({warm_start_dir(cell.cfg).name}): the cells would not pair; delete that cached warm start (the "
                "store's is then used) or pass another --store"
            )
        cell.run_dir.mkdir(parents=True, exist_ok=True)
        (cell.run_dir / "config.yaml").write_text(to_yaml(cell.cfg), encoding="utf-8")  # this version's layout
        with gzip.open(src / (METRICS_NAME + ".gz"), "rb") as f:
            (cell.run_dir / METRICS_NAME).write_bytes(f.read())
        (cell.run_dir / STORED_NAME).write_text(json.dumps(info | {"from": str(src)}) + "\n", encoding="utf-8")
        restored += 1
    return restored


def verify_stored(cells: Sequence[Cell], store: Path | None = None) -> int:
    """Check every restored cell of ``cells`` (:func:`stored_problem`); returns how many were checked.

    Digests are compared with this machine's cached warm starts, else with ``store``'s copies. ``--report-only``
    runs it before reporting.

    Raises:
        ValueError: a restored cell that fails the check (the message names each, up to five): a report would
            pair cells that did not start from the same weights, or count an incomplete run.
    """
    restored = [c for c in cells if (c.run_dir / STORED_NAME).is_file() and not (c.run_dir / "final").is_dir()]
    problems = [(c, p) for c in restored if (p := stored_problem(c, store)) is not None]
    if problems:
        listed = "; ".join(f"{c.run_dir}: {p}" for c, p in problems[:5])
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise ValueError(f"{len(problems)} restored cell(s) do not check: {listed}{more}")
    unchecked = [c for c in restored if c.cfg.warmup.enabled and expected_digest(c.cfg, store) is None]
    if unchecked:
        logger.warning("%d restored cell(s) have no warm start here or in the store to compare digests with "
                       "(e.g. %s)", len(unchecked), unchecked[0].run_dir)  # fmt: skip
    return len(restored)


__all__ = [
    "STORED_NAME",
    "WARM_STORE",
    "cell_state",
    "expected_digest",
    "is_finished",
    "keep_warm_starts",
    "restore_cells",
    "restore_warm_starts",
    "store_cell",
    "stored_problem",
    "verify_stored",
    "warm_start_digest",
]
