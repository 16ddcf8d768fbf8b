r"""The single-machine RLVR loop, read top to bottom: :func:`setup` builds a :class:`Run`; :func:`train_step` steps.

Per step (:func:`train_step`):

    prompts   = queue.take(pool)                          candidate pool (epochs over the finite train set)
    prior     = round.predict(prompts)                    V and n0 per prompt (when a prior is configured)
    alloc     = round.allocate(sample, prior)             the allocator's rounds; sample() = generate + verify
    A         = method.estimate(batch)                    the value method: the round's registered estimator (its
                                                          state carried), POISE's probe or PPO's critic
    θ         ← AdamW(∇ clipped-surrogate loss)           ppo_epochs × micro-batches, grad clipping
    method.after_update(...)                              the method learns the step (critic update, probe refit)
    round.learn(prompts, outcomes)                        the prior learns the step's outcomes
    metrics.jsonl, TensorBoard, eval every N, checkpoint every M

The loop adds no math of its own: the prior, the allocation and the estimator's advantages are
:class:`v05.round.Round`'s (the same round the TRL and verl adapters call), the loss is :mod:`v05.train.loss`'s, and
it knows the value method only through the hooks of :class:`v05.train.value.ValueMethod`. Reproducibility: the prompt
order and every allocator rng are pure functions of (seed, step); the rollout engine's RNG state, the weights, the
optimizer, the scheduler and every estimator/prior/allocator state are checkpointed, so ``resume`` on CPU continues
the uninterrupted run exactly.
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
from v05.priors import get_provider_spec, provider_spec
from v05.registry import ESTIMATORS, get_allocator
from v05.round import Prior, Round
from v05.tasks import make_task
from v05.timing import Phases
from v05.train.checkpoint import Counters, checkpoint_step, export_policy, restore_state, save_state
from v05.train.compute import ComputeMeter
from v05.train.config import AllocatorConfig, LoopConfig, PriorConfig, TrainConfig, config_changes, load_config, to_yaml
from v05.train.evaluation import evaluate, step_metrics
from v05.train.features import PolicyFeatureBackend
from v05.train.policy import load_policy, set_cpu_threads
from v05.train.prompts import PromptQueue
from v05.train.rundir import CONFIG, MetricsLog, atomic_write_text, latest_checkpoint, load_checkpoint
from v05.train.schedule import LRSchedule
from v05.train.spo_drift import DriftMeter
from v05.train.step import (
    RolloutFailure,
    Sampler,
    check_overlong_buffer,
    concat_rollouts,
    learn_prior,
    shape_rewards,
    update_policy,
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


@dataclass
class Run:
    """What a run holds from step to step (built by :func:`setup`; :func:`train_step` advances it by one step).

    Attributes:
        cfg: the checked config.
        run_dir: the run directory.
        task: the task (prompts and verifier).
        pool: the train prompts; ``texts`` their rendered prompts, ``keys`` (P,) their stable keys and
            ``prior_texts`` what the prior reads of each (``prior.input``).
        held_out: the evaluation prompts; ``held_texts`` rendered.
        model: the policy; ``tokenizer`` its tokenizer; ``engine`` the rollout engine; ``reference`` the frozen KL
            reference (or None).
        optimizer: AdamW; ``scheduler`` its learning-rate schedule.
        round: the step's prior → allocation → advantages → prior update (:class:`v05.round.Round`, with the
            run's allocator built once).
        method: the value method (:class:`v05.train.value.ValueMethod`).
        prior_backend: the ``probe`` prior's policy-feature backend (its token-passes are counted), or None.
        queue: the prompt order (epochs over the pool).
        counters: the running totals; ``resumed`` when they came from a checkpoint.
        pool_size: candidate prompts per step.
        recompute: the update recomputes old log-probs first (:func:`recompute_old_logp`).
        metrics: the metrics log; ``started`` the wall clock of step 0 (a resumed run's time included).
    """

    cfg: TrainConfig
    run_dir: Path
    task: Any
    pool: list
    texts: list[str]
    keys: np.ndarray
    prior_texts: list[str]
    held_out: list
    held_texts: list[str]
    model: Any
    tokenizer: Any
    engine: Any
    reference: Any
    optimizer: Any
    scheduler: LRSchedule
    round: Round
    method: ValueMethod
    prior_backend: PolicyFeatureBackend | None
    queue: PromptQueue
    counters: Counters
    resumed: bool
    pool_size: int
    recompute: bool
    metrics: MetricsLog
    started: float
    drift: DriftMeter | None = None  # the policy's drift per prompt (the spo prior's rho="kl"), else None
    init_rollouts: int = 0  # rollouts drawn before step 1 to start the prior (spo-offline), counted in the totals
    encoder_compute: int = 0  # the text prior's encoder over the pool before step 1, counted in the totals
    probe_mark: int = 0  # the probe prior's token-passes already counted (its refit lands in the next step)

    def save(self) -> None:
        """A checkpoint of the full state after the last complete step; RunStopped if it cannot be written."""
        c = self.counters
        c.wall_time = time.perf_counter() - self.started
        try:
            extra = {} if self.drift is None else {"spo_drift": self.drift.state_dict()}
            extra |= {"init_rollouts": self.init_rollouts} if self.init_rollouts else {}
            extra |= {"encoder_compute": self.encoder_compute} if self.encoder_compute else {}
            save_state(self.cfg, self.run_dir, c, self.model, self.optimizer, self.scheduler, self.engine, self.queue,
                       self.method, self.round, extra)  # fmt: skip
        except OSError as err:  # a full disk, an unwritable run directory: the previous checkpoint is untouched
            raise self.stopped(f"the checkpoint of step {c.step} could not be written ({error_line(err)})") from err

    def write(self, row: dict) -> None:
        """Append a metrics row; RunStopped if it cannot be written."""
        try:
            self.metrics.write(row)
        except OSError as err:
            step = row["step"]
            raise self.stopped(f"metrics.jsonl could not be appended at step {step} ({error_line(err)})") from err

    def stopped(self, reason: str) -> RunStopped:
        """The RunStopped for ``reason``, naming the newest intact checkpoint (logged)."""
        ckpt_step = checkpoint_step(self.run_dir)
        kept = f"the checkpoint of step {ckpt_step} is intact" if ckpt_step >= 0 else "no checkpoint was written"
        logger.error("run stopped: %s; %s", reason, kept)
        return RunStopped(f"{reason}; {kept}: fix the cause, then --resume", step=self.counters.step,
                          checkpoint=ckpt_step)  # fmt: skip


def train(
    cfg: TrainConfig, run_dir: str | Path, *, resume: bool = False, log: Callable[[dict], None] | None = None
) -> TrainResult:
    """Run (or resume) one training run into ``run_dir``: :func:`setup`, then :func:`train_step` until done.

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
    run = setup(cfg, Path(run_dir), resume)
    c, stop, bar = run.counters, _Stop(), _progress(cfg, run.counters)
    stop.install()
    try:
        if c.step == 0 and cfg.eval.at_start and not run.resumed:
            row = {"step": 0, "rollouts_total": c.rollouts_total, "tokens_total": c.tokens_total,
                   "compute_total": c.compute_total, "train_pass_rate": float("nan"), "wall_time": 0.0,
                   "pool_size": len(run.keys),  # the train pool's prompts (what an offline init would draw for)
                   **c.compute_totals(), **_init_fields(run), **_evaluate(run)}  # fmt: skip
            run.write(row)
        while not _done(cfg.train, c):
            row = train_step(run)
            run.write(row)
            if log is not None:
                log(row)
            _advance(bar, c)
            every = cfg.run.checkpoint_every
            if stop.requested or _done(cfg.train, c) or (every and c.step % every == 0):
                run.save()
            if stop.requested:
                return TrainResult(run.run_dir, c.step, c.rollouts_total, c.last_eval, interrupted=True)
        if latest_checkpoint(run.run_dir) is None or checkpoint_step(run.run_dir) != c.step:
            run.save()
        export_policy(run.run_dir, run.model, run.tokenizer)
        return TrainResult(run.run_dir, c.step, c.rollouts_total, c.last_eval)
    finally:
        stop.restore()
        run.metrics.close()
        if bar is not None:
            bar.close()


def train_step(run: Run) -> dict[str, Any]:
    """One step (module docstring), its metrics row returned; RunStopped on a fault it cannot work around."""
    cfg, c, rnd = run.cfg, run.counters, run.round
    t_step, step = time.perf_counter(), c.step + 1
    phases, compute = Phases(("generate", "verify", "prior", "estimate", "update")), ComputeMeter()

    # 1. the step's candidate prompts and their prior
    queue_before = run.queue.state_dict()  # put back if the step cannot be taken
    idx = run.queue.take(run.pool_size)
    keys, prior_texts = run.keys[idx], [run.prior_texts[i] for i in idx]
    with phases("prior"):
        prior = rnd.predict(keys, prior_texts)

    # 2. rollouts: the allocator's rounds, each one generate + verify (engine faults retried)
    sample = Sampler(run.engine, run.task, run.pool, run.texts, idx, phases, cfg.train.reward_range,
                     retries=cfg.run.generate_retries, backoff_s=cfg.run.retry_backoff_s)  # fmt: skip
    with phases("estimate"):  # the allocator's and the estimator's own time (generate and verify are theirs)
        alloc = _allocate(run, step, sample, prior, keys, queue_before)
        rollouts_all = concat_rollouts(sample.draws, run.tokenizer)
        compute.generate(rollouts_all.prompt_mask, rollouts_all.response_mask, alloc.prompt)
        rewards, group, kept_pool = alloc.loss_batch()  # (N,), (N,), (G,) kept rollouts in draw order

        # 3. advantages: the value method's (a registered estimator, POISE's probe or the critic)
        out = None
        if len(rewards):
            kept = rollouts_all.select(alloc.kept[alloc.prompt])
            shaped = shape_rewards(cfg.train.overlong, rewards, kept.lengths, max_len=cfg.generation.max_new_tokens,
                                   reward_range=cfg.train.reward_range)  # fmt: skip
            batch = StepBatch(step, kept, shaped, group, keys[kept_pool],
                              prior=None if prior is None else prior.take(kept_pool))  # fmt: skip
            out = run.method.estimate(batch, compute)

    # 4. the policy update (ppo_epochs × micro-batches); then the method learns the step
    with phases("update"):
        upd = {} if out is None else _update_policy(run, step, out, group, alloc.n_rollouts, compute)

    # 5. the prior learns this step's outcomes (every sampled prompt, kept or not)
    with phases("prior"):
        if alloc.n_rollouts:
            _observe_drift(run, alloc, keys, rollouts_all, compute)
            learn_prior(rnd, alloc, keys, prior_texts, step)

    # 6. bookkeeping and the row (eval when due)
    rollouts_before = c.rollouts_total
    _count(run, step, alloc, sample, rollouts_all, compute)
    row = step_metrics(cfg, c, alloc, rewards, group, None if out is None else out.estimate,
                       upd | ({} if out is None else out.metrics), sample.scores, rollouts_all, rnd.provider,
                       phases.seconds, value_g=None if out is None else out.value_g, compute=compute)  # fmt: skip
    row |= {"time/step": time.perf_counter() - t_step, "engine_retries": sample.retried}
    row |= _init_fields(run)
    if prior is not None:
        row |= {"prior_fallbacks": prior.fallbacks, "prior_fallbacks_total": rnd.guard.fallbacks,
                "prior_update_errors_total": rnd.guard.update_errors,
                "pool_prior_var": float(prior.pass_rate.var())}  # fmt: skip  (every candidate's, selected or not)
    if _eval_due(cfg, c, rollouts_before):
        row |= _evaluate(run)
    return row


def _allocate(run: Run, step: int, sample: Sampler, prior: Prior | None, keys: np.ndarray, queue_before: dict) -> Any:
    """The round's allocation over the candidates; the unreached ones go back to the queue.

    A rollout engine that fails every retry stops the run: the queue is put back, the last complete step is
    checkpointed (if it was not), and RunStopped is raised.
    """
    cfg = run.cfg
    try:
        alloc = run.round.allocate(sample, n_prompts=len(keys), rng=np.random.default_rng([cfg.seed, 23, step]),
                                   prior=prior, keys=keys)  # fmt: skip
    except RolloutFailure as err:  # the step is not taken: the state is the last complete step's
        run.queue.load_state_dict(queue_before)
        if checkpoint_step(run.run_dir) != run.counters.step:
            run.save()
        raise run.stopped(f"step {step}: {err}") from err
    unreached = alloc.counts == 0  # (P,) back to the queue's front; passed-over prompts are used up
    if cfg.allocator.rejects == "drop":
        unreached &= ~alloc.passed
    run.queue.give_back(sample.idx[np.flatnonzero(unreached)])
    return alloc


def _update_policy(run: Run, step: int, out: Any, group: np.ndarray, n_rollouts: int, compute: ComputeMeter) -> dict:
    """The policy update on the method's advantages, then the method's own update; OOM stops the run, named."""
    cfg, method = run.cfg, run.method
    value_terms, value_optimizer = method.joint_loss(out, compute)
    _begin_schedule(cfg.train, run.scheduler, run.counters, n_rollouts)
    try:
        upd = update_policy(cfg, run.model, run.reference, run.optimizer, run.scheduler, out.rollouts, group,
                            out.advantages, compute=compute, recompute_old_logp=run.recompute,
                            value_terms=value_terms, value_optimizer=value_optimizer)  # fmt: skip
    except Exception as err:
        if not _is_out_of_memory(err):
            raise
        raise run.stopped(
            f"step {step}: out of memory in the policy update ({error_line(err)}): lower "
            f"train.micro_batch_size (now {cfg.train.micro_batch_size}; a resume may change it)"
        ) from err
    upd |= method.after_update(out, compute)
    _sync(run.engine, run.model)  # an engine with its own copy of the weights (vLLM) follows the update
    return upd


def _offline_init(
    cfg: TrainConfig, rnd: Round, engine: Any, task: Any, pool: list, texts: list[str], c: Counters
) -> int:
    """Start an ``offline`` prior (``spo-offline``) from ``offline_n`` rollouts per train prompt of the starting policy.

    The first ``offline_prompts`` prompts of the pool (None: all); an init at or over ``train.max_rollouts`` (which
    counts it) is refused before a rollout is drawn.

    Drawn with the training engine and generation settings (the recipe uses its validation sampler, T = 0.6), in
    chunks of 64 prompts; counted in the run's rollouts, tokens and compute before step 1, as a user pays them.
    Returns the rollouts drawn (0: no offline init).
    """
    name = cfg.prior.name
    if name is None or not get_provider_spec(name).offline_init or not rnd.provider.offline:
        return 0
    n, compute = rnd.provider.offline_n, ComputeMeter()
    pool = pool[: rnd.provider.offline_prompts]  # None: every prompt (the recipe)
    budget = cfg.train.max_rollouts
    if budget is not None and n * len(pool) >= budget:
        raise ValueError(f"prior {name}: the offline init draws {n * len(pool):,} rollouts ({len(pool):,} prompts × "
                         f"offline_n={n}), at or over train.max_rollouts={budget:,}, which counts them: nothing would "
                         "be left to train; raise the budget, lower prior.options.offline_n or cap "
                         "prior.options.offline_prompts")  # fmt: skip
    successes = np.zeros(len(pool))  # (P,)
    for start in range(0, len(pool), 64):
        idx = np.arange(start, min(start + 64, len(pool)))
        ro = engine.generate([texts[i] for i in idx], [n] * len(idx))
        scored = task.score([pool[idx[j]] for j in ro.prompt_index], list(ro.texts))
        successes[idx] += np.bincount(np.asarray(ro.prompt_index), weights=scored.rewards, minlength=len(idx))
        compute.generate(ro.prompt_mask, ro.response_mask, ro.prompt_index)
        c.tokens_total += int(ro.lengths.sum())
    rnd.provider.init_offline([str(p.key) for p in pool], successes, np.full(len(pool), float(n)))
    c.rollouts_total += n * len(pool)
    c.add_compute(compute)
    return n * len(pool)


def _encoder_init(cfg: TrainConfig, rnd: Round, prior_texts: list[str], model: Any, c: Counters) -> int:
    """Count a text prior's encoder over the pool (``v0``, ``combined``: :meth:`prefetch`, before step 1).

    In the policy's token-passes: the encoder's work Σ tokens × its parameters over the distinct pool texts, as if
    its embedding cache were cold (:meth:`v05.priors.embeddings.Embedder.work`), ÷ the policy's parameters (a
    forward costs ~2 × parameters FLOPs a token for either model). Added to this trainer's and the user's compute
    (``compute/encoder``, ``encoder_compute``). Returns the token-passes (0: no text prior).
    """
    if cfg.prior.name is None or not provider_spec(cfg.prior.name, cfg.prior.options).reads_text:
        return 0
    params = sum(p.numel() for p in model.parameters())
    passes = round(rnd.provider.encoder_work(prior_texts) / params)
    meter = ComputeMeter()
    meter.add("encoder", passes)
    c.add_compute(meter)
    return passes


def _init_fields(run: Run) -> dict[str, int]:
    """The row fields of what the run counted before step 1 (an offline init, a text prior's encoder), if any."""
    return {k: v for k, v in (("init_rollouts", run.init_rollouts), ("encoder_compute", run.encoder_compute)) if v}


def _observe_drift(run: Run, alloc: Any, keys: np.ndarray, rollouts_all: Any, compute: ComputeMeter) -> None:
    """Give a drift-discounting provider (``spo``, rho="kl") the policy's drift on each sampled prompt (no-op else)."""
    if run.drift is None:
        return
    sampled = np.flatnonzero(alloc.counts > 0)  # (G,) candidates drawn this step
    last = np.zeros(len(alloc.counts), np.int64)
    last[alloc.prompt] = np.arange(len(alloc.prompt))  # each candidate's last rollout (the recipe's last write)
    ids = [str(k) for k in keys[sampled]]
    drift = run.drift.step(run.model, ids, rollouts_all, last[sampled], compute)
    run.round.provider.observe_drift(list(drift), list(drift.values()))


def _count(run: Run, step: int, alloc: Any, sample: Sampler, rollouts_all: Any, compute: ComputeMeter) -> None:
    """Advance the run's counters by this step (rollouts, tokens, token-passes, prompts, verifier failures, time)."""
    c = run.counters
    c.step = step
    c.rollouts_total += alloc.n_rollouts
    c.tokens_total += int(rollouts_all.lengths.sum())
    if run.prior_backend is not None:  # the probe prior's prefills since the last step's bookkeeping
        compute.add("probe", run.prior_backend.token_passes - run.probe_mark)
        run.probe_mark = run.prior_backend.token_passes
    c.add_compute(compute)
    c.prompts_total += int(np.count_nonzero(alloc.counts > 0))
    c.verifier_failures += sum(s.failures for s in sample.scores)
    c.wall_time = time.perf_counter() - run.started


def _evaluate(run: Run) -> dict:
    """The held-out evaluation (:func:`v05.train.evaluation.evaluate`); the counters keep its pass rate."""
    out = evaluate(run.cfg, run.model, run.tokenizer, run.task, run.held_out, run.held_texts)
    run.counters.last_eval = out["eval_pass_rate"]
    return out


def setup(cfg: TrainConfig, run_dir: Path, resume: bool) -> Run:
    """Everything a run needs before its first step: task, policy (warm start), engine, optimizer, round, method.

    A resume restores the checkpoint's weights, optimizer, scheduler, RNGs, queue, counters, round and method.
    """
    ckpt = _prepare_run_dir(cfg, run_dir, resume)
    set_cpu_threads(cfg.run.threads)
    torch.manual_seed(cfg.seed)
    task = make_task(cfg.task.name, **cfg.task.options)
    split = task.validation_prompts() if cfg.eval.split == "validation" else task.eval_prompts()
    pool, held_out = list(task.train_prompts()), list(split)[: cfg.eval.size]
    if not held_out:
        raise ValueError(f"task {cfg.task.name!r} has no {cfg.eval.split} prompts: raise that split (eval.size, "
                         "n_eval / n_val, size_eval / size_val)")  # fmt: skip
    policy_cfg = cfg.policy
    if cfg.warmup.enabled:
        policy_cfg = warm_policy(cfg, ensure_warm_start(cfg, progress=cfg.run.progress))
    model, tokenizer = load_policy(policy_cfg)
    texts, held_texts = render_all(cfg, task, pool, tokenizer), render_all(cfg, task, held_out, tokenizer)
    check_overlong_buffer(cfg, task, pool, tokenizer)
    engine = _engine(cfg, model, tokenizer)
    optimizer, scheduler = _optimizer(cfg, model)
    reference = _reference_model(cfg.loss.kl_coef, model)
    rnd = make_round(cfg)
    prior_backend = _bind_prior(cfg, rnd, model, tokenizer, task, pool, texts)
    prior_texts = _prior_texts(cfg.prior, pool, texts)  # what the prior reads of each pool prompt
    if rnd.provider is not None:
        rnd.provider.prefetch(prior_texts)  # the pool's embeddings, once: steps only look them up
    method = make_value_method(cfg, model, tokenizer, rnd)  # a registered estimator, POISE's probe or PPO's critic
    queue = PromptQueue(n=len(pool), seed=cfg.seed, order=cfg.train.prompt_order)
    c = Counters()
    if ckpt is not None:
        tensors, state = load_checkpoint(ckpt)
        restore_state(ckpt, tensors, state, model, optimizer, scheduler, engine)
        _sync(engine, model)
        c = Counters.from_state(state["counters"])
        queue.load_state_dict(state["queue"])
        rnd.load_state_dict(state)
        method.load(tensors, state)
        logger.info("resumed %s at step %d (%d rollouts)", run_dir, c.step, c.rollouts_total)
    drift = None
    if cfg.prior.name is not None and get_provider_spec(cfg.prior.name).needs_drift and rnd.provider.rho == "kl":
        drift = DriftMeter(cfg.generation.temperature)
        if ckpt is not None:
            drift.load_state_dict(state.get("spo_drift") or {})
    if ckpt is not None:
        init, encoder = int(state.get("init_rollouts", 0)), int(state.get("encoder_compute", 0))
    else:
        init = _offline_init(cfg, rnd, engine, task, pool, texts, c)
        encoder = _encoder_init(cfg, rnd, prior_texts, model, c)
    metrics = MetricsLog(run_dir, resume_step=c.step if ckpt is not None else None, tensorboard=cfg.run.tensorboard)
    return Run(cfg, run_dir, task, pool, texts, np.array([p.key for p in pool]), prior_texts, held_out, held_texts,
               model, tokenizer, engine, reference, optimizer, scheduler, rnd, method, prior_backend, queue, c,
               ckpt is not None, _pool_size(cfg.allocator, cfg.train.batch_size, rnd.allocator),
               recompute_old_logp(cfg, model, method), metrics, time.perf_counter() - c.wall_time, drift,
               init, encoder_compute=encoder)  # fmt: skip


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


def _begin_schedule(train_cfg: LoopConfig, scheduler: LRSchedule, c: Counters, step_rollouts: int) -> None:
    """Place this step in the schedule's horizon: its rollouts within the budget, or its index within the steps."""
    if train_cfg.max_rollouts is not None:
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


def _reference_model(kl_coef: float, model: Any) -> Any:
    """A frozen copy of the policy for the KL term (``loss.kl_coef`` > 0), else None."""
    if kl_coef <= 0:
        return None
    ref = copy.deepcopy(model).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref


def make_round(cfg: TrainConfig) -> Round:
    """The run's round: its estimator (none for PPO's critic and POISE, whose methods estimate), prior, allocator.

    The allocator is built here, once per run.
    """
    name = cfg.estimator.name
    own = name in ESTIMATORS and not ESTIMATORS[name].needs_values  # the value method estimates the others
    allocator = get_allocator(cfg.allocator.name, batch_size=cfg.train.batch_size, **cfg.allocator.options)
    return Round(name if own else None, options=cfg.estimator.options if own else None,
                 reward_range=cfg.train.reward_range, prior=cfg.prior.name, prior_options=cfg.prior.options,
                 feed_n0=cfg.prior.feed_n0, allocator=allocator)  # fmt: skip


def _bind_prior(
    cfg: TrainConfig, rnd: Round, model: Any, tokenizer: Any, task: Any, pool: list, texts: list[str]
) -> PolicyFeatureBackend | None:
    """Give the provider what its spec says it needs.

    The live policy's features (``probe``: the backend, returned, whose token-passes the run counts) or extra
    rollouts of the current policy (``oracle``).
    """
    if rnd.provider is None or cfg.prior.name is None:
        return None
    spec, backend = provider_spec(cfg.prior.name, cfg.prior.options), None
    if spec.needs_policy:
        backend = PolicyFeatureBackend(model=model, tokenizer=tokenizer, config=cfg.poise.features)
        rnd.provider.bind_policy(backend)
    if spec.needs_sampler:
        rnd.provider.bind_sampler(_oracle_sampler(cfg, model, tokenizer, task, pool, texts, rnd.provider.rollouts))
    return backend


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


def _prior_texts(prior_cfg: PriorConfig, pool: list, rendered: list[str]) -> list[str]:
    """What the prior reads of each pool prompt (``prior.input``): the bare problem text, or the rendered prompt.

    ``auto``: the problem text for text-embedding priors (V0 was trained on bare problems, not chat-wrapped prompts),
    the rendered prompt for priors that read the policy (``probe``: the policy sees the rendered prompt).
    """
    mode = prior_cfg.input
    if mode == "auto":
        needs_policy = prior_cfg.name is not None and provider_spec(prior_cfg.name, prior_cfg.options).needs_policy
        mode = "prompt" if needs_policy else "question"
    return list(rendered) if mode == "prompt" else [p.question for p in pool]


def _pool_size(alloc_cfg: AllocatorConfig, batch_size: int, allocator: Any) -> int:
    """Prompts a step draws its candidates from: ``allocator.pool_factor`` batches, else the allocator's own."""
    if alloc_cfg.pool_factor is not None:
        return batch_size * alloc_cfg.pool_factor
    return int(allocator.candidate_pool(batch_size))


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


def _done(train_cfg: LoopConfig, c: Counters) -> bool:
    if c.step >= train_cfg.steps:
        return True
    return train_cfg.max_rollouts is not None and c.rollouts_total >= train_cfg.max_rollouts


def _eval_due(cfg: TrainConfig, c: Counters, rollouts_before: int) -> bool:
    """Whether this step ends with an evaluation: after the last step, else by ``every_rollouts`` or ``every``.

    By rollouts: when this step's rollouts cross a multiple of ``every_rollouts``; else every ``every`` steps.
    """
    if _done(cfg.train, c):
        return True
    if cfg.eval.every_rollouts is not None:
        return c.rollouts_total // cfg.eval.every_rollouts > rollouts_before // cfg.eval.every_rollouts
    return cfg.eval.every > 0 and c.step % cfg.eval.every == 0
