r"""The single-machine RLVR loop, read top to bottom.

Per step:

    prompts   = queue.take(pool)                          candidate pool (epochs over the finite train set)
    V, n0     = provider.predict(prompts)                 prior (when configured)
    alloc     = allocate(allocator, sample, ...)          rounds of rollouts; sample() = generate + verify
    A         = method.estimate(batch)                    the value method: a registered estimator (its state
                                                          carried), POISE's probe or PPO's critic
    θ         ← AdamW(∇ clipped-surrogate loss)           ppo_epochs × micro-batches, grad clipping
    method.after_update(...)                              the method learns the step (critic update, probe refit)
    provider.update(prompts, outcomes)                    the prior learns the step's outcomes
    metrics.jsonl, TensorBoard, eval every N, checkpoint every M

The loop adds no math of its own: estimators and allocators come from :mod:`v05.registry`, priors from
:mod:`v05.priors`, the loss from :mod:`v05.train.loss`, and it knows the value method only through the hooks of
:class:`v05.train.value.ValueMethod`. Reproducibility: the prompt order and every allocator rng are
pure functions of (seed, step); the rollout engine's RNG state, the weights, the optimizer, the scheduler and every
estimator/prior/allocator state are checkpointed, so ``resume`` on CPU continues the uninterrupted run exactly.
"""

from __future__ import annotations

import copy
import logging
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from v05._checks import error_line
from v05.engines.hf import HFEngine
from v05.priors import make_provider
from v05.priors.guard import PriorGuard
from v05.registry import get_allocator
from v05.tasks import make_task
from v05.train.checkpoint import checkpoint_step, export_policy, restore_state, save_state
from v05.train.compute import ComputeMeter
from v05.train.config import TrainConfig, config_changes, load_config, to_yaml
from v05.train.evaluation import evaluate, step_metrics
from v05.train.features import PolicyFeatureBackend
from v05.train.policy import load_policy, set_cpu_threads
from v05.train.prompts import PromptQueue
from v05.train.rundir import CONFIG, MetricsLog, atomic_write_text, latest_checkpoint, load_checkpoint
from v05.train.schedule import LRSchedule
from v05.train.state import Counters, state_from_json
from v05.train.step import (
    RolloutFailure,
    Sampler,
    check_overlong_buffer,
    concat_rollouts,
    predict_prior,
    run_allocation,
    shape_rewards,
    update_policy,
    update_prior,
)
from v05.train.value import StepBatch, ValueMethod, make_value_method
from v05.train.warmstart import ensure_warm_start, render_all, warm_policy

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TrainResult:
    """What :func:`train` returns.

    Attributes:
        run_dir: the run directory.
        steps: training steps completed.
        rollouts_total: rollouts consumed.
        eval_pass_rate: the last held-out sampled pass rate (NaN if never evaluated).
        interrupted: stopped by SIGINT/SIGTERM after saving a checkpoint.
    """

    run_dir: Path
    steps: int
    rollouts_total: int
    eval_pass_rate: float
    interrupted: bool = False


class RunStopped(RuntimeError):
    """The run stopped on a fault it cannot work around (the message says which, and which checkpoint is intact).

    Raised for: the rollout engine failing every retry (the step is not taken; a checkpoint of the last complete
    step is written first), a checkpoint or metrics write that fails (a full disk, an unwritable run directory;
    the previous checkpoint stays valid), an out-of-memory in the policy update (naming ``train.micro_batch_size``,
    which a resume may change). ``--resume`` continues from the intact checkpoint.

    Attributes:
        step: the last complete step.
        checkpoint: the step of the newest valid checkpoint (−1: none).
    """

    def __init__(self, message: str, *, step: int, checkpoint: int) -> None:
        super().__init__(message)
        self.step, self.checkpoint = step, checkpoint


RESUME_MAY_CHANGE = ("train.micro_batch_size", "run.progress", "run.threads", "run.generate_retries",
                     "run.retry_backoff_s")  # fmt: skip
"""Config fields a resume may change: how the work is done, never what is computed (micro-batches accumulate the
same gradient; after an out-of-memory the run resumes with smaller ones)."""


