r"""V0's dynamic-query adapter over embedding-model hidden states (torch), and v05's adapter-only weight files.

V0 (arXiv:2602.03584; released ``v0_core/models/v0.py``, ``DynamicQueryAdapter`` + ``last_token_pool``) turns the
final hidden states H (B, L, 1024) of a frozen Qwen3-Embedding-0.6B (``last_hidden_state``, after the final RMSNorm,
not L2-normalised, no instruction prefix, left padding, max 2,048 tokens) into 168 × 6 = 1,008 features per prompt:

    v = H[b, last real token]                      (V0's last_token_pool; see below)
    Q = repeat(Q_static, B) + reshape(G(v), 168 × 6),  G = Linear(1024→128) → LN → GELU → Dropout → Linear(128→1008)
    z = MultiheadAttention(query=LN_q(Q), key=LN_kv(KV), value=KV, key_padding_mask=~mask),  KV = Linear(1024→6)(H)
    features = flatten(z)                          (1,008; reduce_method "none")

Keys (``ADAPTER_KEYS``) are the released names. The official training checkpoint (``model_state_dict`` with
``adapter_layer.*`` and ``backbone.*``) is read by :mod:`v05.priors.v0_official`; this module also reads v05's own
adapter-only files (safetensors, or ``torch.load(weights_only=True)``: loading never executes code from the file).
Differences from v05's earlier reconstruction, found in the released code:
- the KV projection is ``proj_kv`` and the attention ``mha`` (v05 had ``kv_proj``/``attn``; old files still load);
- v = last_token_pool(H, mask): H[:, -1] when every row's last position is real (left padding), else H at
  Σmask − 1 (right padding); v05 took H[:, -1] unconditionally (the same under v05's left-padding tokenizer);
- the number of heads is read from the checkpoint's ``args`` (argparse default 4; ``main_train.sh`` and
  ``V0.from_pretrained`` use 3), not fixed at 3.
"""

from __future__ import annotations

import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from v05._checks import error_line
from v05._types import FloatArray
from v05.priors.embeddings import PROGRESS_MIN_PROMPTS
from v05.priors.encoders import HFEncoderBackend

PathKind = Literal["paper", "demo"]
"""``paper``: encoder → trained adapter (1,008-d); ``demo``: V0's ``demo.py``, last-token state, adapter dropped."""

DEMO_TARGET_DIM = 1024
"""V0's demo model averages features down to 1,024 only when they are wider (``reduce_method="avg_pool"``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class AdapterConfig:
    """Shape of V0's ``DynamicQueryAdapter`` (defaults: the released ``main_train.sh``)."""

    hidden_size: int = 1024
    """width H of the encoder's hidden states (1,024 for Qwen3-Embedding-0.6B)."""
    num_queries: int = 168
    """K learned queries."""
    embed_dim: int = 6
    """d, the width of each query (features = K·d)."""
    num_heads: int = 3
    """attention heads (d must be divisible by it)."""
    bottleneck: int = 128
    """width of the query generator's hidden layer (``dynamic_query_generator_bottleneck_dim``)."""
    dropout: float = 0.2
    """generator dropout during training (inactive in eval mode)."""

    def __post_init__(self) -> None:
        if min(self.hidden_size, self.num_queries, self.embed_dim, self.num_heads, self.bottleneck) < 1:
            raise ValueError(f"adapter sizes must be >= 1, got {self}")
        if self.embed_dim % self.num_heads:
            raise ValueError(f"embed_dim {self.embed_dim} must be divisible by num_heads {self.num_heads}")

    @property
    def n_features(self) -> int:
        """Features per prompt, num_queries × embed_dim (1,008 for V0)."""
        return self.num_queries * self.embed_dim


def last_token_pool(hidden: object, mask: object) -> object:
    """V0's ``last_token_pool``: (B, H) hidden state at each prompt's last real token.

    If every row's last position is real (left padding, as both V0's and v05's tokenizers pad), that position;
    otherwise row b's position Σ_l mask[b, l] − 1 (right padding).

    Args:
        hidden: (B, L, H) torch tensor of hidden states.
        mask: (B, L) attention mask (1 = real token).
    """
    import torch

    mask_t: torch.Tensor = mask.long()  # type: ignore[attr-defined]
    h: torch.Tensor = hidden  # type: ignore[assignment]
    if int(mask_t[:, -1].sum()) == mask_t.shape[0]:
        return h[:, -1]  # (B, H)
    last = mask_t.sum(dim=1) - 1  # (B,)
    return h[torch.arange(h.shape[0], device=h.device), last]  # (B, H)


def demo_features(hidden: object, mask: object) -> object:
    """Features of V0's demo path: the last-token hidden state, average-pooled to 1,024 only if wider (lossy).

    ``V0.from_pretrained`` builds its embedding model with the default ``pooling_type="last_token"`` and loads the
    checkpoint with ``strict=False``, so the trained adapter is silently dropped; this reproduces that forward.
    """
    import torch

    pooled: torch.Tensor = last_token_pool(hidden, mask)  # type: ignore[assignment]  # (B, H)
    if pooled.shape[1] > DEMO_TARGET_DIM:
        pooled = torch.nn.functional.adaptive_avg_pool1d(pooled.unsqueeze(1), DEMO_TARGET_DIM).squeeze(1)
    return pooled


