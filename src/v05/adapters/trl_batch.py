"""A TRL generation batch in v05's terms: prompt texts and keys, TRL's K-block layout as groups, and the batch record.

Used by :class:`v05.adapters.trl.V05GRPOTrainer`; it does not import TRL. TRL lays a batch out as contiguous blocks
of K = ``num_generations`` completions of one prompt, so rollout i belongs to group ``i // K``; :func:`_group_keys`
checks that each block holds one prompt's rollouts.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from v05._types import FloatArray, IntArray
from v05.estimators import Estimate
from v05.tasks.base import prompt_key


@dataclass(frozen=True, slots=True)
class V05Batch:
    """What the adapter computed for the latest generation batch (all processes' rollouts, in TRL's order).

    Attributes:
        mode: ``"train"`` or ``"eval"``.
        prompt_ids: (G,) stable prompt keys (``prompt_id`` column, else ``"sha1:" + sha1(prompt text)[:12]``).
        rewards: (N,) TRL's weighted reward sums on ``v05_reward_range``'s scale; NaN where every reward function
            returned None (unscored).
        group: (N,) group ids, ``arange(N) // K``.
        prior: (G,) the provider's prediction on the reward scale (NaN for a group with no scored rollout), or None.
        estimate: the v05 estimate on the scored rollouts (``scored``), groups renumbered in order.
        advantages: (N,) what TRL's loss uses (sliced per process): the estimate's, 0 for the unscored rollouts.
        scored: (N,) bool, the rollouts with a reward.
        engine_advantages: (N,) TRL's own advantages for the same batch (discarded), or None if TRL's completion
            log could not hold them.
        process_slice: the rollouts of this process.
    """

    mode: str
    prompt_ids: tuple[str, ...]
    rewards: FloatArray
    group: IntArray
    prior: FloatArray | None
    estimate: Estimate
    advantages: FloatArray
    scored: np.ndarray
    engine_advantages: FloatArray | None
    process_slice: slice


def _group_keys(keys: Sequence[str], texts: Sequence[str], k: int) -> tuple[np.ndarray, list[str]]:
    """(G,) keys and texts of the contiguous K-blocks; ValueError if a block mixes prompts (layout assumption)."""
    block = np.asarray(keys, dtype=object).reshape(-1, k)  # (G, K)
    mixed = np.flatnonzero((block != block[:, :1]).any(axis=1))
    if mixed.size:
        g = int(mixed[0])
        raise ValueError(
            f"rollouts {g * k}..{g * k + k - 1} are not one prompt's group (keys {sorted(set(block[g]))}): "
            "v05.adapters.trl assumes TRL's layout of num_generations contiguous rollouts per prompt"
        )
    return block[:, 0].astype(str), [str(t) for t in texts[::k]]


def _prompt_text(prompt: object) -> str:
    """The text of a TRL prompt: a plain string, or the text parts of a conversation's messages joined by newlines.

    Any other prompt is read as its JSON (sorted keys).
    """
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        parts = []
        for message in prompt:
            content = message.get("content", "") if isinstance(message, dict) else message
            if isinstance(content, list):  # content blocks: keep the text ones
                content = " ".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
            parts.append(str(content))
        return "\n".join(parts)
    return json.dumps(prompt, sort_keys=True, default=str)


def _dataset_keys(dataset: Any) -> tuple[np.ndarray, list[str]]:
    """(n,) keys and texts of a train dataset's rows, as :func:`_row_key` and :func:`_prompt_text` read each row."""
    texts = [_prompt_text(p) for p in dataset["prompt"]]
    ids = dataset["prompt_id"] if "prompt_id" in dataset.column_names else [None] * len(texts)
    keys = [_row_key({"prompt_id": i}, t) for i, t in zip(ids, texts, strict=True)]
    return np.asarray(keys, dtype=object), texts


def _row_key(row: dict[str, Any], text: str) -> str:
    """A stable prompt key: the dataset's ``prompt_id`` column when present, else a sha1 of the prompt text."""
    if "prompt_id" in row and row["prompt_id"] is not None:
        return str(row["prompt_id"])
    return prompt_key("sha1", text)
