"""Any reasoning-gym dataset as a task, scored by the dataset's own ``score_answer`` on the extracted answer.

Deviations from reasoning-gym's defaults: the rollout is passed through :func:`~v05.tasks.verify.extract_answer`
before ``score_answer`` (its default scorer gives partial credit to unextracted text, cpu-setup.md §1), and the
reward is binary by default (score >= 1 -> 1, else 0); ``partial_credit=True`` keeps the raw score. Questions that
repeat within a split are kept once, so a pool can be slightly smaller than its requested size. ``reasoning_gym``
is imported lazily (it is slow to import); stdout is silenced while datasets generate (``bf`` prints dots).
"""

from __future__ import annotations

import contextlib
import difflib
import io
import logging
from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from types import ModuleType
from typing import ClassVar

from v05.tasks.base import Prompt, Scores, check_unique_keys, prompt_key
from v05.tasks.verify import score_batch

logger = logging.getLogger(__name__)

EVAL_SEED_OFFSET = 1_000_003
"""The eval split is generated with ``seed + EVAL_SEED_OFFSET``, then stripped of questions that are in train."""
VAL_SEED_OFFSET = 2_000_003
"""The validation split is generated with ``seed + VAL_SEED_OFFSET``, then stripped of train and eval questions."""
_FULL_CREDIT = 1.0 - 1e-9


