"""Rollout engine over vLLM (GPU only): the ``HFEngine.generate(prompts, counts) -> Rollouts`` contract, served by vLLM.

Contract with the trainer: vLLM holds its *own copy* of the policy's weights. Call :meth:`VLLMEngine.sync_weights`
after every change to the policy's weights (each optimizer step, and after loading a checkpoint); ``generate``
never syncs by itself. The engine is colocated with the policy on one GPU (``gpu_memory_utilization`` caps vLLM's
share) and runs vLLM's engine core in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, set here), so the sync is a
device-to-device ``model.load_weights`` through ``LLM.apply_model`` — no serialisation, no second process.

Deviations from ``HFEngine`` and choices:
- ``old_logp``: by default (``recompute_logprobs=True``) the policy recomputes log_softmax(logits / T) of the sampled
  tokens (:func:`recompute_old_logp`), which is exactly ``HFEngine``'s definition. With ``recompute_logprobs=False``
  it is vLLM's ``processed_logprobs``: the distribution *after* temperature and top-p / top-k truncation, from vLLM's
  kernels and dtype — equal to HF's only when ``top_p == 1`` and ``top_k == 0``, and then up to bf16 rounding
  (a vLLM without ``logprobs_mode`` reports raw log-probs at T = 1 instead: keep the recompute there).
- vLLM starts from dummy weights built from the policy's config (``load_format="dummy"``), then receives the
  policy's current weights; the tokenizer stays on the trainer's side (``skip_tokenizer_init``): prompts go in as
  token ids encoded as ``HFEngine`` encodes them, and responses are decoded with the same tokenizer.
- Randomness: request i of call c draws with seed ``base(seed, c) + Σ_{j<i} counts_j`` (vLLM adds the sample index
  within a request), so every rollout of a call has its own seed. The state is ``(seed, calls)``: a resumed engine
  draws the same seeds, but exact reproduction on a GPU is not promised (batching and kernels are not bitwise stable).

Supported: vLLM's V1 engine, vLLM ≥ 0.10; one engine per process (vLLM sets up its single-rank process group here).
"""

from __future__ import annotations

import copy
import dataclasses
import gc
import importlib.metadata
import importlib.util
import os
import random
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from v05._checks import as_index_1d
from v05.engines.hf import GenerationConfig, Rollouts, _eos_token_ids, prompt_special_tokens
from v05.engines.logprobs import sequence_logprobs

__all__ = [
    "INSTALL_HINT",
    "SUPPORTED_VLLM",
    "VLLMEngine",
    "recompute_old_logp",
    "request_seeds",
    "rollouts_from_outputs",
]

INSTALL_HINT = (
    "the vLLM engine needs a CUDA GPU and `pip install 'v05[vllm]'` "
    "(vLLM brings its own torch build; install it in a separate environment)"
)
SUPPORTED_VLLM = "vLLM >= 0.10 (V1 engine, in-process engine core)"


class _Logprob(Protocol):
    logprob: float


class CompletionLike(Protocol):
    """The fields of ``vllm.CompletionOutput`` that are read: sample index, token ids, per-token log-probs."""

    index: int
    token_ids: Sequence[int]
    logprobs: Sequence[Mapping[int, _Logprob]] | None


class RequestLike(Protocol):
    """The field of ``vllm.RequestOutput`` that is read: its ``n`` completions."""

    outputs: Sequence[CompletionLike]


def require_vllm() -> object:
    """Import vLLM for the engine, or raise the one-line install hint.

    Raises:
        ValueError: without a CUDA device or without an importable ``vllm``.
    """
    if not torch.cuda.is_available() or importlib.util.find_spec("vllm") is None:
        raise ValueError(INSTALL_HINT)
    # the engine core must run in this process: sync_weights reaches vLLM's model object directly
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    import vllm  # noqa: PLC0415 (vLLM pins its own torch: imported only when the engine is built)

    return vllm


