"""Claims about loading V0's official training checkpoint, on a tiny random stand-in saved in exactly its layout.

The stand-in mirrors ``v0_core/utils/checkpoint.py``: ``{"epoch", "model_state_dict", "optimizer_state_dict",
"scheduler_state_dict", "args": vars(args), "wandb_run_id"}`` with ``adapter_layer.*`` (``proj_kv``, ``mha``) and
``backbone.*`` (a random Qwen3 encoder). Its forward is compared to ``reference_features``: the released
``QwenEmbeddingModel`` + ``DynamicQueryAdapter`` forward rewritten with loops and plain float64 torch ops.

The real files cannot be downloaded here. With them (see ``v05.priors.v0_official.DOWNLOAD_HINT``)::

    V05_V0_CHECKPOINT=v0_files/v_0_for_grpo_training.pt V05_V0_ENCODER=Qwen3-Embedding-0.6B \
    V05_TABPFN_CHECKPOINT=v0_files/pretrained/tabpfn-v2.5-classifier-v2.5_default.ckpt \
    V05_V0_REPO=path/to/Now-Join-Us/V0 V05_V0_DEVICE=cuda pytest -q tests/priors/test_v0_official.py -k real_checkpoint
"""

import argparse
import math
import os
import sys
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from v05.priors import make_provider  # noqa: E402
from v05.priors.heads import TABPFN_CHECKPOINT  # noqa: E402
from v05.priors.v0_checkpoint import AdapterConfig  # noqa: E402
from v05.priors.v0_official import V0AdapterBackend, V0TabPFNHead, load_adapter, load_official_checkpoint  # noqa: E402

HIDDEN, K, D, HEADS, BOTTLENECK = 32, 4, 6, 3, 8
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *list("abcdefghijklmnopqrstuvwxyz0123456789+=")]
ADAPTER_SHAPES = {
    "static_queries": (1, K, D),
    "generator.0.weight": (BOTTLENECK, HIDDEN),
    "generator.0.bias": (BOTTLENECK,),
    "generator.1.weight": (BOTTLENECK,),
    "generator.1.bias": (BOTTLENECK,),
    "generator.4.weight": (K * D, BOTTLENECK),
    "generator.4.bias": (K * D,),
    "proj_kv.weight": (D, HIDDEN),
    "proj_kv.bias": (D,),
    "mha.in_proj_weight": (3 * D, D),
    "mha.in_proj_bias": (3 * D,),
    "mha.out_proj.weight": (D, D),
    "mha.out_proj.bias": (D,),
    "ln_q.weight": (D,),
    "ln_q.bias": (D,),
    "ln_kv.weight": (D,),
    "ln_kv.bias": (D,),
}
ARGS = {  # vars(args) of main_train.sh, sizes shrunk; ``device`` is a torch.device as in main_train.py
    "pooling_strategy": "dynamic_query",
    "reduce_method": "none",
    "target_dim": 1024,
    "num_queries": K,
    "embed_dim": D,
    "num_heads": HEADS,
    "dynamic_query_generator_bottleneck_dim": BOTTLENECK,
    "dynamic_query_generator_dropout_rate": 0.2,
    "tabpfn_estimators": 4,
    "support_size": 256,
    "label_strategy": "minmax_norm",
    "loss_type": "combined",
    "loss_alpha": 0.25,
    "context_data_paths": ["./data/context.jsonl"],
    "device": torch.device("cuda", 0),
}
TEXTS = ["1 + 2 = 3", "a", "b c d e f g h", "7 7", "x y z = 9 9 9 9", "q"]


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory):
    """A tiny random Qwen3 encoder + character-level WordPiece tokenizer saved locally (stand-in for the 0.6B)."""
    path = tmp_path_factory.mktemp("qwen3")
    (path / "vocab.txt").write_text("\n".join(VOCAB))
    transformers.BertTokenizerFast(
        vocab_file=str(path / "vocab.txt"), model_input_names=["input_ids", "attention_mask"]
    ).save_pretrained(path)
    torch.manual_seed(0)
    config = transformers.Qwen3Config(
        vocab_size=len(VOCAB),
        pad_token_id=0,
        hidden_size=HIDDEN,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=128,
    )
    transformers.Qwen3Model(config).save_pretrained(path, safe_serialization=True)
    return path