def build_adapter(config: AdapterConfig) -> object:
    """A fresh ``DynamicQueryAdapter`` torch module (random Q_static, zero-initialised last generator layer)."""
    import torch
    from torch import nn

    class DynamicQueryAdapter(nn.Module):
        def __init__(self, c: AdapterConfig) -> None:
            super().__init__()
            self.c = c
            self.static_queries = nn.Parameter(torch.randn(1, c.num_queries, c.embed_dim))
            self.generator = nn.Sequential(
                nn.Linear(c.hidden_size, c.bottleneck),
                nn.LayerNorm(c.bottleneck),
                nn.GELU(),
                nn.Dropout(c.dropout),
                nn.Linear(c.bottleneck, c.n_features),
            )
            nn.init.zeros_(self.generator[4].weight)  # ΔQ = 0 at initialisation: the static queries alone
            nn.init.zeros_(self.generator[4].bias)
            self.proj_kv = nn.Linear(c.hidden_size, c.embed_dim)
            self.mha = nn.MultiheadAttention(c.embed_dim, c.num_heads, batch_first=True)
            self.ln_q = nn.LayerNorm(c.embed_dim)
            self.ln_kv = nn.LayerNorm(c.embed_dim)

        def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            b = hidden.shape[0]
            v_global = last_token_pool(hidden, mask)  # (B, H)
            delta_q = self.generator(v_global).view(b, self.c.num_queries, self.c.embed_dim)  # (B, K, d)
            q = self.static_queries.repeat(b, 1, 1) + delta_q  # (B, K, d)
            kv = self.proj_kv(hidden)  # (B, L, d)
            z, _ = self.mha(self.ln_q(q), self.ln_kv(kv), kv, key_padding_mask=~mask.bool())  # (B, K, d)
            return z.reshape(b, -1)  # (B, K·d)

    return DynamicQueryAdapter(config)


ADAPTER_KEYS = (
    "static_queries",
    "generator.0.weight",
    "generator.0.bias",
    "generator.1.weight",
    "generator.1.bias",
    "generator.4.weight",
    "generator.4.bias",
    "proj_kv.weight",
    "proj_kv.bias",
    "mha.in_proj_weight",
    "mha.in_proj_bias",
    "mha.out_proj.weight",
    "mha.out_proj.bias",
    "ln_q.weight",
    "ln_q.bias",
    "ln_kv.weight",
    "ln_kv.bias",
)
"""The adapter's state-dict keys, as in the released ``DynamicQueryAdapter``."""
STRIP_PREFIXES = ("module.", "adapter_layer.", "adapter.", "connector.")
"""Stripped in this order (each at most once) from adapter-only files."""
LEGACY_NAMES = {"kv_proj.": "proj_kv.", "attn.": "mha."}
"""v05's earlier names → the released ones (files written by earlier v05 versions)."""


def load_weights_file(path: str | Path) -> dict[str, object]:
    """The top-level dict of a ``.safetensors`` file or a torch file loaded with ``weights_only=True``.

    Torch files are memory-mapped when they are zip archives (the official V0 file carries a 2.4 GB backbone).
    ``argparse.Namespace`` is allow-listed (V0 stores ``vars(args)``, a dict, but a variant might store the
    Namespace); anything else that is not a tensor or plain container is refused, never unpickled.

    Raises:
        ValueError: the file is missing, is not valid safetensors, needs arbitrary unpickling, or does not hold a dict.
    """
    import argparse

    import torch

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"V0 checkpoint not found: {path}")
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        try:
            return dict(load_file(str(path)))
        except Exception as err:  # noqa: BLE001 - SafetensorError or OSError: a corrupt or disguised file
            raise ValueError(f"{path}: not a safetensors file ({error_line(err)})") from None
    try:
        with torch.serialization.safe_globals([argparse.Namespace]):
            obj = torch.load(str(path), map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(path))
    except Exception as err:  # noqa: BLE001 - unpickling refused or corrupt: report, never retry unsafely
        raise ValueError(f"{path}: not a weights-only torch checkpoint ({error_line(err)})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: expected a dict of tensors, got {type(obj).__name__}")
    return {str(k): v for k, v in obj.items()}


def is_official(raw: dict[str, object]) -> bool:
    """Whether a loaded file is V0's training checkpoint (weights under ``model_state_dict``)."""
    return isinstance(raw.get("model_state_dict"), dict)


def canonical_key(key: str) -> str:
    """A key of an adapter-only file in the released naming (prefixes stripped, v05's old names mapped)."""
    for prefix in STRIP_PREFIXES:
        if key.startswith(prefix):
            key = key[len(prefix) :]
    for old, new in LEGACY_NAMES.items():
        if key.startswith(old):
            key = new + key[len(old) :]
    return key


