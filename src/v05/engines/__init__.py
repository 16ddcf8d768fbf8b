"""Rollout engines: sample N rollouts of M prompts with ragged counts and return them flat, with log π_old.

``hf.HFEngine`` wraps Hugging Face ``model.generate`` (CPU and single GPU); it imports torch and transformers.
"""

from v05.engines.hf import GenerationConfig, HFEngine, Rollouts, prompt_special_tokens

__all__ = ["GenerationConfig", "HFEngine", "Rollouts", "prompt_special_tokens"]
