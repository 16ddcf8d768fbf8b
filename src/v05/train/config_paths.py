"""The trainer config's file and directory fields, checked when the config is (before any model or file is opened).

A value is a local path when it starts with ``/``, ``.`` (``./``, ``../``) or ``~``
(:func:`v05.train.policy.looks_local`); such a path must exist. Anything else is left to the loader that opens it: a
hub id (``policy.name_or_path=Qwen/Qwen2.5-0.5B``) is not a path, and a bare relative name (``data/train.jsonl``)
is resolved, and checked, by the task or prior that reads it. Cache folders may be missing (they are created).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

from v05.train.policy import looks_local

if TYPE_CHECKING:
    from v05.train.config import TrainConfig

PathKind = Literal["dir", "file", "any", "cache"]
"""What a field names: a directory, a file, either, or a cache folder (created when missing, never a file)."""

BACKEND_PATHS: dict[str, PathKind] = {"path": "dir", "model": "dir", "encoder": "dir", "adapter": "file"}
"""Embedding-backend options that name local files (hf: path; sentence_transformers: model; v0_adapter: the rest)."""


def path_fields(cfg: TrainConfig) -> list[tuple[str, object, PathKind]]:
    """``(field, value, kind)`` of every config value that names a file or directory."""
    fields: list[tuple[str, object, PathKind]] = [
        ("policy.name_or_path", cfg.policy.name_or_path, "dir"),
        ("warmup.cache_dir", cfg.warmup.cache_dir, "cache"),
    ]
    task, prior = cfg.task.options, cfg.prior.options
    fields += [(f"task.options.{k}", task[k], "file") for k in ("path", "eval_path") if k in task]  # math_file
    if "cache_dir" in prior:
        fields.append(("prior.options.cache_dir", prior["cache_dir"], "cache"))
    backend, head = prior.get("backend_options"), prior.get("head_options")
    if isinstance(backend, dict):
        named = [(k, kind) for k, kind in BACKEND_PATHS.items() if k in backend]
        fields += [(f"prior.options.backend_options.{k}", backend[k], kind) for k, kind in named]
    if isinstance(head, dict) and "checkpoint" in head:  # tabpfn / v0_tabpfn: the file or its directory
        fields.append(("prior.options.head_options.checkpoint", head["checkpoint"], "any"))
    return fields


def check_paths(cfg: TrainConfig) -> None:
    """Refuse a config whose local paths do not exist (or are of the wrong kind).

    Raises:
        ValueError: ``field: no such directory '...'`` (one line, naming the field).
    """
    for where, value, kind in path_fields(cfg):
        if not isinstance(value, str) or not looks_local(value):
            continue
        path = Path(value).expanduser()
        if kind == "cache":
            ok, msg = not path.exists() or path.is_dir(), f"{value!r} exists and is not a directory"
        elif kind == "dir":
            ok, msg = path.is_dir(), f"no such directory {value!r}" + (" (it is a file)" if path.exists() else "")
        elif kind == "file":
            ok, msg = path.is_file(), f"no such file {value!r}" + (" (it is a directory)" if path.exists() else "")
        else:
            ok, msg = path.exists(), f"no such file or directory {value!r}"
        if not ok:
            raise ValueError(f"{where}: {msg}")


__all__ = ["BACKEND_PATHS", "PathKind", "check_paths", "path_fields"]
