"""The SFT warm start: train the policy to a mid-range sampled pass rate once, cache it, load it every time after.

The SFT stops on the sampled pass rate of the task's *validation* split (``Task.validation_prompts``), which is
disjoint from the training pool and from the eval split: stopping on the eval split would select the warm start on
the numbers the runs are then judged by. With ``warmup.per_seed`` (default) each run seed gets its own warm start —
the tiny policy's initialisation and the SFT batch order are offset by the seed — so a spread over seeds includes
the warm start's; every method of one seed still starts from bit-identical weights (paired comparisons).

The cache key is a hash of everything that determines the warm start (policy and its seed, task, template, SFT
settings and seed, the warm-up's example count and validation size), so a second ``make demo`` skips the warm-up.
A warm start is written to a temporary folder and renamed into place.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from v05.engines.hf import HFEngine, prompt_special_tokens
from v05.tasks import Prompt, Task, make_task, render_prompt
from v05.tasks.base import sft_examples
from v05.train.policy import TINY_NAME, load_policy, save_policy
from v05.train.sft import sft_warmup

logger = logging.getLogger(__name__)

CACHE_ENV = "V05_WARM_START_DIR"
"""Environment variable that overrides the warm-start cache folder (default ``~/.cache/v05/warm_start``)."""


def warm_start_config(cfg: Any) -> Any:
    """``cfg`` as its warm start is trained: seeds offset by ``seed`` when ``warmup.per_seed``.

    Without ``policy.lora`` the warm-up fine-tunes every weight and saves the model. With it the warm-up trains a
    LoRA adapter of that shape on the frozen base and saves the adapter only (a few MB, where SmolLM2's weights are
    540 MB: a grid's store keeps it, so a grid resumed on another machine pairs with its stored cells), and RL trains
    on from that adapter (:func:`warm_policy`): the warm start, the KL reference included, is base + adapter.
    """
    if not cfg.warmup.per_seed or cfg.seed == 0:
        return cfg
    policy = dataclasses.replace(cfg.policy, seed=cfg.policy.seed + cfg.seed)
    sft = dataclasses.replace(cfg.warmup.sft, seed=cfg.warmup.sft.seed + cfg.seed)
    return dataclasses.replace(cfg, policy=policy, warmup=dataclasses.replace(cfg.warmup, sft=sft))


_POLICY_SINCE_V2 = ("gguf_file", "lora", "adapter")
"""Policy fields added since key version 2: left out of the key while unset, so earlier warm starts keep their
folder (and the evidence grid's stored warm starts stay valid)."""


ADAPTER_CONFIG = "adapter_config.json"
"""Marks a LoRA warm start: the folder holds peft's adapter, not the model (its base is ``cfg.policy``'s)."""


def warm_policy(cfg: Any, warm: Path) -> Any:
    """The policy config of RL from the warm start folder ``warm``.

    A full warm start: its weights (not the GGUF) with ``cfg``'s LoRA, if any, fresh on top. A LoRA warm start
    (:data:`ADAPTER_CONFIG`): ``cfg``'s base with the warm start's adapter, trained on.
    """
    if (warm / ADAPTER_CONFIG).is_file():
        return dataclasses.replace(cfg.policy, adapter=str(warm))
    return dataclasses.replace(cfg.policy, name_or_path=str(warm), gguf_file=None)


def warm_start_dir(cfg: Any) -> Path:
    """The cache folder of the warm start ``cfg`` (a :class:`~v05.train.config.TrainConfig`) asks for."""
    cfg = warm_start_config(cfg)
    w = cfg.warmup
    root = Path(w.cache_dir or os.environ.get(CACHE_ENV) or "~/.cache/v05/warm_start")
    policy = {k: v for k, v in dataclasses.asdict(cfg.policy).items() if not (k in _POLICY_SINCE_V2 and v is None)}
    key = {
        "policy": policy | {"device": "-", "dtype": "-"},
        "task": dataclasses.asdict(cfg.task),
        "sft": dataclasses.asdict(w.sft),
        "n_examples": w.n_examples,
        "eval_size": w.eval_size,
        "max_new_tokens": cfg.generation.max_new_tokens,
        "selection": "validation",
        "version": 2,
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return root.expanduser() / digest


def ensure_warm_start(cfg: Any, *, progress: bool = True) -> Path:
    """The folder of the cached warm start, training it first if it is missing.

    Returns:
        A folder that :func:`warm_policy` turns into the RL policy (a ``save_pretrained`` model, or with
        ``policy.lora`` a peft adapter) and an ``sft.json`` with the warm-up's result (``split: "validation"``, its
        size and the seeds used).

    Raises:
        ValueError: the task has no validation split to stop on (e.g. ``math_file`` with ``val_fraction=0``).
    """
    target = warm_start_dir(cfg)
    if (target / "sft.json").is_file():
        logger.info("warm start: cached at %s", target)
        return target
    cfg = warm_start_config(cfg)
    task = make_task(cfg.task.name, **cfg.task.options)
    held_out = list(task.validation_prompts())[: cfg.warmup.eval_size]
    if not held_out:
        raise ValueError(
            f"the warm start stops on the task's validation split, but task {cfg.task.name!r} has none: give it one "
            "(arithmetic n_val, reasoning_gym size_val, math_file val_fraction > 0) or set warmup.enabled=false"
        )
    model, tokenizer = load_policy(cfg.policy)
    examples = sft_examples(task, cfg.warmup.n_examples, cfg.warmup.sft.seed + 1)
    pairs = list(zip(render_all(cfg, task, examples, tokenizer), map(task.sft_target, examples), strict=True))
    held_text = render_all(cfg, task, held_out, tokenizer)
    gen = dataclasses.replace(cfg.generation, temperature=1.0)

    def evaluate(m: Any) -> float:
        rollouts = HFEngine(m, tokenizer, gen, seed=cfg.eval.seed).generate(held_text, [1] * len(held_text))
        return float(task.score(held_out, list(rollouts.texts)).rewards.mean())

    logger.info("warm start: SFT to a sampled pass rate of %.2f (cache %s)", cfg.warmup.sft.target_pass_rate, target)
    result = sft_warmup(model, tokenizer, pairs, evaluate=evaluate, config=cfg.warmup.sft, progress=progress)
    tmp = target.with_name(f".tmp_{target.name}_{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    if cfg.policy.lora is None:
        save_policy(model, tokenizer, tmp)
    else:  # the adapter only (adapter_config.json + adapter_model.safetensors); the tokenizer is the base's
        model.save_pretrained(tmp, safe_serialization=True)
        (tmp / "README.md").unlink(missing_ok=True)  # peft's empty model card
    info = {"examples": len(pairs), "split": "validation", "validation_size": len(held_out),
            "policy_seed": cfg.policy.seed, "sft_seed": cfg.warmup.sft.seed}  # fmt: skip
    (tmp / "sft.json").write_text(json.dumps(dataclasses.asdict(result) | info), encoding="utf-8")
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(tmp, target)
    except OSError:  # another process finished the same warm start first: keep theirs
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _render(cfg: Any, task: Task, prompt: Prompt, tokenizer: object) -> str:
    t = cfg.task
    return render_prompt(task, prompt, tokenizer, template=t.template, system_prompt=t.system_prompt,
                         instruction=t.instruction)  # fmt: skip


def render_all(cfg: Any, task: Task, prompts: Sequence[Prompt], tokenizer: Any) -> list[str]:
    """Every prompt rendered with the run's template (chat or plain).

    Raises:
        ValueError: the policy is the tiny model and the longest rendered prompt plus ``generation.max_new_tokens``
            exceeds its ``policy.max_position_embeddings`` (the engine would cut the prompts' first characters).
    """
    texts = [_render(cfg, task, p, tokenizer) for p in prompts]
    if cfg.policy.name_or_path == TINY_NAME and texts:
        _check_tiny_context(cfg, texts, tokenizer)
    return texts


def _check_tiny_context(cfg: Any, texts: list[str], tokenizer: Any) -> None:
    """Refuse prompts that do not fit the tiny policy's context with room for the response."""
    encoded = tokenizer(texts, add_special_tokens=prompt_special_tokens(tokenizer))["input_ids"]
    i = max(range(len(texts)), key=lambda j: len(encoded[j]))
    n_new, limit = cfg.generation.max_new_tokens, cfg.policy.max_position_embeddings
    if len(encoded[i]) + n_new > limit:
        raise ValueError(
            f"the tiny policy's context cannot fit the prompts: {_head(texts[i])} is {len(encoded[i])} tokens, + "
            f"generation.max_new_tokens={n_new} > policy.max_position_embeddings={limit}; shorten the prompts "
            "(task.options: prompt_form=compact, a smaller dataset config) or raise policy.max_position_embeddings"
        )


def _head(text: str, n: int = 40) -> str:
    return repr(text) if len(text) <= n else f"{text[:n]!r}..."


__all__ = [
    "ensure_warm_start",
    "render_all",
    "sft_examples",
    "warm_policy",
    "warm_start_config",
    "warm_start_dir",
]
