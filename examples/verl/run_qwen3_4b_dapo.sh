#!/usr/bin/env bash
# V0.5 vs GRPO (and SPO) on DAPO-Math-17k with Qwen3-4B-Instruct-2507 through verl 0.9.1 and the v05 plugin (README.md here).
#
#   METHOD=v05    bash examples/verl/run_qwen3_4b_dapo.sh   # V0.5: prior + shrinkage/test, OSLA k_init 4 -> k_max 16
#   METHOD=grpo16 bash examples/verl/run_qwen3_4b_dapo.sh   # the paper's baseline: verl's GRPO, 16 rollouts per prompt
#   METHOD=grpo4  bash examples/verl/run_qwen3_4b_dapo.sh   # GRPO at V0.5's k_init (SPEC §10: always report it)
#   METHOD=eb1    bash examples/verl/run_qwen3_4b_dapo.sh   # v05-recommended's form: v05_eb + running mean, n = 1
#   METHOD=eb2    bash examples/verl/run_qwen3_4b_dapo.sh   # the same at n = 2
#   METHOD=spo    bash examples/verl/run_qwen3_4b_dapo.sh   # SPO (verl's recipe/spo): tracker baseline, n = 1, drawn prompts
#   METHOD=sel1   bash examples/verl/run_qwen3_4b_dapo.sh   # eb1 with the batch selected from 4x candidates by history
#
# Extra Hydra overrides are appended (e.g. trainer.total_training_steps=10). Settings marked (paper) follow the V0.5
# paper (arXiv:2603.10848); the others are our choices (design/methods-v05-v0.md Q10-Q13), identical for all methods.
# The arrays below are parsed by tests/adapters/test_verl.py, which composes them with verl's own Hydra config:
# keep one override per line (shell quoting allowed).
set -euo pipefail

METHOD=${METHOD:-v05}
MODEL=${MODEL:-Qwen/Qwen3-4B-Instruct-2507}
TRAIN_FILE=${TRAIN_FILE:-$HOME/data/dapo-math-17k-v05.parquet}  # add_problem_text.py's output (README.md here)
VAL_FILE=${VAL_FILE:-$HOME/data/aime-2024.parquet}
NNODES=${NNODES:-4}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
PRIOR_BACKEND=${PRIOR_BACKEND:-minilm}
V05_PROMPTS=${V05_PROMPTS:-384}

# No variable needed: verl loads v05's "verl.plugins" entry point (installed with v05) on every `import verl`, in the
# driver and in each Ray worker, which registers the v05 estimators and trainer mode. Only for a v05 source tree that
# is not pip-installed: export VERL_USE_EXTERNAL_MODULES=v05.adapters.verl on every node before `ray start`.

COMMON=(
    trainer.use_v1=true
    data.train_files=${TRAIN_FILE}
    data.val_files=${VAL_FILE}
    data.prompt_key=prompt
    data.max_prompt_length=2048
    data.max_response_length=4096
    data.filter_overlong_prompts=true
    data.truncation=error
    actor_rollout_ref.model.path=${MODEL}
    actor_rollout_ref.model.use_remove_padding=true
    actor_rollout_ref.model.enable_gradient_checkpointing=true
    actor_rollout_ref.actor.optim.lr=1e-6
    actor_rollout_ref.actor.optim.weight_decay=0.1
    actor_rollout_ref.actor.clip_ratio_low=0.2
    actor_rollout_ref.actor.clip_ratio_high=0.28
    actor_rollout_ref.actor.loss_agg_mode=token-mean
    actor_rollout_ref.actor.use_kl_loss=false
    actor_rollout_ref.actor.entropy_coeff=0
    actor_rollout_ref.actor.use_dynamic_bsz=true
    actor_rollout_ref.actor.ppo_max_token_len_per_gpu=24576
    algorithm.use_kl_in_reward=false
    actor_rollout_ref.rollout.name=sglang
    actor_rollout_ref.rollout.tensor_model_parallel_size=1
    actor_rollout_ref.rollout.gpu_memory_utilization=0.7
    actor_rollout_ref.rollout.temperature=1.0
    actor_rollout_ref.rollout.top_p=1.0
    actor_rollout_ref.rollout.val_kwargs.n=16
    actor_rollout_ref.rollout.val_kwargs.do_sample=true
    actor_rollout_ref.rollout.val_kwargs.temperature=0.7
    actor_rollout_ref.rollout.val_kwargs.top_p=0.95
    trainer.nnodes=${NNODES}
    trainer.n_gpus_per_node=${GPUS_PER_NODE}
    trainer.total_training_steps=300
    trainer.test_freq=10
    trainer.save_freq=50
    trainer.logger='[console,wandb]'
    trainer.project_name=v05-verl-dapo
    trainer.experiment_name=qwen3-4b-${METHOD}
)

