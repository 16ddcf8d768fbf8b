"""Safe loading (issue 15, item 5): no user-supplied file is ever unpickled, YAML is parsed safely, config paths exist.

A static scan of ``src/v05`` (with ``ast``) refuses the unsafe loading calls; crafted malicious files (a pickle whose
``__reduce__`` writes a marker file) given to every v05 loader are refused with a ``ValueError`` and the marker is
never written; YAML with ``!!python/...`` tags is refused; local paths in a config must exist when it is checked.
"""

from __future__ import annotations

import ast
import json
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from v05.datasets.v0 import load_v0
from v05.grid.spec import load_grid
from v05.priors.embeddings import Embedder
from v05.priors.encoders import HFEncoderBackend, SentenceTransformerBackend
from v05.priors.head_registry import make_head
from v05.priors.heads import check_tabpfn_checkpoint
from v05.priors.v0_checkpoint import load_weights_file, read_state_dict
from v05.priors.v0_official import V0AdapterBackend, load_adapter, load_official_checkpoint
from v05.report.runs import load_run
from v05.tasks.math_file import MathFileTask
from v05.train.checkpoint import restore_state
from v05.train.config import load_config, to_yaml
from v05.train.loop import train
from v05.train.policy import PolicyConfig, build_char_tokenizer, load_policy
from v05.train.rundir import load_checkpoint

SRC = Path(__file__).resolve().parents[1] / "src" / "v05"

# -- the static scan ------------------------------------------------------------------------------------------------
UNPICKLERS = [f"{m}.{f}" for m in ("pickle", "_pickle", "cPickle") for f in ("load", "loads", "Unpickler")]
BANNED_CALLS = {
    **{name: f"{name} unpickles" for name in UNPICKLERS},
    **{name: f"{name} unpickles" for name in ("joblib.load", "pandas.read_pickle", "shelve.open")},
    **{name: f"{name} runs code objects" for name in ("marshal.load", "marshal.loads")},
    **{f"yaml.{f}": f"yaml.{f} constructs arbitrary objects" for f in ("unsafe_load", "unsafe_load_all")},
    **{f"yaml.{f}": f"yaml.{f} is not the safe loader" for f in ("full_load", "full_load_all")},
    **{name: f"{name}() runs code" for name in ("eval", "exec", "builtins.eval", "builtins.exec")},
}
SAFE_YAML_LOADERS = {"yaml.SafeLoader", "yaml.CSafeLoader", "yaml.BaseLoader", "yaml.CBaseLoader"}
TORCH_LOADS = {"torch.load", "torch.serialization.load"}