@pytest.fixture(scope="module")
def parts(encoder_dir):
    """Random adapter tensors (released names; features of order 1), the encoder's weights as ``backbone``, and
    optimizer and scheduler states."""
    gen = torch.Generator().manual_seed(1)
    adapter = {k: 0.3 * torch.randn(s, generator=gen) for k, s in ADAPTER_SHAPES.items()}
    backbone = transformers.AutoModel.from_pretrained(encoder_dir).state_dict()
    params = [torch.nn.Parameter(v.clone()) for v in adapter.values()]
    optimizer = torch.optim.AdamW([{"params": params[:8], "weight_decay": 0.01}, {"params": params[8:]}], lr=2e-4)
    scheduler = transformers.get_cosine_schedule_with_warmup(optimizer, 1, 10)  # LambdaLR over functools.partial
    for p in params:
        p.grad = torch.ones_like(p)
    optimizer.step()
    scheduler.step()
    return {
        "adapter": adapter,
        "backbone": backbone,
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
    }


def write_checkpoint(path, parts, *, prefix="", args=None, extra=None, drop=()):
    """Save the stand-in in V0's CheckpointManager layout (``extra`` adds, ``drop`` removes model-state keys)."""
    state = {f"{prefix}adapter_layer.{k}": v for k, v in parts["adapter"].items()}
    state |= {f"{prefix}backbone.{k}": v for k, v in parts["backbone"].items()}
    state |= extra or {}
    for key in drop:
        del state[key]
    torch.save(
        {
            "epoch": 7,
            "model_state_dict": state,
            "optimizer_state_dict": parts["optimizer"],
            "scheduler_state_dict": parts["scheduler"],
            "args": dict(ARGS) if args is None else args,
            "wandb_run_id": "love1314",
        },
        path,
    )
    return path


@pytest.fixture(scope="module")
def official_path(tmp_path_factory, parts):
    return write_checkpoint(tmp_path_factory.mktemp("v0") / "v_0_for_grpo_training.pt", parts)


