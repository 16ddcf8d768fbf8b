"""The embedded default task: integer add/sub/mul problems with a difficulty mix, for the tiny char-level policy.

Questions are ``"{a}+{b}"``, ``"{a}-{b}"`` or ``"{a}*{b}"`` without spaces and the answer is the exact integer, so a
rollout after the plain template ``"{question}="`` is just the number. The mix (by default 40 % add, 40 % sub with
1-3 digit operands, 20 % 1-digit × 2-digit mul) spreads a tiny model's per-prompt pass rates from ~0 to ~1, which is
what adaptive baselines need (cpu-setup.md §6). Operand sampling: a digit count uniform in 1..max_digits, then a
value uniform among the numbers with that many digits (1 digit = 0..9). Pools hold distinct questions.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from v05._types import IntArray
from v05.tasks.base import Prompt, Scores, check_unique_keys, prompt_key
from v05.tasks.verify import score_batch

OPS = ("add", "sub", "mul")
_SYMBOLS = ("+", "-", "*")
_INTEGER = re.compile(r"[+-]?[0-9]+")
MAX_POOL = 10_000_000
"""Most prompts a task materialises (n_train + n_eval + n_val): each is a Python object (~1 KB), so 10⁷ is ~10 GB."""
_MAX_DRAWS_PER_QUESTION = 1000  # rejection-sampling cap: far above the coupon-collector cost of any feasible pool


@dataclass(frozen=True, kw_only=True, slots=True)
class ArithmeticTask:
    """Integer arithmetic with a difficulty mix: a finite train pool, a disjoint eval split and a validation split.

    Example:
        >>> task = ArithmeticTask(n_train=4, n_eval=2, seed=0)
        >>> len(task.train_prompts()), len(task.eval_prompts())
        (4, 2)
        >>> p = task.train_prompts()[0]
        >>> task.score([p, p, p], [task.sft_target(p), "+" + p.answer + "1", "zzz"]).rewards.tolist()
        [1.0, 0.0, 0.0]
    """

    name: ClassVar[str] = "arithmetic"
    plain_template: ClassVar[str] = "{question}="
    chat_instruction: ClassVar[str | None] = "Answer with the integer only."

    n_train: int = 2000
    """number of distinct questions in the training pool"""
    n_eval: int = 1000
    """number of distinct held-out questions (none of them in the training pool)"""
    n_val: int = 512
    """distinct validation questions, in neither the pool nor the eval split, for model selection (the warm start's
    stopping rule); one draw of n_train + n_eval + n_val distinct questions is split in this order, so the three
    splits follow one distribution"""
    seed: int = 0
    """seed of the numpy generator that draws both splits"""
    mix: tuple[float, float, float] = (0.4, 0.4, 0.2)
    """relative weights of add, sub and mul questions (normalised to sum to 1)"""
    max_digits: int = 3
    """add/sub operands have 1..max_digits digits; mul is 1-digit × min(2, max_digits)-digit"""
    verify_timeout_s: float | None = 5.0
    """per-rollout verifier timeout in seconds (None disables it)"""
    held_out_first: bool = False
    """draw the eval and validation splits first (from ``seed``), then the training pool from a stream of its own
    without their questions: the held-out splits then do not depend on ``n_train``, so a revisited pool (2,000) and
    a fresh one (40,000) are judged on the same prompts. False: one draw split in the order train, eval, validation
    (every grid before ``benchmarks/grids/evidence.yaml``)."""

    _train: tuple[Prompt, ...] = field(init=False, repr=False, compare=False)
    _eval: tuple[Prompt, ...] = field(init=False, repr=False, compare=False)
    _val: tuple[Prompt, ...] = field(init=False, repr=False, compare=False)
    _held_out_questions: frozenset[str] = field(init=False, repr=False, compare=False)  # eval + validation

    def __post_init__(self) -> None:
        mix = tuple(float(w) for w in self.mix)
        if len(mix) != 3 or not all(math.isfinite(w) and w >= 0 for w in mix) or sum(mix) <= 0:
            raise ValueError(
                f"mix must be 3 non-negative weights (add, sub, mul) with a positive sum, got {self.mix!r}"
            )
        object.__setattr__(self, "mix", tuple(w / sum(mix) for w in mix))
        for name in ("n_train", "n_eval", "n_val", "max_digits"):
            value = getattr(self, name)
            low = 0 if name in ("n_eval", "n_val") else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if self.max_digits > 18:
            raise ValueError(f"max_digits must be <= 18 (int64 operands), got {self.max_digits}")
        if self.verify_timeout_s is not None and not self.verify_timeout_s > 0:
            raise ValueError(f"verify_timeout_s must be positive or None, got {self.verify_timeout_s!r}")
        n = self.n_train + self.n_eval + self.n_val
        space = sum(_space_size(k, self.max_digits) for k in range(3) if self.mix[k] > 0)
        if n > min(space, MAX_POOL):  # refuse before drawing n ops (an OverflowError or MemoryError for huge n)
            what = f"only {space} distinct questions exist" if n > space else f"at most {MAX_POOL} are held in memory"
            raise ValueError(
                f"n_train + n_eval + n_val = {n} prompts, but {what} with max_digits={self.max_digits} and "
                f"mix={self.mix}; lower n_train/n_eval/n_val"
            )
        if self.held_out_first:
            held = self._draw_pool(self.n_eval + self.n_val, np.random.default_rng(self.seed))
            exclude = frozenset(p.question for p in held)
            train = self._draw_pool(self.n_train, np.random.default_rng([self.seed, 1]), exclude)
            prompts = (*train, *held)
        else:
            prompts = self._draw_pool(n, np.random.default_rng(self.seed))
        check_unique_keys(prompts, "ArithmeticTask")
        n_seen = self.n_train + self.n_eval
        object.__setattr__(self, "_train", prompts[: self.n_train])
        object.__setattr__(self, "_eval", prompts[self.n_train : n_seen])
        object.__setattr__(self, "_val", prompts[n_seen:])
        object.__setattr__(self, "_held_out_questions", frozenset(p.question for p in prompts[self.n_train :]))

    def train_prompts(self) -> Sequence[Prompt]:
        """The ``n_train`` training prompts, in generation order."""
        return self._train

    def eval_prompts(self) -> Sequence[Prompt]:
        """The ``n_eval`` held-out prompts, disjoint from the training pool."""
        return self._eval

    def validation_prompts(self) -> Sequence[Prompt]:
        """The ``n_val`` prompts in neither the training pool nor the eval split (model selection)."""
        return self._val

    def sft_target(self, prompt: Prompt) -> str:
        """The exact integer, e.g. ``"-224"`` for ``"141-365"``."""
        return prompt.answer

    def sft_examples(self, n: int, seed: int) -> list[Prompt]:
        """Warm-up prompts: :func:`make_sft_examples` (fresh generator draws, none held out)."""
        return make_sft_examples(self, n, seed)

    def score(self, prompts: Sequence[Prompt], completions: Sequence[str]) -> Scores:
        """Reward 1 iff the extracted answer is the gold integer ("+5" == "5", "-0" == "0", spaces ignored)."""
        return score_batch(_verify_integer, prompts, completions, timeout_s=self.verify_timeout_s)

    def _draw_pool(self, n: int, rng: np.random.Generator, exclude: frozenset[str] = frozenset()) -> tuple[Prompt, ...]:
        """``n`` distinct questions not in ``exclude``.

        Ops are drawn i.i.d. from ``mix``, then distinct operands per op by rejection.
        """
        op = rng.choice(3, size=n, p=self.mix)  # (n,)
        pool: list[Prompt | None] = [None] * n
        for k in range(3):
            slots = np.flatnonzero(op == k)  # (n_k,)
            for slot, prompt in zip(slots, self._distinct(rng, k, len(slots), exclude), strict=True):
                pool[slot] = prompt
        return tuple(p for p in pool if p is not None)

    def _distinct(self, rng: np.random.Generator, k: int, n: int, exclude: frozenset[str]) -> list[Prompt]:
        space = _space_size(k, self.max_digits) - sum(q.find(_SYMBOLS[k], 1) > 0 for q in exclude)
        if n > space:
            raise ValueError(
                f"ArithmeticTask needs {n} distinct {OPS[k]!r} questions but only {space} exist with "
                f"max_digits={self.max_digits} (besides the held-out splits); lower n_train/n_eval/n_val, change mix "
                "or raise max_digits"
            )
        found: dict[str, Prompt] = {}
        draws = 0
        while len(found) < n:
            if draws > _MAX_DRAWS_PER_QUESTION * n:
                raise ValueError(f"could not draw {n} distinct {OPS[k]!r} questions; lower n_train/n_eval/n_val")
            batch = max(2 * (n - len(found)), 64)
            draws += batch
            for prompt in _make_prompts(rng, np.full(batch, k), self.max_digits):
                if prompt.question in exclude:
                    continue
                found.setdefault(prompt.question, prompt)
                if len(found) == n:
                    break
        return list(found.values())


def make_sft_examples(task: ArithmeticTask, n: int, seed: int) -> list[Prompt]:
    """Fresh prompts from ``task``'s generator for an SFT warm-up, none of them in its eval or validation split.

    Args:
        task: Supplies ``mix``, ``max_digits`` and the eval and validation splits to avoid.
        n: Number of examples; they are i.i.d., so repeats (and overlap with the train pool) are possible.
        seed: Seed of the generator (use one different from ``task.seed`` for a different stream).

    Returns:
        ``n`` prompts; train on ``task.plain_template`` + ``task.sft_target(prompt)``.

    Raises:
        ValueError: ``n`` is negative.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    rng = np.random.default_rng(seed)
    held_out = task._held_out_questions  # eval + validation
    out: list[Prompt] = []
    while len(out) < n:
        size = max(n - len(out), 64)
        op = rng.choice(3, size=size, p=task.mix)  # (size,)
        out.extend(p for p in _make_prompts(rng, op, task.max_digits) if p.question not in held_out)
    return out[:n]