def _aliases(tree: ast.AST) -> dict[str, str]:
    """Local name → dotted origin for every import (``np`` → ``numpy``, ``load`` → ``torch.load``)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                names[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def _dotted(node: ast.AST, names: dict[str, str]) -> str | None:
    """``np.load`` → ``numpy.load`` (through the imports); None for anything but a name or an attribute chain."""
    if isinstance(node, ast.Name):
        return names.get(node.id, node.id)
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, names)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _is_const(node: ast.expr | None, value: object) -> bool:
    return isinstance(node, ast.Constant) and node.value is value


def _problem(call: ast.Call, name: str, names: dict[str, str]) -> str | None:
    """Why this call loads unsafely, or None."""
    if name in BANNED_CALLS:
        return BANNED_CALLS[name]
    if name.split(".")[0] in ("dill", "cloudpickle"):
        return f"{name} unpickles"
    if name in TORCH_LOADS and not _is_const(_keyword(call, "weights_only"), True):
        return f"{name} without weights_only=True"
    if name == "numpy.load" and _keyword(call, "allow_pickle") is not None:
        if not _is_const(_keyword(call, "allow_pickle"), False):
            return "numpy.load with allow_pickle"
    if name in ("yaml.load", "yaml.load_all"):
        loader = _keyword(call, "Loader") or (call.args[1] if len(call.args) > 1 else None)
        if loader is None or _dotted(loader, names) not in SAFE_YAML_LOADERS:
            return f"{name} without Loader=yaml.SafeLoader/CSafeLoader"
    return None


def scan_source(source: str, filename: str) -> list[str]:
    """``file:line: why`` for every unsafe loading call (and every dill/cloudpickle import) in ``source``."""
    tree = ast.parse(source, filename=filename)
    names = _aliases(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if any(m.split(".")[0] in ("dill", "cloudpickle") for m in modules):
                found.append(f"{filename}:{node.lineno}: imports dill/cloudpickle")
        if isinstance(node, ast.Call):
            name = _dotted(node.func, names)
            why = None if name is None else _problem(node, name, names)
            if why is not None:
                found.append(f"{filename}:{node.lineno}: {why}")
    return found


PLANTED = """\
import pickle, yaml, torch, joblib
import numpy as np
from torch import load as tload
from pickle import loads
import dill
model.eval()
torch.load(f, weights_only=True)
np.load(f)
np.load(f, allow_pickle=False)
yaml.safe_load(s)
yaml.load(s, Loader=yaml.SafeLoader)
yaml.load(s, yaml.CSafeLoader)
pickle.load(f)
loads(b)
pickle.Unpickler(f).load()
torch.load(f)
tload(f, weights_only=False)
np.load(f, allow_pickle=True)
yaml.load(s)
yaml.load(s, Loader=yaml.Loader)
yaml.unsafe_load(s)
eval("1")
exec("x = 1")
joblib.load(f)
"""


def test_the_scanner_catches_planted_unsafe_calls_and_passes_safe_ones():
    """Each unsafe call in a planted source is reported at its line; the safe forms (weights_only=True, safe_load,
    SafeLoader, np.load without pickles, a module's .eval()) are not."""
    lines = sorted(int(hit.split(":")[1]) for hit in scan_source(PLANTED, "planted.py"))
    # 5: import dill; 13-24: the unsafe calls (15: Unpickler(f) and its .load() are one line, counted once)
    assert lines == [5, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24]
    assert scan_source(PLANTED, "planted.py")[0].startswith("planted.py:5: ")


def test_src_has_no_unsafe_loading_calls():
    """No module under src/v05 unpickles, uses torch.load without weights_only=True, an unsafe YAML loader,
    np.load(allow_pickle=True), joblib, dill, eval or exec."""
    files = sorted(SRC.rglob("*.py"))
    assert len(files) > 50  # the scan sees the package, not an empty folder
    found = [hit for f in files for hit in scan_source(f.read_text(encoding="utf-8"), str(f.relative_to(SRC.parent)))]
    assert not found, "unsafe loading calls:\n" + "\n".join(found)


# -- crafted malicious files -----------------------------------------------------------------------------------------
def _write_marker(path: str) -> None:
    """What the payload runs when it is unpickled."""
    Path(path).write_text("pwned")


@dataclass
class Payload:
    """Unpickling this object calls ``_write_marker(marker)``: if the marker exists, a loader ran code."""

    marker: Path

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return _write_marker, (str(self.marker),)


@dataclass
class Evil:
    """Writers of disguised malicious files, all pointing at one marker."""

    marker: Path

    def torch_file(self, path: Path) -> Path:
        """A torch.save zip archive whose state dict holds the payload."""
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"state_dict": {"weight": Payload(self.marker)}}, path)
        return path

    def pickle_file(self, path: Path, protocol: int = 4) -> Path:
        """A bare pickle (protocol 0 is ASCII text, so it also gets past UTF-8 decoding)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(pickle.dumps({"weight": Payload(self.marker)}, protocol=protocol))
        return path


@pytest.fixture
def evil(tmp_path: Path) -> Evil:
    return Evil(tmp_path / "MARKER")


def _refused(evil: Evil, call: object, match: str | None = None, *, one_line: bool = True) -> str:
    """Run ``call``; it must raise a ValueError (one line, matching ``match``) and leave no marker."""
    with pytest.raises(ValueError, match=match) as err:
        call()  # type: ignore[operator]
    assert not evil.marker.exists(), "the loader executed the payload"
    assert not one_line or "\n" not in str(err.value)
    return str(err.value)


def test_the_payload_is_live(evil):
    """Control: a plain unpickle of the crafted bytes does run the payload (so the refusals below mean something)."""
    pickle.loads(evil.pickle_file(evil.marker.parent / "x.pkl").read_bytes())  # the unsafe call the library avoids
    assert evil.marker.read_text() == "pwned"


@pytest.mark.parametrize("name", ["adapter.pt", "adapter.bin", "adapter.ckpt", "adapter.pth"])
def test_value_model_checkpoint_with_code_is_refused(evil, tmp_path, name):
    """V0 adapter / official checkpoints (torch zip or bare pickle) that need code are refused by every entry point."""
    for i, path in enumerate([evil.torch_file(tmp_path / "zip" / name), evil.pickle_file(tmp_path / "raw" / name)]):
        msg = _refused(evil, lambda p=path: load_weights_file(p), "weights-only")
        assert str(path) in msg and "two options" not in msg, i  # torch's advice to load it unsafely is not relayed
        _refused(evil, lambda p=path: load_adapter(p))
        _refused(evil, lambda p=path: read_state_dict(p))
        _refused(evil, lambda p=path: load_official_checkpoint(p, encoder=None))
        _refused(evil, lambda p=path: V0AdapterBackend(adapter=str(p), encoder=str(tmp_path)).load())


def test_pickle_disguised_as_safetensors_is_refused(evil, tmp_path):
    """A pickle named .safetensors goes to the safetensors parser only, which refuses it."""
    path = evil.pickle_file(tmp_path / "adapter.safetensors")
    _refused(evil, lambda: load_weights_file(path), "not a safetensors file")
    _refused(evil, lambda: load_adapter(path))


def test_tabpfn_checkpoint_with_code_is_refused_before_tabpfn_reads_it(evil, tmp_path):
    """TabPFN calls torch.load(weights_only=None) (a full unpickle under TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD): v05
    checks the file weights-only first, in both TabPFN heads, even with that variable set."""
    path = evil.torch_file(tmp_path / "tabpfn-v2.5-classifier-v2.5_default.ckpt")
    x, y = np.eye(3), np.array([-1.0, 1.0, 1.0])
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
        _refused(evil, lambda: check_tabpfn_checkpoint(str(path)), "weights-only")
        _refused(evil, lambda: check_tabpfn_checkpoint(str(tmp_path)), "weights-only")  # the directory form
        _refused(evil, lambda: make_head("tabpfn", checkpoint=str(path)).fit(x, y))
        _refused(evil, lambda: make_head("v0_tabpfn", checkpoint=str(path)).fit(x, y))


def _hf_dir(path: Path, config: transformers.PretrainedConfig, evil: Evil) -> Path:
    """A Hugging Face folder (config + tokenizer) whose only weights are a malicious pytorch_model.bin."""
    tokenizer = build_char_tokenizer()
    config.vocab_size = len(tokenizer)
    config.save_pretrained(path)
    tokenizer.save_pretrained(path)
    evil.torch_file(path / "pytorch_model.bin")
    return path


def test_policy_folder_with_malicious_bin_is_refused(evil, tmp_path):
    """A policy folder with only pytorch_model.bin is read weights-only: the payload is refused, naming the field."""
    sizes = {"num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2}
    config = transformers.LlamaConfig(hidden_size=16, intermediate_size=32, max_position_embeddings=32, **sizes)
    folder = _hf_dir(tmp_path / "policy", config, evil)
    _refused(evil, lambda: load_policy(PolicyConfig(name_or_path=str(folder))), "name_or_path.*could not be loaded")


def test_encoder_folders_with_malicious_bin_are_refused(evil, tmp_path):
    """The HF encoder reads safetensors only; sentence-transformers reads a .bin weights-only: both refuse."""
    config = transformers.BertConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    folder = _hf_dir(tmp_path / "encoder", config, evil)
    _refused(evil, lambda: HFEncoderBackend(path=str(folder)).load(), "HF encoder")
    _refused(evil, lambda: SentenceTransformerBackend(model=str(folder))._load(), "sentence-transformers")


@dataclass
class _Backend:
    """A cacheable embedding backend with constant rows."""

    id: str = "fake"
    truncated: int = 0

    def encode(self, texts: list[str]) -> np.ndarray:
        return np.ones((len(texts), 2))


def test_malicious_embedding_cache_shard_is_discarded(evil, tmp_path):
    """A pickle planted as an embedding-cache shard is parsed by safetensors only: it is deleted and rebuilt."""
    shard = evil.pickle_file(tmp_path / "cache" / "fake" / "planted.safetensors")
    embedder = Embedder(backend=_Backend(), cache_dir=tmp_path / "cache")
    assert embedder.embed(["a"]).shape == (1, 2)
    assert embedder.rebuilt == 1 and not shard.exists() and not evil.marker.exists()


@pytest.mark.parametrize("protocol", [0, 4])
@pytest.mark.parametrize("target", ["prompts.json", "context.jsonl", "train.jsonl"])
def test_v0_data_file_that_is_a_pickle_is_refused(evil, tmp_path, target, protocol):
    """A V0 directory with one of its files replaced by a pickle (binary or ASCII protocol) is refused as not JSON."""
    root = tmp_path / "v0"
    root.mkdir()
    row = {"id": 1, "score": 0.5, "model": "m", "step": 0, "dataset": "d"}
    (root / "prompts.json").write_text(json.dumps({"d_1": "question"}))
    (root / "context.jsonl").write_text(json.dumps(row) + "\n")
    (root / "train.jsonl").write_text(json.dumps(row) + "\n")
    load_v0(root)  # the honest directory loads
    evil.pickle_file(root / target, protocol)
    assert target in _refused(evil, lambda: load_v0(root))


@pytest.mark.parametrize("protocol", [0, 4])
@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".parquet"])
def test_math_file_that_is_a_pickle_is_refused(evil, tmp_path, suffix, protocol):
    """The math_file task reads JSON lines or Parquet only: a pickle with either extension is refused."""
    path = evil.pickle_file(tmp_path / f"problems{suffix}", protocol)
    assert str(path) in _refused(evil, lambda: MathFileTask(path))


# -- training checkpoints (resume) -----------------------------------------------------------------------------------
def _checkpoint(folder: Path) -> Path:
    """An honest checkpoint folder layout (state.json, tensors.pt, policy/model.safetensors)."""
    (folder / "policy").mkdir(parents=True)
    (folder / "state.json").write_text("{}")
    torch.save({"torch_rng": torch.get_rng_state()}, folder / "tensors.pt")
    return folder


def test_training_checkpoint_with_code_is_refused(evil, tmp_path):
    """tensors.pt (zip or bare pickle) that needs code, a pickled state.json or a pickled model.safetensors is
    refused by load_checkpoint / restore_state."""
    ckpt = _checkpoint(tmp_path / "step_000001")
    assert load_checkpoint(ckpt)[1] == {}
    for write in (evil.torch_file, evil.pickle_file):
        write(ckpt / "tensors.pt")
        _refused(evil, lambda: load_checkpoint(ckpt), "tensors.pt: not a weights-only torch checkpoint")
    ckpt = _checkpoint(tmp_path / "step_000002")
    evil.pickle_file(ckpt / "state.json")
    _refused(evil, lambda: load_checkpoint(ckpt), "state.json")
    ckpt = _checkpoint(tmp_path / "step_000003")
    evil.pickle_file(ckpt / "policy" / "model.safetensors")
    model = torch.nn.Linear(2, 2)
    _refused(evil, lambda: restore_state(ckpt, {}, {}, model, None, None, None), "model.safetensors")


def test_resume_from_a_malicious_checkpoint_is_refused(evil, tmp_path):
    """``train(resume=True)`` on a run whose latest checkpoint holds a payload stops with a ValueError."""
    tiny = ["task.options={n_train: 8, n_eval: 4, n_val: 4, max_digits: 1}", "train.steps=1", "train.batch_size=2"]
    cfg = load_config(None, [*tiny, "eval.size=2", "run.progress=false", "run.tensorboard=false"])
    run = tmp_path / "run"
    ckpt = _checkpoint(run / "checkpoints" / "step_000001")
    (run / "checkpoints" / "latest").write_text(ckpt.name)
    (run / "config.yaml").write_text(to_yaml(cfg))
    evil.torch_file(ckpt / "tensors.pt")
    _refused(evil, lambda: train(cfg, run, resume=True), "tensors.pt")


# -- YAML ------------------------------------------------------------------------------------------------------------
TAGS = [
    '!!python/object/apply:os.system ["touch {marker}"]',
    '!!python/object/apply:pathlib.Path.touch [!!python/object/apply:pathlib.Path ["{marker}"]]',
    "!!python/name:os.system",
    '!!python/object/new:os.system ["touch {marker}"]',
]


@pytest.mark.parametrize("tag", TAGS)
def test_yaml_with_python_tags_is_refused(evil, tmp_path, tag):
    """A config, a grid file or a run's config.yaml with a !!python tag (as a value or the whole document) is refused
    by the safe loader with a ValueError; the command never runs."""
    value = tag.format(marker=evil.marker)
    for i, text in enumerate([f"name: {value}\n", f"{value}\n", f"train:\n  steps: {value}\n"]):
        path = tmp_path / f"config{i}.yaml"
        path.write_text(text)
        assert str(path) in _refused(evil, lambda p=path: load_config(str(p)), "YAML")
        _refused(evil, lambda p=path: load_grid(p), "YAML")
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(f"name: {value}\n")
    (run / "metrics.jsonl").write_text('{"step": 0}\n')
    _refused(evil, lambda: load_run(run), "YAML")


def test_config_that_is_a_pickle_or_a_list_is_refused(evil, tmp_path):
    """A pickle named .yaml and a YAML list are refused as configs, each with a one-line ValueError."""
    _refused(evil, lambda: load_config(str(evil.pickle_file(tmp_path / "c.yaml"))), "not a safe YAML mapping")
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    _refused(evil, lambda: load_config(str(tmp_path / "list.yaml")), "must be a mapping")


# -- paths in configs ------------------------------------------------------------------------------------------------
MISSING = "/nonexistent/v05-safe-loading"
MATH = ["task.name=math_file"]
V0 = ["prior.name=v0"]


@pytest.mark.parametrize(
    ("overrides", "field_name"),
    [
        ([f"policy.name_or_path={MISSING}"], "policy.name_or_path"),
        (["policy.name_or_path=./no-such-policy"], "policy.name_or_path"),
        (["policy.name_or_path=../no-such-policy"], "policy.name_or_path"),
        (["policy.name_or_path=~/no-such-v05-policy"], "policy.name_or_path"),
        ([*MATH, f"task.options={{path: {MISSING}.jsonl}}"], "task.options.path"),
        ([*MATH, f"task.options={{path: ./x.jsonl, eval_path: {MISSING}.jsonl}}"], "task.options.eval_path"),
        (
            [*V0, f"prior.options={{backend: hf, backend_options: {{path: {MISSING}}}}}"],
            "prior.options.backend_options.path",
        ),
        (
            [*V0, f"prior.options={{backend: minilm, backend_options: {{model: {MISSING}}}}}"],
            "prior.options.backend_options.model",
        ),
        (
            [*V0, f"prior.options={{backend: v0_adapter, backend_options: {{adapter: {MISSING}.pt, encoder: /}}}}"],
            "prior.options.backend_options.adapter",
        ),
        (
            [
                *V0,
                f"prior.options={{backend: v0_adapter, backend_options: {{adapter: ./x.jsonl, encoder: {MISSING}}}}}",
            ],
            "prior.options.backend_options.encoder",
        ),
        (
            [*V0, "prior.options={backend: v0_adapter, backend_options: {adapter: /, encoder: /}}"],
            "prior.options.backend_options.adapter",
        ),  # "/" is a directory, not the adapter file
        (
            [*V0, f"prior.options={{head: tabpfn, head_options: {{checkpoint: {MISSING}.ckpt}}}}"],
            "prior.options.head_options.checkpoint",
        ),
    ],
)
def test_missing_local_paths_in_a_config_name_the_field(tmp_path, monkeypatch, overrides, field_name):
    """A config whose local path (``/``, ``./``, ``../``, ``~``) does not exist fails at load_config, before any
    model or file is opened, with a one-line ValueError naming the field."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.jsonl").write_text('{"question": "1+1", "answer": "2"}\n')  # ./x.jsonl exists
    with pytest.raises(ValueError, match=f"^{field_name}: no such") as err:
        load_config(None, overrides)
    assert "\n" not in str(err.value)


def test_existing_paths_and_hub_ids_pass_the_path_check(tmp_path, monkeypatch):
    """Hub ids and bare relative names are not paths to check; existing local folders and files pass; a cache
    folder may be missing (it is created) but must not be a file."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "train.jsonl").write_text('{"question": "1+1", "answer": "2"}\n')
    for name in ("Qwen/Qwen2.5-0.5B", "gpt2", "./ckpt", str(tmp_path / "ckpt"), "tiny-llama"):
        assert load_config(None, [f"policy.name_or_path={name}"]).policy.name_or_path == name
    assert load_config(None, [*MATH, "task.options={path: ./train.jsonl}"]).task.options["path"] == "./train.jsonl"
    assert load_config(None, [*MATH, "task.options={path: data/later.jsonl}"])  # resolved by the task when it loads
    assert load_config(None, [f"warmup.cache_dir={tmp_path / 'new-cache'}"])
    with pytest.raises(ValueError, match="^warmup.cache_dir: .* is not a directory"):
        load_config(None, [f"warmup.cache_dir={tmp_path / 'train.jsonl'}"])
    with pytest.raises(ValueError, match="^policy.name_or_path: .*it is a file"):
        load_config(None, ["policy.name_or_path=./train.jsonl"])
