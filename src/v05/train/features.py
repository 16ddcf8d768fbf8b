"""POISE's rollout features, read from the policy's own forward: hidden states of one layer and token entropies.

:func:`recompute_pass` is the old-log-prob forward of the trainer with a hook on one decoder layer: the same pass
returns log π_old (equal to ``engines.logprobs.sequence_logprobs`` under ``no_grad``) and, per rollout, the mean
layer-L state of the last prompt tokens, of the last response tokens, and three entropy summaries (POISE Step A,
methods-siblings.md §3.2). :func:`prompt_features` is the prompt half alone (one prefill, no rollouts);
:class:`PolicyFeatureBackend` serves it as an embedder backend, so an in-context prior can use the live policy's
prompt representation.

Deviations from the POISE release and choices:
- Tag spans are found in the response decoded token by token (each token id decoded alone), not through the offset
  mapping of a re-encoding: sampled ids need not be the tokenizer's canonical encoding of their text, and the
  per-token pieces map characters back to the sampled tokens exactly. A token belongs to a span when its decoded
  characters overlap it.
- Answer span: POISE takes ``<answer>…</answer>``, else the text after ``</think>``, and gives 0 when neither exists.
  Here a response with neither tag is all answer (mean over all response tokens), so that tag-free tasks still get an
  informative third scalar. The reasoning span starts after the first ``<think>`` or, when the think block was opened
  by the chat template, at the response start; it is 0 without ``</think>``.
- The responses get one extra masked column in the forward, so that the shared-prefix pass also runs the last
  response token (whose state the log-probs never need) and a batch with R = 0 still runs the prompts.
- Both passes run in eval mode (as verl's ``compute_log_prob``); the model's mode is restored afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import numpy.typing as npt
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from v05._types import FloatArray
from v05.engines.hf import Rollouts, _eval_mode, prompt_special_tokens
from v05.engines.logprobs import sequence_logprobs
from v05.train.forward import prefix_rows, shared_prefix_logprobs

__all__ = [
    "FeatureConfig",
    "PolicyFeatureBackend",
    "RolloutFeatures",
    "capture_layer",
    "prompt_features",
    "recompute_pass",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class FeatureConfig:
    """Which hidden states and token spans make up the features (POISE Step A).

    Example:
        >>> FeatureConfig(n_prompt=0)
        Traceback (most recent call last):
        ...
        ValueError: n_prompt=0 must be an integer ≥ 1 (POISE uses 10 for Qwen3-4B, 32 for OLMo-3-7B)
    """

    layer: int = -1
    """Decoder layer whose output hidden state is read (before the final norm); negative counts from the end.
    POISE: 19 for Qwen3-4B (of 36), 7 for OLMo-3-7B (of 32)."""
    n_prompt: int = 10
    """Mean over the last ``n_prompt`` valid prompt tokens (all of them if the prompt is shorter)."""
    n_response: int = 10
    """Mean over the last ``n_response`` valid response tokens, truncated at (and including) the last ``think_end``."""
    think_start: str = "<think>"
    """Opening tag of the reasoning span (may be absent: chat templates often open the think block in the prompt)."""
    think_end: str = "</think>"
    """Closing tag of the reasoning span; the response feature ends at its last occurrence."""
    answer_tags: tuple[str, str] = ("<answer>", "</answer>")
    """Opening and closing tags of the answer span."""

    def __post_init__(self) -> None:
        if isinstance(self.layer, bool) or not isinstance(self.layer, int):
            raise ValueError(f"layer={self.layer!r} must be an integer (negative counts from the last layer)")
        for name in ("n_prompt", "n_response"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"{name}={value!r} must be an integer ≥ 1 (POISE uses 10 for Qwen3-4B, 32 for OLMo-3-7B)"
                )
        tags = (self.think_start, self.think_end, *self.answer_tags)
        if len(self.answer_tags) != 2 or not all(isinstance(t, str) and t for t in tags):
            raise ValueError(f"tags must be non-empty strings and answer_tags a pair, got {tags!r}")


def _decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    """The decoder layer list: ``model.model.layers`` (Llama/Qwen-like causal LMs) or ``model.layers`` (base models)."""
    for owner in (getattr(model, "model", None), model):
        layers = getattr(owner, "layers", None)
        if isinstance(layers, torch.nn.ModuleList) and len(layers):
            return layers
    raise ValueError(
        f"{type(model).__name__} has no decoder layer list at model.model.layers or model.layers "
        "(Llama/Qwen/Mistral/OLMo-like models have one)"
    )


def _layer_index(model: torch.nn.Module, layer: int) -> int:
    """``layer`` as an index in [0, L); ValueError naming the valid range."""
    n_layers = len(_decoder_layers(model))
    if isinstance(layer, bool) or not isinstance(layer, int) or not -n_layers <= layer < n_layers:
        raise ValueError(
            f"layer={layer!r} is out of range for {type(model).__name__} with {n_layers} decoder layers: "
            f"valid {-n_layers} … {n_layers - 1}"
        )
    return layer % n_layers


@contextmanager
def capture_layer(model: torch.nn.Module, layer: int) -> Iterator[list[torch.Tensor]]:
    """Collect the output hidden state of one decoder layer for every forward call made inside the context.

    The state is the layer's output (the first element when it returns a tuple), i.e. the residual stream *before*
    the final norm: it equals ``output_hidden_states[layer + 1]`` for every layer but the last, whose
    ``output_hidden_states[-1]`` has the final norm applied. Tensors are detached; the hook is removed on exit,
    also when the body raises.

    Args:
        model: a causal LM with ``model.model.layers`` (or a base model with ``model.layers``).
        layer: decoder layer index in [−L, L); negative counts from the end.

    Yields:
        The list the states are appended to, one (B, T, H) tensor per forward call, in call order.

    Raises:
        ValueError: if the model has no decoder layer list or ``layer`` is out of range.
    """
    target = _decoder_layers(model)[_layer_index(model, layer)]
    captured: list[torch.Tensor] = []

    def hook(module: torch.nn.Module, args: object, output: torch.Tensor | tuple[torch.Tensor, ...]) -> None:
        captured.append((output[0] if isinstance(output, tuple) else output).detach())

    handle = target.register_forward_hook(hook)
    try:
        yield captured
    finally:
        handle.remove()


@dataclass(frozen=True, slots=True)
class RolloutFeatures:
    """Per-rollout features from the old-log-prob pass (POISE Step A)."""

    prompt: npt.NDArray[np.float32]
    """(N, H) mean layer-L state of the last ``n_prompt`` valid prompt tokens."""
    response: npt.NDArray[np.float32]
    """(N, H) mean layer-L state of the last ``n_response`` valid response tokens up to the last ``think_end``;
    0 for an empty response."""
    scalars: npt.NDArray[np.float32]
    """(N, 3) mean token entropy over all response tokens, the reasoning span and the answer span (0 if empty)."""


def recompute_pass(
    model: PreTrainedModel,
    rollouts: Rollouts,
    *,
    group: np.ndarray | None,
    config: FeatureConfig,
    temperature: float,
    tokenizer: PreTrainedTokenizerBase,
    batch_size: int = 256,
) -> tuple[torch.Tensor, RolloutFeatures]:
    r"""Old log-probs and POISE features of the rollouts from one no-grad forward.

        logp_old = log_softmax(zₜ / T)[yₜ]                    (as sequence_logprobs)
        h^p_i = mean of h_L at the last n_p valid prompt tokens
        h^r_i = mean of h_L at the last n_r response tokens of y_i[: e_i],   e_i = end of the last think_end, else |y_i|
        s_i = (mean_t Hₜ, mean_{t ∈ reasoning} Hₜ, mean_{t ∈ answer} Hₜ),   Hₜ = entropy of softmax(zₜ / T)

    With ``group`` the prompt of each group runs once (the layout of :func:`shared_prefix_logprobs`); without it
    every rollout runs ``cat(prompt, response)`` (:func:`sequence_logprobs`). Both give the same numbers up to float
    rounding. Spans: a token is in the reasoning span when its decoded text overlaps the content between the first
    ``think_start`` (or the response start) and the last ``think_end``; in the answer span when it overlaps the
    content of the last ``<answer>…</answer>`` pair after that, else the text after the last ``think_end``, else
    (no tags at all) the whole response. Empty spans give 0.

    Args:
        model: the policy (a causal LM with ``model.model.layers``); run in eval mode, its mode is restored.
        rollouts: N rollouts (left-padded prompts, right-padded responses).
        group: (N,) group id of each rollout (rollouts of one group must share their prompt), or None.
        config: layer, pooling lengths and tags.
        temperature: T > 0, the sampling temperature (greedy rollouts: 1).
        tokenizer: the policy's tokenizer (decodes the responses to find the tags).
        batch_size: rollouts per forward (a group may be split across two; its prompt then runs twice).

    Returns:
        ``(logp, features)``: (N, R) float32 old log-probs on the model's device (0 where masked) and the features.

    Raises:
        ValueError: for a bad ``group``/``batch_size``/``temperature``, rollouts of one group with different
            prompts, or a layer out of range.
    """
    n, r = rollouts.response_ids.shape
    if group is not None:
        group = np.asarray(group)
        if group.shape != (n,) or (n and group.dtype.kind not in "iu"):
            raise ValueError(f"group must be an (N,) = ({n},) integer array, got {group.dtype} {group.shape}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r} must be a positive integer")
    if not temperature > 0:
        raise ValueError(f"temperature={temperature!r} must be > 0 (greedy rollouts are scored at T = 1)")
    _layer_index(model, config.layer)
    spans = _response_spans(tokenizer, rollouts.response_ids, rollouts.response_mask, config)
    device = next(model.parameters()).device
    if n == 0:
        empty = np.zeros((0, int(model.config.hidden_size)), np.float32)
        logp0 = torch.zeros((0, r), dtype=torch.float32, device=device)
        return logp0, RolloutFeatures(empty, empty.copy(), np.zeros((0, 3), np.float32))
    parts: list[tuple[torch.Tensor, ...]] = []
    with torch.no_grad(), _eval_mode(model):
        for start in range(0, n, batch_size):
            b = slice(start, start + batch_size)
            rows = None if group is None else group[b]
            part = _micro_batch(
                model,
                rollouts.prompt_ids[b],
                rollouts.prompt_mask[b],
                rollouts.response_ids[b],
                rollouts.response_mask[b],
                torch.from_numpy(spans.keep[b]),
                rows=rows,
                config=config,
                temperature=temperature,
            )
            parts.append(part)
    logp, entropy, h_p, h_r = (torch.cat(x) for x in zip(*parts, strict=True))  # (N, R), (N, R), (N, H), (N, H)
    features = RolloutFeatures(
        prompt=h_p.float().cpu().numpy(),
        response=h_r.float().cpu().numpy(),
        scalars=_entropy_summaries(entropy.cpu().numpy(), rollouts.response_mask.bool().numpy(), spans),
    )
    return logp, features


def _micro_batch(
    model: PreTrainedModel,
    p_ids: torch.Tensor,
    p_mask: torch.Tensor,
    r_ids: torch.Tensor,
    r_mask: torch.Tensor,
    keep: torch.Tensor,
    *,
    rows: np.ndarray | None,
    config: FeatureConfig,
    temperature: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One forward of B rollouts: (B, R) logp and entropy, (B, H) prompt and response features."""
    b, r = r_ids.shape
    # one extra masked column: the shared-prefix pass then feeds y[R − 1] too, and R = 0 still runs the prompts
    r_ids1 = torch.nn.functional.pad(r_ids, (0, 1))  # (B, R + 1)
    r_mask1 = torch.nn.functional.pad(r_mask, (0, 1))  # (B, R + 1)
    if rows is None:
        with capture_layer(model, config.layer) as states:
            logp, entropy = sequence_logprobs(
                model, p_ids, p_mask, r_ids1, r_mask1, temperature=temperature, with_entropy=True
            )
        _expect_calls(states, 1)
        p = p_ids.shape[1]
        h_p = _tail_mean(states[0][:, :p], p_mask, config.n_prompt)  # (B, H)
        h_resp = states[0][:, p : p + r]  # (B, R, H)
    else:
        first, inverse = prefix_rows(rows)
        g_ids, g_mask = p_ids[first], p_mask[first]  # (G', P)
        inv = torch.from_numpy(inverse)
        same = (g_mask[inv] == p_mask).all(1) & ((g_ids[inv] == p_ids) | (p_mask == 0)).all(1)  # (B,)
        if not bool(same.all()):
            bad = int((~same).nonzero()[0, 0])
            raise ValueError(
                f"group {int(rows[bad])} holds rollouts with different prompts: group ids must identify the prompt "
                "(pass group=None to run every prompt)"
            )
        with capture_layer(model, config.layer) as states:
            logp, entropy = shared_prefix_logprobs(
                model, g_ids, g_mask, r_ids1, r_mask1, inverse, temperature=temperature, with_entropy=True
            )
        _expect_calls(states, 1 if r == 0 else 2)
        h_p = _tail_mean(states[0], g_mask, config.n_prompt)[inv.to(states[0].device)]  # (G', H) → (B, H)
        h_resp = states[1] if r else states[0].new_zeros((b, 0, states[0].shape[-1]))  # (B, R, H)
    h_r = _tail_mean(h_resp, keep, config.n_response)  # (B, H)
    entropy = cast(torch.Tensor, entropy)  # with_entropy=True: never None
    return logp[:, :r], entropy[:, :r], h_p, h_r


