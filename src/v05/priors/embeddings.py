"""Prompt embeddings: the backend protocol and a checksummed cache (the backends: :mod:`v05.priors.encoders`).

``Embedder(backend, cache_dir)`` turns texts into (Q, D) float64 rows. Rows are cached in memory and on disk by
(backend id, sha256 of the text), so a prompt that recurs is never encoded twice. Disk shards are safetensors files
whose metadata carries the row keys and a sha256 of the array bytes; a shard that fails to parse or whose checksum
does not match is logged, deleted and rebuilt. Nothing is pickled and no checkpoint code is executed
(``trust_remote_code=False``, safetensors weights only).

"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from v05._types import FloatArray

log = logging.getLogger(__name__)

DEFAULT_CACHE_DIR = Path("~/.cache/v05/embeddings")
CACHE_ENV = "V05_CACHE_DIR"
PROGRESS_MIN_PROMPTS = 1000
"""Show a progress bar when encoding more than this many new prompts."""


class Backend(Protocol):
    """Encodes texts; ``id`` names the backend and its settings (the cache namespace)."""

    id: str
    truncated: int

    def encode(self, texts: Sequence[str]) -> FloatArray:
        """(Q, D) embeddings of ``texts``."""
        ...


def text_key(text: str) -> str:
    """sha256 hex digest of the prompt text (the cache key within one backend)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def resolve_cache_dir(cache_dir: str | Path | None) -> Path:
    """The cache root: the argument, else ``$V05_CACHE_DIR``, else ``~/.cache/v05/embeddings``."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else DEFAULT_CACHE_DIR.expanduser()


def _safe_name(backend_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", backend_id)[:120]


@dataclass(kw_only=True, slots=True)
class Embedder:
    """Embeds texts with a backend, caching rows in memory and (unless ``cache_dir=False``) on disk.

    Attributes:
        backend: the encoder.
        cache_dir: cache root (None: ``$V05_CACHE_DIR`` or ``~/.cache/v05/embeddings``; False: memory only).
        hits / misses: rows served from the cache / encoded (metrics).
        rebuilt: corrupt shards detected and removed.
    """

    backend: Backend
    cache_dir: str | Path | None | bool = None
    hits: int = 0
    misses: int = 0
    rebuilt: int = 0
    memory_: dict[str, np.ndarray] = field(default_factory=dict, init=False, repr=False)
    loaded_: bool = field(default=False, init=False)

    @property
    def directory(self) -> Path | None:
        """This backend's shard directory, or None when the disk cache is off."""
        if self.cache_dir is False or not getattr(self.backend, "cacheable", True):
            return None
        root = resolve_cache_dir(None if self.cache_dir in (None, True) else self.cache_dir)  # type: ignore[arg-type]
        return root / _safe_name(self.backend.id)

    @property
    def truncated(self) -> int:
        """Prompts longer than the encoder's limit (truncated before encoding)."""
        return self.backend.truncated

    def embed(self, texts: Sequence[str]) -> FloatArray:
        """(Q, D) float64 embeddings of ``texts`` (duplicates and cached prompts are encoded once).

        A backend marked ``volatile`` (its encoder changes over time, e.g. the policy's own hidden states) is never
        cached: every call encodes its distinct texts afresh.
        """
        if getattr(self.backend, "volatile", False):
            uniq = list(dict.fromkeys(texts))
            self.misses += len(uniq)
            if not uniq:
                return np.zeros((0, 0))
            rows = np.asarray(self.backend.encode(uniq), np.float64)
            where = {t: i for i, t in enumerate(uniq)}
            return rows[[where[t] for t in texts]]
        self._load_disk()
        keys = [text_key(t) for t in texts]
        todo: dict[str, str] = {k: t for k, t in zip(keys, texts, strict=False) if k not in self.memory_}
        self.hits += len(keys) - sum(k in todo for k in keys)
        if todo:
            new = np.asarray(self.backend.encode(list(todo.values())), np.float32)
            self.misses += len(todo)
            for k, row in zip(todo, new, strict=False):
                self.memory_[k] = row
            self._write_shard(list(todo), new)
        if not keys:
            return np.zeros((0, 0))
        return np.stack([self.memory_[k] for k in keys]).astype(np.float64)

    def work(self, texts: Sequence[str]) -> int:
        """The encoder's forward work over the distinct ``texts`` as if nothing were cached: Σ tokens × parameters.

        A transformer forward costs ~2 · parameters FLOPs a token, so work ÷ a policy's parameters is that work in
        the policy's token-passes (:mod:`v05.train.compute`). 0 for a backend with no ``token_work`` (TF-IDF: a
        sparse product, no neural encoder; the policy's own features, counted as ``compute/probe``).
        """
        count = getattr(self.backend, "token_work", None)
        distinct = list(dict.fromkeys(texts))
        return int(count(distinct)) if count is not None and distinct else 0

    def metrics(self) -> dict[str, int]:
        """Cache and truncation counters."""
        return {
            "embed/hits": self.hits,
            "embed/misses": self.misses,
            "embed/truncated": self.truncated,
            "embed/rebuilt_shards": self.rebuilt,
        }

    def _load_disk(self) -> None:
        directory = self.directory
        if self.loaded_ or directory is None or not directory.is_dir():
            self.loaded_ = True
            return
        for shard in sorted(directory.glob("*.safetensors")):
            rows = _read_shard(shard)
            if rows is None:
                log.warning(
                    "embedding cache shard %s is corrupt (checksum or format); removing it, rows will be rebuilt", shard
                )
                self.rebuilt += 1
                shard.unlink(missing_ok=True)
                continue
            self.memory_.update(rows)
        self.loaded_ = True

    def _write_shard(self, keys: list[str], rows: np.ndarray) -> None:
        directory = self.directory
        if directory is None:
            return
        from safetensors.numpy import save_file

        directory.mkdir(parents=True, exist_ok=True)
        data = np.ascontiguousarray(rows, np.float32)
        name = hashlib.sha256("".join(keys).encode()).hexdigest()[:24]
        meta = {
            "keys": json.dumps(keys),
            "sha256": hashlib.sha256(data.tobytes()).hexdigest(),
            "backend": self.backend.id,
        }
        tmp = directory / f".{name}.{os.getpid()}.tmp"  # per process: parallel runs may write the same shard
        save_file({"embeddings": data}, str(tmp), metadata=meta)
        os.replace(tmp, directory / f"{name}.safetensors")  # atomic: readers never see a half-written shard


def _read_shard(path: Path) -> dict[str, np.ndarray] | None:
    """Rows of one shard keyed by text hash, or None if it is unreadable or fails its checksum."""
    try:
        from safetensors import safe_open

        with safe_open(str(path), framework="np") as fh:
            meta = fh.metadata() or {}
            data = fh.get_tensor("embeddings")
        keys = json.loads(meta["keys"])
        if hashlib.sha256(np.ascontiguousarray(data).tobytes()).hexdigest() != meta["sha256"] or len(keys) != len(data):
            return None
    except Exception:  # noqa: BLE001 - any parse failure means the shard is corrupt; it is rebuilt
        return None
    return dict(zip(keys, data, strict=False))


__all__ = [
    "Backend",
    "CACHE_ENV",
    "DEFAULT_CACHE_DIR",
    "Embedder",
    "resolve_cache_dir",
    "text_key",
]