def layer_norm(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def reference_features(w, hidden, mask, num_heads):
    """The released adapter forward, one prompt and one head at a time, in float64."""
    w = {k: v.double() for k, v in w.items()}
    n_queries, d = w["static_queries"].shape[1:]
    left_padded = bool((mask[:, -1] == 1).all())
    hd = d // num_heads
    rows = []
    for b in range(hidden.shape[0]):
        h = hidden[b].double()  # (L, H)
        v = h[-1] if left_padded else h[int(mask[b].sum()) - 1]  # last_token_pool
        g = layer_norm(
            w["generator.0.weight"] @ v + w["generator.0.bias"], w["generator.1.weight"], w["generator.1.bias"]
        )
        g = 0.5 * g * (1 + torch.erf(g / math.sqrt(2)))  # exact GELU; dropout is off in eval
        q = w["static_queries"][0] + (w["generator.4.weight"] @ g + w["generator.4.bias"]).view(n_queries, d)
        kv = h @ w["proj_kv.weight"].T + w["proj_kv.bias"]  # (L, d)
        wq, wk, wv = w["mha.in_proj_weight"].chunk(3)
        bq, bk, bv = w["mha.in_proj_bias"].chunk(3)
        q_p = layer_norm(q, w["ln_q.weight"], w["ln_q.bias"]) @ wq.T + bq  # query = LN_q(Q)
        k_p = layer_norm(kv, w["ln_kv.weight"], w["ln_kv.bias"]) @ wk.T + bk  # key = LN_kv(KV)
        v_p = kv @ wv.T + bv  # value = KV, not normalised
        real = mask[b].bool()
        heads = []
        for j in range(num_heads):
            cols = slice(j * hd, (j + 1) * hd)
            scores = q_p[:, cols] @ k_p[real][:, cols].T / math.sqrt(hd)  # (K, L_real): padding is masked out
            heads.append(torch.softmax(scores, dim=-1) @ v_p[real][:, cols])
        z = torch.cat(heads, dim=-1) @ w["mha.out_proj.weight"].T + w["mha.out_proj.bias"]  # (K, d)
        rows.append(z.reshape(-1))
    return torch.stack(rows)


def reference_hidden(encoder_dir, texts, max_length=2048):
    """QwenEmbeddingModel's backbone call: left-padded batch → AutoModel → last_hidden_state."""
    tok = transformers.AutoTokenizer.from_pretrained(encoder_dir, padding_side="left")
    model = transformers.AutoModel.from_pretrained(encoder_dir, dtype=torch.float32).eval()
    batch = tok(list(texts), max_length=max_length, padding=True, truncation=True, return_tensors="pt")
    with torch.no_grad():
        return model(**batch).last_hidden_state, batch["attention_mask"]


def test_standin_loads_strictly_and_matches_the_reference_forward(official_path, encoder_dir, parts):
    """Strict load: adapter keys consumed, args checked, backbone equal to the encoder; features = reference ± 1e-6."""
    v0 = load_official_checkpoint(official_path, encoder=str(encoder_dir), batch_size=3)
    assert v0.backbone == "matched" and v0.path_kind == "paper" and v0.epoch == 7 and v0.dropped == ()
    assert v0.config == AdapterConfig(hidden_size=HIDDEN, num_queries=K, embed_dim=D, num_heads=HEADS, bottleneck=8)
    got = v0.encode(TEXTS)  # two batches of 3, each left-padded differently
    ref = torch.cat([reference_features(parts["adapter"], *reference_hidden(encoder_dir, TEXTS[i : i + 3]), HEADS)
                     for i in (0, 3)])  # fmt: skip
    assert got.shape == (len(TEXTS), K * D)
    np.testing.assert_allclose(got, ref.numpy(), rtol=0, atol=1e-6)


def test_module_prefix_and_namespace_args_load_identically(tmp_path, official_path, encoder_dir, parts):
    """A DDP ``module.`` prefix and args saved as an argparse.Namespace (allow-listed, weights-only) change nothing."""
    path = write_checkpoint(tmp_path / "ddp.pt", parts, prefix="module.", args=argparse.Namespace(**ARGS))
    a = load_official_checkpoint(official_path, encoder=str(encoder_dir)).encode(TEXTS)
    b = load_official_checkpoint(path, encoder=str(encoder_dir)).encode(TEXTS)
    np.testing.assert_array_equal(a, b)


def test_right_padding_uses_the_last_real_token(official_path, parts):
    """Without an encoder the adapter alone is returned; under right padding it pools at Σmask − 1, like V0."""
    v0 = load_official_checkpoint(official_path, encoder=None)
    assert v0.backbone == "unchecked" and v0.stack is None
    hidden = torch.randn(3, 5, HIDDEN, generator=torch.Generator().manual_seed(2))
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    with torch.no_grad():
        got = v0.adapter(hidden, mask)
    np.testing.assert_allclose(got.numpy(), reference_features(parts["adapter"], hidden, mask, HEADS), atol=1e-6)
    with pytest.raises(ValueError, match="without an encoder"):
        v0.encode(TEXTS)


def test_demo_path_is_the_last_token_hidden_state(official_path, encoder_dir):
    """Demo path (V0.from_pretrained): features = the backbone's last hidden state at the last real token; the
    adapter is dropped (all its keys reported)."""
    v0 = load_official_checkpoint(official_path, encoder=str(encoder_dir), path_kind="demo", batch_size=len(TEXTS))
    assert v0.adapter is None and len(v0.dropped) == len(ADAPTER_SHAPES)
    got = v0.encode(TEXTS)
    hidden, mask = reference_hidden(encoder_dir, TEXTS)
    assert got.shape == (len(TEXTS), HIDDEN) and (mask[:, 0] == 0).any()  # left-padded batch
    np.testing.assert_array_equal(got, hidden[:, -1].numpy())
    alone = np.stack([reference_hidden(encoder_dir, [t])[0][0, -1].numpy() for t in TEXTS])  # no padding at all
    np.testing.assert_allclose(got, alone, atol=1e-5)


@pytest.mark.parametrize(
    ("field", "value"),
    [("pooling_strategy", "last_token"), ("reduce_method", "avg_pool"), ("num_queries", K + 1), ("embed_dim", 12)],
)
def test_args_that_the_loader_cannot_reproduce_are_named(tmp_path, parts, field, value):
    """A checkpoint trained with another pooling, reduction or size is refused, naming the args field."""
    path = write_checkpoint(tmp_path / "x.pt", parts, args=ARGS | {field: value})
    with pytest.raises(ValueError, match=f"args {field}="):
        load_official_checkpoint(path, encoder=None)


def test_missing_args_field_is_named_in_strict_mode(tmp_path, parts):
    """Strict mode needs num_heads (not inferable from tensors); non-strict falls back to V0's 3."""
    path = write_checkpoint(tmp_path / "x.pt", parts, args={k: v for k, v in ARGS.items() if k != "num_heads"})
    with pytest.raises(ValueError, match="num_heads"):
        load_official_checkpoint(path, encoder=None)
    assert load_official_checkpoint(path, encoder=None, strict=False).config.num_heads == 3


def test_unexpected_and_missing_keys_are_listed(tmp_path, parts):
    """Strict: unknown keys and missing adapter keys are listed by name; non-strict ignores the unknown ones."""
    extra = {"adapter_layer.queries": torch.zeros(1, K, D), "tabpfn.encoder.weight": torch.zeros(2)}
    path = write_checkpoint(tmp_path / "extra.pt", parts, extra=extra)
    with pytest.raises(ValueError, match=r"unexpected keys \['adapter_layer.queries', 'tabpfn.encoder.weight'\]"):
        load_official_checkpoint(path, encoder=None)
    assert load_official_checkpoint(path, encoder=None, strict=False).adapter is not None
    path = write_checkpoint(tmp_path / "missing.pt", parts, drop=["adapter_layer.mha.in_proj_weight"])
    with pytest.raises(ValueError, match=r"missing keys \['adapter_layer.mha.in_proj_weight'\]"):
        load_official_checkpoint(path, encoder=None, strict=False)  # the paper path cannot run without it


def test_backbone_mismatch_is_refused_or_loaded_on_request(tmp_path, parts, encoder_dir, official_path):
    """A backbone that differs from the local encoder is a ValueError naming the tensor; backbone='load' runs the
    file's weights instead, and a missing backbone tensor is listed."""
    backbone = dict(parts["backbone"])
    backbone["norm.weight"] = backbone["norm.weight"] + 0.5
    path = write_checkpoint(tmp_path / "b.pt", parts | {"backbone": backbone})
    with pytest.raises(ValueError, match=r"values \['norm.weight \(max \|Δ\| 0.5\)'\]"):
        load_official_checkpoint(path, encoder=str(encoder_dir))
    v0 = load_official_checkpoint(path, encoder=str(encoder_dir), backbone="load")
    _, model = v0.stack.encoder.load()
    assert v0.backbone == "loaded" and torch.equal(model.norm.weight, backbone["norm.weight"])
    bf16 = load_official_checkpoint(official_path, encoder=str(encoder_dir), dtype="bfloat16")
    assert bf16.backbone == "matched"  # float32 file vs bfloat16 encoder: compared after rounding to bfloat16
    path = write_checkpoint(tmp_path / "m.pt", parts, drop=["backbone.layers.1.mlp.up_proj.weight"])
    with pytest.raises(ValueError, match=r"missing \['layers.1.mlp.up_proj.weight'\]"):
        load_official_checkpoint(path, encoder=str(encoder_dir))


def test_checkpoint_needing_arbitrary_unpickling_is_refused(tmp_path, parts):
    """args holding an object outside the allow-list is refused (weights-only), never executed."""
    path = write_checkpoint(tmp_path / "evil.pt", parts, args=ARGS | {"hook": types.SimpleNamespace(x=1)})
    with pytest.raises(ValueError, match="weights-only"):
        load_official_checkpoint(path, encoder=None)


def test_backend_and_provider_read_the_official_file(official_path, encoder_dir):
    """load_adapter and the v0_adapter backend accept the official file; the v0 provider runs on it (both paths)."""
    v0 = load_official_checkpoint(official_path, encoder=str(encoder_dir), batch_size=3)
    hidden, mask = reference_hidden(encoder_dir, TEXTS[:3])
    with torch.no_grad():
        torch.testing.assert_close(load_adapter(official_path)(hidden, mask), v0.adapter(hidden, mask))
    backend = V0AdapterBackend(adapter=str(official_path), encoder=str(encoder_dir), batch_size=3)
    np.testing.assert_array_equal(backend.encode(TEXTS), v0.encode(TEXTS))
    assert V0AdapterBackend(adapter="v0.pt", encoder="e", path_kind="demo").id.endswith("-demo")
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(list("abc123+="), 6)) for _ in range(40)]
    scores = np.where(np.array(["1" in t for t in texts]), 0.5, -0.5)
    for path_kind in ("paper", "demo"):
        prov = make_provider(
            "v0",
            backend="v0_adapter",
            backend_options={"adapter": str(official_path), "encoder": str(encoder_dir), "path_kind": path_kind},
            head="logistic_hard",
            cache_dir=False,
            min_context=16,
        )
        ids = [f"p{i}" for i in range(40)]
        prov.update(ids[:32], texts[:32], scores[:32], np.full(32, 8.0))
        assert np.all(np.abs(prov.predict(ids[32:], texts[32:]).mean) <= 1)