def _is_out_of_memory(err: BaseException) -> bool:
    """An allocation failure: torch's OutOfMemoryError (CUDA/MPS), MemoryError, or the CPU allocator's RuntimeError."""
    if isinstance(err, torch.OutOfMemoryError | MemoryError):
        return True
    text = str(err).lower()
    return isinstance(err, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


@dataclass
class _Stop:
    """Set by SIGINT/SIGTERM; the loop saves a checkpoint at the end of the step and returns."""

    requested: bool = False
    signum: int | None = None
    previous: dict[int, Any] = field(default_factory=dict)

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self.previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread: no handlers (the caller owns signals)
                return

    def _handle(self, signum: int, frame: object) -> None:
        if self.requested:  # a second signal: give up on the clean stop
            raise KeyboardInterrupt
        self.requested, self.signum = True, signum
        logger.warning("signal %d: finishing the step, saving a checkpoint, then stopping", signum)

    def restore(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def train(
    cfg: TrainConfig, run_dir: str | Path, *, resume: bool = False, log: Callable[[dict], None] | None = None
) -> TrainResult:
    """Run (or resume) one training run into ``run_dir``.

    Args:
        cfg: the checked config (:func:`v05.train.config.load_config`).
        run_dir: the run directory (created; an existing run there needs ``resume=True``).
        resume: continue from the last checkpoint in ``run_dir`` (the config saved there must match ``cfg``).
        log: also called with every metrics row (tests, notebooks); the library never prints.

    Raises:
        ValueError: a run already exists without ``resume``, a resume without a checkpoint or with another config,
            or bad task/model options.
        RunStopped: a fault the run cannot work around (see :class:`RunStopped`); the last complete step is saved.
    """
    run_dir = Path(run_dir)
    ckpt = _prepare_run_dir(cfg, run_dir, resume)
    set_cpu_threads(cfg.run.threads)
    torch.manual_seed(cfg.seed)

    # -- setup: task, policy (warm start), engine, optimizer, estimator/allocator/prior state ---------------------
    task = make_task(cfg.task.name, **cfg.task.options)
    split = task.validation_prompts() if cfg.eval.split == "validation" else task.eval_prompts()
    pool, held_out = list(task.train_prompts()), list(split)[: cfg.eval.size]
    if not held_out:
        raise ValueError(f"task {cfg.task.name!r} has no {cfg.eval.split} prompts: raise that split (eval.size, "
                         "n_eval / n_val, size_eval / size_val)")  # fmt: skip
    policy_cfg = cfg.policy
    if cfg.warmup.enabled:
        warm = ensure_warm_start(cfg, progress=cfg.run.progress)
        policy_cfg = warm_policy(cfg, warm)
    model, tokenizer = load_policy(policy_cfg)
    texts, held_texts = render_all(cfg, task, pool, tokenizer), render_all(cfg, task, held_out, tokenizer)
    keys = np.array([p.key for p in pool])
    check_overlong_buffer(cfg, task, pool, tokenizer)
    engine = _engine(cfg, model, tokenizer)
    optimizer, scheduler = _optimizer(cfg, model)
    reference = _reference_model(cfg, model)
    provider, prior_backend = _provider(cfg, model, tokenizer)
    if getattr(provider, "needs_sampler", False):
        provider.bind_sampler(_oracle_sampler(cfg, model, tokenizer, task, pool, texts, provider.rollouts))
    prior_texts = _prior_texts(cfg, provider, pool, texts)  # what the prior reads of each pool prompt
    if provider is not None:
        provider.prefetch(prior_texts)  # the pool's embeddings, once: steps only look them up
    method = make_value_method(cfg, model, tokenizer)  # a registered estimator, POISE's probe or PPO's critic
    recompute = recompute_old_logp(cfg, model, method)
    queue = _queue(cfg, len(pool))
    guard = PriorGuard()  # the running mean that stands in when the provider raises or returns NaN
    alloc_state: Any = None
    c = Counters()
    if ckpt is not None:
        tensors, state = load_checkpoint(ckpt)
        restore_state(ckpt, tensors, state, model, optimizer, scheduler, engine)
        _sync(engine, model)
        c = Counters(**state["counters"])
        queue.load_state_dict(state["queue"])
        alloc_state = state_from_json(state["allocator"])
        method.load(tensors, state)
        if provider is not None:
            provider.load_state_dict(state["provider"])
        if state.get("prior_guard") is not None:  # absent in checkpoints written before the guard
            guard.load_state_dict(state["prior_guard"])
        logger.info("resumed %s at step %d (%d rollouts)", run_dir, c.step, c.rollouts_total)
    probe_mark = 0  # the probe prior's token-passes already counted (its calibration refit lands in the next step)
    metrics = MetricsLog(run_dir, resume_step=c.step if ckpt is not None else None, tensorboard=cfg.run.tensorboard)
    stop = _Stop()
    stop.install()
    bar = _progress(cfg, c)
    started = time.perf_counter() - c.wall_time

    def save() -> None:
        c.wall_time = time.perf_counter() - started
        try:
            save_state(cfg, run_dir, c, model, optimizer, scheduler, engine, queue, method, alloc_state, provider,
                       guard)  # fmt: skip
        except OSError as err:  # a full disk, an unwritable run directory: the previous checkpoint is untouched
            raise _stopped(f"the checkpoint of step {c.step} could not be written ({error_line(err)})") from err

    def write(row: dict) -> None:
        try:
            metrics.write(row)
        except OSError as err:
            raise _stopped(f"metrics.jsonl could not be appended at step {row['step']} ({error_line(err)})") from err

    def _stopped(reason: str) -> RunStopped:
        ckpt_step = checkpoint_step(run_dir)
        kept = f"the checkpoint of step {ckpt_step} is intact" if ckpt_step >= 0 else "no checkpoint was written"
        logger.error("run stopped: %s; %s", reason, kept)
        return RunStopped(f"{reason}; {kept}: fix the cause, then --resume", step=c.step, checkpoint=ckpt_step)

    try:
        if c.step == 0 and cfg.eval.at_start and ckpt is None:
            row = {"step": 0, "rollouts_total": 0, "tokens_total": 0, "compute_total": 0,
                   "train_pass_rate": float("nan"), "wall_time": 0.0,
                   **evaluate(cfg, model, tokenizer, task, held_out, held_texts)}  # fmt: skip
            c.last_eval = row["eval_pass_rate"]
            write(row)
        while not _done(cfg, c):
            t_step = time.perf_counter()
            step = c.step + 1
            timing = dict.fromkeys(("generate", "verify", "prior", "estimate", "update"), 0.0)
            compute = ComputeMeter()

            # 1. the step's candidate prompts and their prior
            queue_before = queue.state_dict()  # put back if the step cannot be taken
            idx = queue.take(_pool_size(cfg))
            t0 = time.perf_counter()
            prior_v, n0, n_fallback = predict_prior(cfg, provider, guard, keys[idx], [prior_texts[i] for i in idx])
            timing["prior"] += time.perf_counter() - t0

            # 2. rollouts: the allocator's rounds, each one generate + verify (engine faults retried)
            sample = Sampler(engine, task, pool, texts, idx, timing, cfg.train.reward_range,
                             retries=cfg.run.generate_retries, backoff_s=cfg.run.retry_backoff_s)  # fmt: skip
            t0 = time.perf_counter()
            try:
                alloc = run_allocation(cfg, step, idx, keys, prior_v, n0, alloc_state, sample)
            except RolloutFailure as err:  # the step is not taken: the state is the last complete step's
                queue.load_state_dict(queue_before)
                if checkpoint_step(run_dir) != c.step:
                    save()
                raise _stopped(f"step {step}: {err}") from err
            alloc_state = alloc.state
            sampled = np.flatnonzero(alloc.counts > 0)
            unreached = alloc.counts == 0  # (P,) back to the queue's front; passed-over prompts are used up
            if cfg.allocator.rejects == "drop":
                unreached &= ~alloc.passed
            queue.give_back(idx[np.flatnonzero(unreached)])
            rollouts_all, scores = concat_rollouts(sample.draws, tokenizer), sample.scores
            compute.forward("generate", rollouts_all.prompt_mask, rollouts_all.response_mask)
            rewards, group, kept_pool = alloc.loss_batch()  # (N,), (N,), (G,) kept rollouts in draw order
            kept_rollouts = rollouts_all.select(alloc.kept[alloc.prompt])

            # 3. advantages: the value method's (a registered estimator, POISE's probe or the critic)
            out = None
            if len(rewards):
                batch = StepBatch(step, kept_rollouts, shape_rewards(cfg, rewards, kept_rollouts), group,
                                  keys[idx[kept_pool]], prior=None if prior_v is None else prior_v[kept_pool],
                                  n0=None if n0 is None else n0[kept_pool])  # fmt: skip
                out = method.estimate(batch, compute)
            timing["estimate"] += time.perf_counter() - t0 - timing["generate"] - timing["verify"]

            # 4. the policy update (ppo_epochs × micro-batches); then the method learns the step
            t0 = time.perf_counter()
            upd = {}
            if out is not None:
                value_terms, value_optimizer = method.joint_loss(out, compute)
                _begin_schedule(cfg, scheduler, c, alloc.n_rollouts)
                try:
                    upd = update_policy(
                        cfg, model, reference, optimizer, scheduler, out.rollouts, group, out.advantages,
                        compute=compute, recompute_old_logp=recompute, value_terms=value_terms,
                        value_optimizer=value_optimizer,
                    )  # fmt: skip
                except Exception as err:
                    if not _is_out_of_memory(err):
                        raise
                    raise _stopped(
                        f"step {step}: out of memory in the policy update ({error_line(err)}): lower "
                        f"train.micro_batch_size (now {cfg.train.micro_batch_size}; a resume may change it)"
                    ) from err
                upd |= method.after_update(out, compute)
                _sync(engine, model)  # an engine with its own copy of the weights (vLLM) follows the update
            timing["update"] += time.perf_counter() - t0

            # 5. the prior learns this step's outcomes (every sampled prompt, kept or not)
            t0 = time.perf_counter()
            if provider is not None and sampled.size:
                update_prior(cfg, provider, guard, alloc, idx, keys, prior_texts, step)
            timing["prior"] += time.perf_counter() - t0

            # 6. bookkeeping, metrics, eval, checkpoint
            c.step = step
            rollouts_before = c.rollouts_total
            c.rollouts_total += alloc.n_rollouts
            c.tokens_total += int(rollouts_all.lengths.sum())
            if prior_backend is not None:  # the probe prior's prefills since the last step's bookkeeping
                compute.add("probe", prior_backend.token_passes - probe_mark)
                probe_mark = prior_backend.token_passes
            c.compute_total += compute.total
            c.prompts_total += int(sampled.size)
            c.verifier_failures += sum(s.failures for s in scores)
            c.wall_time = time.perf_counter() - started
            row = step_metrics(
                cfg, c, alloc, rewards, group, None if out is None else out.estimate,
                upd | ({} if out is None else out.metrics), scores, rollouts_all, provider, timing,
                value_g=None if out is None else out.value_g, compute=compute,
            )  # fmt: skip
            row["time/step"] = time.perf_counter() - t_step
            row["engine_retries"] = sample.retried
            if provider is not None:
                row |= {"prior_fallbacks": n_fallback, "prior_fallbacks_total": guard.fallbacks,
                        "prior_update_errors_total": guard.update_errors}  # fmt: skip
            if _eval_due(cfg, c, rollouts_before):
                row |= evaluate(cfg, model, tokenizer, task, held_out, held_texts)
                c.last_eval = row["eval_pass_rate"]
            write(row)
            if log is not None:
                log(row)
            _advance(bar, c)
            if stop.requested or _done(cfg, c) or (cfg.run.checkpoint_every and step % cfg.run.checkpoint_every == 0):
                save()
            if stop.requested:
                return TrainResult(run_dir, c.step, c.rollouts_total, c.last_eval, interrupted=True)
        if latest_checkpoint(run_dir) is None or checkpoint_step(run_dir) != c.step:
            save()
        export_policy(run_dir, model, tokenizer)
        return TrainResult(run_dir, c.step, c.rollouts_total, c.last_eval)
    finally:
        stop.restore()
        metrics.close()
        if bar is not None:
            bar.close()


# -- setup helpers -------------------------------------------------------------------------------------------------
def _prepare_run_dir(cfg: TrainConfig, run_dir: Path, resume: bool) -> Path | None:
    """Create the run directory (or check it for a resume); write config.yaml; return the checkpoint to resume."""
    text = to_yaml(cfg)
    config_path = run_dir / CONFIG
    if resume:
        ckpt = latest_checkpoint(run_dir)
        if ckpt is None and not config_path.exists():
            raise ValueError(f"--resume: no checkpoint in {run_dir / 'checkpoints'} (start without --resume)")
        if config_path.exists():
            changed = config_changes(load_config(str(config_path)), cfg)
            if set(changed) - set(RESUME_MAY_CHANGE):
                raise ValueError(
                    f"--resume: the config differs from {config_path} in {', '.join(sorted(changed))}; resume with "
                    f"the same config and overrides (only {', '.join(RESUME_MAY_CHANGE)} may change)"
                )
            if changed:
                logger.warning("resuming with %s changed", ", ".join(f"{k}={v!r}" for k, v in sorted(changed.items())))
                atomic_write_text(config_path, text)
        if ckpt is None:  # killed before its first checkpoint: nothing to continue, so the run starts over
            logger.warning("--resume: %s has no checkpoint yet (the run stopped before its first one); starting over",
                           run_dir)  # fmt: skip
        return ckpt
    if (run_dir / "metrics.jsonl").exists() or (run_dir / "checkpoints").exists():
        raise ValueError(f"{run_dir} already holds a run: pass --resume to continue it, or choose another --out")
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(config_path, text)
    return None


def _engine(cfg: TrainConfig, model: Any, tokenizer: Any) -> Any:
    """The rollout engine: HF ``generate`` (CPU/GPU) or vLLM (GPU; imported only when asked for)."""
    if cfg.generation.engine == "vllm":
        from v05.engines.vllm import VLLMEngine  # noqa: PLC0415 (optional, GPU-only extra)

        return VLLMEngine(model, tokenizer, cfg.generation, seed=cfg.seed)
    return HFEngine(model, tokenizer, cfg.generation, seed=cfg.seed)


def _sync(engine: Any, model: Any) -> None:
    """Push the policy's weights into an engine that keeps its own copy (vLLM); HF generate reads the policy."""
    sync = getattr(engine, "sync_weights", None)
    if sync is not None:
        sync(model)


def _optimizer(cfg: TrainConfig, model: Any) -> tuple[Any, LRSchedule]:
    """AdamW and its schedule, whose horizon is the rollout budget when there is one (:mod:`v05.train.schedule`)."""
    o = cfg.optim
    opt = torch.optim.AdamW(model.parameters(), lr=o.lr, betas=tuple(o.betas), eps=o.eps, weight_decay=o.weight_decay)
    horizon = cfg.train.max_rollouts if cfg.train.max_rollouts is not None else cfg.train.steps
    return opt, LRSchedule(opt, lr=o.lr, warmup_steps=o.warmup_steps, schedule=o.schedule, horizon=float(horizon))


def _begin_schedule(cfg: TrainConfig, scheduler: LRSchedule, c: Counters, step_rollouts: int) -> None:
    """Place this step in the schedule's horizon: its rollouts within the budget, or its index within the steps."""
    if cfg.train.max_rollouts is not None:
        scheduler.begin_step(c.rollouts_total, step_rollouts)
    else:
        scheduler.begin_step(c.step, 1)


def recompute_old_logp(cfg: TrainConfig, model: Any, method: ValueMethod) -> bool:
    """Whether the update recomputes old log-probs with the training forward (``train.recompute_old_logp``).

    ``auto``: when the policy is not float32 (``generate``'s KV-cached bf16/fp16 logits differ from the training
    forward, so the first epoch's ratio would not be 1), unless the value method's own pass already recomputes them
    with the training forward (``method.recomputes_old_logp``: POISE's feature pass).
    """
    mode = cfg.train.recompute_old_logp
    if mode != "auto":
        return mode == "always"
    return next(model.parameters()).dtype != torch.float32 and not method.recomputes_old_logp


def _reference_model(cfg: TrainConfig, model: Any) -> Any:
    if cfg.loss.kl_coef <= 0:
        return None
    ref = copy.deepcopy(model).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref


def _provider(cfg: TrainConfig, model: Any, tokenizer: Any) -> tuple[Any, PolicyFeatureBackend | None]:
    """The prior provider and, for the ``probe`` prior, the live policy's feature backend it is bound to."""
    if cfg.prior.name is None:
        return None, None
    provider = make_provider(cfg.prior.name, **cfg.prior.options)
    backend = None
    if hasattr(provider, "bind_policy"):
        backend = PolicyFeatureBackend(model=model, tokenizer=tokenizer, config=cfg.poise.features)
        provider.bind_policy(backend)
    return provider, backend


def _oracle_sampler(
    cfg: TrainConfig, model: Any, tokenizer: Any, task: Any, pool: list, texts: list[str], m: int
) -> Any:
    """The ``oracle`` prior's sampler: ``m`` extra rollouts per prompt from the current policy, scored.

    Its own random stream per draw (seeded by the run's seed and the provider's step, so a resumed run draws the
    same), never the training engine's: the step's own rollouts are those of a run without the oracle's draws.
    """
    index = {str(p.key): i for i, p in enumerate(pool)}

    def sample(ids: list[str], draw: int) -> tuple[np.ndarray, np.ndarray]:
        rows = [index[k] for k in ids]
        seed = (cfg.seed * 1_000_003 + draw * 7_919 + 17) % 2**31
        ro = HFEngine(model, tokenizer, cfg.generation, seed=seed).generate([texts[i] for i in rows], [m] * len(rows))
        rewards = task.score([pool[rows[j]] for j in ro.prompt_index], list(ro.texts)).rewards  # (Q·m,) in [0, 1]
        successes = np.bincount(np.asarray(ro.prompt_index), weights=rewards, minlength=len(rows))
        return successes, np.full(len(rows), float(m))

    return sample


def _prior_texts(cfg: TrainConfig, provider: Any, pool: list, rendered: list[str]) -> list[str]:
    """What the prior reads of each pool prompt (``prior.input``): the bare problem text, or the rendered prompt.

    ``auto``: the problem text for text-embedding priors (V0 was trained on bare problems, not chat-wrapped prompts),
    the rendered prompt for priors that read the policy (``probe``: the policy sees the rendered prompt).
    """
    mode = cfg.prior.input
    if mode == "auto":
        mode = "prompt" if getattr(provider, "needs_policy", False) else "question"
    return list(rendered) if mode == "prompt" else [p.question for p in pool]


def _queue(cfg: TrainConfig, n: int) -> Any:
    return PromptQueue(n=n, seed=cfg.seed, order=cfg.train.prompt_order)


def _pool_size(cfg: TrainConfig) -> int:
    """Prompts a step draws its candidates from: ``allocator.pool_factor`` batches, else the allocator's own."""
    a = cfg.allocator
    if a.pool_factor is not None:
        return cfg.train.batch_size * a.pool_factor
    allocator = get_allocator(a.name, batch_size=cfg.train.batch_size, **a.options)
    return int(allocator.candidate_pool(cfg.train.batch_size))


def _progress(cfg: TrainConfig, c: Counters) -> Any:
    """A bar over the rollout budget (or the steps when there is none), showing step, train and last eval pass rate."""
    if not cfg.run.progress:
        return None
    by_rollouts = cfg.train.max_rollouts is not None
    total = cfg.train.max_rollouts if by_rollouts else cfg.train.steps
    done = c.rollouts_total if by_rollouts else c.step
    unit = "rollout" if by_rollouts else "step"
    return tqdm(total=total, initial=done, desc=cfg.name, unit=unit, dynamic_ncols=True, mininterval=1.0)


def _advance(bar: Any, c: Counters) -> None:
    if bar is None:
        return
    bar.update((c.rollouts_total - bar.n) if bar.unit == "rollout" else 1)
    bar.set_postfix(step=c.step, train=f"{c.train_last:.3f}", eval=f"{c.last_eval:.3f}", refresh=False)


def _done(cfg: TrainConfig, c: Counters) -> bool:
    if c.step >= cfg.train.steps:
        return True
    return cfg.train.max_rollouts is not None and c.rollouts_total >= cfg.train.max_rollouts


def _eval_due(cfg: TrainConfig, c: Counters, rollouts_before: int) -> bool:
    """Whether this step ends with an evaluation: after the last step, else by ``every_rollouts`` or ``every``.

    By rollouts: when this step's rollouts cross a multiple of ``every_rollouts``; else every ``every`` steps.
    """
    if _done(cfg, c):
        return True
    if cfg.eval.every_rollouts is not None:
        return c.rollouts_total // cfg.eval.every_rollouts > rollouts_before // cfg.eval.every_rollouts
    return cfg.eval.every > 0 and c.step % cfg.eval.every == 0