# The paper's baseline: GRPO with 16 rollouts per prompt, 128 prompts = 2048 rollouts per step (paper).
GRPO16=(
    trainer.v1.trainer_mode=sync
    algorithm.adv_estimator=grpo
    data.train_batch_size=128
    actor_rollout_ref.rollout.n=16
    actor_rollout_ref.actor.ppo_mini_batch_size=32
)

# GRPO at V0.5's k_init = 4: 512 prompts x 4 = the same 2048 rollouts per step.
GRPO4=(
    trainer.v1.trainer_mode=sync
    algorithm.adv_estimator=grpo
    data.train_batch_size=512
    actor_rollout_ref.rollout.n=4
    actor_rollout_ref.actor.ppo_mini_batch_size=128
)

# V0.5 (paper): shrinkage + hypothesis test in the paper's ±1 space (verl's math_dapo scorer returns ±1), OSLA with
# k_init 4, k_max 16, c = 0.0039, an in-context V0-style prior refitted every step on the latest 256 (prompt, score)
# pairs. Compute matching (paper: "roughly equal" rollouts per step): V05_PROMPTS x (4 + OSLA extras) ~ 2048; check
# v05/rollouts in the logs and adjust V05_PROMPTS, or cap the extras with
# +algorithm.v05.allocator_options.extra_budget=<n> (ours). rollout.n = k_init sizes verl's mini-batches.
# schedule=jump (ours; the paper's round schedule is not public): each OSLA round is one synchronous generation pass
# that waits for its slowest 4k-token response, and plus_one (+1 rollout per continuing prompt per round) needs up to
# k_max - k_init = 12 extra rounds per step; jump draws each continuing prompt up to its predicted stopping k at once
# (at most 6 rounds vs 13 in tests/adapters/test_verl_example.py), for ~10% more rollouts (it can overshoot).
# The prior reads each prompt's bare problem text (extra_info.question, written by add_problem_text.py): V0 was
# trained on problem texts, not on DAPO's instruction template around them.
V05=(
    trainer.v1.trainer_mode=v05
    algorithm.adv_estimator=v05
    data.train_batch_size=${V05_PROMPTS}
    actor_rollout_ref.rollout.n=4
    actor_rollout_ref.actor.ppo_mini_batch_size=128
    +algorithm.v05.reward_range=pm1
    +algorithm.v05.prior_key=v05_prior
    +algorithm.v05.key_field=index
    +algorithm.v05.text_field=question
    +algorithm.v05.options.noise=bound
    +algorithm.v05.options.switch=smooth
    +algorithm.v05.provider=v0
    +algorithm.v05.provider_options.backend=${PRIOR_BACKEND}
    +algorithm.v05.provider_options.context_size=256
    +algorithm.v05.allocator=osla
    +algorithm.v05.allocator_options.k_init=4
    +algorithm.v05.allocator_options.k_max=16
    +algorithm.v05.allocator_options.c=0.0039
    +algorithm.v05.allocator_options.schedule=jump
)

# v05-recommended's form (README): v05_eb, the empirical-Bayes fusion of the policy's running mean pass rate with
# the group's rollouts, at one rollout per prompt and fixed budgets (no OSLA). The selection grid on the tiny policy
# (2026-12-06; docs/results-selection.md) picked it by its validation rule, a near-tie with the prompt's own history
# (+algorithm.v05.provider=history, the evidence grid's pick before) and selection by that history; a learned prior
# paid only on a pool mixing domains of very different pass rates (docs/results-summary.md):
# +algorithm.v05.provider=combined with provider_options.backend=${PRIOR_BACKEND} runs that one. 2048
# prompts x 1 = the same 2048 rollouts per step as GRPO16. filter_groups stays off: v05_eb gives
# all-correct/all-wrong groups a non-zero advantage (the adapter refuses the filter).
EB1=(
    trainer.v1.trainer_mode=v05
    algorithm.adv_estimator=v05_eb
    data.train_batch_size=2048
    actor_rollout_ref.rollout.n=1
    actor_rollout_ref.actor.ppo_mini_batch_size=512
    +algorithm.v05.reward_range=pm1
    +algorithm.v05.key_field=index
    +algorithm.v05.text_field=question
    +algorithm.v05.options.scale=none
    +algorithm.v05.provider=running_mean
    +algorithm.v05.allocator=fixed
)