def test_tabpfn_head_without_weights_names_the_file_and_the_command(tmp_path):
    """No TabPFN checkpoint here: the head says which file is missing and how to fetch it."""
    x, y = np.zeros((4, 3)), np.array([1.0, -1.0, 0.5, -0.5])
    for checkpoint in (None, str(tmp_path)):
        with pytest.raises(ValueError, match=f"{TABPFN_CHECKPOINT}.*huggingface-cli download"):
            V0TabPFNHead(checkpoint=checkpoint).fit(x, y)


class FakeTabPFN:
    """Records how V0TabPFNHead drives TabPFNClassifier; logits (−x₀, x₀) make p = σ(2x₀), 2p − 1 = tanh(x₀)."""

    made: list = []

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        FakeTabPFN.made.append(self)

    def fit(self, x, y):
        self.x, self.y = x, y
        return self

    def forward(self, x, *, use_inference_mode, return_logits):
        assert use_inference_mode and return_logits and x.dtype == torch.float32
        return torch.stack([-x[:, 0], x[:, 0]], dim=1)


def test_tabpfn_head_is_configured_as_v0(tmp_path, monkeypatch):
    """V0's settings reach TabPFN (4 estimators, float32, differentiable_input), labels are 1[s ≥ 0], the logits
    are softmaxed and p maps to E[s] = 2p − 1 (isotonic option: p itself, for the provider's map)."""
    monkeypatch.setitem(sys.modules, "tabpfn", types.SimpleNamespace(TabPFNClassifier=FakeTabPFN))
    ckpt = tmp_path / TABPFN_CHECKPOINT
    torch.save({"state_dict": {}, "config": {}}, ckpt)  # weights-only loadable: v05 checks it before TabPFN reads it
    x = np.array([[0.3, 1.0], [-0.2, 2.0], [1.5, 0.0]])
    y = np.array([0.0, -0.25, 1.0])  # s = 0 counts as a pass: (0 + 1)/2 ≥ 0.5
    head = V0TabPFNHead(checkpoint=str(tmp_path)).fit(x, y)
    made = FakeTabPFN.made[-1]
    assert made.kwargs["n_estimators"] == 4 and made.kwargs["inference_precision"] is torch.float32
    assert made.kwargs["differentiable_input"] is True and made.kwargs["model_path"] == str(ckpt)
    assert made.x.dtype == torch.float32 and made.y.tolist() == [1, 0, 1]
    assert head.output == "score"
    np.testing.assert_allclose(head.predict(x), np.tanh(x[:, 0]), atol=1e-6)
    iso = V0TabPFNHead(checkpoint=str(ckpt), calibration="isotonic").fit(x, y)
    assert iso.output == "prob_nonneg"
    np.testing.assert_allclose(iso.predict(x), 1 / (1 + np.exp(-2 * x[:, 0])), atol=1e-6)
    assert V0TabPFNHead(checkpoint=str(ckpt)).fit(x, np.ones(3)).predict(x).tolist() == [1.0, 1.0, 1.0]


