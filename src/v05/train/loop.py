r"""The single-machine RLVR loop, read top to bottom.

Per step:

    prompts   = queue.take(pool)                          candidate pool (epochs over the finite train set)
    V, n0     = provider.predict(prompts)                 prior (when configured)
    alloc     = allocate(allocator, sample, ...)          rounds of rollouts; sample() = generate + verify
    A         = estimate(estimator, rewards, group, ...)  any registered estimator, its state carried
    θ         ← AdamW(∇ clipped-surrogate loss)           ppo_epochs × micro-batches, grad clipping
    provider.update(prompts, outcomes)                    the prior learns the step's outcomes
    metrics.jsonl, TensorBoard, eval every N, checkpoint every M

The loop adds no math of its own: estimators and allocators come from :mod:`v05.registry`, priors from
:mod:`v05.priors`, the loss from :mod:`v05.train.loss`. Reproducibility: the prompt order and every allocator rng are
pure functions of (seed, step); the rollout engine's RNG state, the weights, the optimizer, the scheduler and every
estimator/prior/allocator state are checkpointed, so ``resume`` on CPU continues the uninterrupted run exactly.
Seam for later methods (POISE probe, PPO critic): a value estimate is one more input to ``estimate`` per rollout.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from v05.rewards import from_pm1, to_pm1
from v05.train.config import TrainConfig, to_yaml
from v05.train.rundir import CONFIG, MetricsLog, atomic_write_text, latest_checkpoint, load_checkpoint, save_checkpoint
from v05.train.state import state_from_json, state_to_json

logger = logging.getLogger(__name__)

POOL_FACTOR = {"fixed": 1, "osla": 1, "sara": 4, "dps": 4}
"""Default candidate pool per step, in batches (dynamic_sampling: its max_rounds × gen batch)."""


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


@dataclass
class _Counters:
    step: int = 0
    rollouts_total: int = 0
    tokens_total: int = 0
    prompts_total: int = 0
    wall_time: float = 0.0
    last_eval: float = float("nan")
    train_last: float = float("nan")
    verifier_failures: int = 0


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
    """
    import torch  # noqa: PLC0415

    from v05.tasks import make_task  # noqa: PLC0415
    from v05.train.policy import load_policy, set_cpu_threads  # noqa: PLC0415
    from v05.train.warmstart import ensure_warm_start, render_all  # noqa: PLC0415

    run_dir = Path(run_dir)
    ckpt = _prepare_run_dir(cfg, run_dir, resume)
    set_cpu_threads(cfg.run.threads)
    torch.manual_seed(cfg.seed)

    # -- setup: task, policy (warm start), engine, optimizer, estimator/allocator/prior state ---------------------
    task = make_task(cfg.task.name, **cfg.task.options)
    pool, held_out = list(task.train_prompts()), list(task.eval_prompts())[: cfg.eval.size]
    if not held_out:
        raise ValueError(f"task {cfg.task.name!r} has no eval prompts: raise its eval split (eval.size / n_eval)")
    policy_cfg = cfg.policy
    if cfg.warmup.enabled:
        warm = ensure_warm_start(cfg, progress=cfg.run.progress)
        policy_cfg = dataclasses.replace(cfg.policy, name_or_path=str(warm))
    model, tokenizer = load_policy(policy_cfg)
    texts, held_texts = render_all(cfg, task, pool, tokenizer), render_all(cfg, task, held_out, tokenizer)
    keys = np.array([p.key for p in pool])
    engine = _engine(cfg, model, tokenizer)
    optimizer, scheduler = _optimizer(cfg, model)
    reference = _reference_model(cfg, model)
    provider = _provider(cfg)
    if provider is not None:
        provider.prefetch(texts)  # the pool's embeddings, once: steps only look them up
    queue = _queue(cfg, len(pool))
    est_state: Any = None
    alloc_state: Any = None
    c = _Counters()
    if ckpt is not None:
        tensors, state = load_checkpoint(ckpt)
        _restore(ckpt, tensors, state, model, optimizer, scheduler, engine)
        _sync(engine, model)
        c = _Counters(**state["counters"])
        queue.load_state_dict(state["queue"])
        est_state, alloc_state = state_from_json(state["estimator"]), state_from_json(state["allocator"])
        if provider is not None:
            provider.load_state_dict(state["provider"])
        logger.info("resumed %s at step %d (%d rollouts)", run_dir, c.step, c.rollouts_total)
    metrics = MetricsLog(run_dir, resume_step=c.step if ckpt is not None else None, tensorboard=cfg.run.tensorboard)
    stop = _Stop()
    stop.install()
    bar = _progress(cfg, c)
    started = time.perf_counter() - c.wall_time

    def save() -> None:
        c.wall_time = time.perf_counter() - started
        _save(cfg, run_dir, c, model, optimizer, scheduler, engine, queue, est_state, alloc_state, provider)

    try:
        if c.step == 0 and cfg.eval.at_start and ckpt is None:
            row = {"step": 0, "rollouts_total": 0, "tokens_total": 0, "train_pass_rate": float("nan"),
                   "wall_time": 0.0, **_evaluate(cfg, model, tokenizer, task, held_out, held_texts)}  # fmt: skip
            c.last_eval = row["eval_pass_rate"]
            metrics.write(row)
        while not _done(cfg, c):
            t_step = time.perf_counter()
            step = c.step + 1
            timing = dict.fromkeys(("generate", "verify", "prior", "estimate", "update"), 0.0)

            # 1. the step's candidate prompts and their prior
            idx = queue.take(_pool_size(cfg))
            t0 = time.perf_counter()
            prior_v, n0 = _predict(cfg, provider, keys[idx], [texts[i] for i in idx])  # on the reward scale
            timing["prior"] += time.perf_counter() - t0

            # 2. rollouts: the allocator's rounds, each one generate + verify
            sample = _Sampler(engine, task, pool, texts, idx, timing, cfg.train.reward_range)
            t0 = time.perf_counter()
            alloc = _allocate(cfg, step, idx, keys, prior_v, n0, alloc_state, sample)
            alloc_state = alloc.state
            sampled = np.flatnonzero(alloc.counts > 0)
            queue.give_back(idx[np.flatnonzero(alloc.counts == 0)])
            rollouts_all, scores = _concat(sample.draws, tokenizer), sample.scores
            rewards, group, kept_pool = alloc.loss_batch()  # (N,), (N,), (G,) kept rollouts in draw order
            kept_rollouts = rollouts_all.select(alloc.kept[alloc.prompt])

            # 3. advantages from the registered estimator (its state carried across steps)
            shaped = _shape_rewards(cfg, rewards, kept_rollouts)
            est = None
            if len(rewards):
                est, est_state = _estimate(cfg, step, shaped, group, kept_pool, idx, keys, prior_v, n0, est_state)
            timing["estimate"] += time.perf_counter() - t0 - timing["generate"] - timing["verify"]

            # 4. the policy update (ppo_epochs × micro-batches)
            t0 = time.perf_counter()
            upd = {}
            if est is not None:
                upd = _update(cfg, model, reference, optimizer, scheduler, kept_rollouts, group, est)
                _sync(engine, model)  # an engine with its own copy of the weights (vLLM) follows the update
            timing["update"] += time.perf_counter() - t0

            # 5. the prior learns this step's outcomes (every sampled prompt, kept or not)
            t0 = time.perf_counter()
            if provider is not None and sampled.size:
                _learn(cfg, provider, alloc, idx, keys, texts, step)
            timing["prior"] += time.perf_counter() - t0

            # 6. bookkeeping, metrics, eval, checkpoint
            c.step = step
            c.rollouts_total += alloc.n_rollouts
            c.tokens_total += int(rollouts_all.lengths.sum())
            c.prompts_total += int(sampled.size)
            c.verifier_failures += sum(s.failures for s in scores)
            c.wall_time = time.perf_counter() - started
            row = _step_metrics(cfg, c, alloc, rewards, group, est, upd, scores, rollouts_all, provider, timing)
            row["time/step"] = time.perf_counter() - t_step
            if _eval_due(cfg, c):
                row |= _evaluate(cfg, model, tokenizer, task, held_out, held_texts)
                c.last_eval = row["eval_pass_rate"]
            metrics.write(row)
            if log is not None:
                log(row)
            _advance(bar, c)
            if stop.requested or _done(cfg, c) or (cfg.run.checkpoint_every and step % cfg.run.checkpoint_every == 0):
                save()
            if stop.requested:
                return TrainResult(run_dir, c.step, c.rollouts_total, c.last_eval, interrupted=True)
        if latest_checkpoint(run_dir) is None or _ckpt_step(run_dir) != c.step:
            save()
        _export(run_dir, model, tokenizer)
        return TrainResult(run_dir, c.step, c.rollouts_total, c.last_eval)
    finally:
        stop.restore()
        metrics.close()
        if bar is not None:
            bar.close()


