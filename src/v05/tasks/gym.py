"""Any reasoning-gym dataset as a task, scored by the dataset's own ``score_answer`` on the extracted answer.

Deviations from reasoning-gym's defaults: the rollout is passed through :func:`~v05.tasks.verify.extract_answer`
before ``score_answer`` (its default scorer gives partial credit to unextracted text, cpu-setup.md §1), and the
reward is binary by default: 1 iff the score is exactly 1.0 (every dataset gives a gold answer exactly 1.0, while
sums of partial credit can land within 2e-16 of 1: spell_backward's 9 × 1/9 for the gold followed by extra text);
``partial_credit=True`` keeps the raw score. Questions that repeat within a split are kept once, so a pool can be
slightly smaller than its requested size. ``prompt_form="compact"`` replaces each question by a short printable-ASCII
form for the char-level policy (``"Spell this word backward (example: sun -> nus): splat"`` → ``"splat"``, rendered
``"splat="``): a compactor of the entry's metadata (:data:`COMPACTORS`), else the question with whitespace collapsed
and non-printable-ASCII characters dropped; questions that coincide after compaction are kept once.
``reasoning_gym`` is imported lazily (it is slow to import); stdout is silenced while datasets generate.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from types import ModuleType
from typing import ClassVar, Literal

from v05.tasks.base import Prompt, Scores, check_unique_keys, prompt_key
from v05.tasks.verify import score_batch

logger = logging.getLogger(__name__)

EVAL_SEED_OFFSET = 1_000_003
"""The eval split is generated with ``seed + EVAL_SEED_OFFSET``, then stripped of questions that are in train."""
VAL_SEED_OFFSET = 2_000_003
"""The validation split is generated with ``seed + VAL_SEED_OFFSET``, then stripped of train and eval questions."""
_FULL_CREDIT = 1.0
"""The only score that is full credit (no tolerance: partial-credit sums reach 1 ± 2e-16, see the module docstring)."""
PromptForm = Literal["full", "compact"]
PLAIN_TEMPLATES: dict[str, str] = {"full": "Question: {question}\nAnswer:", "compact": "{question}="}
"""The plain template of each prompt form (models without a chat template)."""


@dataclass(frozen=True, slots=True)
class GymTask:
    """A reasoning-gym dataset: ``reasoning_gym.create_dataset(dataset, size=..., seed=..., **config)``.

    Example (not run as a doctest, which must pass without reasoning-gym; tests/tasks/test_gym.py covers it):
        >>> task = GymTask("chain_sum", size_train=8, size_eval=4, config={"max_terms": 2})  # doctest: +SKIP
        >>> p = task.train_prompts()[0]  # doctest: +SKIP
        >>> task.score([p, p], [f"<answer>{p.answer}</answer>", "zzz"]).rewards.tolist()  # doctest: +SKIP
        [1.0, 0.0]
    """

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
    prompt_form: PromptForm = "full"
    """``"full"``: reasoning-gym's question text; ``"compact"``: a short printable-ASCII form (:func:`compact_question`)
    rendered as ``"{question}="``, for the char-level tiny policy (``v05 train`` picks it for ``tiny-llama``)"""

    held_out_first: bool = False
    """generate the eval and validation splits first, then the training pool without their questions: the
    held-out splits then do not depend on ``size_train``, so a revisited pool and a fresh one are judged on the same
    prompts. False: train first, then eval and validation without the train questions (the grids before
    ``benchmarks/grids/evidence.yaml``)."""

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
        if self.prompt_form not in PLAIN_TEMPLATES:
            raise ValueError(f"prompt_form must be 'full' or 'compact', got {self.prompt_form!r}")
        rg = _import_reasoning_gym()
        _check_dataset_name(rg, self.dataset)
        entries: dict[str, tuple[object, dict[str, object]]] = {}
        exclude: frozenset[str] = frozenset()
        train: tuple[Prompt, ...] = ()
        if not self.held_out_first:
            train = self._generate(rg, self.size_train, self.seed, "train", entries, exclude=exclude)
            exclude = frozenset(p.question for p in train)
        eval_ = self._generate(rg, self.size_eval, self.seed + EVAL_SEED_OFFSET, "eval", entries, exclude=exclude)
        exclude |= frozenset(p.question for p in eval_)
        val = self._generate(rg, self.size_val, self.seed + VAL_SEED_OFFSET, "val", entries, exclude=exclude)
        if self.held_out_first:
            exclude |= frozenset(p.question for p in val)
            train = self._generate(rg, self.size_train, self.seed, "train", entries, exclude=exclude)
        check_unique_keys((*train, *eval_, *val), f"GymTask({self.dataset!r})")
        object.__setattr__(self, "_train", train)
        object.__setattr__(self, "_eval", eval_)
        object.__setattr__(self, "_val", val)
        object.__setattr__(self, "_entries", entries)

    @property
    def name(self) -> str:
        """``"reasoning_gym." + dataset``."""
        return f"reasoning_gym.{self.dataset}"

    @property
    def plain_template(self) -> str:
        r"""``"Question: {question}\nAnswer:"`` in full form, ``"{question}="`` in compact form."""
        return PLAIN_TEMPLATES[self.prompt_form]

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
        return 1.0 if score == _FULL_CREDIT else 0.0

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
        compact = self.prompt_form == "compact"
        for index, entry in enumerate(items):
            question = compact_question(self.dataset, entry) if compact else str(entry["question"])
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


def printable_text(text: str) -> str:
    r"""``text`` with runs of whitespace collapsed to one space and characters outside printable ASCII dropped.

    >>> printable_text("  Is  caf\u00e9\nopen?\t")
    'Is caf open?'
    """
    return " ".join("".join(c for c in text if c.isspace() or " " <= c <= "~").split())


def _meta(entry: Mapping[str, object]) -> Mapping[str, object]:
    meta = entry.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _word(entry: Mapping[str, object]) -> str | None:
    word = _meta(entry).get("word")
    return None if word is None else str(word)


def _letter_in_text(entry: Mapping[str, object]) -> str | None:
    meta = _meta(entry)
    letter, span = meta.get("target_letter"), meta.get("span")
    if letter is None or not isinstance(span, list | tuple):
        return None
    return f"{letter}:{' '.join(str(w) for w in span)}"


def _expression(entry: Mapping[str, object]) -> str | None:
    expression = _meta(entry).get("expression")
    return None if expression is None else "".join(str(expression).split())


def _number(entry: Mapping[str, object]) -> str | None:
    number = _meta(entry).get("number")
    return None if number is None else str(number)


def _numbers(entry: Mapping[str, object]) -> str | None:
    numbers = _meta(entry).get("numbers")
    return ",".join(str(n) for n in numbers) if isinstance(numbers, list | tuple) else None


COMPACTORS: dict[str, Callable[[Mapping[str, object]], str | None]] = {
    "spell_backward": _word,  # "Spell this word backward (example: sun -> nus): splat" -> "splat"
    "letter_counting": _letter_in_text,  # 'How many times does the letter "c" appear in ...' -> "c:constitution is ..."
    "chain_sum": _expression,  # "... arithmetic problem: 4 - 1 - 7 =" -> "4-1-7"
    "basic_arithmetic": _expression,  # "Calculate 2 - -1." -> "2--1"
    "products": _expression,  # "Solve the following multiplication: 1 * 5. ..." -> "1*5"
    "count_bits": _number,  # "How many 1 bits are there in ... the number 288545019?" -> "288545019"
    "gcd": _numbers,  # "Find the Greatest Common Divisor (GCD) of these numbers: 777, 912. ..." -> "777,912"
    "lcm": _numbers,  # "Find the Least Common Multiple (LCM) of these numbers: 98, 54" -> "98,54"
}
"""Dataset name → the compact question of an entry (None where the entry's metadata lacks the fields)."""


def compact_question(dataset: str, entry: Mapping[str, object]) -> str:
    r"""The compact question of a reasoning-gym entry: its dataset's compactor, else :func:`printable_text`.

    The result is passed through :func:`printable_text` either way, so it is printable ASCII (what the tiny
    policy's 96-character vocabulary reads).

    >>> compact_question("gcd", {"question": "GCD of 777, 912?", "metadata": {"numbers": [777, 912]}})
    '777,912'
    >>> compact_question("gcd", {"question": "  GCD of\n777, 912?"})  # no metadata: the generic form
    'GCD of 777, 912?'
    """
    compactor = COMPACTORS.get(dataset)
    compact = None if compactor is None else compactor(entry)
    return printable_text(str(entry["question"]) if compact is None else compact)


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
