r"""The official V0 checkpoint format: the dynamic-query adapter over embedding-model hidden states (torch).

V0 (arXiv:2602.03584, github.com/Now-Join-Us/V0 ``v0_core/models/v0.py``; methods-v05-v0.md §3.2) turns the token
hidden states H (L, 1024) of a frozen Qwen3-Embedding-0.6B into 168 × 6 = 1,008 features per prompt:

    v = H[last]                                    (last-token pooling; left padding)
    Q = Q_static + reshape(G(v), 168 × 6),  G = Linear(1024→128) → LN → GELU → Dropout → Linear(128→1008) (zero-init)
    z = MultiheadAttention(LN_q(Q), LN_kv(KV), KV, key_padding_mask = ~mask),  KV = Linear(1024→6)(H)
    features = flatten(z)                          (1,008; no reduction)

A TabPFN classifier fitted on the support set's hard labels 1[s ≥ 0] reads the features and outputs P(s ≥ 0), which
the ``v0`` provider maps to E[s] on its buffer. State-dict keys (``ADAPTER_KEYS``; a ``module.``/``adapter.`` prefix
is stripped): ``static_queries``, ``generator.{0,1,4}.*``, ``kv_proj.*``, ``ln_q.*``, ``ln_kv.*``, ``attn.*``.
The public repo's exact key names could not be checked offline; the loader reports missing/unexpected keys by name.
Checkpoints load with safetensors or ``torch.load(weights_only=True)``: loading never executes code from the file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from v05._types import FloatArray
from v05.priors.embeddings import PROGRESS_MIN_PROMPTS, HFEncoderBackend


@dataclass(frozen=True, kw_only=True, slots=True)
class AdapterConfig:
    """Shape of V0's ``DynamicQueryAdapter`` (defaults: the released ``main_train.sh``)."""

    hidden_size: int = 1024
    num_queries: int = 168
    embed_dim: int = 6
    num_heads: int = 3
    bottleneck: int = 128
    dropout: float = 0.2

    def __post_init__(self) -> None:
        if min(self.hidden_size, self.num_queries, self.embed_dim, self.num_heads, self.bottleneck) < 1:
            raise ValueError(f"adapter sizes must be >= 1, got {self}")
        if self.embed_dim % self.num_heads:
            raise ValueError(f"embed_dim {self.embed_dim} must be divisible by num_heads {self.num_heads}")

    @property
    def n_features(self) -> int:
        """Features per prompt, num_queries × embed_dim (1,008 for V0)."""
        return self.num_queries * self.embed_dim


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
            nn.init.zeros_(self.generator[4].weight)
            nn.init.zeros_(self.generator[4].bias)
            self.kv_proj = nn.Linear(c.hidden_size, c.embed_dim)
            self.ln_q = nn.LayerNorm(c.embed_dim)
            self.ln_kv = nn.LayerNorm(c.embed_dim)
            self.attn = nn.MultiheadAttention(c.embed_dim, c.num_heads, batch_first=True)

        def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            b = hidden.shape[0]
            v_global = hidden[:, -1]  # (B, H): the last token (left padding)
            q = self.static_queries + self.generator(v_global).view(
                b, self.c.num_queries, self.c.embed_dim
            )  # (B, K, d)
            kv = self.kv_proj(hidden)  # (B, L, d)
            z, _ = self.attn(self.ln_q(q), self.ln_kv(kv), kv, key_padding_mask=~mask.bool())  # (B, K, d)
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
    "kv_proj.weight",
    "kv_proj.bias",
    "ln_q.weight",
    "ln_q.bias",
    "ln_kv.weight",
    "ln_kv.bias",
    "attn.in_proj_weight",
    "attn.in_proj_bias",
    "attn.out_proj.weight",
    "attn.out_proj.bias",
)
STRIP_PREFIXES = ("module.", "adapter.", "connector.")


def read_state_dict(path: str | Path) -> dict[str, object]:
    """Tensors of a ``.safetensors`` or torch ``.pt``/``.bin`` file; torch files load with ``weights_only=True``."""
    import torch

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"V0 adapter checkpoint not found: {path}")
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        state: object = load_file(str(path))
    else:
        try:
            state = torch.load(str(path), map_location="cpu", weights_only=True)  # no code execution from the file
        except Exception as err:  # noqa: BLE001 - unpickling refused or corrupt: report, never retry unsafely
            raise ValueError(f"{path}: not a weights-only torch checkpoint ({type(err).__name__}: {err})") from None
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    if not isinstance(state, dict):
        raise ValueError(f"{path}: expected a state dict, got {type(state).__name__}")
    out = {}
    for key, value in state.items():
        name = str(key)
        for prefix in STRIP_PREFIXES:
            if name.startswith(prefix):
                name = name[len(prefix) :]
        out[name] = value
    return out