@dataclass
class _Sampler:
    """The allocators' ``sample(ids, counts)`` for one step: generate, verify, keep the rollouts and scores."""

    engine: Any
    task: Any
    pool: list
    texts: list[str]
    idx: np.ndarray  # (P,) train-pool index of each candidate prompt
    timing: dict[str, float]
    reward_range: str  # the scale the rewards are returned on (task rewards are in [0, 1])
    draws: list[Any] = field(default_factory=list)
    scores: list[Any] = field(default_factory=list)

    def __call__(self, ids: np.ndarray, counts: np.ndarray) -> np.ndarray:
        t = time.perf_counter()
        ro = self.engine.generate([self.texts[self.idx[i]] for i in ids], counts)
        self.timing["generate"] += time.perf_counter() - t
        t = time.perf_counter()
        sc = self.task.score([self.pool[self.idx[ids[j]]] for j in ro.prompt_index], list(ro.texts))
        self.timing["verify"] += time.perf_counter() - t
        self.draws.append(ro)
        self.scores.append(sc)
        return to_pm1(sc.rewards, "01") if self.reward_range == "pm1" else sc.rewards


# -- setup helpers -------------------------------------------------------------------------------------------------
def _prepare_run_dir(cfg: TrainConfig, run_dir: Path, resume: bool) -> Path | None:
    """Create the run directory (or check it for a resume); write config.yaml; return the checkpoint to resume."""
    text = to_yaml(cfg)
    config_path = run_dir / CONFIG
    if resume:
        ckpt = latest_checkpoint(run_dir)
        if ckpt is None:
            raise ValueError(f"--resume: no checkpoint in {run_dir / 'checkpoints'} (start without --resume)")
        saved = config_path.read_text(encoding="utf-8") if config_path.exists() else None
        if saved is not None and saved != text:
            raise ValueError(
                f"--resume: the config differs from {config_path}; resume with the same config and overrides"
            )
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
    from v05.engines.hf import HFEngine  # noqa: PLC0415

    return HFEngine(model, tokenizer, cfg.generation, seed=cfg.seed)


