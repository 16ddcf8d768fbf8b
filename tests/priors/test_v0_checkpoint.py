"""Claims about the official V0 checkpoint format, on a tiny randomly initialised stand-in saved in that format."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from v05.priors import make_provider  # noqa: E402
from v05.priors.v0_checkpoint import (  # noqa: E402
    ADAPTER_KEYS,
    AdapterConfig,
    build_adapter,
    last_token_pool,
    save_adapter,
)
from v05.priors.v0_official import load_adapter  # noqa: E402

CONFIG = AdapterConfig(hidden_size=32, num_queries=4, embed_dim=6, num_heads=3, bottleneck=8)


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory):
    """A tiny random BERT encoder + word-piece tokenizer saved as safetensors (stand-in for Qwen3-Embedding)."""
    path = tmp_path_factory.mktemp("encoder")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *list("abcdefghijklmnopqrstuvwxyz0123456789+=")]
    (path / "vocab.txt").write_text("\n".join(vocab))
    tok = transformers.BertTokenizerFast(vocab_file=str(path / "vocab.txt"))
    tok.save_pretrained(path)
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    transformers.BertModel(config).save_pretrained(path, safe_serialization=True)
    return path


@pytest.fixture(scope="module")
def adapter_path(tmp_path_factory):
    torch.manual_seed(1)
    adapter = build_adapter(CONFIG)
    torch.nn.init.normal_(adapter.generator[4].weight, std=0.1)  # non-zero so the generator path is exercised
    return save_adapter(adapter, tmp_path_factory.mktemp("adapter") / "adapter.safetensors")


def test_adapter_has_the_official_keys_and_shapes():
    """The module's state dict has exactly V0's keys; features are num_queries × embed_dim per prompt."""
    adapter = build_adapter(CONFIG)
    assert set(adapter.state_dict()) == set(ADAPTER_KEYS)
    out = adapter.eval()(torch.randn(2, 5, 32), torch.ones(2, 5, dtype=torch.long))
    assert out.shape == (2, CONFIG.n_features)


def test_padding_tokens_do_not_change_features():
    """With left padding, masked positions leave a prompt's features unchanged (key_padding_mask)."""
    adapter = build_adapter(CONFIG).eval()
    h = torch.randn(1, 4, 32)
    padded = torch.cat([torch.randn(1, 3, 32), h], dim=1)
    mask = torch.tensor([[0, 0, 0, 1, 1, 1, 1]])
    with torch.no_grad():
        torch.testing.assert_close(adapter(h, torch.ones(1, 4)), adapter(padded, mask), atol=1e-5, rtol=1e-5)


def test_adapter_uses_the_released_names_and_reads_v05s_old_ones(tmp_path):
    """Keys are V0's (proj_kv, mha); a file with v05's earlier names (kv_proj, attn) loads to the same module."""
    adapter = build_adapter(CONFIG).eval()
    assert {"proj_kv.weight", "mha.in_proj_weight"} <= set(adapter.state_dict())
    old = {k.replace("proj_kv.", "kv_proj.").replace("mha.", "attn."): v for k, v in adapter.state_dict().items()}
    assert "attn.out_proj.weight" in old
    torch.save({"state_dict": {f"adapter.{k}": v for k, v in old.items()}}, tmp_path / "old.pt")
    h, m = torch.randn(2, 3, 32), torch.ones(2, 3, dtype=torch.long)
    with torch.no_grad():
        torch.testing.assert_close(load_adapter(tmp_path / "old.pt")(h, m), adapter(h, m), rtol=0, atol=0)


def test_global_query_is_the_last_real_token_under_either_padding():
    """V0's last_token_pool: the last position when all rows end in a real token, else position Σmask − 1."""
    h = torch.arange(2 * 4 * 1, dtype=torch.float32).view(2, 4, 1)
    left = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
    right = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0]])
    assert last_token_pool(h, left).flatten().tolist() == [3.0, 7.0]
    assert last_token_pool(h, right).flatten().tolist() == [1.0, 6.0]


def test_load_round_trip_safetensors_and_weights_only_pt(adapter_path, tmp_path):
    """The saved adapter reloads identically from safetensors and from a weights-only torch file with a prefix."""
    a = load_adapter(adapter_path)
    state = {f"module.{k}": v for k, v in a.state_dict().items()}
    torch.save(state, tmp_path / "v0.pt")
    b = load_adapter(tmp_path / "v0.pt")
    h, m = torch.randn(2, 3, 32), torch.ones(2, 3)
    with torch.no_grad():
        torch.testing.assert_close(a(h, m), b(h, m))


def test_foreign_state_dict_names_the_bad_keys(tmp_path):
    """A state dict of another model is rejected with its missing and unexpected keys."""
    torch.save({"weight": torch.zeros(2)}, tmp_path / "x.pt")
    with pytest.raises(ValueError, match="missing keys.*static_queries"):
        load_adapter(tmp_path / "x.pt")


def test_checkpoint_with_code_is_refused(tmp_path):
    """A torch file that needs arbitrary unpickling (code) is refused, not executed."""
    torch.save({"state_dict": {"x": object()}}, tmp_path / "evil.pt")
    with pytest.raises(ValueError, match="weights-only"):
        load_adapter(tmp_path / "evil.pt")


def test_v0_provider_runs_the_official_forward(encoder_dir, adapter_path):
    """v0 with the adapter backend and a hard-label head predicts calibrated scores in [−1, 1] for new prompts."""
    rng = np.random.default_rng(0)
    texts = ["".join(rng.choice(list("abc123+="), 12)) for _ in range(48)]
    scores = np.where(np.array(["1" in t for t in texts]), 0.6, -0.6)
    prov = make_provider(
        "v0",
        backend="v0_adapter",
        backend_options={"adapter": str(adapter_path), "encoder": str(encoder_dir)},
        head="logistic_hard",
        cache_dir=False,
        min_context=16,
    )
    ids = [f"p{i}" for i in range(48)]
    prov.update(ids[:40], texts[:40], scores[:40], np.full(40, 8.0))
    pred = prov.predict(ids[40:], texts[40:])
    assert pred.mean.shape == (8,) and np.all(np.abs(pred.mean) <= 1)
    assert prov.embedder.backend.truncated == 0
