import string

import pytest
import torch
from transformers import AutoTokenizer

from v05.train.policy import PolicyConfig, build_char_tokenizer, load_policy, save_policy, set_cpu_threads

torch.set_num_threads(1)

TEXT = "".join(c for c in string.printable if c not in "\t\r\x0b\x0c")  # every char of the vocabulary


def test_char_tokenizer_round_trip_every_char():
    """Each printable char is one token, <bos> is prepended, and decoding without specials gives the text back."""
    tok = build_char_tokenizer()
    ids = tok(TEXT)["input_ids"]
    assert len(tok) == 100 and len(TEXT) == 96
    assert ids[0] == tok.bos_token_id and len(ids) == len(TEXT) + 1
    assert tok.decode(ids, skip_special_tokens=True) == TEXT
    assert tok("é")["input_ids"] == [tok.bos_token_id, tok.unk_token_id]
    assert (tok.pad_token, tok.bos_token, tok.eos_token, tok.unk_token) == ("<pad>", "<bos>", "<eos>", "<unk>")
    assert tok.padding_side == "left"


def test_char_tokenizer_keeps_bos_after_save_and_autotokenizer_reload(tmp_path):
    """The TemplateProcessing post-processor is stored in tokenizer.json, so a reloaded tokenizer still adds <bos>."""
    tok = build_char_tokenizer()
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    for text in ("12+3=", "a b\n", TEXT):
        assert again(text)["input_ids"] == tok(text)["input_ids"]
    assert again.decode(again("x=1")["input_ids"], skip_special_tokens=True) == "x=1"
    batch = again(["1", "123"], padding=True)
    assert batch["input_ids"][0] == [0, 0, 1, 5]  # left padding: <pad> <pad> <bos> "1"


def test_tiny_policy_has_537728_parameters():
    """Defaults (vocab 100, h128, 2 layers, inter 512, tied): 100·128 + 2·(4·128² + 3·128·512 + 2·128) + 128."""
    model, _ = load_policy(PolicyConfig())
    assert sum(p.numel() for p in model.parameters()) == 100 * 128 + 2 * (4 * 128**2 + 3 * 128 * 512 + 2 * 128) + 128
    assert sum(p.numel() for p in model.parameters()) == 537_728
    assert model.dtype == torch.float32 and model.device.type == "cpu" and model.training


def test_tiny_policy_seed_is_private_and_deterministic():
    """The weight seed reproduces the weights and leaves the global torch RNG where it was."""
    before = torch.get_rng_state()
    a, _ = load_policy(PolicyConfig(seed=3))
    assert torch.equal(torch.get_rng_state(), before)
    b, _ = load_policy(PolicyConfig(seed=3))
    c, _ = load_policy(PolicyConfig(seed=4))
    w = "model.embed_tokens.weight"
    assert torch.equal(a.state_dict()[w], b.state_dict()[w])
    assert not torch.equal(a.state_dict()[w], c.state_dict()[w])


def test_save_and_reload_policy_gives_the_same_model(tmp_path):
    """save_policy → load_policy(name_or_path=dir) restores weights, logits and prompt encoding."""
    model, tok = load_policy(PolicyConfig(seed=1))
    save_policy(model, tok, tmp_path / "ckpt")
    again, tok2 = load_policy(PolicyConfig(name_or_path=str(tmp_path / "ckpt")))
    assert (tmp_path / "ckpt" / "model.safetensors").exists()
    ids = torch.tensor([tok("12+34=")["input_ids"]])
    assert tok2("12+34=")["input_ids"] == ids[0].tolist()
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, again(ids).logits)
    assert tok2.padding_side == "left" and tok2.pad_token_id == tok.pad_token_id


def test_tokenizer_without_pad_gets_eos_as_pad(tmp_path):
    """A checkpoint whose tokenizer has no pad token is loaded with pad = eos."""
    model, tok = load_policy(PolicyConfig())
    tok.pad_token = None
    save_policy(model, tok, tmp_path)
    _, again = load_policy(PolicyConfig(name_or_path=str(tmp_path)))
    assert again.pad_token_id == again.eos_token_id


@pytest.mark.parametrize("name", ["/nonexistent/v05-policy", "./no-such-dir"])
def test_missing_local_path_is_a_one_line_value_error(name):
    """A missing local directory fails fast with a one-line ValueError naming the field."""
    with pytest.raises(ValueError, match="name_or_path") as err:
        load_policy(PolicyConfig(name_or_path=name))
    assert "\n" not in str(err.value)


def test_file_instead_of_directory_is_rejected(tmp_path):
    """Pointing name_or_path at a file (e.g. model.safetensors) says to pass the directory."""
    f = tmp_path / "model.safetensors"
    f.write_bytes(b"")
    with pytest.raises(ValueError, match="directory"):
        load_policy(PolicyConfig(name_or_path=str(f)))


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"name_or_path": ""}, "name_or_path"),
        ({"hidden_size": 130}, "hidden_size"),
        ({"num_layers": 0}, "num_layers"),
        ({"num_heads": 1.5}, "num_heads"),
        ({"intermediate_size": -1}, "intermediate_size"),
        ({"max_position_embeddings": 0}, "max_position_embeddings"),
        ({"dtype": "float8"}, "dtype"),
        ({"device": "not-a-device"}, "device"),
        ({"seed": -1}, "seed"),
    ],
)
def test_bad_policy_config_names_the_field(kwargs, field):
    """Invalid fields raise ValueError naming the field."""
    with pytest.raises(ValueError, match=field):
        PolicyConfig(**kwargs)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only error")
def test_cuda_device_without_cuda_is_a_value_error():
    """Asking for CUDA on a CPU-only machine says so instead of failing inside torch."""
    with pytest.raises(ValueError, match="CUDA is not available"):
        load_policy(PolicyConfig(device="cuda"))


def test_set_cpu_threads_is_a_knob():
    """set_cpu_threads(n) sets torch's intra-op threads; n < 1 is rejected."""
    before = torch.get_num_threads()
    try:
        set_cpu_threads(1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    with pytest.raises(ValueError, match="n=0"):
        set_cpu_threads(0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_auto_device_and_dtype_on_cuda():
    """On CUDA, device='auto' and dtype='auto' give a bfloat16 model on the GPU."""
    model, _ = load_policy(PolicyConfig())
    assert model.device.type == "cuda" and model.dtype == torch.bfloat16


def test_set_cpu_threads_also_limits_the_blas_pools():
    """numpy/SciPy BLAS pools get the same limit as torch (2 BLAS threads beside the torch thread stalled steps)."""
    from threadpoolctl import threadpool_info

    from v05.train.policy import set_cpu_threads

    set_cpu_threads(1)
    assert torch.get_num_threads() == 1
    assert all(p["num_threads"] == 1 for p in threadpool_info() if p["user_api"] == "blas")
