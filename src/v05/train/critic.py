r"""PPO's critic: GAE advantages and returns, the clipped value loss, the value model (methods-siblings §2.2).

The math follows verl 0.9.1 (``verl/trainer/ppo/core_algos.py``: ``compute_gae_advantage_return``,
``compute_value_loss``; ``verl/utils/torch_functional.py``: ``masked_whiten``) and is tested against it. Per step the
loop does: ``V_old = critic.values(...)`` (no grad) → ``outcome_token_rewards`` → ``gae`` → ``whiten`` (advantages
only) → PPO epochs, each adding ``value_loss(critic.values(...), V_old, returns, mask)``.

Deviations from verl 0.9.1:
- ``gae`` and ``whiten`` read the mask as a boolean (``torch.where``): a non-finite value at a masked position is
  ignored (verl multiplies by the mask, so NaN·0 = NaN would leak); identical for finite values and 0/1 masks.
- ``whiten`` divides by the token count n, not n + 1e-8 (relative change ≤ 1e-8); n < 2 raises as in verl.
- ``value_loss`` aggregates with :mod:`v05.train.loss`'s ``LossNorm`` (the same deviations as the policy loss).
- Default value clip range 0.2 (verl's critic default ``cliprange_value`` is 0.5).
- The value head starts at zero (weights and bias): V ≡ 0 at step 0, and no draw from the global RNG.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn
from transformers import PreTrainedModel

from v05.engines.logprobs import check_sequences
from v05.train.loss import AGG_MODES, AggMode, LossNorm, _aggregate, _token_mean

CriticMode = Literal["head", "separate"]

__all__ = [
    "Critic",
    "CriticConfig",
    "CriticMode",
    "ValueHead",
    "gae",
    "outcome_token_rewards",
    "value_loss",
    "whiten",
]


def _check_same_shape(named: dict[str, torch.Tensor]) -> tuple[int, int]:
    shapes = {name: tuple(t.shape) for name, t in named.items()}
    first = next(iter(shapes.values()))
    if len(first) != 2 or len(set(shapes.values())) > 1:
        raise ValueError(f"need 2-D (N, T) tensors of one shape, got {shapes}")
    return first  # type: ignore[return-value]


def gae(
    token_rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, *, gamma: float = 1.0, lam: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Generalised advantage estimation over the response tokens, as verl 0.9.1 (no whitening here).

        δ_t = r_t + γ·V_{t'} − V_t,    Â_t = δ_t + γλ·Â_{t'},    returns_t = Â_t + V_t

    t' is the next *unmasked* position after t (a reversed scan that carries (V_{t'}, Â_{t'}) unchanged through masked
    positions; both are 0 past the last one). So masked tokens inside a response are skipped without an extra γ, their
    rewards are ignored, and a masked position t holds Â_{t'} (trailing padding: 0) and returns_t = Â_{t'} + V_t.
    With γ = λ = 1 (verl's defaults) and an outcome reward R on the last token, Â_t = R − V_t.

    Bias: λ < 1 trades variance for the critic's bias; γ = λ = 1 is the unbiased Monte-Carlo advantage R − V_t.

    Args:
        token_rewards: (N, T) per-token rewards (``outcome_token_rewards`` for outcome rewards).
        values: (N, T) V_t from the critic at the positions that predict each response token (detached).
        mask: (N, T) response mask, bool or 0/1.
        gamma: discount γ ∈ [0, 1].
        lam: GAE λ ∈ [0, 1].

    Returns:
        ``(advantages, returns)``, both (N, T) in ``values``' dtype, without gradient.

    Raises:
        ValueError: mismatched or non-2-D shapes, γ or λ outside [0, 1].

    References:
        Schulman et al. (2016), "High-Dimensional Continuous Control Using Generalized Advantage Estimation",
        arXiv:1506.02438, eq. 16; verl ``compute_gae_advantage_return``.
    """
    n, t_len = _check_same_shape({"token_rewards": token_rewards, "values": values, "mask": mask})
    for name, x in (("gamma", gamma), ("lam", lam)):
        if not (math.isfinite(x) and 0.0 <= x <= 1.0):
            raise ValueError(f"{name} must lie in [0, 1], got {x!r}")
    with torch.no_grad():
        v = values.detach()
        r = token_rewards.detach().to(v.dtype)
        keep = mask != 0  # (N, T)
        next_value = torch.zeros(n, dtype=v.dtype, device=v.device)  # V_{t'}
        last_adv = torch.zeros(n, dtype=v.dtype, device=v.device)  # Â_{t'}
        adv = torch.empty_like(v)
        for t in reversed(range(t_len)):
            delta = r[:, t] + gamma * next_value - v[:, t]  # (N,)
            candidate = delta + gamma * lam * last_adv
            next_value = torch.where(keep[:, t], v[:, t], next_value)
            last_adv = torch.where(keep[:, t], candidate, last_adv)
            adv[:, t] = last_adv
        return adv, adv + v


