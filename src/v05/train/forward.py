"""The trainer's shared-prefix forward: per-token log-probabilities when the k rollouts of a group share a prompt.

:func:`shared_prefix_logprobs` computes the numbers of :func:`v05.engines.logprobs.sequence_logprobs` (one forward
over ``cat(prompt, response)``) when the k rollouts of a group share their prompt: the prompt goes through the model
once per group (its key/value cache is then gathered to every rollout, gradients flow back through the gather), and
only the responses run per rollout — with k = 4 and short answers it halves the training forward + backward. Equal to
:func:`~v05.engines.logprobs.sequence_logprobs` up to float rounding (tested: ~1e-6).
"""

from __future__ import annotations

import inspect
from functools import cache

import numpy as np
import torch
from transformers import PreTrainedModel

__all__ = ["prefix_rows", "shared_prefix_logprobs"]


def prefix_rows(group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first rollout of each group and, per rollout, the row of its group's prompt in that list.

    Args:
        group: (N,) group id of each rollout (any integers; rollouts of one group share their prompt).

    Returns:
        ``(first (G',), rows (N,))`` with ``group[first[rows]] == group``; rows follow first appearance.
    """
    group = np.asarray(group)
    uniq, first, inverse = np.unique(group, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # groups by first appearance
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    return first[order], rank[inverse.reshape(-1)]


def _cache_arg(model: PreTrainedModel) -> str:
    """The forward keyword of the KV cache: ``cache`` (transformers ≥ 5.2x) or ``past_key_values`` (older).

    Read from the model's own class: a peft wrapper's ``forward`` takes ``**kwargs`` and hands them on to it.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return _forward_cache_arg(type(base))


@cache
def _forward_cache_arg(model_cls: type) -> str:
    """``_cache_arg`` of a model class (cached: the signature is read once a class)."""
    return "cache" if "cache" in inspect.signature(model_cls.forward).parameters else "past_key_values"


def shared_prefix_logprobs(
    model: PreTrainedModel,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
    rows: torch.Tensor | np.ndarray,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    r"""``sequence_logprobs`` (:mod:`v05.engines.logprobs`) for rollouts sharing prompts, each prompt run once.

        prefix:    model(x_g) for the G' distinct prompts → logits at the last prompt position, KV cache (G', ...)
        gather:    cache_i = cache_{rows_i};   z₀ of rollout i = last prompt logits of rows_i
        responses: model(y_i[:−1] | cache_i) at positions n_g … n_g + R − 2 → z₁ … z_{R−1}

    Args:
        model: a causal LM with a KV cache (``use_cache``) whose cache can be reordered along the batch.
        prompt_ids: (G', P) left-padded distinct prompts.
        prompt_mask: (G', P) 1 for real prompt tokens.
        response_ids: (N, R) right-padded responses.
        response_mask: (N, R) 1 for response tokens (EOS included).
        rows: (N,) row of each rollout's prompt in ``prompt_ids`` (:func:`prefix_rows`).
        temperature: T > 0, as in ``sequence_logprobs``.
        with_entropy: also return the per-token entropy.

    Returns:
        ``(logp, entropy)`` as ``sequence_logprobs``: (N, R) float32, 0 where masked; differentiable.

    Raises:
        ValueError: mismatched shapes, ``temperature ≤ 0`` or rows out of range.
    """
    if not temperature > 0:
        raise ValueError(f"temperature={temperature!r} must be > 0 (greedy rollouts are scored at T = 1)")
    rows_t = torch.as_tensor(np.asarray(rows), dtype=torch.long)
    n, r = response_ids.shape
    if prompt_ids.shape != prompt_mask.shape or response_ids.shape != response_mask.shape or rows_t.shape != (n,):
        raise ValueError(
            f"shapes do not fit: prompts {tuple(prompt_ids.shape)}/{tuple(prompt_mask.shape)}, responses "
            f"{tuple(response_ids.shape)}/{tuple(response_mask.shape)}, rows {tuple(rows_t.shape)}"
        )
    if n and (int(rows_t.min()) < 0 or int(rows_t.max()) >= prompt_ids.shape[0]):
        raise ValueError(f"rows must index the {prompt_ids.shape[0]} prompts, got [{int(rows_t.min())}, "
                         f"{int(rows_t.max())}]")  # fmt: skip
    if prompt_ids.shape[1] == 0:
        raise ValueError("prompts are empty (P = 0): the first response token has no context to condition on")
    if r == 0:
        empty = torch.zeros((n, 0), dtype=torch.float32, device=response_ids.device)
        return empty, (empty.clone() if with_entropy else None)
    device = next(model.parameters()).device
    p_ids, p_mask, rows_t = prompt_ids.to(device), prompt_mask.to(device), rows_t.to(device)
    r_ids, r_mask = response_ids.to(device), response_mask.to(device)
    p_pos = (p_mask.long().cumsum(-1) - 1).clamp(min=0)  # (G', P) left padding starts at position 0
    kw = _cache_arg(model)
    out = model(input_ids=p_ids, attention_mask=p_mask, position_ids=p_pos, use_cache=True, logits_to_keep=1)
    kv = getattr(out, "cache", None) if kw == "cache" else out.past_key_values
    if kv is None:
        kv = out.past_key_values
    kv.reorder_cache(rows_t)  # (G', ...) → (N, ...); index_select keeps the graph to the prefix
    first = out.logits[:, -1][rows_t]  # (N, V) logits of the first response token
    if r > 1:
        mask = torch.cat([p_mask[rows_t], r_mask[:, :-1]], dim=1)  # (N, P + R − 1)
        pos = p_mask.long().sum(1)[rows_t][:, None] + torch.arange(r - 1, device=device)[None, :]  # (N, R − 1)
        rest = model(input_ids=r_ids[:, :-1], attention_mask=mask, position_ids=pos, use_cache=True, **{kw: kv})
        logits = torch.cat([first[:, None], rest.logits], dim=1)  # (N, R, V)
    else:
        logits = first[:, None]
    logp_v = torch.log_softmax(logits.float() / temperature, dim=-1)  # (N, R, V)
    logp = logp_v.gather(-1, r_ids.unsqueeze(-1)).squeeze(-1)  # (N, R)
    keep = r_mask.bool()
    entropy = None
    if with_entropy:
        entropy = torch.where(keep, -(logp_v.exp() * logp_v).sum(-1), 0.0)  # (N, R)
    return torch.where(keep, logp, 0.0), entropy