def read_state_dict(path: str | Path) -> dict[str, object]:
    """Tensors of a weight file in the released adapter naming (``state_dict``/``model_state_dict`` unwrapped).

    Keys of the official checkpoint's backbone keep their ``backbone.`` prefix; use
    :func:`v05.priors.v0_official.load_official_checkpoint` to load that file.
    """
    raw = load_weights_file(path)
    state = raw
    for wrapper in ("model_state_dict", "state_dict"):
        if isinstance(raw.get(wrapper), dict):
            state = raw[wrapper]  # type: ignore[assignment]
            break
    return {canonical_key(str(k)): v for k, v in state.items()}


def infer_config(state: dict[str, object], *, num_heads: int = 3, dropout: float = 0.2) -> AdapterConfig:
    """Adapter sizes read off the tensor shapes (heads cannot be inferred: V0's ``args`` record them)."""
    try:
        _, k, d = state["static_queries"].shape  # type: ignore[attr-defined]
        bottleneck, hidden = state["generator.0.weight"].shape  # type: ignore[attr-defined]
    except (KeyError, AttributeError, ValueError) as err:
        raise ValueError(f"not a V0 adapter state dict (missing or malformed {err})") from None
    return AdapterConfig(
        hidden_size=int(hidden),
        num_queries=int(k),
        embed_dim=int(d),
        num_heads=num_heads,
        bottleneck=int(bottleneck),
        dropout=dropout,
    )


def adapter_from_state(state: dict[str, object], config: AdapterConfig, *, source: str) -> object:
    """The adapter (eval mode) with ``state`` loaded strictly; keys must be ``ADAPTER_KEYS`` exactly."""
    check_adapter_keys(state, source)
    adapter = build_adapter(config)
    try:
        adapter.load_state_dict(state, strict=True)  # type: ignore[attr-defined]
    except RuntimeError as err:  # shapes that disagree with the config (e.g. heads, hidden width)
        raise ValueError(f"{source}: adapter tensors do not fit {config}: {err}") from None
    return adapter.eval()  # type: ignore[attr-defined]


def check_adapter_keys(state: dict[str, object], source: str) -> None:
    """Raise ``ValueError`` unless ``state`` holds exactly ``ADAPTER_KEYS`` (naming the missing and unexpected)."""
    missing = sorted(set(ADAPTER_KEYS) - set(state))
    unexpected = sorted(set(state) - set(ADAPTER_KEYS))
    if missing or unexpected:
        raise ValueError(f"{source}: not a V0 adapter state dict; missing keys {missing}, unexpected keys {unexpected}")


def save_adapter(adapter: object, path: str | Path) -> Path:
    """Write the adapter's state dict as safetensors (the format ``load_adapter`` reads)."""
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().contiguous() for k, v in adapter.state_dict().items()}, str(path))  # type: ignore[attr-defined]
    return path


@dataclass(kw_only=True, slots=True)
class V0FeatureStack:
    """Texts → V0 features: a local encoder's final hidden states, then the adapter (paper) or the last token (demo).

    Attributes:
        encoder: the local HF encoder (``normalize=False``; its pooling setting is not used).
        adapter: the ``DynamicQueryAdapter`` (paper path), or None for the demo path.
    """

    encoder: HFEncoderBackend
    adapter: object = None

    @property
    def path_kind(self) -> PathKind:
        """``paper`` with an adapter, ``demo`` without."""
        return "demo" if self.adapter is None else "paper"

    def features(self, hidden: object, mask: object) -> object:
        """(B, D) float32 features of one batch of hidden states (B, L, H) and its mask (B, L)."""
        h = hidden.float()  # type: ignore[attr-defined]  # V0 runs backbone and adapter in float32
        return demo_features(h, mask) if self.adapter is None else self.adapter(h, mask)  # type: ignore[operator]

    def encode(self, texts: Sequence[str]) -> FloatArray:
        """(Q, D) features of ``texts`` in batches of ``encoder.batch_size`` (left padding)."""
        import torch
        from tqdm.auto import tqdm

        rows = []
        starts = range(0, len(texts), self.encoder.batch_size)
        for start in tqdm(starts, disable=len(texts) <= PROGRESS_MIN_PROMPTS, desc=f"V0 {self.path_kind} features"):
            hidden, mask = self.encoder.hidden_states(texts[start : start + self.encoder.batch_size])
            with torch.no_grad():
                rows.append(self.features(hidden, mask).cpu().numpy())  # type: ignore[attr-defined]  # (B, D)
        return np.concatenate(rows).astype(np.float64) if rows else np.zeros((0, 0))


__all__ = [
    "ADAPTER_KEYS",
    "DEMO_TARGET_DIM",
    "LEGACY_NAMES",
    "AdapterConfig",
    "PathKind",
    "V0FeatureStack",
    "adapter_from_state",
    "build_adapter",
    "canonical_key",
    "check_adapter_keys",
    "demo_features",
    "infer_config",
    "is_official",
    "last_token_pool",
    "load_weights_file",
    "read_state_dict",
    "save_adapter",
]
