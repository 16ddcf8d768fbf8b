"""The trainer's configuration: a tree of frozen dataclasses (the schema), merged by OmegaConf.

A config is built from the defaults below, a YAML file (a path, or the name of a packaged config such as
``demo-v05``) and dotted ``key=value`` overrides, in that order (``load_config``). OmegaConf checks every type and
name against the schema, so a typo or a wrong type fails with the field's name; ``__post_init__`` then checks values
and how the parts fit together (``check_config``).

Method choice is by name: ``estimator.name`` (``v05.registry.ESTIMATORS``), ``allocator.name``
(``v05.registry.ALLOCATORS``), ``prior.name`` (``v05.priors.PROVIDERS``) and ``task.name`` (``v05.tasks.TASKS``),
each with an ``options`` mapping passed to it. (The part configs of the policy, generation, loss and SFT live beside
their code; importing this module imports torch — the CLI imports it only when ``v05 train`` runs.)
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.resources
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import omegaconf
import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from v05._checks import error_line, reward_range_text
from v05.engines.hf import GenerationConfig
from v05.priors import PROVIDERS, check_provider_options
from v05.registry import ALLOCATORS, CONTEXT_OPTIONS, TRAINER_ESTIMATORS, get_allocator, get_estimator
from v05.tasks import TASKS
from v05.train.critic import CriticConfig
from v05.train.features import FeatureConfig
from v05.train.loss import LossConfig
from v05.train.policy import TINY_NAME, PolicyConfig, looks_local
from v05.train.sft import SFTConfig

logger = logging.getLogger(__name__)

CONFIG_PACKAGE = "v05.train.configs"
"""Packaged configs (``demo-grpo4.yaml`` ...) resolve by name."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskConfig:
    """Which task, and how its prompts are rendered."""

    name: str = "arithmetic"
    """task name in ``v05.tasks.TASKS`` (arithmetic, reasoning_gym, math_file)."""
    options: dict[str, Any] = field(default_factory=dict)
    """keyword options of the task (e.g. ``n_train``, ``dataset``, ``path``, ``question_field``). A reasoning_gym
    task with the tiny policy gets ``prompt_form: compact`` unless one is given (:func:`resolve_prompt_form`)."""
    template: Literal["auto", "chat", "plain"] = "auto"
    """prompt rendering: the tokenizer's chat template (instruct models), the task's plain template, or auto."""
    system_prompt: str | None = None
    """system message for chat templates (None: none)."""
    instruction: str | None = None
    """text appended to the question in chat templates (None: the task's default)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class WarmupConfig:
    """Supervised warm-up of the policy before RL, cached on disk so later runs start from the same weights."""

    enabled: bool = False
    """run (or load from the cache) an SFT warm start before RL."""
    sft: SFTConfig = field(default_factory=SFTConfig)
    """optimiser and stopping rule (stops on the sampled pass rate, not a step count)."""
    n_examples: int = 50_000
    """fresh training examples drawn from the task's generator (arithmetic) or its train pool (others)."""
    eval_size: int = 512
    """validation prompts sampled (T = 1) to measure the pass rate during the warm-up: the task's validation split,
    disjoint from its train pool and its eval split (the SFT stops on it, so it must not be the eval split)."""
    per_seed: bool = True
    """one warm start per run ``seed``: the tiny policy's initialisation (``policy.seed``) and the SFT batch order
    (``warmup.sft.seed``) are offset by ``seed``, so the spread over seeds includes the warm start's. False: every
    seed starts from the same weights (paired runs then differ only in RL sampling)."""
    cache_dir: str | None = None
    """where warm starts are cached (None: ``$V05_WARM_START_DIR`` or ``~/.cache/v05/warm_start``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class EstimatorConfig:
    """The advantage estimator."""

    name: str = "grpo"
    """estimator name in ``v05.registry.ESTIMATORS``."""
    options: dict[str, Any] = field(default_factory=dict)
    """its keyword options (e.g. ``scale``, ``loo``, ``guard_level``); state, prior and keys are the loop's."""