def whiten(x: torch.Tensor, mask: torch.Tensor, *, shift_mean: bool = True, eps: float = 1e-8) -> torch.Tensor:
    r"""Batch-wide token whitening over the unmasked entries (verl's ``masked_whiten``).

        m = Σ_{mask} x / n,   s² = Σ_{mask} (x − m)² / (n − 1),   out = (x − m)/√(s² + ε)   (+ m if not shift_mean)

    n is the number of unmasked entries; the variance is unbiased, as verl's. Every position is transformed (masked
    ones too); only the statistics are masked.

    Args:
        x: (N, T) values (advantages).
        mask: (N, T) bool or 0/1.
        shift_mean: if False the mean is added back after scaling.
        eps: ε added to the variance.

    Returns:
        (N, T) whitened values.

    Raises:
        ValueError: mismatched shapes or fewer than 2 unmasked entries (verl raises too: the variance is undefined).
    """
    _check_same_shape({"x": x, "mask": mask})
    keep = mask != 0
    n = int(keep.sum())
    if n < 2:
        raise ValueError(f"whiten needs at least 2 unmasked entries to estimate a variance, got {n}")
    mean = torch.where(keep, x, 0.0).sum() / n  # ()
    var = torch.where(keep, (x - mean) ** 2, 0.0).sum() / (n - 1)  # () unbiased
    out = (x - mean) * torch.rsqrt(var + eps)
    return out + mean if not shift_mean else out