def _sync(engine: Any, model: Any) -> None:
    """Push the policy's weights into an engine that keeps its own copy (vLLM); HF generate reads the policy."""
    sync = getattr(engine, "sync_weights", None)
    if sync is not None:
        sync(model)


def _optimizer(cfg: TrainConfig, model: Any) -> tuple[Any, Any]:
    import torch  # noqa: PLC0415

    o = cfg.optim
    opt = torch.optim.AdamW(model.parameters(), lr=o.lr, betas=tuple(o.betas), eps=o.eps, weight_decay=o.weight_decay)
    total, warm = max(cfg.train.steps, 1), o.warmup_steps

    def factor(s: int) -> float:  # s = optimizer steps taken so far
        if warm and s < warm:
            return (s + 1) / warm
        if o.schedule == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * min(1.0, (s - warm) / max(total - warm, 1))))
        return 1.0

    return opt, torch.optim.lr_scheduler.LambdaLR(opt, factor)


def _reference_model(cfg: TrainConfig, model: Any) -> Any:
    if cfg.loss.kl_coef <= 0:
        return None
    import copy  # noqa: PLC0415

    ref = copy.deepcopy(model).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref


def _provider(cfg: TrainConfig) -> Any:
    if cfg.prior.name is None:
        return None
    from v05.priors import make_provider  # noqa: PLC0415

    return make_provider(cfg.prior.name, **cfg.prior.options)


def _queue(cfg: TrainConfig, n: int) -> Any:
    from v05.train.prompts import PromptQueue  # noqa: PLC0415

    return PromptQueue(n=n, seed=cfg.seed, order=cfg.train.prompt_order)


