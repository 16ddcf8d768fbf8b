r"""Policy-update loss: dual-clip PPO surrogate, KL to a reference, entropy bonus, DAPO overlong shaping.

The loss of one micro-batch is ``agg(L) + kl_coef·agg(KL) − entropy_coef·agg(H)`` with verl 0.9.1's vanilla
policy loss, ``agg_loss`` and ``kl_penalty`` (``verl/trainer/ppo/core_algos.py``); a ``LossNorm`` of global counts
makes the micro-batch losses sum to the mini-batch loss. Deviations from verl 0.9.1:
- ``seq-mean-token-mean`` divides a sequence's token sum by max(n_i, 1), not n_i + 1e-8 (relative change ≤ 1e-8).
- An all-masked batch gives loss 0 with zero gradient (verl: 0/0 = NaN for ``token-mean``).
- ``dual_clip=None`` turns the dual clip off (verl always applies ``clip_ratio_c``).
- Only k1/k2/k3 KL estimators; no ``abs``/``full`` and no straight-through ``k3+`` variants.
- ``approx_kl_old`` is the k3 estimate of KL(old‖new); verl logs the k1 estimate ``ppo_kl = mean(−log ρ)``.
- ``pg_loss``/``kl``/``entropy`` diagnostics are local token-means in every mode (verl logs the aggregated value).
- ``overlong_shaping`` stops at −penalty beyond max_len (verl's DAPO manager is linear without a floor, but verl
  truncates responses at max_len, so the two agree on every length verl produces).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np
import numpy.typing as npt
import torch

from v05._checks import as_index_1d
from v05._types import FloatArray

AggMode = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
KLEstimator = Literal["k1", "k2", "k3"]
AGG_MODES: tuple[str, ...] = get_args(AggMode)
KL_ESTIMATORS: tuple[str, ...] = get_args(KLEstimator)

LOG_RATIO_CLAMP = 20.0
"""|log ρ| and |log(π_ref/π)| are clamped to this before exp (verl's bound; e^20 ≈ 4.9e8 stays finite in fp16/bf16)."""
K3_CLAMP = 10.0
"""The per-token k3 estimate is clamped to [−K3_CLAMP, K3_CLAMP], as verl's ``low_var_kl``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LossConfig:
    """Hyper-parameters of the policy-update loss (defaults: SPEC §7, DAPO clip-higher, no KL, no entropy bonus)."""

    clip_low: float = 0.2
    """ε_lo: ρ is clipped below at 1 − ε_lo (PPO, arXiv:1707.06347). In [0, 1)."""
    clip_high: float = 0.28
    """ε_hi: ρ is clipped above at 1 + ε_hi; ε_hi > ε_lo is DAPO's clip-higher (arXiv:2503.14476, eq. 10). ≥ 0."""
    dual_clip: float | None = 3.0
    """c > 1: for A < 0 the per-token loss is capped at −A·c (dual-clip PPO, arXiv:1912.09729); None disables."""
    agg: AggMode = "token-mean"
    """How per-token losses become a scalar: ``token-mean``, ``seq-mean-token-mean``, ``seq-mean-token-sum-norm``."""
    kl_coef: float = 0.0
    """β ≥ 0: weight of the KL to a frozen reference policy; 0 turns it off (no ``ref_logp`` needed)."""
    kl_estimator: KLEstimator = "k3"
    """Per-token KL estimator: ``k1``, ``k2`` or ``k3`` (Schulman, "Approximating KL divergence", 2020)."""
    entropy_coef: float = 0.0
    """≥ 0: weight of the entropy bonus subtracted from the loss; 0 turns it off (no ``entropy`` needed)."""

    def __post_init__(self) -> None:
        for name in ("clip_low", "clip_high", "kl_coef", "entropy_coef"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"LossConfig.{name} must be a finite number ≥ 0, got {value!r}")
        if self.clip_low >= 1:
            raise ValueError(
                f"LossConfig.clip_low must be < 1 so that the lower bound 1 − clip_low stays positive, "
                f"got {self.clip_low!r} (typical: 0.2)"
            )
        if self.dual_clip is not None and not (math.isfinite(self.dual_clip) and self.dual_clip > 1):
            raise ValueError(
                f"LossConfig.dual_clip must be a finite number > 1 (typical: 3.0) or None to disable it, "
                f"got {self.dual_clip!r}"
            )
        if self.agg not in AGG_MODES:
            raise ValueError(f"LossConfig.agg must be one of {', '.join(AGG_MODES)}; got {self.agg!r}")
        if self.kl_estimator not in KL_ESTIMATORS:
            raise ValueError(
                f"LossConfig.kl_estimator must be one of {', '.join(KL_ESTIMATORS)}; got {self.kl_estimator!r}"
            )


@dataclass(frozen=True, slots=True)
class LossNorm:
    """Global counts of one optimizer step's mini-batch, so that micro-batch losses sum to the mini-batch loss.

    Build it with ``loss_norm`` from the masks of all micro-batches of the step.
    """

    n_tokens: int
    """Response tokens (mask ≠ 0) in the whole mini-batch: the ``token-mean`` denominator."""
    n_seqs: int
    """Rollouts with at least one response token in the whole mini-batch: the ``seq-mean-*`` denominator."""
    max_len: int | None = None
    """``seq-mean-token-sum-norm``'s constant horizon; None uses each micro-batch's padded width T (verl's default)."""

    def __post_init__(self) -> None:
        for name in ("n_tokens", "n_seqs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"LossNorm.{name} must be an int ≥ 0, got {value!r}")
        if self.max_len is not None and (
            isinstance(self.max_len, bool) or not isinstance(self.max_len, int) or self.max_len < 1
        ):
            raise ValueError(f"LossNorm.max_len must be an int ≥ 1 or None, got {self.max_len!r}")


@dataclass(frozen=True, slots=True)
class LossTerms:
    """The loss to backpropagate and its detached diagnostics (local token-means over this micro-batch's mask)."""

    loss: torch.Tensor
    """() scalar with gradient: agg(L) + β·agg(KL) − entropy_coef·agg(H), already divided by the ``LossNorm``."""
    pg_loss: torch.Tensor
    """() token-mean of the clipped surrogate L."""
    kl: torch.Tensor
    """() token-mean of the KL estimate to the reference (0 when ``ref_logp`` is None)."""
    entropy: torch.Tensor
    """() token-mean of the policy entropy (0 when ``entropy`` is None)."""
    clip_frac: torch.Tensor
    """() fraction of tokens where the clipped branch is active: −A·clip(ρ) > −A·ρ (verl's ``pg_clipfrac``)."""
    dual_clip_frac: torch.Tensor
    """() fraction of tokens with A < 0 capped at −A·c (verl's ``pg_clipfrac_lower``; 0 when the dual clip is off)."""
    ratio_mean: torch.Tensor
    """() token-mean of ρ = π/π_old."""
    ratio_max_dev: torch.Tensor
    """() max |ρ − 1| over the masked tokens (0 for an all-masked batch): 0 on fresh rollouts whose old log-probs
    come from this forward; the bf16 check of the old log-probs reads it."""
    approx_kl_old: torch.Tensor
    """() k3 estimate of KL(π_old‖π): token-mean of ρ − 1 − log ρ."""


def loss_norm(masks: Sequence[torch.Tensor], *, max_len: int | None = None) -> LossNorm:
    """Global token and sequence counts of the micro-batches of one optimizer step.

        n_tokens = Σ_k Σ_{i,t} [m⁽ᵏ⁾_{i,t} ≠ 0],   n_seqs = Σ_k #{i : Σ_t m⁽ᵏ⁾_{i,t} > 0}

    All-masked rows are not counted, as in verl. Passing the result to ``policy_loss`` for every micro-batch makes
    Σ_k ∇loss⁽ᵏ⁾ equal ∇ of the loss of the concatenated batch, for every aggregation mode.

    Args:
        masks: K tensors of shape (B_k, T_k), the response masks of the micro-batches (bool or 0/1).
        max_len: the horizon of ``seq-mean-token-sum-norm``; None uses the widest T_k, which equals the padded
            width of the whole batch when the micro-batches are row slices of it. Pass the maximum response length
            for Dr. GRPO's constant normaliser.

    Returns:
        The ``LossNorm`` to pass to each micro-batch's ``policy_loss``.

    Raises:
        ValueError: if ``masks`` is empty or a mask is not 2-D.
    """
    if len(masks) == 0:
        raise ValueError("masks is empty: pass the response masks of all micro-batches of the step")
    for k, mask in enumerate(masks):
        if mask.ndim != 2:
            raise ValueError(f"masks[{k}] must be 2-D (B, T), got shape {tuple(mask.shape)}")
    n_tokens = sum(int((m != 0).sum()) for m in masks)
    n_seqs = sum(int((m != 0).any(dim=-1).sum()) for m in masks)
    horizon = max(int(m.shape[-1]) for m in masks) if max_len is None else max_len
    return LossNorm(n_tokens=n_tokens, n_seqs=n_seqs, max_len=horizon)


def kl_estimate(logp: torch.Tensor, ref_logp: torch.Tensor, *, estimator: KLEstimator = "k3") -> torch.Tensor:
    """Per-token estimate of KL(π‖π_ref) from the log-probabilities of tokens sampled from π.

        k1 = log π − log π_ref
        k2 = ½ (log π − log π_ref)²
        k3 = e^δ − δ − 1,   δ = clamp(log π_ref − log π, ±20),   then clamped to [−10, 10]

    k1 is unbiased but can be negative; k2 is biased with low variance; k3 is unbiased (before clamping) and ≥ 0.
    k1/k2/k3 are verl's ``kl``/``mse``/``low_var_kl``, with the same clamps. Equal log-probs give 0 for all three.

    Args:
        logp: (B, T) log π of the sampled tokens under the current policy.
        ref_logp: (B, T) log π_ref of the same tokens under the frozen reference policy.
        estimator: ``k1``, ``k2`` or ``k3``.

    Returns:
        (B, T) per-token estimates (padding positions are not masked here).

    Raises:
        ValueError: if the shapes differ or the estimator is unknown.

    References:
        J. Schulman (2020), "Approximating KL Divergence", http://joschu.net/blog/kl-approx.html.
    """
    if ref_logp.shape != logp.shape:
        raise ValueError(f"ref_logp must have the shape of logp {tuple(logp.shape)}, got {tuple(ref_logp.shape)}")
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"estimator must be one of {', '.join(KL_ESTIMATORS)}; got {estimator!r}")
    return _kl(logp, ref_logp.to(logp.dtype), estimator)


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    config: LossConfig,
    ref_logp: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    norm: LossNorm | None = None,
) -> LossTerms:
    r"""Dual-clip PPO loss with clip-higher, optional KL to a reference and entropy bonus, for one micro-batch.

        ρ = exp(clamp(log π − log π_old, ±20))
        L = max(−A·ρ, −A·clip(ρ, 1 − ε_lo, 1 + ε_hi));   if A < 0:  L ← min(L, −A·c)
        loss = agg(L) + β·agg(k(log π, log π_ref)) − entropy_coef·agg(H)

    agg over the tokens with m ≠ 0, nᵢ = Σ_t m_{i,t}, S = #{i : nᵢ > 0}, T the padded width:
        token-mean:               Σ_{i,t} L / Σ_i nᵢ
        seq-mean-token-mean:      (1/S) Σ_{i: nᵢ>0} (Σ_t L / nᵢ)                  (GRPO's sample-level loss)
        seq-mean-token-sum-norm:  Σ_{i,t} L / (S·T)                              (Dr. GRPO's constant normaliser)
    With ``norm``, Σ_i nᵢ, S and T are replaced by ``norm.n_tokens``, ``norm.n_seqs`` and ``norm.max_len`` (T if
    None), the counts of the whole mini-batch, so that Σ over micro-batches of ``loss.backward()`` equals the
    gradient of the mini-batch loss; without it the micro-batch is the whole batch (verl 0.9.1's ``agg_loss``).

    Degenerate cases: all-masked rows contribute nothing and are not counted in S; an all-masked batch gives
    loss 0 with zero gradient. A = 0 gives L = 0 and no policy gradient. At ρ = 1 (first epoch on fresh
    rollouts) L = −A, no clipping is active and ∇L = −A·∇log π (REINFORCE).

    Args:
        logp: (B, T) log π of the sampled response tokens under the current policy (with gradient).
        old_logp: (B, T) log π_old of the same tokens under the policy that sampled them.
        advantages: (B,) per-rollout advantages, broadcast over tokens, or (B, T) per-token advantages.
        mask: (B, T) response mask, bool or 0/1; nonzero marks a response token.
        config: clipping, aggregation, KL and entropy settings.
        ref_logp: (B, T) log π_ref under the frozen reference policy; required when ``config.kl_coef > 0``.
        entropy: (B, T) per-token entropy H of the current policy (with gradient); required when
            ``config.entropy_coef > 0``.
        norm: global counts of the mini-batch (``loss_norm``) when it is split into micro-batches.

    Returns:
        ``LossTerms`` with the scalar ``loss`` to backpropagate and detached diagnostics.

    Raises:
        ValueError: on mismatched shapes, a non-float ``logp``, or a missing ``ref_logp``/``entropy`` whose
            coefficient is positive.

    References:
        Schulman et al. (2017), "Proximal Policy Optimization Algorithms", arXiv:1707.06347, eq. 7.
        Ye et al. (2020), "Mastering Complex Control in MOBA Games with Deep RL" (dual clip), arXiv:1912.09729, eq. 5.
        Yu et al. (2025), "DAPO" (clip-higher, token-level loss), arXiv:2503.14476, eqs. 10 and 12.
        Liu et al. (2025), "Understanding R1-Zero-Like Training" (Dr. GRPO), arXiv:2503.20783.
    """
    adv = _check_inputs(logp, old_logp, advantages, mask, config, ref_logp, entropy)
    keep = mask != 0  # (B, T)
    log_ratio = torch.clamp(logp - old_logp, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # (B, T)
    ratio = torch.exp(log_ratio)
    loss_unclipped = -adv * ratio
    loss_clipped = -adv * torch.clamp(ratio, 1 - config.clip_low, 1 + config.clip_high)
    per_token = torch.maximum(loss_unclipped, loss_clipped)  # (B, T)
    dual_active = torch.zeros_like(keep)
    if config.dual_clip is not None:
        loss_cap = -adv * config.dual_clip
        dual_active = (adv < 0) & (per_token > loss_cap)
        per_token = torch.where(adv < 0, torch.minimum(per_token, loss_cap), per_token)

    loss = _aggregate(per_token, keep, config.agg, norm)
    kl = torch.zeros((), dtype=logp.dtype, device=logp.device)
    if ref_logp is not None:
        kl_token = _kl(logp, ref_logp.to(logp.dtype), config.kl_estimator)  # (B, T)
        kl = _token_mean(kl_token.detach(), keep)
        if config.kl_coef > 0:
            loss = loss + config.kl_coef * _aggregate(kl_token, keep, config.agg, norm)
    mean_entropy = torch.zeros((), dtype=logp.dtype, device=logp.device)
    if entropy is not None:
        entropy = entropy.to(logp.dtype)
        mean_entropy = _token_mean(entropy.detach(), keep)
        if config.entropy_coef > 0:
            loss = loss - config.entropy_coef * _aggregate(entropy, keep, config.agg, norm)

    with torch.no_grad():
        return LossTerms(
            loss=loss,
            pg_loss=_token_mean(per_token, keep),
            kl=kl,
            entropy=mean_entropy,
            clip_frac=_token_mean((loss_clipped > loss_unclipped).to(logp.dtype), keep),
            dual_clip_frac=_token_mean(dual_active.to(logp.dtype), keep),
            ratio_mean=_token_mean(ratio, keep),
            ratio_max_dev=torch.where(keep, (ratio - 1).abs(), 0.0).amax() if keep.numel() else ratio.new_zeros(()),
            approx_kl_old=_token_mean((ratio - 1 - log_ratio).clamp_min(0.0), keep),  # ≥ 0; rounding gave −1e-9
        )


def overlong_shaping(lengths: npt.ArrayLike, *, max_len: int, buffer: int, penalty: float) -> FloatArray:
    """DAPO's soft overlong punishment, to be added to the rollouts' rewards.

        R_len(L) = 0                                   if L ≤ L_max − L_buf
                 = −penalty · (L − (L_max − L_buf)) / L_buf   if L_max − L_buf < L ≤ L_max
                 = −penalty                            if L > L_max

    The penalty grows linearly from 0 to −penalty over the last ``buffer`` tokens. verl's DAPO reward manager
    computes min(−(L − (L_max − L_buf))/L_buf · penalty, 0), identical for L ≤ L_max (verl never produces longer
    responses); beyond L_max we keep the paper's floor −penalty. ``penalty = 0`` gives all zeros.

    Args:
        lengths: (N,) response lengths in tokens (non-negative integers).
        max_len: L_max, the maximum response length (≥ 1).
        buffer: L_buf, the soft-punishment interval in tokens, 1 ≤ buffer ≤ max_len.
        penalty: the punishment at L_max (DAPO: 1.0), finite and ≥ 0.

    Returns:
        (N,) float64 shaping terms in [−penalty, 0].

    Raises:
        ValueError: on non-integer or negative lengths, or out-of-range ``max_len``/``buffer``/``penalty``.

    References:
        Yu et al. (2025), "DAPO: An Open-Source LLM Reinforcement Learning System at Scale", arXiv:2503.14476, eq. 13.
    """
    n_tokens = as_index_1d(lengths, "lengths", allow_empty=True)  # (N,)
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1:
        raise ValueError(f"max_len must be an int ≥ 1, got {max_len!r}")
    if isinstance(buffer, bool) or not isinstance(buffer, int) or not 1 <= buffer <= max_len:
        raise ValueError(f"buffer must be an int in [1, max_len={max_len}], got {buffer!r}")
    if not math.isfinite(penalty) or penalty < 0:
        raise ValueError(f"penalty must be a finite number ≥ 0, got {penalty!r}")
    exceed = (n_tokens - (max_len - buffer)).astype(np.float64)  # (N,)
    return np.clip(-penalty * exceed / buffer, -penalty, 0.0)


def _check_inputs(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    config: LossConfig,
    ref_logp: torch.Tensor | None,
    entropy: torch.Tensor | None,
) -> torch.Tensor:
    """Validate ``policy_loss``'s inputs; return the advantages as (B, T)-broadcastable in logp's dtype."""
    if logp.ndim != 2 or not logp.is_floating_point():
        raise ValueError(f"logp must be a 2-D (B, T) float tensor, got shape {tuple(logp.shape)} {logp.dtype}")
    shape = tuple(logp.shape)
    named = {"old_logp": old_logp, "mask": mask, "ref_logp": ref_logp, "entropy": entropy}
    for name, tensor in named.items():
        if tensor is not None and tuple(tensor.shape) != shape:
            raise ValueError(f"{name} must have the shape of logp {shape}, got {tuple(tensor.shape)}")
    if tuple(advantages.shape) not in (shape[:1], shape):
        raise ValueError(f"advantages must have shape (B,) = {shape[:1]} or (B, T) = {shape}, got {advantages.shape}")
    if config.kl_coef > 0 and ref_logp is None:
        raise ValueError(f"config.kl_coef = {config.kl_coef} > 0 needs ref_logp; pass it or set kl_coef = 0")
    if config.entropy_coef > 0 and entropy is None:
        raise ValueError(
            f"config.entropy_coef = {config.entropy_coef} > 0 needs entropy; pass it or set entropy_coef = 0"
        )
    adv = advantages.to(logp.dtype)
    return adv.unsqueeze(-1) if adv.ndim == 1 else adv  # (B, 1) or (B, T)


def _kl(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str) -> torch.Tensor:
    """(B, T) per-token KL estimate; see ``kl_estimate``."""
    if estimator == "k1":
        return logp - ref_logp
    if estimator == "k2":
        return 0.5 * (logp - ref_logp).square()
    delta = torch.clamp(ref_logp - logp, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # log(π_ref/π)
    return torch.clamp(torch.exp(delta) - delta - 1, -K3_CLAMP, K3_CLAMP)


def _aggregate(values: torch.Tensor, keep: torch.Tensor, agg: str, norm: LossNorm | None) -> torch.Tensor:
    """() scalar aggregate of (B, T) per-token values over ``keep``, with local or global (``norm``) counts."""
    values = torch.where(keep, values, 0.0)  # (B, T); also drops non-finite padding values
    n_i = keep.sum(dim=-1)  # (B,)
    if agg == "token-mean":
        n_tokens = n_i.sum().clamp_min(1) if norm is None else max(norm.n_tokens, 1)
        return values.sum() / n_tokens  # ()
    n_seqs = (n_i > 0).sum().clamp_min(1) if norm is None else max(norm.n_seqs, 1)
    if agg == "seq-mean-token-mean":
        return (values.sum(dim=-1) / n_i.clamp_min(1)).sum() / n_seqs  # (B,) -> ()
    horizon = keep.shape[-1] if norm is None or norm.max_len is None else norm.max_len
    return values.sum() / (n_seqs * horizon)  # ()


def _token_mean(values: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """() mean of (B, T) values over ``keep`` (0 for an all-masked batch)."""
    return torch.where(keep, values, 0.0).sum() / keep.sum().clamp_min(1)