def request_seeds(seed: int, call: int, counts: Sequence[int] | npt.NDArray[np.integer]) -> npt.NDArray[np.int64]:
    """Per-request vLLM seeds of one ``generate`` call, spaced so that every rollout gets its own seed.

        base = SeedSequence([seed, call]) → uniform integer in [0, 2³¹ − N),   seed_i = base + Σ_{j<i} counts_j

    vLLM gives the k-th sample of a request the seed ``seed_i + k``, so the N = Σ counts rollouts of a call draw with
    the distinct seeds base … base + N − 1.

    Args:
        seed: the engine's seed (≥ 0).
        call: how many calls the engine made before this one (≥ 0).
        counts: (M,) rollouts per request (≥ 0).

    Returns:
        (M,) int64 seeds.

    Example:
        >>> s = request_seeds(0, 0, [2, 3, 1])
        >>> (s - s[0]).tolist()
        [0, 2, 5]
    """
    counts_m = as_index_1d(counts, "counts", allow_empty=True)  # (M,)
    n = int(counts_m.sum())
    base = int(np.random.default_rng([seed, call]).integers(0, 2**31 - n))
    return base + np.cumsum(counts_m) - counts_m  # (M,) exclusive cumulative sum


def rollouts_from_outputs(
    outputs: Sequence[RequestLike],
    prompts: Sequence[Sequence[int]],
    counts: Sequence[int] | npt.NDArray[np.integer],
    *,
    prompt_index: npt.NDArray[np.int64],
    eos_ids: Sequence[int],
    pad_id: int,
    decode: Callable[[list[list[int]]], list[str]],
) -> Rollouts:
    """Assemble vLLM's request outputs into flat :class:`Rollouts` (the layout of ``HFEngine.generate``).

    Request j holds ``counts[j]`` completions, ordered by their sample index; rollouts follow request order. A response
    ends at its first EOS (kept, mask 1); one without an EOS is truncated. ``old_logp`` is the log-prob vLLM reported
    for the sampled token (0 where the mask is 0, and everywhere when vLLM returned none).

    Args:
        outputs: (M',) request outputs (``.outputs[k].index / .token_ids / .logprobs``), one per prompt sent.
        prompts: (M',) the prompt token ids sent.
        counts: (M',) positive completions per request.
        prompt_index: (N,) ``prompt_index`` of the rollouts, N = Σ counts.
        eos_ids: the token ids that end a response.
        pad_id: id written into padding.
        decode: token-id lists → texts (the tokenizer's ``batch_decode`` without special tokens).

    Returns:
        N rollouts: left-padded prompts, right-padded responses.

    Raises:
        ValueError: if the numbers of requests, completions and rollouts do not match.
    """
    counts_m = as_index_1d(counts, "counts", allow_empty=True)  # (M',)
    n = int(counts_m.sum())
    if len(outputs) != len(prompts) or len(counts_m) != len(prompts) or len(prompt_index) != n:
        raise ValueError(f"{len(outputs)} outputs, {len(prompts)} prompts, {len(counts_m)} counts and "
                         f"{len(prompt_index)} rollouts do not fit together")  # fmt: skip
    eos = set(int(i) for i in eos_ids)
    ids_n: list[list[int]] = []
    logp_n: list[list[float]] = []
    for j, (req, k) in enumerate(zip(outputs, counts_m.tolist(), strict=True)):
        done = sorted(req.outputs, key=lambda c: c.index)
        if len(done) != k:
            raise ValueError(f"request {j} returned {len(done)} completions, expected {k}")
        for c in done:
            tokens = [int(t) for t in c.token_ids]
            stop = next((t + 1 for t, tok in enumerate(tokens) if tok in eos), len(tokens))  # first EOS included
            tokens = tokens[:stop]
            lps = c.logprobs
            ids_n.append(tokens)
            logp_n.append(
                [float(lps[t][tok].logprob) for t, tok in enumerate(tokens)] if lps is not None else [0.0] * stop
            )
    p = max((len(x) for x in prompts), default=0)
    r = max((len(x) for x in ids_n), default=0)
    prompt_m, pmask_m = _left_pad(prompts, p, pad_id)  # (M', P)
    row = torch.from_numpy(np.repeat(np.arange(len(prompts), dtype=np.int64), counts_m))  # (N,)
    response_ids = torch.full((n, r), pad_id, dtype=torch.long)  # (N, R)
    response_mask = torch.zeros((n, r), dtype=torch.long)  # (N, R)
    old_logp = torch.zeros((n, r), dtype=torch.float32)  # (N, R)
    for i, (tokens, lp) in enumerate(zip(ids_n, logp_n, strict=True)):
        response_ids[i, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
        response_mask[i, : len(tokens)] = 1
        old_logp[i, : len(tokens)] = torch.tensor(lp, dtype=torch.float32)
    truncated = np.array([not tokens or tokens[-1] not in eos for tokens in ids_n], dtype=np.bool_)  # (N,)
    return Rollouts(
        prompt_index=np.asarray(prompt_index, dtype=np.int64),
        prompt_ids=prompt_m[row],
        prompt_mask=pmask_m[row],
        response_ids=response_ids,
        response_mask=response_mask,
        old_logp=old_logp,
        texts=tuple(decode(ids_n)) if ids_n else (),
        lengths=np.array([len(x) for x in ids_n], dtype=np.int64),
        truncated=truncated,
    )


def recompute_old_logp(
    model: PreTrainedModel, rollouts: Rollouts, temperature: float, *, batch_size: int = 256
) -> Rollouts:
    """Replace ``old_logp`` by the policy's log_softmax(logits / T) at the sampled tokens (``HFEngine``'s definition).

    One ``sequence_logprobs`` forward per ``batch_size`` rollouts, under ``torch.no_grad()`` in eval mode (the model's
    mode is restored). Greedy rollouts (T = 0) are scored at T = 1, as ``HFEngine`` does.

    Args:
        model: the policy (its current weights: call before the update that uses these rollouts).
        rollouts: N rollouts from any engine.
        temperature: the sampling temperature T ≥ 0.
        batch_size: rollouts per forward.

    Returns:
        The same rollouts with (N, R) float32 ``old_logp`` on CPU, 0 where the mask is 0.

    Raises:
        ValueError: if ``temperature < 0`` or ``batch_size < 1``.
    """
    if not temperature >= 0 or batch_size < 1:
        raise ValueError(f"need temperature ≥ 0 and batch_size ≥ 1, got {temperature!r}, {batch_size!r}")
    n, r = rollouts.response_ids.shape
    if n == 0 or r == 0:
        return rollouts
    t = temperature if temperature > 0 else 1.0
    parts = []
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for start in range(0, n, batch_size):
                s = slice(start, start + batch_size)
                ro = rollouts
                logp, _ = sequence_logprobs(
                    model, ro.prompt_ids[s], ro.prompt_mask[s], ro.response_ids[s], ro.response_mask[s], temperature=t
                )
                parts.append(logp.float().cpu())  # (B, R)
    finally:
        model.train(was_training)
    return dataclasses.replace(rollouts, old_logp=torch.cat(parts))


class VLLMEngine:
    """Sample rollouts with vLLM from the policy's current weights (pushed by :meth:`sync_weights`).

    Args:
        model: the policy (a ``PreTrainedModel`` on the GPU); its config builds vLLM's model, its weights fill it.
        tokenizer: its tokenizer, with EOS and pad tokens set (``load_policy`` does this).
        config: sampling parameters (``batch_size`` is the recompute forward's micro-batch; vLLM batches itself).
        seed: seed of the engine's sampling stream.
        gpu_memory_utilization: fraction of the GPU's memory vLLM may take (weights + KV cache), beside the policy.
        enforce_eager: no CUDA graphs (faster start; the rollouts are short).
        dtype: vLLM's weight dtype.
        recompute_logprobs: ``old_logp`` from the policy (True: exactly ``HFEngine``'s definition) or vLLM's
            processed log-probs (False; see the module docstring).
        enable_sleep_mode: let :meth:`sleep` release vLLM's memory during the update (woken by the next call).
        llm_options: further ``vllm.LLM`` keyword arguments (``max_num_seqs``, ``max_model_len`` ...); they win.

    Raises:
        ValueError: without CUDA or vLLM (:data:`INSTALL_HINT`), for bad arguments, or if vLLM's model has weights
            the policy does not provide.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        config: GenerationConfig,
        *,
        seed: int = 0,
        gpu_memory_utilization: float = 0.3,
        enforce_eager: bool = True,
        dtype: Literal["bfloat16", "float16", "float32", "auto"] = "bfloat16",
        recompute_logprobs: bool = True,
        enable_sleep_mode: bool = False,
        llm_options: Mapping[str, object] | None = None,
    ) -> None:
        if not 0 < gpu_memory_utilization <= 1:
            raise ValueError(f"gpu_memory_utilization={gpu_memory_utilization!r} must be in (0, 1]")
        self._attach(model, tokenizer, config, seed=seed, recompute_logprobs=recompute_logprobs,
                     sleep_mode=enable_sleep_mode)  # fmt: skip
        vllm = require_vllm()
        self._folder = tempfile.TemporaryDirectory(prefix="v05-vllm-")
        _write_config(model, Path(self._folder.name))
        options: dict[str, object] = {
            "model": self._folder.name,
            "skip_tokenizer_init": True,
            "load_format": "dummy",  # the policy's weights arrive through sync_weights below
            "dtype": dtype,
            "seed": seed,
            "gpu_memory_utilization": gpu_memory_utilization,
            "enforce_eager": enforce_eager,
            "enable_sleep_mode": enable_sleep_mode,
        }
        known = {f.name for f in dataclasses.fields(vllm.EngineArgs)}  # type: ignore[attr-defined]
        options |= {k: v for k, v in (("logprobs_mode", "processed_logprobs"), ("generation_config", "vllm"))
                    if k in known}  # fmt: skip
        options |= dict(llm_options or {})
        with _global_rng_kept():  # vLLM's worker seeds the global RNGs of this process
            self.llm_ = vllm.LLM(**options)  # type: ignore[attr-defined]
        self._sampling_params = vllm.SamplingParams  # type: ignore[attr-defined]
        self.sync_weights(model, check_complete=True)

    @classmethod
    def _from_llm(
        cls,
        llm: object,
        sampling_params: Callable[..., object],
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        config: GenerationConfig,
        *,
        seed: int = 0,
        recompute_logprobs: bool = True,
    ) -> VLLMEngine:
        """An engine around an existing ``LLM``-like object (the tests drive the engine with a stand-in)."""
        self = cls.__new__(cls)
        self._attach(model, tokenizer, config, seed=seed, recompute_logprobs=recompute_logprobs, sleep_mode=False)
        self.llm_, self._sampling_params = llm, sampling_params
        return self

    def _attach(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        config: GenerationConfig,
        *,
        seed: int,
        recompute_logprobs: bool,
        sleep_mode: bool,
    ) -> None:
        """Check the arguments and set everything but vLLM itself."""
        if tokenizer.eos_token_id is None or tokenizer.pad_token_id is None:
            raise ValueError("tokenizer needs eos_token and pad_token (load_policy sets pad = eos when missing)")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed={seed!r} must be a non-negative integer")
        max_positions = getattr(model.config, "max_position_embeddings", None)
        if max_positions is not None and config.max_new_tokens >= max_positions:
            raise ValueError(f"max_new_tokens={config.max_new_tokens} leaves no room for a prompt "
                             f"(max_position_embeddings={max_positions})")  # fmt: skip
        self.llm_: object = None
        self._sampling_params: Callable[..., object] | None = None
        self._folder: tempfile.TemporaryDirectory[str] | None = None
        self.model = model
        self.tokenizer = tokenizer
        self.config = config
        self.recompute_logprobs = recompute_logprobs
        self.weight_syncs_ = 0
        self.seed = seed
        self._calls = 0  # generate calls so far: the sampling stream's position
        self._pad_id = int(tokenizer.pad_token_id)  # type: ignore[arg-type]
        self._eos_ids = _eos_token_ids(model, tokenizer)
        self._max_prompt_tokens = None if max_positions is None else max_positions - config.max_new_tokens
        self._add_special_tokens = prompt_special_tokens(tokenizer)
        self._sleep_mode = sleep_mode
        self._asleep: set[str] = set()  # vLLM memory tags released by sleep() and not woken yet

    def generate(self, prompts: Sequence[str], counts: Sequence[int] | npt.NDArray[np.integer]) -> Rollouts:
        """Sample ``counts[i]`` rollouts of ``prompts[i]`` for every i, in one ``LLM.generate`` call.

        Args:
            prompts: (M,) prompt texts.
            counts: (M,) non-negative rollouts per prompt; 0 skips the prompt.

        Returns:
            N = Σ counts rollouts, laid out as ``np.repeat(arange(M), counts)``.

        Raises:
            ValueError: if the lengths differ, a count is negative or a prompt encodes to no tokens.
        """
        counts_m = as_index_1d(counts, "counts", allow_empty=True)  # (M,)
        if len(counts_m) != len(prompts):
            raise ValueError(f"counts has {len(counts_m)} entries but prompts has {len(prompts)}")
        prompt_index = np.repeat(np.arange(len(prompts), dtype=np.int64), counts_m)  # (N,)
        keep = np.flatnonzero(counts_m)  # (M',)
        encoded = self._encode([prompts[i] for i in keep])
        seeds = request_seeds(self.seed, self._calls, counts_m[keep])  # (M',)
        self._calls += 1
        outputs: Sequence[RequestLike] = []
        if len(keep):
            self._wake()
            params = [self._params(int(k), int(s)) for k, s in zip(counts_m[keep], seeds, strict=True)]
            requests = [{"prompt_token_ids": ids} for ids in encoded]
            outputs = self.llm_.generate(requests, params, use_tqdm=False)  # type: ignore[attr-defined]
        rollouts = rollouts_from_outputs(outputs, encoded, counts_m[keep], prompt_index=prompt_index,
                                         eos_ids=self._eos_ids, pad_id=self._pad_id, decode=self._decode)  # fmt: skip
        if self.recompute_logprobs:
            rollouts = recompute_old_logp(self.model, rollouts, self.config.temperature,
                                          batch_size=self.config.batch_size)  # fmt: skip
        return rollouts

    def sync_weights(self, model: PreTrainedModel, *, check_complete: bool = False) -> None:
        """Copy the policy's current parameters into vLLM's model (in place) and drop vLLM's prefix cache.

        Call after every optimizer step and after loading a checkpoint. Parameters go by their Hugging Face names
        (``model.named_parameters()``); vLLM's ``load_weights`` maps them onto its fused layers (qkv, gate_up).

        Args:
            model: the policy (same architecture as the one the engine was built from).
            check_complete: raise if some of vLLM's parameters received no weight (done once, at construction,
                when vLLM still holds dummy weights).

        Raises:
            ValueError: if vLLM's model cannot be reached (outside :data:`SUPPORTED_VLLM` or with a multiprocess
                engine core), or if ``check_complete`` finds parameters left unset.
        """
        if "weights" in self._asleep:
            self.llm_.wake_up(tags=["weights"])  # type: ignore[attr-defined]
            self._asleep.discard("weights")
        weights = [(name, p.detach()) for name, p in model.named_parameters()]
        missing = _load_weights(self.llm_, weights)
        if check_complete and missing:
            raise ValueError(f"vLLM's model has parameters the policy does not provide: {missing[:5]} "
                             f"({len(missing)} in all); is the policy's architecture supported by vLLM?")  # fmt: skip
        reset = getattr(self.llm_, "reset_prefix_cache", None)
        if callable(reset):
            reset()  # cached prompt keys/values were computed with the old weights
        self.weight_syncs_ += 1

    def sleep(self) -> None:
        """Release vLLM's GPU memory during the policy update (level 1: weights to CPU, KV cache dropped).

        A no-op unless built with ``enable_sleep_mode=True``; the next ``generate`` or ``sync_weights`` wakes it.
        """
        if self._sleep_mode and not self._asleep:
            self.llm_.sleep(level=1)  # type: ignore[attr-defined]
            self._asleep = {"weights", "kv_cache"}

    def close(self) -> None:
        """Drop vLLM (its GPU memory) and the temporary config folder; the engine is unusable afterwards."""
        self.llm_ = None
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        if self._folder is not None:
            self._folder.cleanup()
            self._folder = None

    def state_dict(self) -> dict[str, int]:
        """Return the sampling stream's state ``{"seed", "calls"}``."""
        return {"seed": self.seed, "calls": self._calls}

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        """Restore a state from :meth:`state_dict`: the next ``generate`` uses the seeds the saved engine would have.

        Raises:
            ValueError: if a key is missing or not a non-negative integer (e.g. an ``HFEngine`` state).
        """
        missing = {"seed", "calls"} - set(state)
        if missing:
            raise ValueError(f"vLLM engine state is missing {sorted(missing)} (an HFEngine state has seed/cpu/cuda)")
        values = {k: state[k] for k in ("seed", "calls")}
        for key, value in values.items():
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
                raise ValueError(f"vLLM engine state {key}={value!r} must be a non-negative integer")
        self.seed, self._calls = int(values["seed"]), int(values["calls"])  # type: ignore[call-overload]

    def _params(self, n: int, seed: int) -> object:
        c = self.config
        return self._sampling_params(  # type: ignore[misc]
            n=n,
            temperature=c.temperature,
            top_p=c.top_p,
            top_k=c.top_k if c.top_k > 0 else -1,  # -1 disables top-k in every vLLM version (0 only in newer ones)
            max_tokens=c.max_new_tokens,
            seed=seed,
            logprobs=None if self.recompute_logprobs else 0,  # 0: the sampled token's log-prob only
            stop_token_ids=list(self._eos_ids),  # vLLM has no tokenizer: every EOS is an explicit stop id
            detokenize=False,
        )

    def _encode(self, prompts: list[str]) -> list[list[int]]:
        """Token ids of each prompt, as ``HFEngine`` encodes them (left-truncated to the model's positions)."""
        if not prompts:
            return []
        encoded = [
            list(ids) for ids in self.tokenizer(prompts, add_special_tokens=self._add_special_tokens)["input_ids"]
        ]
        if any(len(ids) == 0 for ids in encoded):
            raise ValueError("a prompt encodes to no tokens: generation needs at least one token of context")
        limit = self._max_prompt_tokens
        return [ids[-limit:] for ids in encoded] if limit is not None else encoded

    def _decode(self, ids: list[list[int]]) -> list[str]:
        return list(self.tokenizer.batch_decode(ids, skip_special_tokens=True))

    def _wake(self) -> None:
        if self._asleep:  # wake only what is still asleep: waking a mapped allocation twice is an error
            self.llm_.wake_up(tags=sorted(self._asleep))  # type: ignore[attr-defined]
            self._asleep = set()