REAL = os.environ.get("V05_V0_CHECKPOINT"), os.environ.get("V05_V0_ENCODER")
needs_real = pytest.mark.skipif(not all(REAL), reason="set V05_V0_CHECKPOINT and V05_V0_ENCODER (real V0 files)")


def _real_prompts(n_context, n_target):
    """Context and target prompts (with ±1 scores) of one V0 policy snapshot from the bundled data."""
    from v05.datasets import load_v0

    ds = load_v0()
    snap = np.bincount(ds.context.snapshot).argmax()
    rows = ds.context.select(ds.context.snapshot == snap)
    texts, scores = ds.texts(rows.prompt_id), np.asarray(rows.score)
    return texts[:n_context], scores[:n_context], texts[n_context : n_context + n_target]


@needs_real
def test_real_checkpoint_loads_strictly_and_matches_the_reference():
    """The released file loads strictly (backbone equal to Qwen3-Embedding-0.6B) and its paper-path features match
    the reference forward; the demo path gives 1,024-d features."""
    device = os.environ.get("V05_V0_DEVICE", "cpu")
    v0 = load_official_checkpoint(REAL[0], encoder=REAL[1], device=device)
    assert v0.backbone == "matched" and v0.config.n_features == 1008 and v0.config.num_heads == 3
    _, _, texts = _real_prompts(0, 8)
    got = v0.encode(texts)
    hidden, mask = v0.stack.encoder.hidden_states(texts)
    state = {k: v.cpu() for k, v in v0.adapter.state_dict().items()}
    ref = reference_features(state, hidden.cpu(), mask.cpu(), 3).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    demo = load_official_checkpoint(REAL[0], encoder=REAL[1], device=device, path_kind="demo")
    assert demo.encode(texts).shape == (8, 1024)


