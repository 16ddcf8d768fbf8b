"""A run directory: the resolved config, the metrics log, TensorBoard events and atomic checkpoints.

Layout::

    RUN_DIR/config.yaml           the resolved config
    RUN_DIR/metrics.jsonl         one JSON object per step (``step``, ``rollouts_total``, ``train_pass_rate``, ...)
    RUN_DIR/tensorboard/          TensorBoard events (the same scalars)
    RUN_DIR/checkpoints/step_000050/   policy (safetensors + config + tokenizer), optimizer.pt, state.json
    RUN_DIR/checkpoints/latest    the name of the newest complete checkpoint

Writes are atomic: a checkpoint is written into a temporary folder and renamed into place, then ``latest`` is
replaced by rename; an interrupted save leaves the previous checkpoint valid. Everything but the optimizer and RNG
tensors is JSON (no pickle); tensors are loaded with ``weights_only=True``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from v05._checks import error_line

logger = logging.getLogger(__name__)

CHECKPOINTS = "checkpoints"
LATEST = "latest"
METRICS = "metrics.jsonl"
CONFIG = "config.yaml"


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename (never a half-written file)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _jsonable(value: Any) -> Any:
    """Metrics as JSON values: numpy/torch scalars → float/int, non-finite floats kept (json writes NaN)."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (bool, int, str)) or value is None:
        return value
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


class MetricsLog:
    """``metrics.jsonl`` plus TensorBoard scalars; on resume, lines after the checkpoint's step are dropped."""

    def __init__(self, run_dir: Path, *, resume_step: int | None, tensorboard: bool) -> None:
        self.path = run_dir / METRICS
        if resume_step is not None and self.path.exists():
            kept = [ln for ln in self.path.read_text(encoding="utf-8").splitlines() if _step_of(ln) <= resume_step]
            atomic_write_text(self.path, "".join(f"{ln}\n" for ln in kept))
        elif resume_step is None and self.path.exists():
            self.path.unlink()
        self._fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (closed in close())
        self._tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter  # noqa: PLC0415
            except ImportError as err:  # pragma: no cover - tensorboard is part of the train extra
                raise ValueError(f"run.tensorboard needs tensorboard: pip install 'v05[train]' ({err})") from None
            purge = None if resume_step is None else resume_step + 1
            self._tb = SummaryWriter(log_dir=str(run_dir / "tensorboard"), purge_step=purge)

    def write(self, metrics: Mapping[str, Any]) -> None:
        """Append one step's metrics (must hold ``step``) and mirror the finite scalars to TensorBoard."""
        row = _jsonable(metrics)
        self._fh.write(json.dumps(row) + "\n")
        self._fh.flush()
        if self._tb is not None:
            step = int(row["step"])
            for key, value in row.items():
                if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                    if math.isfinite(value):
                        self._tb.add_scalar(key, value, step)
            self._tb.flush()

    def close(self) -> None:
        """Flush and close the files."""
        self._fh.close()
        if self._tb is not None:
            self._tb.close()


def _step_of(line: str) -> int:
    try:
        return int(json.loads(line)["step"])
    except (ValueError, KeyError, TypeError):
        return 1 << 62  # an unreadable line is dropped on resume


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint of a run, or None."""
    pointer = run_dir / CHECKPOINTS / LATEST
    if not pointer.is_file():
        return None
    path = run_dir / CHECKPOINTS / pointer.read_text(encoding="utf-8").strip()
    return path if (path / "state.json").is_file() else None


def save_checkpoint(
    run_dir: Path,
    step: int,
    *,
    write_policy: Any,
    tensors: Mapping[str, Any],
    state: Mapping[str, Any],
    keep: int,
) -> Path:
    """Write checkpoint ``step`` atomically and prune old ones.

    Args:
        run_dir: the run directory.
        step: training steps completed.
        write_policy: ``write_policy(folder)`` saves the policy (safetensors) into the folder.
        tensors: torch objects (optimizer and scheduler state, RNG states) saved to ``tensors.pt``.
        state: JSON-serialisable trainer state (counters, prompt order, estimator/prior/allocator state).
        keep: checkpoints to keep.

    Returns:
        The checkpoint folder.
    """
    import torch  # noqa: PLC0415

    root = run_dir / CHECKPOINTS
    root.mkdir(parents=True, exist_ok=True)
    name = f"step_{step:06d}"
    tmp = root / f".tmp_{name}"
    for stale in [*root.glob(".tmp_step_*"), *root.glob(".trash_step_*")]:  # left by a killed save or removal
        shutil.rmtree(stale, ignore_errors=True)
    try:
        tmp.mkdir()
        write_policy(tmp / "policy")
        torch.save(dict(tensors), tmp / "tensors.pt")
        atomic_write_text(tmp / "state.json", json.dumps(_jsonable(state)))
        final = root / name
        if final.exists():
            _remove(final, root)
        os.replace(tmp, final)
        atomic_write_text(root / LATEST, name)
    except BaseException:  # a full disk, an unwritable folder, a signal: the previous checkpoint stays as it was
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    done = sorted(p for p in root.glob("step_*") if p.is_dir())
    for old in done[:-keep]:
        _remove(old, root)
    return final


def _remove(folder: Path, root: Path) -> None:
    """Delete a checkpoint folder: renamed out of the ``step_*`` namespace first, then removed.

    A kill mid-removal leaves a ``.trash_*`` folder (the next save removes it), never a half-deleted ``step_*``.
    """
    trash = root / f".trash_{folder.name}"
    shutil.rmtree(trash, ignore_errors=True)
    os.replace(folder, trash)
    shutil.rmtree(trash, ignore_errors=True)


def load_checkpoint(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(tensors, state)`` of a checkpoint folder (tensors loaded with ``weights_only=True``).

    Raises:
        ValueError: ``tensors.pt`` needs arbitrary unpickling (code) or is corrupt, or ``state.json`` is not a JSON
            object; the file is never loaded unsafely.
    """
    import torch  # noqa: PLC0415

    tensors_file, state_file = path / "tensors.pt", path / "state.json"
    try:
        tensors = torch.load(tensors_file, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - unpickling refused or corrupt: report, never retry unsafely
        raise ValueError(f"{tensors_file}: not a weights-only torch checkpoint ({error_line(err)})") from None
    try:
        state = json.loads(state_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ValueError(f"{state_file}: not a JSON checkpoint state ({error_line(err)})") from None
    if not isinstance(tensors, dict) or not isinstance(state, dict):
        raise ValueError(f"{path}: tensors.pt and state.json must each hold a mapping")
    return tensors, state


__all__ = [
    "CONFIG",
    "METRICS",
    "MetricsLog",
    "atomic_write_text",
    "latest_checkpoint",
    "load_checkpoint",
    "save_checkpoint",
]
