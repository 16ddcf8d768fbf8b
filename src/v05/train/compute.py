r"""Compute accounting: token-passes per step, as this trainer spends them and as a TRL or verl user would pay them.

    token-passes = Σ_passes Σ_models (real input tokens of the pass) · (1 forward, + 2 if it is backpropagated)

A forward of one real (non-padding) token by one model counts 1, its backward 2, so a training forward + backward
over T tokens is 3T. Counted parts (``PARTS``): ``generate`` (the policy sampling: prompt + response tokens of every
rollout), ``policy`` (training forwards and backwards, every PPO epoch; with the shared-prefix forward a group's
prompt counts once per micro-batch), ``recompute`` (no-grad policy passes that recompute old log-probs, POISE's
feature pass, SPO's drift pass), ``reference`` (the KL reference's forwards), ``critic`` (PPO's value passes),
``probe`` (the ``probe`` prior's prompt prefills) and ``encoder`` (a text prior's encoder, ``v0``/``combined``:
MiniLM over the pool's distinct prompts once before step 1, as if its embedding cache were cold; another model, so
counted in the policy's token-passes as its work Σ tokens × its parameters ÷ the policy's parameters). Equal
rollouts is not equal compute: PPO's critic and POISE's extra pass cost token-passes that a rollout count hides.
Token-passes compare runs of one policy; they are not FLOPs across models of other sizes.

The same step split three ways, and what a user of TRL or verl pays (rollout i: P_i prompt and R_i response tokens;
group g: the step's rollouts of one prompt, over all the allocator's rounds, P_g its prompt tokens; a pass π of
weight w_π = 1 forward, 3 forward + backward, over rollouts i ∈ π and, with the shared-prefix forward, its distinct
prompts g ∈ π):

    compute/prefill = Σ_i P_i                       this trainer's engine (HF ``generate``) prefills every rollout's
                                                    prompt row: no prefix cache, a group of k prefills its prompt k×
    compute/decode  = Σ_i R_i                       response tokens generated (= tokens_step)
    compute/update  = Σ_π w_π (Σ_{g∈π} P_g + Σ_{i∈π} R_i)  shared prefix;   Σ_π w_π Σ_{i∈π} (P_i + R_i)  without
                                                    (parts policy + recompute + reference + critic)
    compute_step    = compute/prefill + compute/decode + compute/update + compute/probe + compute/encoder  (Σ PARTS)

    compute_user/prefill = Σ_g P_g                  vLLM's prefix cache: each group's prompt prefilled once
    compute_user/update  = Σ_π w_π Σ_{i∈π} (P_i + R_i)   the same passes, every rollout's prompt through each
                                                    (TRL and verl share no prompt in the update)
    compute_user_step    = compute_user/prefill + compute/decode + compute_user/update + compute/probe
                           + compute/encoder

So at k = 1 (every group one rollout) compute_user_step = compute_step exactly; with ``share_prompt_prefix`` off
the update parts agree and compute_user_step = compute_step − Σ_g (n_g − 1) P_g (only the prefix cache differs);
with it on and groups of n_g > 1, the user's update carries the n_g − 1 extra prompts per group that this trainer
shares. The run's totals (:class:`v05.train.checkpoint.Counters`, checkpointed) are the cumulative sums:
``compute_total`` (this trainer's compute, ``compute``), ``compute_user`` (the user's), ``prefill_total``,
``decode_total``, ``update_total``, ``prefill_user_total`` and ``update_user_total``; SPO's offline rollouts are
counted in them before step 1, and so is a text prior's encoder (``encoder_compute``). Not counted: evaluation.
On the 0.5 M-parameter toy policy MiniLM (22.7 M parameters) costs ~42 policy token-passes a token, so a text prior's
encoder is a large share of a toy run's compute; on SmolLM2-135M it costs ~0.17.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

PARTS = ("generate", "policy", "recompute", "reference", "critic", "probe", "encoder")
"""The parts a step's token-passes are split into (metrics ``compute/<part>``; their sum is ``compute_step``)."""

