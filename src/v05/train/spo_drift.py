r"""The policy's drift per prompt since its last visit: what SPO's ``rho="kl"`` discount reads (trainer side).

For each prompt sampled this step, after the policy update (verl ``recipe/spo``'s order):

    D = mean_t |log π_last(y_t) − log π_now(y_t)|   over the response tokens y of the prompt's stored response

where the stored response is the one kept at the prompt's last visit and log π_last its log-probs under the policy
right after that visit's update; then this step's response of the prompt (its last rollout, the recipe's "last write
wins") and its log-probs under the updated policy are stored for the next visit. A first visit has nothing stored:
the provider takes D = 0 (ρ = clip_upper). The no-grad passes are counted in the step's compute (``recompute``).
State (token ids and log-probs per prompt) is checkpointed as JSON, so a resumed run measures the same D.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from v05.engines.logprobs import sequence_logprobs
from v05.train.compute import ComputeMeter


class DriftMeter:
    """Stored last responses per prompt key and the drift D of the policy on them (module docstring)."""

    def __init__(self, temperature: float) -> None:
        self.temperature = temperature
        self.stored: dict[str, tuple[list[int], list[int], list[float]]] = {}  # key → (prompt, response, logp)

    def step(self, model: Any, keys: list[str], rollouts: Any, rows: np.ndarray, compute: ComputeMeter) -> dict:
        """D for the prompts seen before (key → D), then store row ``rows[i]`` of ``rollouts`` as ``keys[i]``'s."""
        seen = [k for k in keys if k in self.stored]
        drift = {}
        if seen:
            old = [self.stored[k] for k in seen]
            logp, mask = self._logprobs(model, [p for p, _, _ in old], [r for _, r, _ in old], compute)
            for i, k in enumerate(seen):
                n = int(mask[i].sum())
                diff = np.abs(np.asarray(old[i][2], np.float64) - logp[i, :n])  # (R_i,)
                drift[k] = float(diff.mean()) if n else 0.0
        prompts = [_real(rollouts.prompt_ids[j], rollouts.prompt_mask[j]) for j in rows]
        responses = [_real(rollouts.response_ids[j], rollouts.response_mask[j]) for j in rows]
        logp, mask = self._logprobs(model, prompts, responses, compute)
        for i, k in enumerate(keys):
            self.stored[k] = (prompts[i], responses[i], logp[i, : int(mask[i].sum())].tolist())
        return drift

    def _logprobs(
        self, model: Any, prompts: list[list[int]], responses: list[list[int]], compute: ComputeMeter
    ) -> tuple[np.ndarray, np.ndarray]:
        """(M, R) float64 log-probs of the responses (left-padded prompts, right-padded responses) and the mask."""
        p_len, r_len = max(len(p) for p in prompts), max(max(len(r) for r in responses), 1)
        p_ids = torch.zeros(len(prompts), p_len, dtype=torch.long)
        p_mask = torch.zeros_like(p_ids)
        r_ids = torch.zeros(len(prompts), r_len, dtype=torch.long)
        r_mask = torch.zeros_like(r_ids)
        for i, (p, r) in enumerate(zip(prompts, responses, strict=True)):
            p_ids[i, p_len - len(p) :], p_mask[i, p_len - len(p) :] = torch.tensor(p), 1
            r_ids[i, : len(r)], r_mask[i, : len(r)] = torch.tensor(r, dtype=torch.long), 1
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                logp, _ = sequence_logprobs(model, p_ids, p_mask, r_ids, r_mask, temperature=self.temperature)
        finally:
            model.train(was_training)
        compute.forward("recompute", p_mask, r_mask)
        return logp.double().cpu().numpy(), r_mask.numpy()

    def state_dict(self) -> dict[str, Any]:
        """JSON state: each prompt's stored response and log-probs."""
        return {k: {"prompt": p, "response": r, "logp": lp} for k, (p, r, lp) in self.stored.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.stored = {k: (list(v["prompt"]), list(v["response"]), [float(x) for x in v["logp"]])
                       for k, v in state.items()}  # fmt: skip


def _real(ids: Any, mask: Any) -> list[int]:
    """The real (unpadded) tokens of one row."""
    return [int(t) for t, m in zip(ids.tolist(), mask.tolist(), strict=True) if m]


__all__ = ["DriftMeter"]