@dataclass(frozen=True, slots=True)
class GymTask:
    """A reasoning-gym dataset: ``reasoning_gym.create_dataset(dataset, size=..., seed=..., **config)``.

    Example (not run as a doctest, which must pass without reasoning-gym; tests/tasks/test_gym.py covers it):
        >>> task = GymTask("chain_sum", size_train=8, size_eval=4, config={"max_terms": 2})  # doctest: +SKIP
        >>> p = task.train_prompts()[0]  # doctest: +SKIP
        >>> task.score([p, p], [f"<answer>{p.answer}</answer>", "zzz"]).rewards.tolist()  # doctest: +SKIP
        [1.0, 0.0]
    """

    plain_template: ClassVar[str] = "Question: {question}\nAnswer:"
    chat_instruction: ClassVar[str | None] = "Give your final answer between <answer> and </answer> tags."

    dataset: str
    """reasoning-gym dataset name, e.g. "chain_sum" (``reasoning_gym.factory.DATASETS`` lists them)"""
    _: KW_ONLY
    size_train: int = 2000
    """items generated for the training pool (before removing repeated questions)"""
    size_eval: int = 500
    """items generated for the eval split (before removing questions also in train)"""
    size_val: int = 256
    """items generated for the validation split (model selection, e.g. the warm start's stopping rule; before
    removing questions also in train or eval)"""
    seed: int = 0
    """seed of the training pool; the eval split uses ``seed + EVAL_SEED_OFFSET``"""
    config: Mapping[str, object] = field(default_factory=dict)
    """keyword arguments of the dataset's config class, e.g. ``{"min_terms": 2, "max_terms": 2}``"""
    partial_credit: bool = False
    """keep reasoning-gym's fractional scores instead of rewarding only full credit"""
    verify_timeout_s: float | None = 5.0
    """per-rollout verifier timeout in seconds (None disables it)"""

    _train: tuple[Prompt, ...] = field(init=False, repr=False, compare=False)
    _eval: tuple[Prompt, ...] = field(init=False, repr=False, compare=False)
    _val: tuple[Prompt, ...] = field(init=False, repr=False, compare=False)
    _entries: dict[str, tuple[object, dict[str, object]]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("size_train", "size_eval", "size_val"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (1 if name == "size_train" else 0):
                raise ValueError(f"{name} must be an integer >= {1 if name == 'size_train' else 0}, got {value!r}")
        if self.verify_timeout_s is not None and not self.verify_timeout_s > 0:
            raise ValueError(f"verify_timeout_s must be positive or None, got {self.verify_timeout_s!r}")
        rg = _import_reasoning_gym()
        _check_dataset_name(rg, self.dataset)
        entries: dict[str, tuple[object, dict[str, object]]] = {}
        train = self._generate(rg, self.size_train, self.seed, "train", entries, exclude=frozenset())
        exclude = frozenset(p.question for p in train)
        eval_ = self._generate(rg, self.size_eval, self.seed + EVAL_SEED_OFFSET, "eval", entries, exclude=exclude)
        exclude |= frozenset(p.question for p in eval_)
        val = self._generate(rg, self.size_val, self.seed + VAL_SEED_OFFSET, "val", entries, exclude=exclude)
        check_unique_keys((*train, *eval_, *val), f"GymTask({self.dataset!r})")
        object.__setattr__(self, "_train", train)
        object.__setattr__(self, "_eval", eval_)
        object.__setattr__(self, "_val", val)
        object.__setattr__(self, "_entries", entries)

    @property
    def name(self) -> str:
        """``"reasoning_gym." + dataset``."""
        return f"reasoning_gym.{self.dataset}"

    def train_prompts(self) -> Sequence[Prompt]:
        """The training pool (distinct questions, in dataset order)."""
        return self._train

    def eval_prompts(self) -> Sequence[Prompt]:
        """The eval split: a differently seeded dataset without the questions of the training pool."""
        return self._eval

    def validation_prompts(self) -> Sequence[Prompt]:
        """The validation split: a third seed, without the questions of the training pool and the eval split."""
        return self._val

    def sft_target(self, prompt: Prompt) -> str:
        """The gold answer.

        Raises:
            ValueError: The dataset has no unique gold answer (e.g. graph_color, rubiks_cube).
        """
        if not prompt.answer:
            raise ValueError(f"{self.dataset} prompt {prompt.key} has no gold answer to train on (many are valid)")
        return prompt.answer

    def score(self, prompts: Sequence[Prompt], completions: Sequence[str]) -> Scores:
        """The dataset's ``score_answer`` on the extracted answer (binary unless ``partial_credit``).

        Raises:
            ValueError: A prompt does not come from this task (its dataset entry is unknown).
        """
        unknown = [p.key for p in prompts if p.key not in self._entries]
        if unknown:
            raise ValueError(f"prompts {unknown[:3]} are not from {self!r}; score them with the task that made them")
        return score_batch(self._verify, prompts, completions, timeout_s=self.verify_timeout_s)

    def _verify(self, prompt: Prompt, answer: str) -> float:
        dataset, entry = self._entries[prompt.key]
        score = float(dataset.score_answer(answer, entry))  # type: ignore[attr-defined]
        if self.partial_credit:
            return min(max(score, 0.0), 1.0)
        return 1.0 if score >= _FULL_CREDIT else 0.0

    def _generate(
        self,
        rg: ModuleType,
        size: int,
        seed: int,
        split: str,
        entries: dict[str, tuple[object, dict[str, object]]],
        *,
        exclude: frozenset[str],
    ) -> tuple[Prompt, ...]:
        if size == 0:
            return ()
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                dataset = rg.create_dataset(self.dataset, size=size, seed=seed, **dict(self.config))
                items = [dataset[i] for i in range(size)]
            except (TypeError, ValueError, AssertionError, KeyError) as err:
                raise ValueError(
                    f"reasoning-gym dataset {self.dataset!r} rejected config {dict(self.config)}: {err}"
                ) from None
        prompts: list[Prompt] = []
        seen = set(exclude)
        for index, entry in enumerate(items):
            question = str(entry["question"])
            if question in seen:
                continue
            seen.add(question)
            answer = "" if entry.get("answer") is None else str(entry["answer"])
            prompt = Prompt(prompt_key(self.dataset, question), question, answer, {"split": split, "index": index})
            entries[prompt.key] = (dataset, entry)
            prompts.append(prompt)
        if len(prompts) < size:
            logger.info(
                "%s %s: kept %d of %d items (repeated questions removed)", self.dataset, split, len(prompts), size
            )
        return tuple(prompts)


def _import_reasoning_gym() -> ModuleType:
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            import reasoning_gym
    except ImportError as err:
        raise ImportError(f"GymTask needs reasoning-gym ({err}); install v05[train]") from None
    return reasoning_gym


def _check_dataset_name(rg: ModuleType, name: str) -> None:
    names = sorted(rg.factory.DATASETS)
    if name not in names:
        close = difflib.get_close_matches(name, names, n=5)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise ValueError(
            f"unknown reasoning-gym dataset {name!r}: {hint}valid names include {', '.join(names[:8])}, ... "
            f"({len(names)} in reasoning_gym.factory.DATASETS)"
        )