UPDATE_PARTS = ("policy", "recompute", "reference", "critic")
"""The training-side passes (metric ``compute/update``)."""

BACKWARD = 2
"""A backward pass costs this many token-passes per token (a forward costs 1)."""


def real_tokens(*masks: Any) -> int:
    """Real tokens (mask ≠ 0) in the given masks, summed (torch tensors or numpy arrays)."""
    return int(sum(int((m != 0).sum()) for m in masks))


def _row_tokens(mask: Any) -> np.ndarray:
    """(M,) real tokens of each row of a (M, L) mask."""
    counts = (mask != 0).sum(1)
    counts = counts.cpu().numpy() if hasattr(counts, "cpu") else np.asarray(counts)
    return counts.astype(np.int64).reshape(-1)


@dataclass
class ComputeMeter:
    """One step's token-passes by part, this trainer's (``parts``) and a TRL/verl user's (``user``).

    ``generate`` adds a generation pass, ``forward`` a training-side pass (and its backward), ``add`` token-passes
    counted elsewhere (the probe prior's prefills: the same for both).
    """

    parts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PARTS, 0))
    user: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PARTS, 0))
    prefill: int = 0
    """This trainer's prompt tokens in ``generate`` (the rest of ``parts["generate"]`` is decode)."""
    user_prefill: int = 0
    """The user's prompt tokens in ``generate`` (each group's prompt once)."""

    def generate(self, prompt_mask: Any, response_mask: Any, group: Any) -> None:
        """A generation pass over rollouts: every rollout prefills its prompt row here, each group once for the user.

        Args:
            prompt_mask: (N, P) each rollout's prompt mask.
            response_mask: (N, R) its response mask.
            group: (N,) group (any integers) of each rollout: rollouts of one group share their prompt.
        """
        group = np.asarray(group).reshape(-1)
        if len(group) != prompt_mask.shape[0] or prompt_mask.shape[0] != response_mask.shape[0]:
            raise ValueError(f"generate: {prompt_mask.shape[0]} prompt rows, {response_mask.shape[0]} responses and "
                             f"{len(group)} groups must agree (one per rollout)")  # fmt: skip
        prompts, responses = real_tokens(prompt_mask), real_tokens(response_mask)
        _, first = np.unique(group, return_index=True)  # the first rollout of each group
        shared = int(_row_tokens(prompt_mask)[first].sum())
        self.prefill += prompts
        self.user_prefill += shared
        self.parts["generate"] += prompts + responses
        self.user["generate"] += shared + responses

    def forward(self, part: str, prompt_mask: Any, response_mask: Any, *, backward: bool = False,
                rows: Any = None) -> None:  # fmt: skip
        """Add a training-side forward (and, with ``backward``, its backward) over the real tokens to ``part``.

        Args:
            part: one of ``UPDATE_PARTS``.
            prompt_mask: (N, P) one prompt row per response, or (G', P) one per distinct prompt with ``rows``.
            response_mask: (N, R).
            backward: the pass is backpropagated (3 token-passes per token instead of 1).
            rows: (N,) the prompt row of each response (the shared-prefix forward), or None.
        """
        if part not in UPDATE_PARTS:
            raise ValueError(f"unknown training-side compute part {part!r}; valid: {', '.join(UPDATE_PARTS)} "
                             "(generation: ComputeMeter.generate; counted elsewhere: ComputeMeter.add)")  # fmt: skip
        weight = 1 + (BACKWARD if backward else 0)
        responses = real_tokens(response_mask)
        if rows is None:
            if prompt_mask.shape[0] != response_mask.shape[0]:
                raise ValueError(f"{part}: {prompt_mask.shape[0]} prompt rows for {response_mask.shape[0]} responses: "
                                 "pass rows= (each response's prompt row) for a shared-prefix pass")  # fmt: skip
            user_prompts = real_tokens(prompt_mask)
        else:
            user_prompts = int(_row_tokens(prompt_mask)[np.asarray(rows).reshape(-1)].sum())
        self.parts[part] += weight * (real_tokens(prompt_mask) + responses)
        self.user[part] += weight * (user_prompts + responses)

    def add(self, part: str, token_passes: int) -> None:
        """Add token-passes counted elsewhere (e.g. by a prior backend) to ``part``, the same for the user."""
        if part not in self.parts:
            raise ValueError(f"unknown compute part {part!r}; valid: {', '.join(PARTS)}")
        self.parts[part] += int(token_passes)
        self.user[part] += int(token_passes)

    @property
    def total(self) -> int:
        """The step's token-passes (this trainer)."""
        return sum(self.parts.values())

    @property
    def user_total(self) -> int:
        """The step's token-passes as a TRL/verl user pays them."""
        return sum(self.user.values())

    @property
    def decode(self) -> int:
        """Response tokens generated (the same for the user)."""
        return self.parts["generate"] - self.prefill

    @property
    def update(self) -> int:
        """This trainer's training-side token-passes (``UPDATE_PARTS``)."""
        return sum(self.parts[p] for p in UPDATE_PARTS)

    @property
    def user_update(self) -> int:
        """The user's training-side token-passes (every rollout's prompt through every pass)."""
        return sum(self.user[p] for p in UPDATE_PARTS)

    def metrics(self) -> dict[str, int]:
        """The step's metrics (module docstring).

        ``compute/<part>`` for every part, ``compute_step`` (their sum), the split ``compute/prefill``,
        ``compute/decode``, ``compute/update``, and the user's ``compute_user/prefill``, ``compute_user/update`` and
        ``compute_user_step``.
        """
        return {
            **{f"compute/{k}": v for k, v in self.parts.items()},
            "compute_step": self.total,
            "compute/prefill": self.prefill,
            "compute/decode": self.decode,
            "compute/update": self.update,
            "compute_user/prefill": self.user_prefill,
            "compute_user/update": self.user_update,
            "compute_user_step": self.user_total,
        }