def _space_size(k: int, max_digits: int) -> int:
    """Number of distinct questions of op ``k``: 10^D values per add/sub operand, 10 × (90 or 10) for mul."""
    if k < 2:
        return 10 ** (2 * max_digits)
    return 10 * (90 if max_digits >= 2 else 10)


def _operands(rng: np.random.Generator, digits: IntArray) -> IntArray:
    """A uniform value with the given number of digits for each entry (1 digit = 0..9)."""
    low = np.where(digits == 1, 0, 10 ** (digits - 1))  # (M,)
    return rng.integers(low, 10**digits)


def _make_prompts(rng: np.random.Generator, op: IntArray, max_digits: int) -> list[Prompt]:
    """One question per entry of ``op`` (0 add, 1 sub, 2 mul), operands drawn as the module docstring says."""
    m = len(op)
    a = _operands(rng, rng.integers(1, max_digits + 1, size=m))  # (M,)
    b = _operands(rng, rng.integers(1, max_digits + 1, size=m))  # (M,)
    is_mul = op == 2  # (M,)
    a[is_mul] = rng.integers(0, 10, size=int(is_mul.sum()))
    b[is_mul] = _operands(rng, np.full(int(is_mul.sum()), min(2, max_digits)))
    prompts: list[Prompt] = []
    for k, x, y in zip(op.tolist(), a.tolist(), b.tolist(), strict=True):
        question = f"{x}{_SYMBOLS[k]}{y}"
        answer = x + y if k == 0 else x - y if k == 1 else x * y
        meta = {"op": OPS[k], "digits": max(len(str(x)), len(str(y)))}
        prompts.append(Prompt(prompt_key("arithmetic", question), question, str(answer), meta))
    return prompts


def normalize_integer(text: str) -> str | None:
    """Canonical form of an integer written with optional sign and spaces, or None if ``text`` is not one.

    >>> normalize_integer(" + 0 05"), normalize_integer("-0"), normalize_integer("-224"), normalize_integer("2.0")
    ('5', '0', '-224', None)
    """
    compact = "".join(text.split())
    if not _INTEGER.fullmatch(compact):
        return None
    digits = compact.lstrip("+-").lstrip("0")
    if not digits:
        return "0"
    return ("-" if compact[0] == "-" else "") + digits


def _verify_integer(prompt: Prompt, answer: str) -> float | None:
    predicted = normalize_integer(answer)
    if predicted is None:
        return None
    gold = normalize_integer(prompt.answer)
    if gold is None:
        raise ValueError(f"gold answer {prompt.answer!r} of prompt {prompt.key} is not an integer")
    return float(predicted == gold)