def _expect_calls(states: list[torch.Tensor], n_calls: int) -> None:
    if len(states) != n_calls:
        raise RuntimeError(f"the hooked layer ran {len(states)} times in one pass, expected {n_calls}")


def _tail_mean(states: torch.Tensor, keep: torch.Tensor, n: int) -> torch.Tensor:
    """(B, H) float32 mean of ``states`` (B, T, H) over the last ``n`` positions where ``keep`` (B, T) is true."""
    b, t, h = states.shape
    k = min(n, t)
    if k == 0:
        return states.new_zeros((b, h), dtype=torch.float32)
    keep = keep.to(states.device).bool()
    position = torch.arange(t, device=states.device).expand(b, t)  # (B, T)
    top, idx = torch.where(keep, position, -1).topk(k, dim=1)  # (B, k): the k last kept positions, −1 past them
    w = (top >= 0).float()  # (B, k)
    picked = states.gather(1, idx[..., None].expand(b, k, h)).float()  # (B, k, H)
    return (picked * w[..., None]).sum(1) / w.sum(1, keepdim=True).clamp_min(1.0)  # (B, H)


@dataclass(frozen=True, slots=True)
class _Spans:
    keep: npt.NDArray[np.bool_]  # (N, R) tokens the response feature may use: y[: e_i]
    reasoning: npt.NDArray[np.bool_]  # (N, R)
    answer: npt.NDArray[np.bool_]  # (N, R)


