"""Per-token log-probabilities (and entropies) of given responses under a policy: log π(yₜ | x, y₍<ₜ₎).

One forward over ``cat(prompt, response)``; the same function gives the differentiable log π_θ for the trainer's
loss and, under ``torch.no_grad()``, reference or old log-probs — the vLLM engine recomputes its ``old_logp`` with it.
Positions follow the left padding of the prompts exactly as ``model.generate`` numbers them, so on the HF engine's
own rollouts it reproduces that engine's ``old_logp``. The trainer's shared-prefix variant, which runs each prompt
once per group, is :func:`v05.train.forward.shared_prefix_logprobs`.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

__all__ = ["check_sequences", "sequence_logprobs"]


def check_sequences(
    prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, response_ids: torch.Tensor, response_mask: torch.Tensor
) -> None:
    """Reject ids/masks that do not form (N, P) prompts and (N, R) responses of matching shapes (ValueError)."""
    if prompt_ids.shape != prompt_mask.shape or response_ids.shape != response_mask.shape:
        raise ValueError(
            f"ids and masks differ in shape: prompt {tuple(prompt_ids.shape)} vs {tuple(prompt_mask.shape)}, "
            f"response {tuple(response_ids.shape)} vs {tuple(response_mask.shape)}"
        )
    if prompt_ids.ndim != 2 or response_ids.ndim != 2 or prompt_ids.shape[0] != response_ids.shape[0]:
        raise ValueError(
            f"need (N, P) prompts and (N, R) responses, got {tuple(prompt_ids.shape)}, {tuple(response_ids.shape)}"
        )


def sequence_logprobs(
    model: PreTrainedModel,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    r"""Log-probability of each response token, log π(yₜ | x, y₍<ₜ₎) = log_softmax(zₜ / T)[yₜ].

        x = cat(prompt, response),   attention_mask = cat(prompt_mask, response_mask),
        position_ids = (cumsum(attention_mask) − 1).clamp(min=0)   (left-padded prompts start at position 0),
        zₜ = logits at positions P − 1 … P + R − 2   (the position before each response token),
        Hₜ = −Σ_v π(v) log π(v)   (entropy of the same tempered distribution).

    Only the R + 1 last positions go through the LM head (``logits_to_keep``) and the log_softmax is taken over the
    response slice only, in float32.

    Args:
        model: a causal LM accepting ``input_ids``, ``attention_mask``, ``position_ids`` and ``logits_to_keep``.
        prompt_ids: (N, P) left-padded prompt ids.
        prompt_mask: (N, P) 1 for real prompt tokens.
        response_ids: (N, R) right-padded response ids.
        response_mask: (N, R) 1 for response tokens (EOS included).
        temperature: T > 0; use the sampling temperature to get the engine's ``old_logp``.
        with_entropy: also return the per-token entropy.

    Returns:
        ``(logp, entropy)``: (N, R) float32 log-probabilities, 0 where ``response_mask`` is 0, and (N, R) entropies
        (0 where masked) or None. Differentiable unless called under ``torch.no_grad()``.

    Raises:
        ValueError: for mismatched shapes or ``temperature ≤ 0``.
    """
    if not temperature > 0:
        raise ValueError(f"temperature={temperature!r} must be > 0 (greedy rollouts are scored at T = 1)")
    check_sequences(prompt_ids, prompt_mask, response_ids, response_mask)
    if prompt_ids.shape[1] == 0:
        raise ValueError("prompts are empty (P = 0): the first response token has no context to condition on")
    n, r = response_ids.shape
    if r == 0:
        empty = torch.zeros((n, 0), dtype=torch.float32, device=response_ids.device)
        return empty, (empty.clone() if with_entropy else None)
    device = next(model.parameters()).device
    input_ids = torch.cat([prompt_ids, response_ids], dim=1).to(device)  # (N, P + R)
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1).to(device)  # (N, P + R)
    position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)  # (N, P + R)
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        use_cache=False,
        logits_to_keep=r + 1,
    )
    logits = out.logits[:, :-1].float() / temperature  # (N, R, V): positions P − 1 … P + R − 2
    logp_v = torch.log_softmax(logits, dim=-1)  # (N, R, V)
    targets = response_ids.to(device)
    logp = logp_v.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (N, R)
    mask = response_mask.to(device).bool()
    entropy = None
    if with_entropy:
        entropy = -(logp_v.exp() * logp_v).sum(-1)  # (N, R)
        entropy = torch.where(mask, entropy, 0.0)
    return torch.where(mask, logp, 0.0), entropy