def _pool_size(cfg: TrainConfig) -> int:
    a = cfg.allocator
    if a.pool_factor is not None:
        return cfg.train.batch_size * a.pool_factor
    if a.name == "dynamic_sampling":
        gen = a.options.get("gen_batch_size") or cfg.train.batch_size
        return int(gen) * int(a.options.get("max_rounds", 4))
    return cfg.train.batch_size * POOL_FACTOR.get(a.name, 1)


def _progress(cfg: TrainConfig, c: _Counters) -> Any:
    """A bar over the rollout budget (or the steps when there is none), showing step, train and last eval pass rate."""
    if not cfg.run.progress:
        return None
    from tqdm.auto import tqdm  # noqa: PLC0415

    by_rollouts = cfg.train.max_rollouts is not None
    total = cfg.train.max_rollouts if by_rollouts else cfg.train.steps
    done = c.rollouts_total if by_rollouts else c.step
    unit = "rollout" if by_rollouts else "step"
    return tqdm(total=total, initial=done, desc=cfg.name, unit=unit, dynamic_ncols=True, mininterval=1.0)


def _advance(bar: Any, c: _Counters) -> None:
    if bar is None:
        return
    bar.update((c.rollouts_total - bar.n) if bar.unit == "rollout" else 1)
    bar.set_postfix(step=c.step, train=f"{c.train_last:.3f}", eval=f"{c.last_eval:.3f}", refresh=False)


def _done(cfg: TrainConfig, c: _Counters) -> bool:
    if c.step >= cfg.train.steps:
        return True
    return cfg.train.max_rollouts is not None and c.rollouts_total >= cfg.train.max_rollouts


def _eval_due(cfg: TrainConfig, c: _Counters) -> bool:
    return _done(cfg, c) or (cfg.eval.every > 0 and c.step % cfg.eval.every == 0)