SHARED_PARTS = ("policy", "reference", "recompute")
"""The update passes that take the shared-prefix forward (``train.share_prompt_prefix``); the critic's do not."""


def user_step_recount(row: Mapping[str, Any], group_size: float, *, shared_prefix: bool) -> float | None:
    r"""A step's ``compute_user_step`` recounted from the parts a run logged before it was logged (older grid cells).

        R = tokens_step,   S = compute/generate − R   (every rollout's prompt: this trainer's prefill),
        G = S / k                                      (each group's prompt once: the user's prefill),
        user = (G + R) + Σ_{p ∈ SHARED_PARTS} c_p · (S + R) / (G + R) + compute/critic + compute/probe

    with c_p the logged part: a shared-prefix pass over the batch costs w (G + R) here and w (S + R) for the user,
    whatever its weight w and however many passes (without ``shared_prefix`` the parts are the user's already).

    Exact when every group of the step has k rollouts and the update passes cover exactly the generated rollouts
    with each group inside one micro-batch (GRPO at a fixed k, k = 1 methods); with groups of varying size (OSLA,
    dynamic sampling) k is their mean and the recount assumes equal prompt lengths, an approximation. At k = 1 it
    is ``compute_step``. None where the row lacks ``compute/generate`` or ``tokens_step``.
    """
    gen, responses = row.get("compute/generate"), row.get("tokens_step")
    if gen is None or responses is None:
        return None
    if not group_size >= 1:
        raise ValueError(f"group_size must be >= 1, got {group_size!r}")
    prompts = float(gen) - float(responses)
    shared = prompts / group_size
    update = sum(float(row.get(f"compute/{p}") or 0.0) for p in SHARED_PARTS)
    if shared_prefix and shared + responses > 0:  # multiplied before dividing: whole token counts stay exact
        update = update * (prompts + responses) / (shared + responses)
    rest = float(row.get("compute/critic") or 0.0) + float(row.get("compute/probe") or 0.0)
    return shared + float(responses) + update + rest


__all__ = ["BACKWARD", "PARTS", "SHARED_PARTS", "UPDATE_PARTS", "ComputeMeter", "real_tokens", "user_step_recount"]