@dataclass(frozen=True, kw_only=True, slots=True)
class AllocatorConfig:
    """The rollout allocator; its ``batch_size`` is ``train.batch_size``."""

    name: str = "fixed"
    """allocator name in ``v05.registry.ALLOCATORS`` (fixed, osla, dynamic_sampling, sara, dps, prior_select,
    greso)."""
    options: dict[str, Any] = field(default_factory=dict)
    """its options: the base group size (fixed/dynamic_sampling/dps/prior_select/greso ``k``, osla ``k_init``, sara
    ``group_size``; fixed defaults to k = 4) and the rest (``k_max``, ``c``, ``max_rounds`` ...)."""
    pool_factor: int | None = None
    """candidate pool per step = batch_size × pool_factor prompts (None: 1 for fixed/osla, max_rounds × gen batch
    for dynamic_sampling, 4 for sara, dps, prior_select and greso). Prompts the allocator did not reach go back to
    the front of the queue; see ``rejects`` for the ones it passed over."""
    rejects: Literal["drop", "return"] = "drop"
    """what becomes of the pool prompts a selecting allocator looked at and passed over (dps and prior_select: the
    unselected; greso: the skipped): ``drop`` (used up for this epoch, as the DPS, MoPPS and GRESO trainers do, so
    the next pool is fresh prompts) or ``return`` (to the front of the queue, as v05 did before: the next pool is
    then mostly the last one's rejects)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PriorConfig:
    """The prior provider (value model) whose predictions V0.5-type estimators and OSLA read."""

    name: str | None = None
    """provider name in ``v05.priors.PROVIDERS`` (running_mean, history, v0, combined); None: no prior."""
    options: dict[str, Any] = field(default_factory=dict)
    """its keyword options (e.g. ``backend``, ``head``, ``context_size``)."""
    input: Literal["auto", "question", "prompt"] = "auto"
    """what the prior reads of a prompt: ``question`` (the bare problem text: V0 was trained on it, not on chat-wrapped
    prompts), ``prompt`` (the rendered prompt the policy sees) or ``auto`` (``prompt`` for priors that read the
    policy, i.e. ``probe``; ``question`` otherwise)."""
    feed_n0: bool = True
    """give ``v05_eb`` (and OSLA's eb_guard test) the provider's calibrated n0 per prompt; False: v05_eb uses its own
    online τ² state."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PoiseConfig:
    """POISE's probe (``estimator.name=poise``; arXiv 2605.07579).

    The released recipe for Qwen3-4B: layer 19, 10 + 10 tokens, PCA 32/64, ridge α 100, 4,096 buffer rows, 16 RLOO
    bootstrap steps.
    """

    features: FeatureConfig = field(default_factory=FeatureConfig)
    """which hidden layer and how many last prompt/response tokens make the features."""
    pca_prompt: int = 32
    """PCA components of the prompt feature (clamped to rows and width)."""
    pca_response: int = 64
    """PCA components of the response feature."""
    alpha: float = 100.0
    """ridge regularisation."""
    buffer_rows: int = 4096
    """FIFO buffer of whole groups the probe is refit on after every step."""
    bootstrap_steps: int = 16
    """the first steps use RLOO advantages while the buffer fills."""
    seed: int = 42
    """PCA seed (randomised SVD)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class OptimConfig:
    """AdamW with a linear warm-up."""

    lr: float = 1e-4
    """peak learning rate."""
    betas: tuple[float, float] = (0.9, 0.99)
    """AdamW betas."""
    eps: float = 1e-8
    """AdamW epsilon."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    warmup_steps: int = 10
    """linear warm-up over this many optimizer steps (ppo_epochs per training step) from lr/warmup_steps to lr."""
    schedule: Literal["constant", "cosine"] = "constant"
    """constant, or cosine decay to 0 over the run: over the rollout budget ``train.max_rollouts`` when it is set
    (every method at equal budget sees the same decay), else over ``train.steps`` (v05.train.schedule)."""
    grad_clip: float | None = 1.0
    """clip the global gradient norm (None: no clipping; the norm is logged either way)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class OverlongConfig:
    """DAPO soft overlong punishment added to the rewards (arXiv:2503.14476, eq. 13); off by default."""

    enabled: bool = False
    """shape the rewards of long responses."""
    buffer: int = 4
    """length of the punishment interval before max_new_tokens."""
    penalty: float = 1.0
    """reward subtracted at max_new_tokens."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LoopConfig:
    """How long and how big: prompts per step, the stopping budget, updates per batch."""

    batch_size: int = 32
    """prompts whose rollouts reach the loss per step (the allocator's batch_size)."""
    steps: int = 300
    """training steps at most."""
    max_rollouts: int | None = None
    """stop once this many rollouts were consumed (the equal-budget comparison); None: steps only."""
    ppo_epochs: int = 1
    """policy updates per batch (importance ratios against the rollout log-probs)."""
    micro_batch_size: int = 256
    """rollouts per forward/backward (the loss is scaled so the gradient equals the full batch's)."""
    share_prompt_prefix: bool = True
    """run each prompt through the model once per group in the training forward (its KV cache is gathered to the
    group's rollouts); equal to the per-rollout forward up to float rounding, about half the cost at k = 4 with short
    answers. False: one forward over prompt + response per rollout."""
    overlong: OverlongConfig = field(default_factory=OverlongConfig)
    """DAPO overlong reward shaping."""
    prompt_order: Literal["epochs", "random"] = "epochs"
    """``epochs``: a fresh permutation of the pool per epoch; ``random``: prompts drawn with replacement."""
    recompute_old_logp: Literal["auto", "always", "never"] = "auto"
    """recompute the old log-probs with the training forward before the update: ``auto`` when the policy is not
    float32 (bf16 ``generate`` logits differ from the training forward, so the first PPO epoch's ratio would not be
    1 and clipping would fire spuriously; verl recomputes too), ``always`` or ``never``."""
    reward_range: Literal["pm1", "01"] = "pm1"
    """the scale estimators see: ``pm1`` maps task rewards r ∈ [0, 1] to 2r − 1 (the V0.5 paper's space; unscaled
    advantages are twice the 0/1 ones), ``01`` keeps them. GRPO's std scaling makes it indifferent."""


EVAL_SPLITS = ("eval", "validation")


@dataclass(frozen=True, kw_only=True, slots=True)
class EvalConfig:
    """Held-out evaluation: one sampled rollout (and one greedy) per eval prompt, the same sampling seed each time."""

    every: int = 25
    """evaluate every this many steps (and after the last step); 0: only at the end."""
    every_rollouts: int | None = None
    """evaluate each time the rollouts consumed cross a multiple of this (and after the last step), in place of
    ``every``: methods that spend their budget in more, smaller steps (k = 1, 2) are then evaluated as often, and at
    the same rollout counts, as k = 4 (``v05 bench matrix``). None: by steps."""
    size: int | None = None
    """eval prompts (None: the whole eval split)."""
    greedy: bool = True
    """also report the greedy pass rate."""
    seed: int = 12345
    """sampling seed, identical at every evaluation (so the curves compare models, not draws)."""
    at_start: bool = True
    """evaluate before the first step (step 0)."""
    split: str = "eval"
    """the split evaluated: ``eval`` (the held-out split results are judged on) or ``validation`` (model selection:
    ``v05 bench matrix``'s tuning sweep scores its settings there, never on the eval split)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RunConfig:
    """Run-directory artefacts and the process."""

    checkpoint_every: int = 50
    """save a checkpoint every this many steps (and at the end and on SIGINT/SIGTERM); 0: only at the end."""
    keep_checkpoints: int = 2
    """checkpoints kept (older ones are deleted once a newer one is complete)."""
    tensorboard: bool = True
    """write TensorBoard events beside metrics.jsonl."""
    progress: bool = True
    """show a progress bar."""
    threads: int = 1
    """torch CPU threads (1 is fastest on a busy 2-core machine; raise it on a quiet one)."""
    generate_retries: int = 2
    """retries of a rollout-engine call that raised, before the run stops cleanly (0: stop at the first error)."""
    retry_backoff_s: float = 1.0
    """seconds before the first retry of the rollout engine; doubled before each next one."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TrainConfig:
    """One training run."""

    name: str = "run"
    """method label in reports (seeds of one method share it)."""
    seed: int = 0
    """seed of the prompt order, the rollout sampling and the policy's initialisation."""
    task: TaskConfig = field(default_factory=TaskConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    warmup: WarmupConfig = field(default_factory=WarmupConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    estimator: EstimatorConfig = field(default_factory=EstimatorConfig)
    allocator: AllocatorConfig = field(default_factory=AllocatorConfig)
    prior: PriorConfig = field(default_factory=PriorConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: LoopConfig = field(default_factory=LoopConfig)
    poise: PoiseConfig = field(default_factory=PoiseConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    run: RunConfig = field(default_factory=RunConfig)


def packaged_configs() -> dict[str, Path]:
    """Name → path of every config shipped in the package (``v05/train/configs/*.yaml``)."""
    root = importlib.resources.files(CONFIG_PACKAGE)
    return {p.name[: -len(".yaml")]: Path(str(p)) for p in root.iterdir() if p.name.endswith(".yaml")}


def resolve_config_path(config: str) -> Path:
    """A config argument as a file: an existing path, else a packaged name, else ``configs/NAME.yaml`` here."""
    path = Path(config)
    if path.is_file():
        return path
    known = packaged_configs()
    if config in known:
        return known[config]
    local = Path("configs") / f"{config}.yaml"
    if local.is_file():
        return local
    raise ValueError(f"config {config!r} is neither a file nor a known config; known: {', '.join(sorted(known))}")


def load_config(config: str | None = None, overrides: list[str] | tuple[str, ...] = (), *, quick: bool = False):  # noqa: ANN201
    """Merge the defaults, a YAML file (path or name) and dotted overrides into a checked :class:`TrainConfig`.

    Args:
        config: a YAML path or a packaged config name (None: the defaults).
        overrides: ``key=value`` strings (OmegaConf dotlist: ``train.steps=50``, ``allocator.options.k=8``).
        quick: shrink the run to a smoke run of a minute or two on CPU (:func:`quick_config`), applied last.

    Raises:
        ValueError: unknown file or name, unknown keys, wrong types or invalid values — the message names the field.
    """
    if tuple(int(x) for x in omegaconf.__version__.split(".")[:2]) < (2, 4):
        raise ValueError(
            f"v05 train needs omegaconf >= 2.4 (its configs use Literal modes), found {omegaconf.__version__}; "
            "verl's hydra-core pins omegaconf < 2.4, so run v05's trainer in an environment without v05[verl]"
        )

    for item in overrides:
        if "=" not in item:
            raise ValueError(f"override {item!r} is not key=value (e.g. train.steps=50)")
    try:
        merged = _schema()  # merge copies it: the cached defaults are never changed
        if config is not None:
            merged = OmegaConf.merge(merged, _literal_strings(_load_yaml(resolve_config_path(config))))
        if overrides:
            merged = OmegaConf.merge(merged, _literal_strings(OmegaConf.from_dotlist(list(overrides))))
        cfg: TrainConfig = OmegaConf.to_object(merged)  # type: ignore[assignment]
    except OmegaConfBaseException as err:
        raise ValueError(f"bad config: {_one_line(err)}") from None
    except yaml.YAMLError as err:  # an override value OmegaConf's YAML loader refuses (e.g. a !!python/... tag)
        raise ValueError(f"bad override: {error_line(err)}") from None
    except TypeError as err:  # a dataclass __init__ rejecting a value
        raise ValueError(f"bad config: {err}") from None
    if quick:
        cfg = quick_config(cfg)
    cfg = resolve_prompt_form(cfg)
    check_config(cfg)
    return cfg


@functools.cache
def _schema() -> omegaconf.DictConfig:
    """The defaults as an OmegaConf structured config, built once per process (~60 ms; a merge copies it)."""
    return OmegaConf.structured(TrainConfig)


def _load_yaml(path: Path) -> omegaconf.DictConfig:
    """A config file as a mapping, parsed by OmegaConf's YAML loader (a ``yaml.SafeLoader``: no python tags).

    Raises:
        ValueError: the file is not UTF-8 YAML, uses a tag the safe loader refuses (``!!python/...``), or its top
            level is not a mapping.
    """
    try:
        node = OmegaConf.load(path)
    except (yaml.YAMLError, UnicodeDecodeError, OSError) as err:  # ConstructorError for !!python/... tags
        raise ValueError(f"config {path}: not a safe YAML mapping ({error_line(err)})") from None
    if not isinstance(node, omegaconf.DictConfig):
        raise ValueError(f"config {path}: the top level must be a mapping (task:, policy:, ...)")
    return node


def resolve_prompt_form(cfg: TrainConfig) -> TrainConfig:
    """Give a reasoning_gym task the compact prompt form when the policy is the char-level tiny model.

    The tiny policy reads 96 printable ASCII characters within ``policy.max_position_embeddings`` positions, so
    reasoning-gym's long English questions are replaced by their compact form (``GymTask.prompt_form``). An explicit
    ``task.options.prompt_form`` is kept; other tasks and policies are returned unchanged. The resolved value is part
    of the config, hence of the run's ``config.yaml`` and of the warm start's cache key.
    """
    t = cfg.task
    if t.name != "reasoning_gym" or cfg.policy.name_or_path != TINY_NAME or "prompt_form" in t.options:
        return cfg
    task = dataclasses.replace(t, options={**t.options, "prompt_form": "compact"})
    return dataclasses.replace(cfg, task=task)


def _literal_strings(node: Any) -> Any:
    """Give ``train.reward_range`` back its text: ``reward_range: 01`` parses as the integer 1."""
    value = OmegaConf.select(node, "train.reward_range", default=None)
    if reward_range_text(value) != value:
        OmegaConf.update(node, "train.reward_range", reward_range_text(value), merge=False)
    return node


def _one_line(err: Exception) -> str:
    """OmegaConf's message without its multi-line context block, plus the full key it names."""
    lines = [ln for ln in str(err).splitlines() if ln.strip()]
    key = getattr(err, "full_key", None)
    head = lines[0] if lines else type(err).__name__
    return f"{key}: {head}" if key and key not in head else head


def to_yaml(cfg: TrainConfig) -> str:
    """The resolved config as YAML (what ``config.yaml`` in a run directory holds)."""
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def quick_config(cfg: TrainConfig) -> TrainConfig:
    """Shrink a config to a smoke run of a minute or two on CPU, keeping the method (estimator, allocator, prior).

    The tiny policy (every packaged config as shipped; well under a minute): steps ≤ 6, eval every 3 steps on ≤ 64
    prompts, checkpoints every 3 steps, a warm-up of at most 200 SFT steps whose stopping check runs at most every
    100 steps (a config's own shorter interval is kept) (cached separately), at most 16 prompts per step and the
    rollout budget scaled with the steps. These numbers are pinned: ``tests/test_golden_identity.py`` checks every
    packaged config's quick run against recorded metrics.

    Any other policy (a real checkpoint: SmolLM2's GGUF, a local folder, a hub id) costs ~2 s a rollout on 2 CPU
    cores (v05-recommended --quick on SmolLM2 used to plan 1,536 rollouts, ~50 min), so :func:`_quick_checkpoint`
    shrinks it further to ~70 rollout-sized units: ≤ 2 steps of ≤ 16 rollouts (⌊16 / k⌋ prompts of k rollouts,
    at least one prompt; the budget ≤ 32), responses ≤ 16 tokens, eval on ≤ 8 prompts at the start and the end
    (2 × 8 sampled + 2 × 8 greedy = 32 generations, no update) and a warm-up of ≤ 2 SFT steps of ≤ 8 examples
    checked once on ≤ 8 validation prompts: 32 + 32 + 8 = 72 rollouts, ≈ 1-2 min at ~1-2 s a rollout (the
    loading, warm-start save and checkpoint of a 135 M model add ~20-30 s). Measured on 2 CPU cores under a load
    average of ~6: ``v05 train --config v05-recommended --quick policy.name_or_path=smollm2-135m-instruct`` took
    78 s training its warm start (2 SFT steps, 17 s; RL steps of 16 rollouts ~16 s each), 52 s with it cached, after
    the GGUF's one-time dequantisation (19 s).
    """
    r = dataclasses.replace
    train = r(
        cfg.train,
        steps=min(cfg.train.steps, 6),
        batch_size=min(cfg.train.batch_size, 16),
        max_rollouts=None if cfg.train.max_rollouts is None else min(cfg.train.max_rollouts, 6 * 16 * 16),
    )
    sft_cfg = cfg.warmup.sft
    sft = r(sft_cfg, max_steps=min(sft_cfg.max_steps, 200), eval_every=min(sft_cfg.eval_every, 100))
    warmup = r(cfg.warmup, sft=sft,
               n_examples=min(cfg.warmup.n_examples, 20_000), eval_size=min(cfg.warmup.eval_size, 128))  # fmt: skip
    ev = r(cfg.eval, every=3, every_rollouts=None, size=min(cfg.eval.size or 64, 64))
    run = r(cfg.run, checkpoint_every=3)
    quick = r(cfg, train=train, warmup=warmup, eval=ev, run=run)
    return _quick_offline(quick if cfg.policy.name_or_path == TINY_NAME else _quick_checkpoint(quick))


def _quick_offline(cfg: TrainConfig) -> TrainConfig:
    """A quick run's offline init (``spo-offline``) on the first prompts only, so it takes half the quick budget.

    The init covers the whole pool otherwise (2,000 prompts × 8 = 16,000 rollouts on the packaged task, over any
    smoke budget: the run would train nothing); ``prior.options.offline_prompts`` caps it (a config's smaller cap
    is kept).
    """
    name, opts = cfg.prior.name, dict(cfg.prior.options)
    if name not in PROVIDERS or not PROVIDERS[name].offline_init or not opts.get("offline"):
        return cfg
    budget = cfg.train.max_rollouts if cfg.train.max_rollouts is not None else cfg.train.steps * cfg.train.batch_size
    n = int(opts.get("offline_n", PROVIDERS[name].cls.offline_n))  # type: ignore[attr-defined]
    cap = max(1, budget // (2 * n))
    opts["offline_prompts"] = min(int(opts.get("offline_prompts") or cap), cap)
    return dataclasses.replace(cfg, prior=dataclasses.replace(cfg.prior, options=opts))


QUICK_ROLLOUTS_PER_STEP = 16
"""Rollouts a step of a quick run on a real checkpoint (:func:`quick_config`): ⌊16 / k⌋ prompts of k rollouts."""


def _quick_checkpoint(cfg: TrainConfig) -> TrainConfig:
    """The tiny policy's quick config shrunk to ~1-2 min on a real checkpoint (the budget in :func:`quick_config`)."""
    r = dataclasses.replace
    per_step = QUICK_ROLLOUTS_PER_STEP
    prompts = max(1, per_step // _group_size(cfg.allocator))
    budget = None if cfg.train.max_rollouts is None else min(cfg.train.max_rollouts, 2 * per_step)
    train = r(cfg.train, steps=min(cfg.train.steps, 2), batch_size=min(cfg.train.batch_size, prompts),
              max_rollouts=budget)  # fmt: skip
    generation = r(cfg.generation, max_new_tokens=min(cfg.generation.max_new_tokens, 16))
    sft_cfg = cfg.warmup.sft
    sft = r(sft_cfg, max_steps=min(sft_cfg.max_steps, 2), batch_size=min(sft_cfg.batch_size, 8),
            eval_every=min(sft_cfg.eval_every, 2), eval_size=min(sft_cfg.eval_size, 8))  # fmt: skip
    warmup = r(cfg.warmup, sft=sft, n_examples=min(cfg.warmup.n_examples, 64), eval_size=min(cfg.warmup.eval_size, 8))
    ev = r(cfg.eval, size=min(cfg.eval.size or 8, 8))
    return r(cfg, train=train, generation=generation, warmup=warmup, eval=ev)


def _group_size(allocator: AllocatorConfig) -> int:
    """The allocator's base group size k (its ``k_option``, else that field's default; 1 for an unknown name)."""
    spec = ALLOCATORS.get(allocator.name)
    if spec is None:
        return 1  # check_config names the unknown allocator
    value = allocator.options.get(spec.k_option)
    if value is None:
        default = {f.name: f.default for f in dataclasses.fields(spec.cls)}.get(spec.k_option)
        value = default if isinstance(default, int) else 1
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else 1


def _first_non_finite(node: Any, where: str) -> tuple[str, float] | None:
    """``(dotted field, value)`` of the first NaN or ±inf number in a config tree (dataclasses, dicts, lists)."""
    if isinstance(node, float):
        return None if math.isfinite(node) else (where, node)
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        items: Any = ((f.name, getattr(node, f.name)) for f in dataclasses.fields(node))
    elif isinstance(node, dict):
        items = node.items()
    elif isinstance(node, list | tuple):
        items = enumerate(node)
    else:
        return None
    for key, value in items:
        found = _first_non_finite(value, f"{where}.{key}" if where else str(key))
        if found is not None:
            return found
    return None


def check_config(cfg: TrainConfig) -> None:
    """Check values and how the parts fit together; raise ValueError naming the field and how to fix it."""

    def need(ok: bool, where: str, msg: str) -> None:
        if not ok:
            raise ValueError(f"{where}: {msg}")

    bad = _first_non_finite(cfg, "")  # NaN or inf (YAML .nan/.inf, 1e400) would reach the optimiser or the math
    need(bad is None, bad[0] if bad else "", f"must be a finite number, got {bad[1] if bad else None}")
    tr = cfg.train
    for name in ("batch_size", "steps", "ppo_epochs", "micro_batch_size"):
        need(getattr(tr, name) >= 1, f"train.{name}", f"must be >= 1, got {getattr(tr, name)}")
    need(tr.max_rollouts is None or tr.max_rollouts >= 1, "train.max_rollouts", "must be >= 1 or null")
    need(cfg.eval.every >= 0, "eval.every", "must be >= 0")
    need(cfg.eval.every_rollouts is None or cfg.eval.every_rollouts >= 1, "eval.every_rollouts", "must be >= 1 or null")
    need(cfg.eval.size is None or cfg.eval.size >= 1, "eval.size", "must be >= 1 or null")
    need(cfg.eval.split in EVAL_SPLITS, "eval.split", f"must be one of {', '.join(EVAL_SPLITS)}")
    need(cfg.run.checkpoint_every >= 0, "run.checkpoint_every", "must be >= 0")
    need(cfg.run.keep_checkpoints >= 1, "run.keep_checkpoints", "must be >= 1")
    need(cfg.run.threads >= 1, "run.threads", "must be >= 1")
    need(cfg.run.generate_retries >= 0, "run.generate_retries", "must be >= 0")
    need(cfg.run.retry_backoff_s >= 0, "run.retry_backoff_s", "must be >= 0")
    need(cfg.optim.lr > 0, "optim.lr", f"must be > 0, got {cfg.optim.lr}")
    need(cfg.policy.adapter is None or not cfg.warmup.enabled, "policy.adapter",
         "the SFT warm-up (warmup.enabled) trains its own adapter on the base and RL would train on from that one, "
         "not this; set warmup.enabled=false to train on from policy.adapter, or drop it")  # fmt: skip
    need(cfg.optim.warmup_steps >= 0, "optim.warmup_steps", "must be >= 0")
    need(cfg.optim.grad_clip is None or cfg.optim.grad_clip > 0, "optim.grad_clip", "must be > 0 or null")
    if tr.overlong.enabled:
        need(0 < tr.overlong.buffer <= cfg.generation.max_new_tokens, "train.overlong.buffer",
             f"must lie in [1, generation.max_new_tokens={cfg.generation.max_new_tokens}]")  # fmt: skip
    # estimator: a registered name (or a trainer-only one), options it knows, a prior when it needs one
    trainer_only = TRAINER_ESTIMATORS.get(cfg.estimator.name)
    if trainer_only is not None:
        name, model = cfg.estimator.name, trainer_only.value_model
        need(not cfg.estimator.options, "estimator.options", f"{name} takes its options from {model}.*")
        need(cfg.allocator.name != "osla", "allocator.name",
             f"{name}'s advantages come from the {model}; OSLA's prior test does not apply")  # fmt: skip
        _check_rest(cfg, need)
        return
    try:
        spec = get_estimator(cfg.estimator.name)
    except ValueError as err:
        raise ValueError(f"estimator.name: {err}") from None
    loop_owned = {*CONTEXT_OPTIONS, "n0"}  # n0 comes from the provider (prior.feed_n0), never a user option here
    bad = sorted(set(cfg.estimator.options) - (set(spec.options) - loop_owned))
    need(not bad, "estimator.options", f"unknown or loop-owned option(s) {', '.join(bad)}; valid: "
         f"{', '.join(sorted(set(spec.options) - loop_owned))}")  # fmt: skip
    need(not spec.needs_truth, "estimator.name", f"{cfg.estimator.name!r} needs the true values (simulation only)")
    need(not spec.uses_prior or cfg.prior.name is not None, "prior.name",
         f"estimator {cfg.estimator.name!r} fuses a prior: set prior.name (e.g. v0, combined)")  # fmt: skip
    _check_rest(cfg, need)


def _check_osla_pairing(cfg: TrainConfig) -> None:
    """Warn when OSLA buys extras on a test the estimator does not act on (``v05_eb`` + the paper's test).

    OSLA's extras pay off where the prior is dropped; ``v05_eb`` drops a prior only through its own guard, so the
    coherent pairing is ``test: eb_guard`` with the estimator's ``guard_level`` (demo-v05-eb).
    """
    if cfg.estimator.name != "v05_eb":
        return
    test = cfg.allocator.options.get("test", "v05")
    level = cfg.estimator.options.get("guard_level")
    osla_level = cfg.allocator.options.get("guard_level", 0.01)
    if test != "eb_guard" or level is None or float(level) != float(osla_level):
        logger.warning(
            "v05_eb with osla test=%s (guard_level %s) and estimator guard_level %s: OSLA buys extra rollouts for "
            "prompts whose prior v05_eb keeps; pair them with allocator.options.test=eb_guard and the same "
            "guard_level in estimator.options", test, osla_level, level,
        )  # fmt: skip


# -- local paths ---------------------------------------------------------------------------------------------------
# The config's file and directory fields, checked when the config is (before any model or file is opened). A value
# is a local path when it starts with ``/``, ``.`` (``./``, ``../``) or ``~`` (:func:`v05.train.policy.looks_local`);
# such a path must exist. Anything else is left to the loader that opens it: a hub id (``Qwen/Qwen2.5-0.5B``) is not
# a path, and a bare relative name (``data/train.jsonl``) is resolved, and checked, by the task or prior that reads
# it. Cache folders may be missing (they are created).

PathKind = Literal["dir", "file", "any", "cache"]
"""What a field names: a directory, a file, either, or a cache folder (created when missing, never a file)."""

BACKEND_PATHS: dict[str, PathKind] = {"path": "dir", "model": "dir", "encoder": "dir", "adapter": "file"}
"""Embedding-backend options that name local files (hf: path; sentence_transformers: model; v0_adapter: the rest)."""


def path_fields(cfg: TrainConfig) -> list[tuple[str, object, PathKind]]:
    """``(field, value, kind)`` of every config value that names a file or directory."""
    fields: list[tuple[str, object, PathKind]] = [
        ("policy.name_or_path", cfg.policy.name_or_path, "dir"),
        ("policy.gguf_file", cfg.policy.gguf_file, "file"),
        ("policy.adapter", cfg.policy.adapter, "dir"),
        ("warmup.cache_dir", cfg.warmup.cache_dir, "cache"),
    ]
    task, prior = cfg.task.options, cfg.prior.options
    fields += [(f"task.options.{k}", task[k], "file") for k in ("path", "eval_path") if k in task]  # math_file
    if "cache_dir" in prior:
        fields.append(("prior.options.cache_dir", prior["cache_dir"], "cache"))
    backend, head = prior.get("backend_options"), prior.get("head_options")
    if isinstance(backend, dict):
        named = [(k, kind) for k, kind in BACKEND_PATHS.items() if k in backend]
        fields += [(f"prior.options.backend_options.{k}", backend[k], kind) for k, kind in named]
    if isinstance(head, dict) and "checkpoint" in head:  # tabpfn / v0_tabpfn: the file or its directory
        fields.append(("prior.options.head_options.checkpoint", head["checkpoint"], "any"))
    return fields


def check_paths(cfg: TrainConfig) -> None:
    """Refuse a config whose local paths do not exist (or are of the wrong kind).

    Raises:
        ValueError: ``field: no such directory '...'`` (one line, naming the field).
    """
    for where, value, kind in path_fields(cfg):
        if not isinstance(value, str) or not looks_local(value):
            continue
        path = Path(value).expanduser()
        if kind == "cache":
            ok, msg = not path.exists() or path.is_dir(), f"{value!r} exists and is not a directory"
        elif kind == "dir":
            ok, msg = path.is_dir(), f"no such directory {value!r}" + (" (it is a file)" if path.exists() else "")
        elif kind == "file":
            ok, msg = path.is_file(), f"no such file {value!r}" + (" (it is a directory)" if path.exists() else "")
        else:
            ok, msg = path.exists(), f"no such file or directory {value!r}"
        if not ok:
            raise ValueError(f"{where}: {msg}")


def _check_rest(cfg: TrainConfig, need: Any) -> None:
    """The checks every estimator shares: allocator, prior, task, local paths (:func:`check_paths`)."""
    tr = cfg.train
    # allocator: a registered name with valid options (batch_size is the loop's)
    need(cfg.allocator.name in ALLOCATORS, "allocator.name",
         f"unknown allocator {cfg.allocator.name!r}; valid: {', '.join(ALLOCATORS)}")  # fmt: skip
    need("batch_size" not in cfg.allocator.options, "allocator.options.batch_size",
         "is set by train.batch_size")  # fmt: skip
    need(cfg.allocator.pool_factor is None or cfg.allocator.pool_factor >= 1, "allocator.pool_factor", "must be >= 1")
    if ALLOCATORS[cfg.allocator.name].uses_prior:  # the name was checked above
        need(cfg.prior.name is not None, "prior.name", f"allocator {cfg.allocator.name!r} reads a prior: set it")
    if cfg.allocator.name == "osla":
        _check_osla_pairing(cfg)
    try:
        get_allocator(cfg.allocator.name, batch_size=tr.batch_size, **cfg.allocator.options)
    except (ValueError, TypeError) as err:
        raise ValueError(f"allocator.options: {err}") from None
    need(cfg.task.name in TASKS, "task.name", f"unknown task {cfg.task.name!r}; valid: {', '.join(TASKS)}")
    check_paths(cfg)  # a missing file first: the provider's own checks (packages, options) come after
    if cfg.prior.name is not None:
        need(cfg.prior.name in PROVIDERS, "prior.name",
             f"unknown prior provider {cfg.prior.name!r}; valid: {', '.join(PROVIDERS)}")  # fmt: skip
        try:
            check_provider_options(cfg.prior.name, cfg.prior.options)
        except ValueError as err:
            raise ValueError(f"prior.options: {error_line(err)}") from None


def config_changes(saved: TrainConfig, cfg: TrainConfig) -> dict[str, Any]:
    """Dotted field → new value for every leaf field where ``cfg`` differs from ``saved`` (empty: the same config).

    A field added since the run was saved reads as its default, so it never counts as a change.
    """
    out: dict[str, Any] = {}

    def walk(a: Any, b: Any, prefix: str) -> None:
        if dataclasses.is_dataclass(a) and type(a) is type(b):
            for f in dataclasses.fields(a):
                walk(getattr(a, f.name), getattr(b, f.name), f"{prefix}{f.name}.")
        elif a != b:
            out[prefix[:-1]] = b

    walk(saved, cfg, "")
    return out


__all__ = [
    "BACKEND_PATHS",
    "AllocatorConfig",
    "EstimatorConfig",
    "EVAL_SPLITS",
    "EvalConfig",
    "LoopConfig",
    "OptimConfig",
    "OverlongConfig",
    "PoiseConfig",
    "PriorConfig",
    "RunConfig",
    "TaskConfig",
    "TrainConfig",
    "WarmupConfig",
    "check_config",
    "check_paths",
    "config_changes",
    "load_config",
    "packaged_configs",
    "path_fields",
    "quick_config",
    "resolve_config_path",
    "resolve_prompt_form",
    "to_yaml",
]