def infer_config(state: dict[str, object], *, num_heads: int = 3, dropout: float = 0.2) -> AdapterConfig:
    """Adapter sizes read off the tensor shapes (heads cannot be inferred: V0 uses 3)."""
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


def load_adapter(path: str | Path, *, num_heads: int = 3) -> object:
    """The adapter module with the checkpoint's weights (eval mode); keys must match ``ADAPTER_KEYS`` exactly."""
    state = read_state_dict(path)
    missing = sorted(set(ADAPTER_KEYS) - set(state))
    unexpected = sorted(set(state) - set(ADAPTER_KEYS))
    if missing or unexpected:
        raise ValueError(
            f"{path}: not a V0 adapter state dict; missing keys {missing}, unexpected keys {unexpected[:10]}"
        )
    adapter = build_adapter(infer_config(state, num_heads=num_heads))
    adapter.load_state_dict(state, strict=True)  # type: ignore[attr-defined]
    return adapter.eval()  # type: ignore[attr-defined]


def save_adapter(adapter: object, path: str | Path) -> Path:
    """Write the adapter's state dict as safetensors (the format ``load_adapter`` reads)."""
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().contiguous() for k, v in adapter.state_dict().items()}, str(path))  # type: ignore[attr-defined]
    return path


@dataclass(kw_only=True, slots=True)
class V0AdapterBackend:
    """Features of the official V0 stack: a local HF encoder's hidden states through the V0 adapter (1,008-d).

    Attributes:
        adapter: path of the adapter checkpoint (safetensors or weights-only torch file).
        encoder: local directory of the embedding model (Qwen3-Embedding-0.6B for the released V0).
        max_length: tokenizer truncation (V0: 2,048); longer prompts are counted in ``truncated``.
        device: torch device of encoder and adapter (``"cuda"`` on a GPU).
        dtype: encoder dtype (``"bfloat16"`` on a GPU); the adapter runs in float32 as in V0.
    """

    adapter: str
    encoder: str
    max_length: int = 2048
    batch_size: int = 4
    num_heads: int = 3
    num_threads: int = 1
    device: str = "cpu"
    dtype: str = "float32"
    truncated: int = field(default=0, init=False)
    encoder_: HFEncoderBackend | None = field(default=None, init=False, repr=False)
    adapter_: object = field(default=None, init=False, repr=False)

    @property
    def id(self) -> str:
        """Cache namespace: the backend's name and settings."""
        return f"v0adapter-{Path(self.adapter).stem}-{Path(self.encoder).name}-{self.max_length}"

    def encode(self, texts: Sequence[str]) -> FloatArray:
        """(Q, D) embeddings of ``texts``."""
        import torch
        from tqdm.auto import tqdm

        if self.adapter_ is None:
            self.adapter_ = load_adapter(self.adapter, num_heads=self.num_heads).to(self.device)  # type: ignore[attr-defined]
            self.encoder_ = HFEncoderBackend(
                device=self.device,
                dtype=self.dtype,
                path=self.encoder,
                pooling="last",
                max_length=self.max_length,
                batch_size=self.batch_size,
                num_threads=self.num_threads,
                normalize=False,
            )
        assert self.encoder_ is not None  # set together with adapter_ (internal invariant, not user input)
        rows = []
        starts = range(0, len(texts), self.batch_size)
        for start in tqdm(starts, disable=len(texts) <= PROGRESS_MIN_PROMPTS, desc="V0 features"):
            hidden, mask = self.encoder_.hidden_states(texts[start : start + self.batch_size])
            with torch.no_grad():
                rows.append(self.adapter_(hidden.float(), mask).cpu().numpy())  # type: ignore[operator]  # (B, 1008)
        self.truncated = self.encoder_.truncated
        return np.concatenate(rows).astype(np.float64) if rows else np.zeros((0, 0))


__all__ = [
    "ADAPTER_KEYS",
    "AdapterConfig",
    "V0AdapterBackend",
    "build_adapter",
    "infer_config",
    "load_adapter",
    "read_state_dict",
    "save_adapter",
]