# -- one step ------------------------------------------------------------------------------------------------------
def _predict(
    cfg: TrainConfig, provider: Any, keys: np.ndarray, texts: list[str]
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The prior on the run's reward scale and its pseudo-count per candidate prompt (None without a provider)."""
    if provider is None:
        return None, None
    pred = provider.predict([str(k) for k in keys], texts)
    v = np.clip(np.asarray(pred.mean, np.float64), -1.0, 1.0)  # providers predict in ±1 space
    return from_pm1(v, cfg.train.reward_range), np.asarray(pred.n0, np.float64)


def _allocate(
    cfg: TrainConfig,
    step: int,
    idx: np.ndarray,
    keys: np.ndarray,
    prior_v: np.ndarray | None,
    n0: np.ndarray | None,
    state: Any,
    sample: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> Any:
    from v05.allocation import allocate  # noqa: PLC0415
    from v05.registry import get_allocator  # noqa: PLC0415

    allocator = get_allocator(cfg.allocator.name, batch_size=cfg.train.batch_size, **cfg.allocator.options)
    feed = cfg.prior.feed_n0 and n0 is not None
    return allocate(
        allocator,
        sample,
        n_prompts=len(idx),
        rng=np.random.default_rng([cfg.seed, 23, step]),
        prior=prior_v,
        n0=n0 if feed else None,
        keys=keys[idx],
        reward_range=cfg.train.reward_range,
        state=state,
    )


def _shape_rewards(cfg: TrainConfig, rewards: np.ndarray, rollouts: Any) -> np.ndarray:
    """DAPO's soft overlong punishment added to the rewards, clipped to the reward range (when enabled)."""
    if not cfg.train.overlong.enabled or not len(rewards):
        return rewards
    from v05.train.loss import overlong_shaping  # noqa: PLC0415

    o = cfg.train.overlong
    shaped = rewards + overlong_shaping(
        rollouts.lengths, max_len=cfg.generation.max_new_tokens, buffer=o.buffer, penalty=o.penalty
    )
    return np.clip(shaped, -1.0 if cfg.train.reward_range == "pm1" else 0.0, 1.0)


def _estimate(
    cfg: TrainConfig,
    step: int,
    rewards: np.ndarray,
    group: np.ndarray,
    kept_pool: np.ndarray,
    idx: np.ndarray,
    keys: np.ndarray,
    prior_v: np.ndarray | None,
    n0: np.ndarray | None,
    state: Any,
) -> tuple[Any, Any]:
    from v05.registry import estimate, get_estimator  # noqa: PLC0415

    spec = get_estimator(cfg.estimator.name)
    kw: dict[str, Any] = dict(cfg.estimator.options)
    if spec.stateful:
        kw["state"] = state
    if spec.keyed:
        kw["prompt_ids"] = keys[idx[kept_pool]]
    if "step" in spec.options:
        kw["step"] = step
    prior = None
    if spec.uses_prior and prior_v is not None:
        prior = prior_v[kept_pool]
        if "n0" in spec.options and cfg.prior.feed_n0 and n0 is not None and "n0" not in kw:
            kw["n0"] = n0[kept_pool]
    est = estimate(cfg.estimator.name, rewards, group, prior=prior, reward_range=cfg.train.reward_range, **kw)
    return est, est.state if spec.stateful else state


def _learn(
    cfg: TrainConfig, provider: Any, alloc: Any, idx: np.ndarray, keys: np.ndarray, texts: list[str], step: int
) -> None:
    """Feed every sampled prompt's ±1 mean score and rollout count to the provider."""
    from v05.priors import group_outcomes  # noqa: PLC0415

    mask = alloc.counts[alloc.prompt] > 0
    group, pool_index = _group_index(alloc.prompt[mask])
    scores, counts = group_outcomes(alloc.rewards[mask], group, reward_range=cfg.train.reward_range)
    sel = idx[pool_index]
    provider.update([str(k) for k in keys[sel]], [texts[i] for i in sel], scores, counts, step=step)


def _group_index(prompt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    from v05.groups import group_index  # noqa: PLC0415

    group, uniq = group_index(prompt)
    return group, uniq.astype(np.int64)


def _concat(draws: list[Any], tokenizer: Any) -> Any:
    from v05.engines.hf import Rollouts  # noqa: PLC0415

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    return Rollouts.concat(draws, pad_id=pad)


def _update(
    cfg: TrainConfig,
    model: Any,
    reference: Any,
    optimizer: Any,
    scheduler: Any,
    rollouts: Any,
    group: np.ndarray,
    est: Any,
) -> dict[str, float]:
    """ppo_epochs optimizer steps over the kept rollouts, each accumulating micro-batch gradients."""
    import torch  # noqa: PLC0415

    from v05.train.loss import loss_norm, policy_loss  # noqa: PLC0415

    n = len(rollouts)
    adv = torch.as_tensor(est.advantages, dtype=torch.float32)
    mb = cfg.train.micro_batch_size
    chunks = [np.arange(i, min(i + mb, n)) for i in range(0, n, mb)]
    parts = [_MicroBatch.of(rollouts, ch, group, share=cfg.train.share_prompt_prefix) for ch in chunks]
    norm = loss_norm([p.response_mask for p in parts])
    temp = cfg.generation.temperature
    stats: dict[str, list[float]] = {"loss": [], "pg_loss": [], "entropy": [], "clip_frac": [], "kl": [],
                                     "approx_kl": [], "grad_norm": [], "ratio": []}  # fmt: skip
    model.train()
    for _ in range(cfg.train.ppo_epochs):
        optimizer.zero_grad(set_to_none=True)
        for ch, part in zip(chunks, parts, strict=True):
            logp, entropy = part.logprobs(model, temp, with_entropy=True)
            ref_logp = None
            if reference is not None:
                with torch.no_grad():
                    ref_logp, _ = part.logprobs(reference, temp, with_entropy=False)
            terms = policy_loss(logp, part.old_logp, adv[ch], part.response_mask, config=cfg.loss, ref_logp=ref_logp,
                                entropy=entropy, norm=norm)  # fmt: skip
            terms.loss.backward()
            w = len(ch) / n
            for key, value in (("loss", terms.loss), ("pg_loss", terms.pg_loss), ("entropy", terms.entropy),
                               ("clip_frac", terms.clip_frac), ("kl", terms.kl), ("approx_kl", terms.approx_kl_old),
                               ("ratio", terms.ratio_mean)):  # fmt: skip
                stats[key].append(float(value.detach()) * (1.0 if key == "loss" else w))
        clip = cfg.optim.grad_clip if cfg.optim.grad_clip is not None else float("inf")
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        stats["grad_norm"].append(float(grad_norm))
        optimizer.step()
        scheduler.step()
    epochs = cfg.train.ppo_epochs
    out = {k: sum(v) / (epochs if k != "grad_norm" else len(v)) for k, v in stats.items() if v}
    out["lr"] = float(scheduler.get_last_lr()[0])
    return out


@dataclass(frozen=True)
class _MicroBatch:
    """One micro-batch without all-padding columns; with ``rows`` set, its prompts are the distinct ones only."""

    prompt_ids: Any  # (N, P) or (G', P) with rows
    prompt_mask: Any
    response_ids: Any  # (N, R)
    response_mask: Any
    old_logp: Any  # (N, R)
    rows: np.ndarray | None  # (N,) prompt row of each rollout (shared-prefix forward), or None

    @classmethod
    def of(cls, rollouts: Any, ch: np.ndarray, group: np.ndarray, *, share: bool) -> _MicroBatch:
        from v05.train.forward import prefix_rows  # noqa: PLC0415

        ro = rollouts.select(ch)
        r_len = int(ro.response_mask.sum(1).max()) if len(ro) else 0
        rows = None
        p_ids, p_mask = ro.prompt_ids, ro.prompt_mask
        if share:
            first, rows = prefix_rows(group[ch])
            p_ids, p_mask = p_ids[first], p_mask[first]
        keep = p_mask.bool().any(0)
        start = int(keep.float().argmax()) if bool(keep.any()) else p_mask.shape[1]  # first non-padding column
        return cls(p_ids[:, start:], p_mask[:, start:], ro.response_ids[:, :r_len], ro.response_mask[:, :r_len],
                   ro.old_logp[:, :r_len], rows)  # fmt: skip

    def logprobs(self, model: Any, temperature: float, *, with_entropy: bool) -> tuple[Any, Any]:
        from v05.train.forward import sequence_logprobs, shared_prefix_logprobs  # noqa: PLC0415

        if self.rows is None:
            return sequence_logprobs(model, self.prompt_ids, self.prompt_mask, self.response_ids, self.response_mask,
                                     temperature=temperature, with_entropy=with_entropy)  # fmt: skip
        return shared_prefix_logprobs(model, self.prompt_ids, self.prompt_mask, self.response_ids, self.response_mask,
                                      self.rows, temperature=temperature, with_entropy=with_entropy)  # fmt: skip


# -- metrics and evaluation ----------------------------------------------------------------------------------------
def _step_metrics(
    cfg: TrainConfig,
    c: _Counters,
    alloc: Any,
    rewards: np.ndarray,
    group: np.ndarray,
    est: Any,
    upd: dict[str, float],
    scores: list[Any],
    rollouts_all: Any,
    provider: Any,
    timing: dict[str, float],
) -> dict[str, Any]:
    from v05.groups import segment_count  # noqa: PLC0415

    n_drawn = int(alloc.n_rollouts)
    passed = np.concatenate([sc.rewards for sc in scores]) if scores else np.zeros(0)  # task rewards in [0, 1]
    train_pass = float(passed.mean()) if n_drawn else float("nan")
    c.train_last = train_pass
    k = alloc.counts[alloc.counts > 0]
    row: dict[str, Any] = {
        "step": c.step,
        "rollouts_total": c.rollouts_total,
        "tokens_total": c.tokens_total,
        "prompts_total": c.prompts_total,
        "train_pass_rate": train_pass,
        "wall_time": c.wall_time,
        "rollouts_step": n_drawn,
        "prompts_sampled": int(k.size),
        "groups_kept": int(alloc.kept.sum()),
        "rollouts_per_prompt": float(k.mean()) if k.size else float("nan"),
        "k_hist": np.bincount(k).tolist() if k.size else [],
        "verifier_failures": int(sum(s.failures for s in scores)),
        "verifier_failures_total": c.verifier_failures,
        "no_answer_frac": float(np.mean(np.concatenate([s.no_answer for s in scores]))) if scores else float("nan"),
        "truncated_frac": float(np.mean(rollouts_all.truncated)) if len(rollouts_all) else float("nan"),
        "response_length": float(np.mean(rollouts_all.lengths)) if len(rollouts_all) else float("nan"),
    }
    if est is not None and len(rewards):
        n_g = segment_count(group)
        lo = np.full(len(n_g), np.inf)
        hi = np.full(len(n_g), -np.inf)
        np.minimum.at(lo, group, rewards)
        np.maximum.at(hi, group, rewards)
        zero = np.zeros(len(n_g), bool)
        np.logical_or.at(zero, group, np.abs(est.advantages) > 1e-12)
        row["all_equal_frac"] = float(np.mean(hi == lo))
        row["zero_adv_frac"] = float(np.mean(~zero))
        row["adv_abs_mean"] = float(np.mean(np.abs(est.advantages)))
        if est.weight is not None:
            row["mean_weight"] = float(np.mean(est.weight))
        if est.reject is not None:
            row["estimator_reject_rate"] = float(np.mean(est.reject))
        if est.n0 is not None:
            row["estimator_n0"] = float(np.mean(est.n0))
    for key, value in alloc.stats.items():
        row[key if key not in row else f"alloc/{key}"] = value
    if provider is not None:
        cal = provider.calibration()
        row |= {"prior/tau2": cal.tau2, "prior/auc": cal.auc, "prior/n0": cal.n0, "prior/n": cal.n}
    row |= upd
    row |= {f"time/{k}": v for k, v in timing.items()}
    return row


def _evaluate(cfg: TrainConfig, model: Any, tokenizer: Any, task: Any, held_out: list, texts: list[str]) -> dict:
    """Held-out pass rates: one sampled rollout per prompt (the same seed every time) and one greedy."""
    from v05.engines.hf import HFEngine  # noqa: PLC0415

    gen = cfg.generation
    ones = [1] * len(texts)
    sampled = HFEngine(model, tokenizer, gen, seed=cfg.eval.seed).generate(texts, ones)
    out = {"eval_pass_rate": float(task.score(held_out, list(sampled.texts)).rewards.mean())}
    if cfg.eval.greedy:
        greedy = HFEngine(model, tokenizer, dataclasses.replace(gen, temperature=0.0), seed=cfg.eval.seed)
        greedy_texts = list(greedy.generate(texts, ones).texts)
        out["eval_greedy_pass_rate"] = float(task.score(held_out, greedy_texts).rewards.mean())
    return out


# -- checkpoints ---------------------------------------------------------------------------------------------------
def _save(
    cfg: TrainConfig,
    run_dir: Path,
    c: _Counters,
    model: Any,
    optimizer: Any,
    scheduler: Any,
    engine: Any,
    queue: Any,
    est_state: Any,
    alloc_state: Any,
    provider: Any,
) -> None:
    import torch  # noqa: PLC0415
    from safetensors.torch import save_model  # noqa: PLC0415

    def write_policy(folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        save_model(model, str(folder / "model.safetensors"))

    tensors = {
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "engine": engine.state_dict(),
        "torch_rng": torch.get_rng_state(),
    }
    state = {
        "counters": dataclasses.asdict(c),
        "queue": queue.state_dict(),
        "estimator": state_to_json(est_state),
        "allocator": state_to_json(alloc_state),
        "provider": provider.state_dict() if provider is not None else None,
    }
    save_checkpoint(run_dir, c.step, write_policy=write_policy, tensors=tensors, state=state,
                    keep=cfg.run.keep_checkpoints)  # fmt: skip


def _restore(ckpt: Path, tensors: dict, state: dict, model: Any, optimizer: Any, scheduler: Any, engine: Any) -> None:
    import torch  # noqa: PLC0415
    from safetensors.torch import load_model  # noqa: PLC0415

    load_model(model, str(ckpt / "policy" / "model.safetensors"))
    optimizer.load_state_dict(tensors["optimizer"])
    scheduler.load_state_dict(tensors["scheduler"])
    engine.load_state_dict(tensors["engine"])
    torch.set_rng_state(tensors["torch_rng"])


def _ckpt_step(run_dir: Path) -> int:
    path = latest_checkpoint(run_dir)
    return -1 if path is None else int(path.name.split("_")[-1])


def _export(run_dir: Path, model: Any, tokenizer: Any) -> None:
    """The final policy as a Hugging Face folder (``from_pretrained`` reads it)."""
    from v05.train.policy import save_policy  # noqa: PLC0415

    save_policy(model, tokenizer, run_dir / "final")


__all__ = ["TrainResult", "train"]