def _write_config(model: PreTrainedModel, folder: Path) -> None:
    """The policy's config.json (architecture named), from which vLLM builds its model; no weights, no tokenizer."""
    config = copy.deepcopy(model.config)
    config.architectures = [type(model).__name__]
    config.save_pretrained(folder)


def _load_weights(llm: object, weights: list[tuple[str, torch.Tensor]]) -> list[str]:
    """``load_weights`` on vLLM's model object; returns vLLM's parameter names that received nothing."""

    def load(model: torch.nn.Module) -> list[str]:
        loaded = model.load_weights(iter(weights))  # type: ignore[operator]
        if loaded is None:  # a model whose load_weights reports nothing: cannot check
            return []
        return sorted({name for name, _ in model.named_parameters()} - set(loaded))

    engine = getattr(llm, "llm_engine", None)
    if engine is not None and getattr(engine, "model_executor", None) is None:
        raise ValueError(f"vLLM's engine core runs in another process (VLLM_ENABLE_V1_MULTIPROCESSING is not 0): "
                         f"cannot sync weights in place; supported: {SUPPORTED_VLLM}")  # fmt: skip
    apply = getattr(llm, "apply_model", None)
    if not callable(apply):
        raise ValueError(f"vLLM {_vllm_version()} has no LLM.apply_model to load weights in place; "
                         f"supported: {SUPPORTED_VLLM}")  # fmt: skip
    return list(apply(load)[0])  # one worker: the in-process one


def _vllm_version() -> str:
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _left_pad(rows: Sequence[Sequence[int]], width: int, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(M, width) left-padded ids and mask."""
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        if row:
            ids[i, width - len(row) :] = torch.tensor(list(row), dtype=torch.long)
            mask[i, width - len(row) :] = 1
    return ids, mask


@contextmanager
def _global_rng_kept() -> Iterator[None]:
    """Restore Python's, NumPy's and torch's (CPU and CUDA) global RNG states after the block."""
    py, np_state = random.getstate(), np.random.get_state()
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        try:
            yield
        finally:
            random.setstate(py)
            np.random.set_state(np_state)