def _response_spans(
    tokenizer: PreTrainedTokenizerBase, response_ids: torch.Tensor, response_mask: torch.Tensor, config: FeatureConfig
) -> _Spans:
    """Token masks of the truncated response, the reasoning span and the answer span (decoded token by token)."""
    n, r = response_ids.shape
    lengths = response_mask.sum(1).tolist()
    seqs = [ids[:m].tolist() for ids, m in zip(response_ids, lengths, strict=True)]
    uniq = sorted({i for seq in seqs for i in seq})
    # an empty batch decodes to [] (some transformers versions return [""] for it)
    decoded = (
        tokenizer.batch_decode([[i] for i in uniq], skip_special_tokens=False, clean_up_tokenization_spaces=False)
        if uniq
        else []
    )
    piece = dict(zip(uniq, decoded, strict=True))
    keep, reasoning, answer = (np.zeros((n, r), np.bool_) for _ in range(3))
    for i, seq in enumerate(seqs):
        pieces = [piece[t] for t in seq]
        width = np.array([len(s) for s in pieces], np.int64)  # (m,) characters of each token
        ends = np.cumsum(width)  # (m,)
        starts = ends - width  # (m,)
        cut, reason, ans = _char_spans("".join(pieces), config)
        keep[i, : len(seq) if cut is None else int(np.searchsorted(starts, cut))] = True
        reasoning[i, : len(seq)] = _overlap(starts, ends, reason)
        answer[i, : len(seq)] = True if ans is None else _overlap(starts, ends, ans)
    return _Spans(keep=keep, reasoning=reasoning, answer=answer)


