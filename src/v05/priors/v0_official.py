r"""The official V0 checkpoint ``v_0_for_grpo_training.pt`` (HF ``Now-Join-Us/Generalist-Value-Model-V0``) and its head.

Layout (released ``v0_core/utils/checkpoint.py``): ``{"epoch", "model_state_dict", "optimizer_state_dict",
"scheduler_state_dict", "args", "wandb_run_id"}``. ``model_state_dict`` is ``QwenEmbeddingModel``'s, keys optionally
under ``module.``: ``adapter_layer.*`` (the ``DynamicQueryAdapter`` of :mod:`v05.priors.v0_checkpoint`) and
``backbone.*`` (the frozen Qwen3-Embedding-0.6B, float32). ``args`` is ``vars(argparse.Namespace)``: a dict
(weights-only loadable; its ``device`` is a ``torch.device``, which the weights-only unpickler allows).
Two named paths: ``paper`` (encoder → trained adapter, 1,008 features, as in training and in the paper) and
``demo``: V0's ``demo.py``/``V0.from_pretrained`` builds the default ``pooling_type="last_token"`` model and loads
this file with ``strict=False``, so the adapter is silently dropped and features are the 1,024-d last-token state
(lossy). The head (:class:`V0TabPFNHead`) is TabPFN v2.5, ``n_estimators=4``, float32, ``differentiable_input=True``
(preprocessing "none", no class shuffling), fitted on hard labels 1[s ≥ 0] of ≤ 256 context prompts of one policy
step; temperature-scaled logits are averaged over estimators, then softmax. Training minimised 0.25·pairwise +
0.75·soft cross-entropy towards (s + 1)/2, so p̂ = P(class 1) estimates the pass rate and E[s] = 2p̂ − 1 (default).
Differences from v05's earlier reading: weights sit under ``model_state_dict`` (not ``state_dict``), prefix
``adapter_layer.`` (not ``adapter.``), ``proj_kv``/``mha`` (not ``kv_proj``/``attn``), a ``backbone.*`` copy of the
encoder (checked here, not rejected), heads from ``args``; p̂ was isotonic-mapped as P(s ≥ 0) (now optional);
``heads.TabPFNHead`` preprocesses, shuffles classes and averages probabilities (V0 averages logits).

The loaders that accept either file, this checkpoint or a v05 adapter-only file (:func:`load_adapter`, the
``v0_adapter`` embedding backend :class:`V0AdapterBackend`), live here, above :mod:`v05.priors.v0_checkpoint`.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

import numpy as np

from v05._types import FloatArray, HeadOutput
from v05.priors.encoders import HFEncoderBackend
from v05.priors.heads import TABPFN_CHECKPOINT, check_tabpfn_checkpoint
from v05.priors.v0_checkpoint import (
    ADAPTER_KEYS,
    AdapterConfig,
    PathKind,
    V0FeatureStack,
    adapter_from_state,
    check_adapter_keys,
    infer_config,
    is_official,
    load_weights_file,
    read_state_dict,
)
from v05.rewards import from_pass_rate

log = logging.getLogger(__name__)

HF_REPO = "Now-Join-Us/Generalist-Value-Model-V0"
CHECKPOINT_FILE = "v_0_for_grpo_training.pt"
TOP_LEVEL_KEYS = ("epoch", "model_state_dict", "optimizer_state_dict", "scheduler_state_dict", "args", "wandb_run_id")
ADAPTER_PREFIX = "adapter_layer."
BACKBONE_PREFIX = "backbone."
REQUIRED_ARGS = {"pooling_strategy": "dynamic_query", "reduce_method": "none"}
"""``args`` values the adapter forward depends on (the features are the adapter's, unreduced)."""
DOWNLOAD_HINT = (
    f"huggingface-cli download {HF_REPO} {CHECKPOINT_FILE} pretrained/{TABPFN_CHECKPOINT} --local-dir v0_files && "
    "huggingface-cli download Qwen/Qwen3-Embedding-0.6B --local-dir Qwen3-Embedding-0.6B"
)
"""The command that fetches the official files (run where the hub is reachable)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class OfficialV0:
    """The official checkpoint, loaded.

    Attributes:
        path_kind: ``paper`` (adapter features) or ``demo`` (last-token features; adapter dropped).
        config: the adapter's shape (heads from ``args``).
        args: the training arguments stored in the file.
        epoch: the training epoch of the file.
        adapter: the ``DynamicQueryAdapter`` (eval mode) on the paper path, None on the demo path.
        stack: texts → features (None when loaded without an encoder).
        backbone: ``matched`` (equal to the local encoder), ``loaded`` (copied into it) or ``unchecked``.
        dropped: adapter keys present in the file and unused (the demo path drops all of them).
    """

    path_kind: PathKind
    config: AdapterConfig
    args: dict[str, object]
    epoch: int | None
    adapter: object
    stack: V0FeatureStack | None
    backbone: Literal["matched", "loaded", "unchecked"]
    dropped: tuple[str, ...] = ()

    def encode(self, texts: Sequence[str]) -> FloatArray:
        """(Q, D) features of ``texts`` (D = 1,008 on the paper path, the encoder width on the demo path)."""
        if self.stack is None:
            raise ValueError("this checkpoint was loaded without an encoder; pass encoder=DIR to encode texts")
        return self.stack.encode(texts)


def split_model_state(
    state: dict[str, object], *, source: str, strict: bool, need_adapter: bool
) -> tuple[dict[str, object], dict[str, object]]:
    """(adapter, backbone) tensors of ``model_state_dict``: ``[module.]adapter_layer.*`` and ``[module.]backbone.*``.

    Raises:
        ValueError: listing adapter keys that are missing (when ``strict`` or ``need_adapter``) and, when
            ``strict``, keys that are neither adapter nor backbone, unknown adapter keys, or no backbone.
    """
    adapter: dict[str, object] = {}
    backbone: dict[str, object] = {}
    unexpected: list[str] = []
    for key, value in state.items():
        name = key.removeprefix("module.")
        if name.startswith(ADAPTER_PREFIX) and name[len(ADAPTER_PREFIX) :] in ADAPTER_KEYS:
            adapter[name[len(ADAPTER_PREFIX) :]] = value
        elif name.startswith(BACKBONE_PREFIX):
            backbone[name[len(BACKBONE_PREFIX) :]] = value
        else:
            unexpected.append(key)
    missing = [ADAPTER_PREFIX + k for k in ADAPTER_KEYS if k not in adapter]
    if (missing and (strict or need_adapter)) or (unexpected and strict):
        raise ValueError(
            f"{source}: not the official V0 layout; missing keys {missing}, unexpected keys {sorted(unexpected)}"
        )
    if strict and not backbone:
        raise ValueError(f"{source}: no {BACKBONE_PREFIX}* keys (the official file stores the frozen encoder)")
    return adapter, backbone


def config_from_args(
    args: dict[str, object], adapter: dict[str, object], *, source: str, strict: bool
) -> AdapterConfig:
    """The adapter shape from ``args`` (heads) and the tensors (sizes), after checking that they agree.

    Raises:
        ValueError: naming the ``args`` field whose value the loader cannot reproduce (pooling, reduction, sizes),
            or, when ``strict``, one that is absent.
    """
    if "num_heads" not in args and strict:
        raise ValueError(f"{source}: args has no num_heads (the adapter's head count cannot be read off its tensors)")
    config = infer_config(
        adapter,
        num_heads=int(args.get("num_heads", 3)),  # type: ignore[call-overload]
        dropout=float(args.get("dynamic_query_generator_dropout_rate", 0.2)),  # type: ignore[arg-type]
    )
    expected: dict[str, object] = dict(REQUIRED_ARGS)
    expected.update(
        num_queries=config.num_queries,
        embed_dim=config.embed_dim,
        dynamic_query_generator_bottleneck_dim=config.bottleneck,
    )
    for name, want in expected.items():
        if name not in args:
            if strict:
                raise ValueError(f"{source}: args has no {name} (expected {want!r})")
            continue
        if args[name] != want:
            raise ValueError(f"{source}: args {name}={args[name]!r}, expected {want!r} (V0's released paper setting)")
    return config


def check_backbone(backbone: dict[str, object], local: dict[str, object], *, source: str, compare: bool) -> None:
    """Check the file's ``backbone.*`` against the local encoder's state dict: keys, shapes and, if ``compare``, values.

    Values are compared exactly after casting both to the coarser dtype (the file is float32; a bfloat16 encoder
    is the same weights rounded). Raises ValueError listing every difference (10 per kind).
    """
    import torch

    missing = sorted(set(local) - set(backbone))
    unexpected = sorted(set(backbone) - set(local))
    shapes, values = [], []
    for key in sorted(set(local) & set(backbone)):
        a, b = backbone[key], local[key]
        if tuple(a.shape) != tuple(b.shape) or a.is_floating_point() != b.is_floating_point():  # type: ignore[attr-defined]
            shapes.append(f"{key}: file {a.dtype} {tuple(a.shape)} vs encoder {b.dtype} {tuple(b.shape)}")  # type: ignore[attr-defined]
        elif compare:
            coarse = max((a.dtype, b.dtype), key=lambda t: torch.finfo(t).eps if t.is_floating_point else 0)  # type: ignore[attr-defined]
            a_c, b_c = a.to(coarse), b.detach().to("cpu", coarse)  # type: ignore[attr-defined]
            if not torch.equal(a_c, b_c):
                values.append(f"{key} (max |Δ| {float((a_c.double() - b_c.double()).abs().max()):.3g})")
    if missing or unexpected or shapes or values:
        raise ValueError(
            f"{source}: backbone.* differs from the local encoder: missing {missing[:10]} ({len(missing)}), "
            f"unexpected {unexpected[:10]} ({len(unexpected)}), shape/dtype {shapes[:10]} ({len(shapes)}), "
            f"values {values[:10]} ({len(values)}); use the encoder V0 was trained with (Qwen3-Embedding-0.6B), "
            "or backbone='load' to run the file's backbone weights"
        )


def official_from_raw(
    raw: dict[str, object],
    *,
    source: str,
    encoder: HFEncoderBackend | None,
    path_kind: PathKind = "paper",
    strict: bool = True,
    backbone: Literal["check", "load"] = "check",
) -> OfficialV0:
    """:func:`load_official_checkpoint` on an already-read file (see there); ``encoder`` is an HF backend."""
    if path_kind not in ("paper", "demo"):
        raise ValueError(f"unknown path_kind {path_kind!r}; valid: paper, demo")
    extra = sorted(set(raw) - set(TOP_LEVEL_KEYS))
    if strict and extra:
        raise ValueError(f"{source}: unexpected top-level entries {extra} (expected {list(TOP_LEVEL_KEYS)})")
    args = raw.get("args")
    if isinstance(args, argparse.Namespace):
        args = vars(args)
    if not isinstance(args, dict):
        if strict:
            raise ValueError(f"{source}: no training args dict (the official file stores vars(args) under 'args')")
        args = {}
    args = {str(k): v for k, v in args.items()}
    state = raw.get("model_state_dict")
    if not isinstance(state, dict):
        raise ValueError(f"{source}: no model_state_dict (not a V0 training checkpoint)")
    adapter_state, backbone_state = split_model_state(
        state, source=source, strict=strict, need_adapter=path_kind == "paper"
    )
    config = config_from_args(args, adapter_state, source=source, strict=strict)
    adapter = adapter_from_state(adapter_state, config, source=source) if path_kind == "paper" else None
    dropped = tuple(sorted(adapter_state)) if adapter is None else ()
    if dropped:
        log.warning("V0 demo path: %d trained adapter tensors of %s are dropped (lossy)", len(dropped), source)
    status: Literal["matched", "loaded", "unchecked"] = "unchecked"
    stack = None
    if encoder is not None:
        _, model = encoder.load()
        local = model.state_dict()  # type: ignore[attr-defined]
        check_backbone(backbone_state, local, source=source, compare=backbone == "check")
        if backbone == "load":
            model.load_state_dict({k: v.to(local[k].dtype) for k, v in backbone_state.items()}, strict=True)  # type: ignore[attr-defined]
        status = "matched" if backbone == "check" else "loaded"
        if adapter is not None:
            adapter = adapter.to(encoder.device)  # type: ignore[attr-defined]
        stack = V0FeatureStack(encoder=encoder, adapter=adapter)
    epoch = raw.get("epoch")
    return OfficialV0(
        path_kind=path_kind,
        config=config,
        args=args,
        epoch=int(epoch) if isinstance(epoch, int) else None,
        adapter=adapter,
        stack=stack,
        backbone=status,
        dropped=dropped,
    )


def load_official_checkpoint(
    path: str | Path,
    *,
    encoder: str | None,
    path_kind: PathKind = "paper",
    strict: bool = True,
    backbone: Literal["check", "load"] = "check",
    device: str = "cpu",
    dtype: str = "float32",
    max_length: int = 2048,
    batch_size: int = 32,
) -> OfficialV0:
    """Load ``v_0_for_grpo_training.pt`` (``torch.load(weights_only=True)``) into V0's feature stack.

    Args:
        path: the checkpoint file.
        encoder: local Qwen3-Embedding-0.6B directory; None loads the adapter only (backbone unchecked).
        path_kind: ``paper`` (trained adapter, 1,008-d) or ``demo`` (V0's demo.py: last token, adapter dropped).
        strict: every adapter key consumed, none missing, nothing unknown, ``args`` complete; else the keys and
            ``args`` fields present are still checked and unknown entries ignored.
        backbone: ``check`` the file's ``backbone.*`` against the encoder (keys, shapes, values), or ``load`` it
            into the encoder (keys and shapes checked).
        device: torch device of encoder and adapter.
        dtype: encoder dtype (V0: float32).
        max_length: tokenizer truncation (V0: 2,048).
        batch_size: prompts per encoder forward (V0.predict: 32).

    Raises:
        ValueError: naming the missing file, unsafe pickle, unknown/missing keys, the mismatching ``args`` field,
            or the backbone tensors that differ from the encoder.
    """
    hf = None
    if encoder is not None:
        hf = HFEncoderBackend(
            path=encoder,
            pooling="last",
            max_length=max_length,
            batch_size=batch_size,
            device=device,
            dtype=dtype,
            normalize=False,
        )
    raw = load_weights_file(path)
    return official_from_raw(raw, source=str(path), encoder=hf, path_kind=path_kind, strict=strict, backbone=backbone)


@dataclass(kw_only=True, slots=True)
class V0TabPFNHead:
    """V0's head: TabPFN v2.5 on hard labels 1[s ≥ 0], configured as V0 ran it; predicts E[s] = 2p̂ − 1.

    p̂ = softmax(mean over the 4 estimators of logits / T)[1] with TabPFN's default T = 0.9, ``differentiable_input
    =True`` (preprocessing "none", no class shuffling), float32 inputs. A one-class context predicts that class.

    Attributes:
        checkpoint: the local ``tabpfn-v2.5-classifier-v2.5_default.ckpt`` (file or its directory).
        calibration: ``pass_rate`` (E[s] = 2p̂ − 1, what V0 was trained for) or ``isotonic`` (outputs p̂ as
            ``prob_nonneg``, which the ``v0`` provider maps to E[s] with an isotonic fit on its context).
    """

    requires: ClassVar[tuple[str, ...]] = ("torch", "tabpfn")  # modules it imports on use (v05.extras)

    checkpoint: str | None = None
    n_estimators: int = 4
    device: str = "cpu"
    random_state: int = 0
    calibration: Literal["pass_rate", "isotonic"] = "pass_rate"
    output: HeadOutput = field(default="score", init=False)
    model_: object = field(default=None, init=False, repr=False)
    constant_: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if self.calibration not in ("pass_rate", "isotonic"):
            raise ValueError(f"unknown calibration {self.calibration!r}; valid: pass_rate, isotonic")
        if self.n_estimators < 1:
            raise ValueError(f"n_estimators must be >= 1, got {self.n_estimators}")
        self.output = "score" if self.calibration == "pass_rate" else "prob_nonneg"

    def fit(self, x: FloatArray, y: FloatArray) -> V0TabPFNHead:
        """Fit on context features (C, D) and scores (C,) in [−1, 1]; returns the head."""
        try:
            path = check_tabpfn_checkpoint(self.checkpoint)
        except ValueError as err:
            raise ValueError(f"{err}; to fetch it: {DOWNLOAD_HINT}") from None
        try:
            from tabpfn import TabPFNClassifier  # optional extra; V0 pins PriorLabs/TabPFN 2cd2326 (6.2.0)
        except ImportError:
            raise ValueError("the V0 TabPFN head needs the optional package: pip install 'tabpfn==6.2.0'") from None
        import torch

        label = (np.asarray(y, np.float64) >= 0).astype(np.int64)  # (C,) V0: (s + 1)/2 ≥ 0.5
        self.constant_ = float(label[0]) if label.min() == label.max() else None
        if self.constant_ is None:
            self.model_ = TabPFNClassifier(
                model_path=str(path),
                device=self.device,
                n_estimators=self.n_estimators,
                inference_precision=torch.float32,
                differentiable_input=True,
                random_state=self.random_state,
            )
            self.model_.fit(  # type: ignore[attr-defined]
                torch.as_tensor(np.asarray(x), dtype=torch.float32, device=self.device),
                torch.as_tensor(label, device=self.device),
            )
        return self

    def predict_pass_rate(self, x: FloatArray) -> FloatArray:
        """(Q,) p̂, V0's output for query features (Q, D)."""
        if self.constant_ is not None:
            return np.full(len(x), self.constant_)
        if self.model_ is None:
            raise ValueError("V0TabPFNHead.predict before fit")
        import torch

        x_t = torch.as_tensor(np.asarray(x), dtype=torch.float32, device=self.device)
        with torch.no_grad():
            logits = self.model_.forward(x_t, use_inference_mode=True, return_logits=True)  # type: ignore[attr-defined]
            prob = torch.softmax(logits.reshape(len(x), -1), dim=1)  # (Q, 2)
        return prob[:, 1].double().cpu().numpy()

    def predict(self, x: FloatArray) -> FloatArray:
        """(Q,) E[s] = 2p̂ − 1 (``pass_rate``) or p̂ (``isotonic``) for query features (Q, D)."""
        p = self.predict_pass_rate(x)
        return from_pass_rate(p, "pm1") if self.calibration == "pass_rate" else p


# -- the loaders that accept either file: the official checkpoint or a v05 adapter-only file ----------------------


def load_adapter(path: str | Path, *, num_heads: int = 3) -> object:
    """The adapter module with a file's weights (eval mode).

    An adapter-only file must hold exactly ``ADAPTER_KEYS`` (after ``STRIP_PREFIXES``/``LEGACY_NAMES``). The
    official checkpoint is loaded strictly by ``load_official_checkpoint`` (heads from its ``args``; ``num_heads``
    is ignored) without checking its backbone, which needs the encoder.
    """
    raw = load_weights_file(path)
    if is_official(raw):
        return official_from_raw(raw, source=str(path), encoder=None).adapter
    state = read_state_dict(path)
    check_adapter_keys(state, str(path))
    return adapter_from_state(state, infer_config(state, num_heads=num_heads), source=str(path))


@dataclass(kw_only=True, slots=True)
class V0AdapterBackend:
    """Features of the V0 stack: a local HF encoder's hidden states through the V0 adapter (1,008-d).

    Attributes:
        adapter: the official ``v_0_for_grpo_training.pt`` (loaded strictly, backbone checked against ``encoder``)
            or a v05 adapter-only file (safetensors / weights-only torch).
        encoder: local directory of the embedding model (Qwen3-Embedding-0.6B for the released V0).
        path_kind: ``paper`` (the trained adapter) or ``demo`` (V0's demo.py: last-token features, adapter
            dropped; official file only).
        backbone: ``check`` the official file's ``backbone.*`` against the encoder, or ``load`` it into the encoder.
        max_length: tokenizer truncation (V0: 2,048); longer prompts are counted in ``truncated``.
        batch_size: prompts per encoder forward (V0.predict: 32; training: 4); left padding makes float32
            features depend on the batch at the ~1e-7 relative level.
        num_heads: attention heads of an adapter-only file (the official file records its own).
        num_threads: torch CPU threads.
        device: torch device of encoder and adapter (``"cuda"`` on a GPU).
        dtype: encoder dtype (V0 ran float32; ``"bfloat16"`` is faster on a GPU); the adapter runs in float32.
    """

    requires: ClassVar[tuple[str, ...]] = ("torch", "transformers")  # modules it imports on use (v05.extras)

    adapter: str
    encoder: str
    path_kind: PathKind = "paper"
    backbone: Literal["check", "load"] = "check"
    max_length: int = 2048
    batch_size: int = 4
    num_heads: int = 3
    num_threads: int = 1
    device: str = "cpu"
    dtype: str = "float32"
    truncated: int = field(default=0, init=False)
    stack_: V0FeatureStack | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.path_kind not in ("paper", "demo"):
            raise ValueError(f"unknown path_kind {self.path_kind!r}; valid: paper, demo")
        if self.backbone not in ("check", "load"):
            raise ValueError(f"unknown backbone mode {self.backbone!r}; valid: check, load")

    @property
    def id(self) -> str:
        """Cache namespace: the backend's name and settings."""
        suffix = "-demo" if self.path_kind == "demo" else ""
        return f"v0adapter-{Path(self.adapter).stem}-{Path(self.encoder).name}-{self.max_length}{suffix}"

    def load(self) -> V0FeatureStack:
        """The feature stack (loaded once)."""
        if self.stack_ is None:
            encoder = HFEncoderBackend(
                device=self.device,
                dtype=self.dtype,
                path=self.encoder,
                pooling="last",
                max_length=self.max_length,
                batch_size=self.batch_size,
                num_threads=self.num_threads,
                normalize=False,
            )
            raw = load_weights_file(self.adapter)
            if is_official(raw):
                official = official_from_raw(
                    raw, source=self.adapter, encoder=encoder, path_kind=self.path_kind, backbone=self.backbone
                )
                assert official.stack is not None  # an encoder was given (internal invariant, not user input)
                self.stack_ = official.stack
            elif self.path_kind == "demo":
                raise ValueError(f"{self.adapter}: the demo path needs the official V0 checkpoint (model_state_dict)")
            else:
                adapter = load_adapter(self.adapter, num_heads=self.num_heads)
                self.stack_ = V0FeatureStack(encoder=encoder, adapter=adapter.to(self.device))  # type: ignore[attr-defined]
        return self.stack_

    def encode(self, texts: Sequence[str]) -> FloatArray:
        """(Q, D) embeddings of ``texts``."""
        stack = self.load()
        out = stack.encode(texts)
        self.truncated = stack.encoder.truncated
        return out


__all__ = [
    "CHECKPOINT_FILE",
    "DOWNLOAD_HINT",
    "HF_REPO",
    "OfficialV0",
    "V0AdapterBackend",
    "V0TabPFNHead",
    "check_backbone",
    "config_from_args",
    "load_adapter",
    "load_official_checkpoint",
    "official_from_raw",
    "split_model_state",
]
