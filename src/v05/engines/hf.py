"""Rollout engine over Hugging Face ``model.generate``: ragged requests in, flat ``Rollouts`` with log π_old out.

A request is ``(prompts, counts)``: ``counts[i]`` rollouts of ``prompts[i]``, laid out contiguously as
``np.repeat(arange(M), counts)``, so the allocators' ragged budgets need no reshaping. Generation is batched
(``GenerationConfig.batch_size`` rollouts per ``generate`` call) over left-padded prompts with the KV cache.

Deviations and choices:
- ``old_logp`` is ``log_softmax(logits / T)`` of the *raw* logits (``output_logits=True``), i.e. it ignores top-p /
  top-k truncation: it is the distribution the trainer's ``sequence_logprobs`` recomputes, not the truncated
  sampling distribution. At ``temperature == 0`` (greedy) it is taken at T = 1.
- The model's own generation defaults (e.g. a checkpoint's ``repetition_penalty``) are overridden by neutral values,
  so that what is sampled follows ``GenerationConfig`` only.
- The engine owns its random stream (CPU and, on CUDA, the CUDA generator state); the global RNG is left untouched.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
import torch
import transformers
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from v05._checks import as_index_1d

__all__ = ["GenerationConfig", "HFEngine", "Rollouts", "prompt_special_tokens"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class GenerationConfig:
    """How rollouts are sampled.

    Example:
        >>> GenerationConfig(top_p=0.0)
        Traceback (most recent call last):
        ...
        ValueError: top_p=0.0 must be in (0, 1] (1 disables nucleus sampling)
    """

    temperature: float = 1.0
    """Sampling temperature T ≥ 0; 0 is greedy decoding."""
    top_p: float = 1.0
    """Nucleus sampling mass in (0, 1]; 1 disables it."""
    top_k: int = 0
    """Keep the k most likely tokens; 0 disables it."""
    max_new_tokens: int = 8
    """Longest response, in tokens (EOS included); a rollout that reaches it without EOS is marked truncated."""
    batch_size: int = 512
    """Rollouts per ``model.generate`` call (micro-batching bounds memory: the raw logits cost B×R×V×4 bytes)."""
    engine: Literal["hf", "vllm"] = "hf"
    """Which engine samples the training rollouts: ``hf`` (``model.generate``, CPU or GPU) or ``vllm`` (GPU only,
    ``pip install 'v05[vllm]'`` in its own environment; weights synced after every update). Evaluation uses ``hf``."""

    def __post_init__(self) -> None:
        if self.engine not in ("hf", "vllm"):
            raise ValueError(f"engine={self.engine!r}; valid: hf, vllm")
        if not np.isfinite(self.temperature) or self.temperature < 0:
            raise ValueError(f"temperature={self.temperature!r} must be finite and ≥ 0 (0 is greedy)")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p={self.top_p!r} must be in (0, 1] (1 disables nucleus sampling)")
        for name, low in (("top_k", 0), ("max_new_tokens", 1), ("batch_size", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name}={value!r} must be an integer ≥ {low}")


@dataclass(frozen=True, slots=True)
class Rollouts:
    """A flat batch of N rollouts (torch tensors on CPU).

    Padded positions hold a pad id and have mask 0; never read ids, ``old_logp`` (0 there) without the mask.
    """

    prompt_index: npt.NDArray[np.int64]
    """(N,) index into the request's prompt list; rollouts are laid out as ``np.repeat(arange(M), counts)``."""
    prompt_ids: torch.Tensor
    """(N, P) left-padded prompt token ids."""
    prompt_mask: torch.Tensor
    """(N, P) 1 for real prompt tokens, 0 for left padding."""
    response_ids: torch.Tensor
    """(N, R) right-padded response ids; the first EOS is included (mask 1), everything after it is padding."""
    response_mask: torch.Tensor
    """(N, R) 1 for response tokens up to and including the first EOS."""
    old_logp: torch.Tensor
    """(N, R) float32 log π_old(token) = log_softmax(logits / T) at the sampled token; 0 where the mask is 0."""
    texts: tuple[str, ...]
    """(N,) decoded responses without special tokens."""
    lengths: npt.NDArray[np.int64]
    """(N,) response tokens (``response_mask.sum(1)``), EOS included."""
    truncated: npt.NDArray[np.bool_]
    """(N,) True where the rollout hit ``max_new_tokens`` without an EOS."""

    def __post_init__(self) -> None:
        n = len(self.prompt_index)
        rows = {
            "prompt_ids": self.prompt_ids.shape[0],
            "prompt_mask": self.prompt_mask.shape[0],
            "response_ids": self.response_ids.shape[0],
            "response_mask": self.response_mask.shape[0],
            "old_logp": self.old_logp.shape[0],
            "texts": len(self.texts),
            "lengths": len(self.lengths),
            "truncated": len(self.truncated),
        }
        bad = {k: v for k, v in rows.items() if v != n}
        if bad:
            raise ValueError(f"Rollouts fields must all have N={n} rows (len(prompt_index)); got {bad}")
        if self.prompt_ids.shape != self.prompt_mask.shape:
            raise ValueError(
                f"prompt_ids {tuple(self.prompt_ids.shape)} != prompt_mask {tuple(self.prompt_mask.shape)}"
            )
        if not self.response_ids.shape == self.response_mask.shape == self.old_logp.shape:
            raise ValueError(
                f"response_ids {tuple(self.response_ids.shape)}, response_mask {tuple(self.response_mask.shape)} and "
                f"old_logp {tuple(self.old_logp.shape)} must have the same (N, R) shape"
            )

    def __len__(self) -> int:
        return len(self.prompt_index)

    def select(self, idx: Sequence[int] | npt.NDArray[np.integer] | npt.NDArray[np.bool_]) -> Rollouts:
        """Return the rollouts at ``idx`` (integer indices or an (N,) boolean mask), keeping P and R.

        Args:
            idx: (K,) rollout indices in [0, N), or an (N,) boolean mask.

        Returns:
            The K selected rollouts; ``prompt_index`` is kept as is.
        """
        arr = np.asarray(idx)
        if arr.dtype == np.bool_:
            if arr.shape != (len(self),):
                raise ValueError(f"a boolean idx must have shape ({len(self)},), got {arr.shape}")
            arr = np.flatnonzero(arr)
        arr = as_index_1d(arr, "idx", allow_empty=True)
        if arr.size and arr.max() >= len(self):
            raise ValueError(f"idx holds {int(arr.max())}, out of range for {len(self)} rollouts")
        t = torch.from_numpy(arr)
        return Rollouts(
            prompt_index=self.prompt_index[arr],
            prompt_ids=self.prompt_ids[t],
            prompt_mask=self.prompt_mask[t],
            response_ids=self.response_ids[t],
            response_mask=self.response_mask[t],
            old_logp=self.old_logp[t],
            texts=tuple(self.texts[i] for i in arr.tolist()),
            lengths=self.lengths[arr],
            truncated=self.truncated[arr],
        )

    @staticmethod
    def concat(parts: Sequence[Rollouts], *, pad_id: int = 0) -> Rollouts:
        """Stack batches of rollouts, left-padding prompts and right-padding responses to the longest.

        Args:
            parts: the batches, in order.
            pad_id: id written into the new padding (mask 0).

        Returns:
            One batch; ``prompt_index`` values are kept as given (offsetting them is the caller's business).

        Raises:
            ValueError: if ``parts`` is empty.
        """
        if not parts:
            raise ValueError("parts is empty: nothing to concatenate")
        p = max(r.prompt_ids.shape[1] for r in parts)
        r_max = max(r.response_ids.shape[1] for r in parts)
        return Rollouts(
            prompt_index=np.concatenate([r.prompt_index for r in parts]).astype(np.int64),
            prompt_ids=torch.cat([_pad_to(r.prompt_ids, p, pad_id, left=True) for r in parts]),
            prompt_mask=torch.cat([_pad_to(r.prompt_mask, p, 0, left=True) for r in parts]),
            response_ids=torch.cat([_pad_to(r.response_ids, r_max, pad_id, left=False) for r in parts]),
            response_mask=torch.cat([_pad_to(r.response_mask, r_max, 0, left=False) for r in parts]),
            old_logp=torch.cat([_pad_to(r.old_logp, r_max, 0, left=False) for r in parts]),
            texts=tuple(t for r in parts for t in r.texts),
            lengths=np.concatenate([r.lengths for r in parts]).astype(np.int64),
            truncated=np.concatenate([r.truncated for r in parts]).astype(np.bool_),
        )