def _char_spans(text: str, config: FeatureConfig) -> tuple[int | None, tuple[int, int] | None, tuple[int, int] | None]:
    """(end of the last think_end or None, reasoning span or None, answer span or None = the whole response)."""
    close = text.rfind(config.think_end)
    if close < 0:
        cut, reasoning, tail = None, None, 0
    else:
        cut = tail = close + len(config.think_end)
        opened = text.find(config.think_start, 0, close)
        reasoning = (0 if opened < 0 else opened + len(config.think_start), close)
    open_tag, close_tag = config.answer_tags
    answer_close = text.rfind(close_tag, tail)
    answer_open = -1 if answer_close < 0 else text.rfind(open_tag, tail, answer_close)
    if answer_open >= 0:
        return cut, reasoning, (answer_open + len(open_tag), answer_close)
    return cut, reasoning, (None if cut is None else (cut, len(text)))


def _overlap(starts: np.ndarray, ends: np.ndarray, span: tuple[int, int] | None) -> npt.NDArray[np.bool_]:
    """(m,) tokens whose characters [start, end) overlap ``span`` = [a, b); none for an empty or absent span."""
    if span is None or span[0] >= span[1]:
        return np.zeros(len(starts), np.bool_)
    return (starts < span[1]) & (ends > span[0])