def outcome_token_rewards(rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Place each rollout's outcome reward on its last unmasked response token, zeros elsewhere.

    verl's reward managers put the score at ``valid_response_length − 1``; for right-padded responses that is the
    last unmasked token. A row without unmasked tokens (empty response) gets no reward (all zeros).

    Args:
        rewards: (N,) outcome rewards.
        mask: (N, T) response mask, bool or 0/1.

    Returns:
        (N, T) token rewards in ``rewards``' dtype (float32 for integer rewards), on ``mask``'s device.

    Raises:
        ValueError: if ``rewards`` is not (N,) for an (N, T) mask.

    >>> outcome_token_rewards(torch.tensor([1.0, -1.0]), torch.tensor([[1, 1, 0], [1, 0, 1]]))
    tensor([[ 0.,  1.,  0.],
            [ 0.,  0., -1.]])
    """
    if mask.ndim != 2 or tuple(rewards.shape) != (mask.shape[0],):
        raise ValueError(f"need rewards (N,) and mask (N, T), got {tuple(rewards.shape)} and {tuple(mask.shape)}")
    dtype = rewards.dtype if rewards.is_floating_point() else torch.float32
    keep = mask != 0  # (N, T)
    t_len = mask.shape[1]
    last = t_len - 1 - torch.flip(keep, dims=[1]).int().argmax(dim=1)  # (N,) last unmasked index (0 if none)
    out = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    placed = torch.where(keep.any(dim=1), rewards.to(device=mask.device, dtype=dtype), 0.0)  # (N,)
    out[torch.arange(mask.shape[0], device=mask.device), last] = placed
    return out


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_range: float = 0.2,
    agg: AggMode = "token-mean",
    norm: LossNorm | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""PPO's clipped value loss (verl 0.9.1's ``compute_value_loss``).

        V_clip = clip(V, V_old − c, V_old + c),   ℓ_t = max((V − G)², (V_clip − G)²),   loss = ½·agg(ℓ)

    G = returns (GAE's Â + V_old, not whitened). ``agg`` and ``norm`` are the policy loss's
    (:func:`v05.train.loss.policy_loss`): ``token-mean``, ``seq-mean-token-mean``, ``seq-mean-token-sum-norm``, with
    the mini-batch's global counts so that micro-batch losses sum to the mini-batch loss.
    Degenerate cases: at V = V_old (first epoch) both branches agree; an all-masked batch gives loss 0.

    Args:
        values: (N, T) current V (with gradient).
        old_values: (N, T) V_old from before the update (detached).
        returns: (N, T) regression targets G (detached).
        mask: (N, T) response mask, bool or 0/1.
        clip_range: c > 0 (verl's ``cliprange_value``; its critic default is 0.5).
        agg: aggregation mode.
        norm: the mini-batch's global counts when it is split into micro-batches.

    Returns:
        ``(loss, clip_frac)``: the scalar loss with gradient and the detached token-mean fraction where the clipped
        branch is larger ((V_clip − G)² > (V − G)², verl's ``vf_clipfrac``).

    Raises:
        ValueError: mismatched shapes, a bad ``clip_range`` or unknown ``agg``.

    References:
        Schulman et al. (2017), arXiv:1707.06347; verl ``compute_value_loss``.
    """
    _check_same_shape({"values": values, "old_values": old_values, "returns": returns, "mask": mask})
    if not (math.isfinite(clip_range) and clip_range > 0):
        raise ValueError(f"clip_range must be a finite number > 0, got {clip_range!r} (verl's default: 0.5)")
    if agg not in AGG_MODES:
        raise ValueError(f"agg must be one of {', '.join(AGG_MODES)}; got {agg!r}")
    old = old_values.detach().to(values.dtype)
    target = returns.detach().to(values.dtype)
    clipped = torch.clamp(values, old - clip_range, old + clip_range)
    loss_plain = (values - target) ** 2
    loss_clipped = (clipped - target) ** 2
    keep = mask != 0
    loss = 0.5 * _aggregate(torch.maximum(loss_plain, loss_clipped), keep, agg, norm)
    with torch.no_grad():
        clip_frac = _token_mean((loss_clipped > loss_plain).to(values.dtype), keep)
    return loss, clip_frac


@dataclass(frozen=True, kw_only=True, slots=True)
class CriticConfig:
    """How PPO's critic is built and trained (defaults: verl's γ = λ = 1; clipped value loss; whitened advantages)."""

    mode: CriticMode = "separate"
    """``separate``: a copy of the policy's transformer trunk + value head with its own AdamW (verl's critic);
    ``head``: a value head on the policy's own last hidden state (shared trunk; ``vf_coef`` weighs its loss)."""
    gamma: float = 1.0
    """GAE discount γ ∈ [0, 1]."""
    lam: float = 1.0
    """GAE λ ∈ [0, 1]; λ = 1 gives the Monte-Carlo advantage R − V_t."""
    clip_range: float = 0.2
    """Value clip c > 0 of the clipped value loss (verl's critic default is 0.5)."""
    lr: float = 1e-4
    """AdamW learning rate of the critic's own parameters (trunk + head, or the head alone in ``head`` mode)."""
    vf_coef: float = 0.5
    """``head`` mode: the value loss enters the policy loss as ``vf_coef · value_loss`` (the trunk is shared)."""
    whiten: bool = True
    """Whiten the GAE advantages over the batch's response tokens (verl always does); returns are never whitened."""

    def __post_init__(self) -> None:
        if self.mode not in ("head", "separate"):
            raise ValueError(f"CriticConfig.mode must be 'head' or 'separate', got {self.mode!r}")
        for name in ("gamma", "lam"):
            value = getattr(self, name)
            if not (math.isfinite(value) and 0.0 <= value <= 1.0):
                raise ValueError(f"CriticConfig.{name} must lie in [0, 1], got {value!r} (default 1.0)")
        for name in ("clip_range", "lr"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"CriticConfig.{name} must be a finite number > 0, got {value!r}")
        if not (math.isfinite(self.vf_coef) and self.vf_coef >= 0):
            raise ValueError(f"CriticConfig.vf_coef must be a finite number >= 0, got {self.vf_coef!r}")


class ValueHead(nn.Module):
    """V = w·h + b on a hidden state h (float32), initialised at zero."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.score = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.score.weight)
        nn.init.zeros_(self.score.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """(..., H) hidden states → (...) values."""
        return self.score(hidden.to(self.score.weight.dtype)).squeeze(-1)


class Critic:
    """PPO's value model: a value head on a transformer trunk, evaluated at the positions that predict the response.

    ``separate`` mode owns a deep copy of the policy's trunk (``policy.base_model``, e.g. ``LlamaModel``) and the head,
    trained by its own AdamW. ``head`` mode shares the policy's trunk: :meth:`values` reads the policy's last hidden
    state (passed as ``hidden_states`` from the loss forward with ``output_hidden_states=True``, or computed by
    running the shared trunk); its AdamW steps the head only, and the trunk learns through the policy optimizer from
    ``vf_coef · value_loss``. Build with :meth:`build`.
    """

    def __init__(self, config: CriticConfig, trunk: nn.Module, head: ValueHead) -> None:
        self.config = config
        self.trunk = trunk
        self.head = head
        self.optimizer = torch.optim.AdamW(self.parameters(), lr=config.lr)

    @classmethod
    def build(cls, policy_model: PreTrainedModel, config: CriticConfig) -> Critic:
        """The critic for ``policy_model`` (a causal LM whose ``base_model`` is its transformer trunk).

        Raises:
            ValueError: if the model exposes no separate trunk (``base_model`` is the model itself).
        """
        trunk = policy_model.base_model
        if trunk is policy_model:
            raise ValueError(
                f"{type(policy_model).__name__} has no transformer trunk under base_model_prefix "
                f"{policy_model.base_model_prefix!r}; the critic needs an AutoModel-level module (e.g. model.model)"
            )
        if config.mode == "separate":
            trunk = copy.deepcopy(trunk)
            trunk.train()
        device = next(trunk.parameters()).device
        head = ValueHead(int(policy_model.config.hidden_size)).to(device)
        return cls(config, trunk, head)

    def parameters(self) -> Iterator[nn.Parameter]:
        """The parameters the critic's optimizer steps (trunk + head, or the head alone in ``head`` mode)."""
        if self.config.mode == "separate":
            yield from self.trunk.parameters()
        yield from self.head.parameters()

    def values(
        self,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        response_ids: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        hidden_states: torch.Tensor | None = None,
    ) -> torch.Tensor:
        r"""V at the positions that predict each response token: P − 1 … P + R − 2 (those ``sequence_logprobs`` uses).

            h = trunk(cat(prompt, response), attention_mask, position_ids = cumsum(mask) − 1),
            V_t = head(h[P − 1 + t]),   t = 0 … R − 1,   0 where ``response_mask`` is 0 (as verl's critic)

        Args:
            prompt_ids: (N, P) left-padded prompt ids.
            prompt_mask: (N, P) 1 for real prompt tokens.
            response_ids: (N, R) right-padded response ids.
            response_mask: (N, R) 1 for response tokens.
            hidden_states: ``head`` mode only: (N, P + R, H) last hidden states of the policy's forward over
                ``cat(prompt, response)`` (``output_hidden_states=True``, ``.hidden_states[-1]``); saves a forward.

        Returns:
            (N, R) float32 values, with gradient (call under ``torch.no_grad()`` for V_old).

        Raises:
            ValueError: mismatched shapes, empty prompts, or ``hidden_states`` in ``separate`` mode.
        """
        check_sequences(prompt_ids, prompt_mask, response_ids, response_mask)
        (n, p), r = prompt_ids.shape, response_ids.shape[1]
        if p == 0:
            raise ValueError("prompts are empty (P = 0): the first response token has no position to be valued at")
        device = self.head.score.weight.device
        if hidden_states is not None:
            if self.config.mode != "head":
                raise ValueError("hidden_states are the policy's: pass them in 'head' mode only (separate has its own)")
            if hidden_states.ndim != 3 or tuple(hidden_states.shape[:2]) != (n, p + r):
                raise ValueError(f"hidden_states must be (N, P + R, H) = ({n}, {p + r}, H), got {hidden_states.shape}")
            hidden = hidden_states
        else:
            input_ids = torch.cat([prompt_ids, response_ids], dim=1).to(device)  # (N, P + R)
            attention_mask = torch.cat([prompt_mask, response_mask], dim=1).to(device)  # (N, P + R)
            position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)  # (N, P + R)
            out = self.trunk(
                input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
            )
            hidden = out.last_hidden_state  # (N, P + R, H)
        v = self.head(hidden[:, p - 1 : p + r - 1].to(device))  # (N, R): positions P − 1 … P + R − 2
        return torch.where(response_mask.to(device) != 0, v, 0.0)

    def train(self, mode: bool = True) -> Critic:
        """Set train/eval mode of the critic's own modules (the shared trunk in ``head`` mode is left alone)."""
        if self.config.mode == "separate":
            self.trunk.train(mode)
        self.head.train(mode)
        return self

    def state_dict(self) -> dict[str, object]:
        """Tensors to checkpoint: head, trunk (``separate`` only; the shared one is the policy's) and optimizer."""
        state: dict[str, object] = {
            "mode": self.config.mode,
            "head": self.head.state_dict(),
            "optimizer": self.optimizer.state_dict(),
        }
        if self.config.mode == "separate":
            state["trunk"] = self.trunk.state_dict()
        return state

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Restore :meth:`state_dict` (weights and optimizer).

        Raises:
            ValueError: if the state was saved in another mode.
        """
        if state.get("mode") != self.config.mode:
            raise ValueError(
                f"critic state was saved in mode {state.get('mode')!r}, this critic is {self.config.mode!r}"
            )
        self.head.load_state_dict(state["head"])  # type: ignore[arg-type]
        if self.config.mode == "separate":
            self.trunk.load_state_dict(state["trunk"])  # type: ignore[arg-type]
        self.optimizer.load_state_dict(state["optimizer"])  # type: ignore[arg-type]