class HFEngine:
    """Sample rollouts with ``model.generate`` and record their log-probabilities under the sampling temperature.

    Prompts are encoded once per call with the tokenizer's post-processor (``<bos>`` for the tiny model). A tokenizer
    with a chat template is assumed to receive prompts already rendered by that template, which include their special
    tokens, so they are encoded with ``add_special_tokens=False``. Prompts longer than the model's
    ``max_position_embeddings − max_new_tokens`` keep their last tokens (a warning is logged once per engine).

    Args:
        model: a causal LM (``PreTrainedModel``); its mode is restored after each call.
        tokenizer: its tokenizer, with EOS and pad tokens set (``load_policy`` does this).
        config: sampling parameters.
        seed: seed of the engine's own random stream.

    Raises:
        ValueError: if the tokenizer has no EOS/pad token or ``max_new_tokens`` leaves no room for a prompt.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        config: GenerationConfig,
        *,
        seed: int = 0,
    ) -> None:
        if tokenizer.eos_token_id is None or tokenizer.pad_token_id is None:
            raise ValueError("tokenizer needs eos_token and pad_token (load_policy sets pad = eos when missing)")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed={seed!r} must be a non-negative integer")
        max_positions = getattr(model.config, "max_position_embeddings", None)
        if max_positions is not None and config.max_new_tokens >= max_positions:
            raise ValueError(
                f"max_new_tokens={config.max_new_tokens} leaves no room for a prompt "
                f"(max_position_embeddings={max_positions})"
            )
        self.model = model
        self.tokenizer = tokenizer
        self.config = config
        self.seed = seed
        self._device = next(model.parameters()).device
        self._pad_id = int(tokenizer.pad_token_id)
        self._eos_ids = _eos_token_ids(model, tokenizer)
        self._max_prompt_tokens = None if max_positions is None else max_positions - config.max_new_tokens
        self._add_special_tokens = prompt_special_tokens(tokenizer)
        self._warned_truncation = False
        self._cpu_state, self._cuda_state = _initial_rng_state(seed, self._device)

    def generate(self, prompts: Sequence[str], counts: Sequence[int] | npt.NDArray[np.integer]) -> Rollouts:
        """Sample ``counts[i]`` rollouts of ``prompts[i]`` for every i.

        Args:
            prompts: (M,) prompt texts.
            counts: (M,) non-negative rollouts per prompt; 0 skips the prompt.

        Returns:
            N = Σ counts rollouts, laid out as ``np.repeat(arange(M), counts)``.

        Raises:
            ValueError: if the lengths differ or a count is negative.
        """
        counts_m = as_index_1d(counts, "counts", allow_empty=True)  # (M,)
        if len(counts_m) != len(prompts):
            raise ValueError(f"counts has {len(counts_m)} entries but prompts has {len(prompts)}")
        prompt_index = np.repeat(np.arange(len(prompts), dtype=np.int64), counts_m)  # (N,)
        ids_m, mask_m = self._encode([prompts[i] for i in np.flatnonzero(counts_m)])  # (M', P)
        # row of each rollout in the encoded (non-zero-count) prompts
        row = torch.from_numpy(np.repeat(np.arange(len(ids_m), dtype=np.int64), counts_m[counts_m > 0]))  # (N,)
        prompt_ids, prompt_mask = ids_m[row], mask_m[row]  # (N, P)
        parts = []
        with self._own_rng(), torch.no_grad(), _eval_mode(self.model):
            for start in range(0, len(row), self.config.batch_size):
                stop = start + self.config.batch_size
                parts.append(self._generate_batch(prompt_ids[start:stop], prompt_mask[start:stop]))
        r_max = max((ids.shape[1] for ids, _, _ in parts), default=0)
        response_ids = torch.cat([_pad_to(ids, r_max, self._pad_id, left=False) for ids, _, _ in parts] or [_empty()])
        response_mask = torch.cat([_pad_to(m, r_max, 0, left=False) for _, m, _ in parts] or [_empty()])
        old_logp = torch.cat([_pad_to(lp, r_max, 0, left=False) for _, _, lp in parts] or [_empty(torch.float32)])
        lengths = response_mask.sum(1).numpy().astype(np.int64)  # (N,)
        has_eos = torch.isin(response_ids, torch.tensor(self._eos_ids)) & response_mask.bool()  # (N, R)
        # an empty batch decodes to [] (some transformers versions return [""] for it)
        seqs = [ids[:n].tolist() for ids, n in zip(response_ids, lengths.tolist(), strict=True)]
        texts = self.tokenizer.batch_decode(seqs, skip_special_tokens=True) if seqs else []
        return Rollouts(
            prompt_index=prompt_index,
            prompt_ids=prompt_ids,
            prompt_mask=prompt_mask,
            response_ids=response_ids,
            response_mask=response_mask,
            old_logp=old_logp,
            texts=tuple(texts),
            lengths=lengths,
            truncated=~has_eos.any(1).numpy(),
        )

    def state_dict(self) -> dict[str, int | torch.Tensor | None]:
        """Return the engine's random state: ``{"seed", "cpu", "cuda"}`` (generator states; ``cuda`` None on CPU)."""
        cuda = None if self._cuda_state is None else self._cuda_state.clone()
        return {"seed": self.seed, "cpu": self._cpu_state.clone(), "cuda": cuda}

    def load_state_dict(self, state: Mapping[str, int | torch.Tensor | None]) -> None:
        """Restore a state from :meth:`state_dict`, so that the next ``generate`` samples as the saved engine would.

        Raises:
            ValueError: if a key is missing or the CUDA state does not match the model's device.
        """
        missing = {"seed", "cpu", "cuda"} - set(state)
        if missing:
            raise ValueError(f"engine state is missing {sorted(missing)}")
        cpu, cuda = state["cpu"], state["cuda"]
        if not isinstance(cpu, torch.Tensor):
            raise ValueError(f"engine state 'cpu' must be a tensor (torch.get_rng_state()), got {type(cpu).__name__}")
        if (cuda is None) != (self._cuda_state is None) or (cuda is not None and not isinstance(cuda, torch.Tensor)):
            raise ValueError(f"engine state has cuda={type(cuda).__name__} but the model is on {self._device}")
        if isinstance(state["seed"], int):
            self.seed = state["seed"]
        self._cpu_state = cpu.clone()
        self._cuda_state = cuda.clone() if isinstance(cuda, torch.Tensor) else None

    def _encode(self, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Encode each prompt once, truncate from the left, and left-pad: (M', P) ids and mask on CPU."""
        if not prompts:
            return torch.zeros((0, 0), dtype=torch.long), torch.zeros((0, 0), dtype=torch.long)
        encoded = self.tokenizer(prompts, add_special_tokens=self._add_special_tokens)["input_ids"]
        if any(len(ids) == 0 for ids in encoded):
            raise ValueError("a prompt encodes to no tokens: generation needs at least one token of context")
        limit = self._max_prompt_tokens
        if limit is not None and any(len(ids) > limit for ids in encoded):
            if not self._warned_truncation:
                longest = max(len(ids) for ids in encoded)
                logger.warning("prompts up to %d tokens truncated to their last %d (max positions)", longest, limit)
                self._warned_truncation = True
            encoded = [ids[-limit:] for ids in encoded]
        p = max((len(ids) for ids in encoded), default=0)
        ids_m = torch.full((len(encoded), p), self._pad_id, dtype=torch.long)  # (M', P)
        mask_m = torch.zeros((len(encoded), p), dtype=torch.long)  # (M', P)
        for i, ids in enumerate(encoded):
            if ids:
                ids_m[i, p - len(ids) :] = torch.tensor(ids, dtype=torch.long)
                mask_m[i, p - len(ids) :] = 1
        return ids_m, mask_m

    def _generate_batch(
        self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One ``generate`` call: (B, R) response ids (padded after the first EOS), mask and old log-probs, on CPU."""
        keep = prompt_mask.any(0).nonzero()
        first = int(keep[0]) if len(keep) else prompt_mask.shape[1]  # drop columns that are padding in every row
        out = self.model.generate(
            input_ids=prompt_ids[:, first:].to(self._device),
            attention_mask=prompt_mask[:, first:].to(self._device),
            generation_config=self._hf_generation_config(),
        )
        response = out.sequences[:, prompt_ids.shape[1] - first :]  # (B, R)
        is_eos = torch.isin(response, torch.tensor(self._eos_ids, device=response.device)).long()  # (B, R)
        mask = (is_eos.cumsum(1) - is_eos) == 0  # (B, R) True up to and including the first EOS
        logp = _token_logprobs(out.logits, response, self.config.temperature)  # (B, R)
        response = torch.where(mask, response, self._pad_id)
        return response.cpu(), mask.long().cpu(), torch.where(mask, logp, 0.0).cpu()

    def _hf_generation_config(self) -> transformers.GenerationConfig:
        c = self.config
        sampling = (
            {"do_sample": True, "temperature": c.temperature, "top_p": c.top_p, "top_k": c.top_k}
            if c.temperature > 0
            else {"do_sample": False}
        )
        return transformers.GenerationConfig(
            **sampling,
            max_new_tokens=c.max_new_tokens,
            pad_token_id=self._pad_id,
            eos_token_id=self._eos_ids,
            return_dict_in_generate=True,
            output_logits=True,
            use_cache=True,
            num_beams=1,
            num_return_sequences=1,
            # neutral values, so that a checkpoint's own defaults cannot change what is sampled
            min_new_tokens=0,
            repetition_penalty=1.0,
            no_repeat_ngram_size=0,
            typical_p=1.0,
            epsilon_cutoff=0.0,
            eta_cutoff=0.0,
            renormalize_logits=False,
        )

    @contextmanager
    def _own_rng(self) -> Iterator[None]:
        """Sample from the engine's stream: fork the global RNG, load the engine's state, save it back afterwards."""
        cuda = self._device.type == "cuda"
        with torch.random.fork_rng(devices=[self._device] if cuda else []):
            torch.set_rng_state(self._cpu_state)
            if self._cuda_state is not None:
                torch.cuda.set_rng_state(self._cuda_state, self._device)
            yield
            self._cpu_state = torch.get_rng_state()
            self._cuda_state = torch.cuda.get_rng_state(self._device) if cuda else None


def prompt_special_tokens(tokenizer: PreTrainedTokenizerBase) -> bool:
    """Whether prompts are encoded with ``add_special_tokens=True``.

    True (the post-processor adds e.g. ``<bos>``) unless the tokenizer has a chat template: prompts rendered by a chat
    template already contain their special tokens, and adding them again would double the BOS.
    """
    return getattr(tokenizer, "chat_template", None) is None


def _eos_token_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """The tokenizer's EOS plus the model's generation EOS ids (chat models often end turns with another token)."""
    ids = [int(tokenizer.eos_token_id)]
    generation_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    extra = [generation_eos] if isinstance(generation_eos, int) else list(generation_eos or [])
    return ids + [int(i) for i in extra if int(i) not in ids]


def _token_logprobs(logits: Sequence[torch.Tensor], response: torch.Tensor, temperature: float) -> torch.Tensor:
    """(B, R) log_softmax(logits_t / T)[token_t] from R raw (B, V) logits; T = 1 for greedy (T = 0) decoding."""
    t = temperature if temperature > 0 else 1.0
    steps = [  # one (B, V) log_softmax at a time: no second (B, R, V) tensor
        torch.log_softmax(step.float() / t, dim=-1).gather(-1, response[:, i, None]).squeeze(-1)  # (B,)
        for i, step in enumerate(logits)
    ]
    return torch.stack(steps, dim=1) if steps else torch.zeros(response.shape, device=response.device)


def _initial_rng_state(seed: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(CPU, CUDA or None) generator states after ``manual_seed(seed)``, without touching the global generators."""
    cuda = torch.Generator(device=device).manual_seed(seed).get_state() if device.type == "cuda" else None
    return torch.Generator().manual_seed(seed).get_state(), cuda


@contextmanager
def _eval_mode(model: torch.nn.Module) -> Iterator[None]:
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def _pad_to(x: torch.Tensor, width: int, value: float, *, left: bool) -> torch.Tensor:
    """Pad the last dim of a (N, W) tensor to ``width`` on the left or the right."""
    extra = width - x.shape[1]
    if extra == 0:
        return x
    return torch.nn.functional.pad(x, (extra, 0) if left else (0, extra), value=value)


def _empty(dtype: torch.dtype = torch.long) -> torch.Tensor:
    return torch.zeros((0, 0), dtype=dtype)