def _entropy_summaries(entropy: np.ndarray, mask: np.ndarray, spans: _Spans) -> npt.NDArray[np.float32]:
    """(N, 3) float32 mean entropy over all response tokens, the reasoning span and the answer span (0 if empty)."""
    columns = []
    for m in (mask, spans.reasoning & mask, spans.answer & mask):  # (N, R) each
        count = m.sum(1)  # (N,)
        columns.append(np.where(m, entropy, 0.0).sum(1) / np.maximum(count, 1))  # (N,)
    return np.stack(columns, axis=1).astype(np.float32)  # (N, 3)


def prompt_features(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    *,
    config: FeatureConfig,
    batch_size: int = 64,
) -> npt.NDArray[np.float32]:
    """(Q, H) mean layer-L state of the last ``n_prompt`` tokens of each prompt, from one no-grad prefill.

    Prompts are encoded as :class:`~v05.engines.HFEngine` encodes them (``prompt_special_tokens``, left padding), so
    a prompt's row equals the prompt feature :func:`recompute_pass` gives its rollouts (up to float rounding).
    Prompts longer than ``max_position_embeddings`` keep their last tokens (the engine keeps ``max_new_tokens``
    fewer).

    Args:
        model: the policy; run in eval mode, its mode is restored.
        tokenizer: its tokenizer (with a pad token).
        texts: (Q,) prompt texts.
        config: layer and ``n_prompt`` (the response fields are unused).
        batch_size: prompts per forward.

    Returns:
        (Q, H) float32 features.

    Raises:
        ValueError: for a layer out of range, a prompt that encodes to no tokens or a bad ``batch_size``.
    """
    return _prompt_features(model, tokenizer, texts, config=config, batch_size=batch_size)[0]


