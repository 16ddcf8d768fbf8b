"""TRL's GRPOTrainer with v05's advantages: one rollout per prompt, the `history` prior as its baseline (CPU, < 1 min).

    python examples/trl/train_tiny.py      # after: pip install 'v05[train,trl]' (torch==2.13.0 first)

The policy is v05's 0.5 M-parameter character-level Llama built from a config (no download); swap in any causal LM
and its tokenizer. From random weights it rarely answers right, so the rewards are mostly 0 and the run shows the
wiring, not learning: `v05 train --config v05-recommended` warm-starts the same policy first.
"""

from datasets import Dataset
from v05.adapters.trl import V05GRPOConfig, V05GRPOTrainer, no_checkpointing_args
from v05.tasks.arithmetic import ArithmeticTask
from v05.tasks.base import render_prompt
from v05.train.policy import PolicyConfig, load_policy

task = ArithmeticTask(n_train=512, seed=0)  # v05's embedded add/sub/mul task and its verifier
prompts = list(task.train_prompts())
model, tokenizer = load_policy(PolicyConfig(device="cpu"))
dataset = Dataset.from_dict(
    {
        "prompt": [render_prompt(task, p, tokenizer, template="plain") for p in prompts],  # plain strings
        "prompt_id": [p.key for p in prompts],  # a stable key per prompt: the prior's per-prompt history
    }
)
by_key = {p.key: p for p in prompts}


def correct(prompts, completions, prompt_id, **kwargs):
    """1.0 if the completion is the right integer, else 0.0: rewards on [0, 1] (v05_reward_range="01").

    TRL passes the dataset's other columns as keyword lists (here prompt_id). Return None for a rollout the
    function does not apply to: v05 leaves it out of the baseline with advantage 0, as TRL does.
    """
    return task.score([by_key[k] for k in prompt_id], completions).rewards.tolist()


args = V05GRPOConfig(
    output_dir="runs/trl-tiny",
    use_cpu=True,  # CPU: no CUDA, no bf16
    bf16=False,
    report_to=[],
    **no_checkpointing_args(),  # TRL turns activation checkpointing on by default; a tiny model does not need it
    num_generations=1,  # one rollout per prompt: the prior is the baseline (TRL alone needs >= 2)
    per_device_train_batch_size=64,  # counts completions: 64 prompts x 1 rollout per step
    max_completion_length=6,
    max_steps=20,
    learning_rate=1e-4,
    beta=0.0,
    logging_steps=5,
    v05_estimator="v05_eb",  # v05-recommended's estimator: empirical-Bayes fusion of prior and rollouts
    v05_prior="history",  # v05-recommended's: the prompt's own history; a new prompt gets the running policy mean
    v05_reward_range="01",  # "pm1" for rewards on [-1, 1]
)
trainer = V05GRPOTrainer(
    model=model, reward_funcs=correct, args=args, train_dataset=dataset, processing_class=tokenizer
)
trainer.train()  # logs reward, v05/prior_auc, v05/n0, v05/adv_abs_mean, ... every 5 steps
