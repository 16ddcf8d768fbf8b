"""A cell's state, and the store: finished cells and warm starts kept (committed) so a grid runs in parts anywhere.

A cell is ``done`` (a finished run of its config: ``final/``, or restored from a store), ``resume`` (a checkpoint) or
``new`` (:func:`cell_state`); a run directory holding another config is refused. The store (the grid's ``store:``)
keeps each finished cell as ``config.yaml``, ``metrics.jsonl.gz`` and ``stored.json`` (the warm start's weight digest
and the hardware), and each warm start once; a fresh ``--out`` restores the stored cells instead of training them,
but only where this machine's cached warm start has the same digest: cells pair only when they start from the same
weights.
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
    """Whether the cell's run directory holds a finished run (trained here, or restored from a store)."""
    return (cell.run_dir / "final").is_dir() or (cell.run_dir / STORED_NAME).is_file()


def cell_state(cell: Cell) -> str:
    """``"done"`` (a finished run of this config), ``"resume"`` (a checkpoint), or ``"new"``.

    Raises:
        ValueError: the run directory holds a run of another config (the grid changed: delete it or use another
            ``--out``).
    """
    saved = cell.run_dir / "config.yaml"
    if saved.is_file() and not _same_config(saved, cell.cfg):  # loaded: a field added since reads as its default
        raise ValueError(
            f"{cell.run_dir} holds a run of another config than the grid's cell {cell.task.name}/{cell.method.name}: "
            "delete it or pass another --out"
        )
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
    folder = warm_start_dir(cfg)
    files = sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin"))
    if not files:
        return None
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.read_bytes())
    return digest.hexdigest()[:16]


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
    try:
        return load_config(str(saved)) == cfg
    except ValueError:  # a field removed or renamed since: another config
        return False


def restore_cells(cells: Sequence[Cell], store: Path) -> int:
    """Copy the stored cells that this ``--out`` lacks (state ``new``) into their run directories; returns how many.

    A stored cell of another config (the grid changed since) is left out and will be trained again; configs compare
    as loaded, so a field added to the trainer since (at its default) does not make a stored cell stale.

    Raises:
        ValueError: a stored cell started from another warm start than the one cached on this machine (they would
            not pair: train the grid into another store). Without a cached warm start (a report only) nothing is
            compared.
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
        local = warm_start_digest(cell.cfg)
        if local is not None and info.get("warm_start") != local:
            raise ValueError(
                f"store: {src} was trained from warm start {info.get('warm_start')} but this machine's is {local} "
                f"({warm_start_dir(cell.cfg)}): the cells would not pair; delete that cached warm start (the "
                "store's is then used) or pass another --store"
            )
        cell.run_dir.mkdir(parents=True, exist_ok=True)
        (cell.run_dir / "config.yaml").write_text(to_yaml(cell.cfg), encoding="utf-8")  # this version's layout
        with gzip.open(src / (METRICS_NAME + ".gz"), "rb") as f:
            (cell.run_dir / METRICS_NAME).write_bytes(f.read())
        (cell.run_dir / STORED_NAME).write_text(json.dumps(info | {"from": str(src)}) + "\n", encoding="utf-8")
        restored += 1
    return restored


__all__ = [
    "STORED_NAME",
    "WARM_STORE",
    "cell_state",
    "is_finished",
    "keep_warm_starts",
    "restore_cells",
    "restore_warm_starts",
    "store_cell",
    "warm_start_digest",
]