def _prompt_features(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    *,
    config: FeatureConfig,
    batch_size: int,
) -> tuple[npt.NDArray[np.float32], int, int]:
    """(Q, H) features, the number of prompts truncated to ``max_position_embeddings``, and the tokens run."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r} must be a positive integer")
    _layer_index(model, config.layer)
    encoded = tokenizer(list(texts), add_special_tokens=prompt_special_tokens(tokenizer))["input_ids"] if texts else []
    if any(len(ids) == 0 for ids in encoded):
        raise ValueError("a prompt encodes to no tokens: its features need at least one token")
    limit = getattr(model.config, "max_position_embeddings", None)
    n_truncated = 0 if limit is None else sum(len(ids) > limit for ids in encoded)
    encoded = encoded if limit is None else [ids[-limit:] for ids in encoded]
    pad_id = 0 if tokenizer.pad_token_id is None else int(tokenizer.pad_token_id)
    device = next(model.parameters()).device
    rows = [np.zeros((0, int(model.config.hidden_size)), np.float32)]
    with torch.no_grad(), _eval_mode(model):
        for start in range(0, len(encoded), batch_size):
            chunk = encoded[start : start + batch_size]
            p = max(len(ids) for ids in chunk)
            ids_b = torch.tensor([[pad_id] * (p - len(ids)) + ids for ids in chunk], device=device)  # (B, P)
            mask_b = torch.tensor([[0] * (p - len(ids)) + [1] * len(ids) for ids in chunk], device=device)  # (B, P)
            position = (mask_b.cumsum(-1) - 1).clamp(min=0)  # (B, P) left padding starts at 0, as in the engine
            with capture_layer(model, config.layer) as states:
                model(input_ids=ids_b, attention_mask=mask_b, position_ids=position, use_cache=False, logits_to_keep=1)
            _expect_calls(states, 1)
            rows.append(_tail_mean(states[0], mask_b, config.n_prompt).cpu().numpy())  # (B, H)
    return np.concatenate(rows).astype(np.float32), n_truncated, sum(len(ids) for ids in encoded)


@dataclass(kw_only=True, slots=True)
class PolicyFeatureBackend:
    """An :class:`~v05.priors.embeddings.Embedder` backend whose embedding is the live policy's prompt feature.

    ``encode`` runs :func:`prompt_features` on the current weights, so the same prompt embeds differently after each
    update: ``volatile`` is True, so the wrapping ``Embedder`` caches nothing (neither on disk nor in memory).

    Attributes:
        model: the policy (live; not copied).
        tokenizer: its tokenizer.
        config: layer and ``n_prompt``.
        batch_size: prompts per forward.
        truncated: prompts longer than ``max_position_embeddings`` seen so far.
    """

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    config: FeatureConfig = field(default_factory=FeatureConfig)
    batch_size: int = 64
    truncated: int = field(default=0, init=False)
    token_passes: int = field(default=0, init=False)
    """real prompt tokens run through the policy so far (the trainer's compute accounting)."""
    cacheable: bool = field(default=False, init=False)
    volatile: bool = field(default=True, init=False)

    @property
    def id(self) -> str:
        """Backend name: ``policy-layer{L}-last{n_prompt}`` with L in [0, layers)."""
        return f"policy-layer{_layer_index(self.model, self.config.layer)}-last{self.config.n_prompt}"

    def encode(self, texts: Sequence[str]) -> FloatArray:
        """(Q, H) float64 prompt features of ``texts`` under the current weights."""
        rows, n_truncated, n_tokens = _prompt_features(
            self.model, self.tokenizer, texts, config=self.config, batch_size=self.batch_size
        )
        self.truncated += n_truncated
        self.token_passes += n_tokens
        return rows.astype(np.float64)