@needs_real
def test_real_checkpoint_reproduces_the_released_v0_code():
    """Against V0's own code (V05_V0_REPO, with tabpfn 6.2.0): paper features equal QwenEmbeddingModel's with the
    adapter loaded strictly, and V0.predict (the demo path + TabPFN) equals ours. Their backbone is kept in float32
    as under V0's pinned transformers 4.55 (transformers 5 would load Qwen3-Embedding in bfloat16)."""
    repo, tabpfn_ckpt = os.environ.get("V05_V0_REPO"), os.environ.get("V05_TABPFN_CHECKPOINT")
    if not (repo and tabpfn_ckpt):
        pytest.skip("set V05_V0_REPO and V05_TABPFN_CHECKPOINT")
    pytest.importorskip("tabpfn")
    sys.path.insert(0, repo)
    from v0_core.models.v0 import V0, QwenEmbeddingModel

    device = os.environ.get("V05_V0_DEVICE", "cpu")
    ctx_texts, ctx_scores, targets = _real_prompts(256, 16)
    theirs = QwenEmbeddingModel(
        REAL[1],
        pooling_type="dynamic_query",
        num_queries=168,
        embed_dim=6,
        reduce_method="none",
        num_heads=3,
        generator_dropout_rate=0.0,
        device=device,
    )
    state = torch.load(REAL[0], map_location=device, weights_only=True)["model_state_dict"]
    state = {k.removeprefix("module."): v for k, v in state.items()}
    theirs.backbone.float()
    theirs.load_state_dict(state, strict=True)
    theirs.eval()
    with torch.no_grad():
        ref = theirs(targets, batch_size=32).float().cpu().numpy()
    ours = load_official_checkpoint(REAL[0], encoder=REAL[1], device=device)
    np.testing.assert_allclose(ours.encode(targets), ref, rtol=1e-5, atol=1e-5)
    model = V0.from_pretrained(REAL[0], REAL[1], tabpfn_ckpt, device=device)
    model.embedding_model.backbone.float()
    model.embedding_model.load_state_dict(state, strict=False)  # what demo.py does, now into float32
    ref_p = np.asarray(model.predict(ctx_texts, (ctx_scores >= 0).astype(float).tolist(), targets))
    demo = load_official_checkpoint(REAL[0], encoder=REAL[1], device=device, path_kind="demo")
    head = V0TabPFNHead(checkpoint=tabpfn_ckpt, device=device).fit(demo.encode(ctx_texts), ctx_scores)
    np.testing.assert_allclose(head.predict_pass_rate(demo.encode(targets)), ref_p, atol=1e-4)