# The same at 2 rollouts per prompt: 1024 prompts x 2 = 2048 rollouts per step.
EB2=(
    trainer.v1.trainer_mode=v05
    algorithm.adv_estimator=v05_eb
    data.train_batch_size=1024
    actor_rollout_ref.rollout.n=2
    actor_rollout_ref.actor.ppo_mini_batch_size=256
    +algorithm.v05.reward_range=pm1
    +algorithm.v05.key_field=index
    +algorithm.v05.text_field=question
    +algorithm.v05.options.scale=none
    +algorithm.v05.provider=running_mean
    +algorithm.v05.allocator=fixed
)

# SPO (arXiv:2509.13232; verl's recipe/spo; README.md here: the recipe's keys and these): one rollout per prompt, the
# spo tracker's value (a per-prompt discounted Beta) as the baseline normalised over the batch (v05_spo), and the
# batch drawn from data.gen_batch_size = 14000 candidates (the recipe's pool) by the tracker's uncertainty,
# w = sqrt(p(1 - p)) + 0.05. rho=constant at the recipe's rho.value: its default rho=kl reads actor log-probs that the
# trainer mode does not compute (refused). 2048 prompts x 1 = the same 2048 rollouts per step as GRPO16.
SPO=(
    trainer.v1.trainer_mode=v05
    algorithm.adv_estimator=v05_spo
    data.train_batch_size=2048
    data.gen_batch_size=14000
    actor_rollout_ref.rollout.n=1
    actor_rollout_ref.actor.ppo_mini_batch_size=512
    +algorithm.v05.reward_range=pm1
    +algorithm.v05.key_field=index
    +algorithm.v05.provider=spo
    +algorithm.v05.provider_options.rho=constant
    +algorithm.v05.provider_options.rho_value=0.875
    +algorithm.v05.allocator=spo
)

# Selection (issue 42; docs/results-selection.md says where it pays and where not): EB1's v05_eb at one rollout per
# prompt, the batch chosen by prior_select from data.gen_batch_size = 8192 candidates (4 x 2048, the selection grid's
# pool): the Bernoulli variance p(1 - p) of a Thompson draw from each candidate's prior, 5 % explored at random, the
# passed-over candidates dropped for the epoch. The prior is the prompt's own `history` (the selection grid's picked
# learned selector; the policy's running mean for a prompt not seen before), also the baseline. 2048 prompts x 1 =
# the same 2048 rollouts per step as GRPO16.
SEL1=(
    trainer.v1.trainer_mode=v05
    algorithm.adv_estimator=v05_eb
    data.train_batch_size=2048
    data.gen_batch_size=8192
    actor_rollout_ref.rollout.n=1
    actor_rollout_ref.actor.ppo_mini_batch_size=512
    +algorithm.v05.reward_range=pm1
    +algorithm.v05.key_field=index
    +algorithm.v05.text_field=question
    +algorithm.v05.options.scale=none
    +algorithm.v05.provider=history
    +algorithm.v05.allocator=prior_select
)

case "${METHOD}" in
    v05) METHOD_ARGS=("${V05[@]}") ;;
    grpo16) METHOD_ARGS=("${GRPO16[@]}") ;;
    grpo4) METHOD_ARGS=("${GRPO4[@]}") ;;
    eb1) METHOD_ARGS=("${EB1[@]}") ;;
    eb2) METHOD_ARGS=("${EB2[@]}") ;;
    spo) METHOD_ARGS=("${SPO[@]}") ;;
    sel1) METHOD_ARGS=("${SEL1[@]}") ;;
    *) echo "METHOD must be v05, grpo16, grpo4, eb1, eb2, spo or sel1, got ${METHOD}" >&2; exit 2 ;;
esac

python3 -m verl.trainer.main_ppo "${COMMON[@]}" "${METHOD_ARGS[@]}" "$@"
