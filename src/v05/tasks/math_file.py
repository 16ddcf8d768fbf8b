r"""Math problems from a local JSONL or Parquet file, verified with math-verify.

Fields may be nested (``"reward_model.ground_truth"`` in verl/DAPO Parquet files; integer parts index lists, as in
``"prompt.0.content"``). Gold answers that are not already LaTeX (no ``\`` or ``$``) are wrapped in ``$...$`` before
parsing. math-verify's own SIGALRM timeouts are switched off (they raise outside the main thread) and replaced by
:func:`~v05.tasks.verify.call_with_timeout`. Deviation from math-verify's usual use: it sees the extracted answer
(:func:`~v05.tasks.verify.extract_answer`), not the whole rollout, so a rollout without ``<answer>`` tags or a
``\boxed{}`` is judged on its first line only.
"""

from __future__ import annotations

import json
import logging
import numbers
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np

from v05._checks import error_line
from v05.tasks.base import Prompt, Scores, check_unique_keys, prompt_key
from v05.tasks.verify import score_batch

logger = logging.getLogger(__name__)

JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")
PARQUET_SUFFIXES = (".parquet", ".pq")


@dataclass(frozen=True, slots=True)
class MathFileTask:
    r"""Problems with free-form math answers; reward 1 iff math-verify finds the answer equal to the gold one.

    Accepted answer forms include ``\boxed{12}``, ``12``, ``12.0``, ``\frac{1}{2}`` (gold ``0.5``) and
    ``\boxed{\frac{6}{4}}`` (gold ``3/2``).
    """

    name: ClassVar[str] = "math_file"
    plain_template: ClassVar[str] = "Problem: {question}\nSolution:"
    chat_instruction: ClassVar[str | None] = "Please reason step by step, and put your final answer within \\boxed{}."

    path: str | Path
    """JSONL (one JSON object per line) or Parquet file of problems"""
    _: KW_ONLY
    question_field: str = "question"
    """field holding the problem text; dots address nested fields ("extra_info.question", "prompt.0.content")"""
    answer_field: str = "answer"
    """field holding the gold answer (a string or a number), e.g. "reward_model.ground_truth" for verl files"""
    eval_fraction: float = 0.1
    """share of the file's distinct problems held out for eval (ignored when ``eval_path`` is given)"""
    eval_path: str | Path | None = None
    """optional separate eval file in the same format; its problems that are also in ``path`` are dropped"""
    val_fraction: float = 0.0
    """share of the training problems held out as a validation split (model selection, e.g. a warm start's stopping
    rule); 0 keeps every training problem for training (then a warm start cannot run on this task)"""
    seed: int = 0
    """seed of the random train/eval split"""
    limit: int | None = None
    """read only the first ``limit`` records of ``path`` (None reads all)"""
    verify_timeout_s: float | None = 5.0
    """per-rollout verifier timeout in seconds (None disables it)"""

    _train: tuple[Prompt, ...] = field(init=False, repr=False, compare=False)
    _eval: tuple[Prompt, ...] = field(init=False, repr=False, compare=False)
    _val: tuple[Prompt, ...] = field(init=False, repr=False, compare=False)
    _gold_cache: dict[str, object] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not 0.0 <= self.eval_fraction < 1.0:
            raise ValueError(f"eval_fraction must be in [0, 1), got {self.eval_fraction!r}")
        if not 0.0 <= self.val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in [0, 1), got {self.val_fraction!r}")
        if self.limit is not None and (
            isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1
        ):
            raise ValueError(f"limit must be a positive integer or None, got {self.limit!r}")
        if self.verify_timeout_s is not None and not self.verify_timeout_s > 0:
            raise ValueError(f"verify_timeout_s must be positive or None, got {self.verify_timeout_s!r}")
        prompts = self._load(Path(self.path), self.limit, exclude=frozenset())
        if self.eval_path is None:
            n_eval = round(self.eval_fraction * len(prompts))
            is_eval = np.zeros(len(prompts), dtype=np.bool_)  # (n_prompts,)
            is_eval[np.random.default_rng(self.seed).permutation(len(prompts))[:n_eval]] = True
            train = tuple(p for p, e in zip(prompts, is_eval, strict=True) if not e)
            eval_ = tuple(p for p, e in zip(prompts, is_eval, strict=True) if e)
        else:
            train = prompts
            eval_ = self._load(Path(self.eval_path), None, exclude=frozenset(p.question for p in train))
        n_val = round(self.val_fraction * len(train))
        is_val = np.zeros(len(train), dtype=np.bool_)  # (n_train,)
        is_val[np.random.default_rng([self.seed, 1]).permutation(len(train))[:n_val]] = True
        val = tuple(p for p, v in zip(train, is_val, strict=True) if v)
        train = tuple(p for p, v in zip(train, is_val, strict=True) if not v)
        if not train:
            raise ValueError(
                f"{self.path}: no training problems left; lower eval_fraction/val_fraction or add problems"
            )
        check_unique_keys((*train, *eval_, *val), f"MathFileTask({str(self.path)!r})")
        object.__setattr__(self, "_train", train)
        object.__setattr__(self, "_eval", eval_)
        object.__setattr__(self, "_val", val)
        object.__setattr__(self, "_gold_cache", {})

    def train_prompts(self) -> Sequence[Prompt]:
        """The training problems, in file order."""
        return self._train

    def eval_prompts(self) -> Sequence[Prompt]:
        """The held-out problems, in file order."""
        return self._eval

    def validation_prompts(self) -> Sequence[Prompt]:
        """The validation problems (``val_fraction`` of the training problems), in file order."""
        return self._val

    def sft_target(self, prompt: Prompt) -> str:
        """The gold answer (a real LM would be warmed up on worked solutions, which these files lack)."""
        return prompt.answer

    def score(self, prompts: Sequence[Prompt], completions: Sequence[str]) -> Scores:
        """``verify(parse(gold), parse(extracted))`` per rollout; an unparseable answer is ``no_answer``."""
        parse, verify = _import_math_verify()

        def verify_one(prompt: Prompt, answer: str) -> float | None:
            gold = self._gold_cache.get(prompt.key)
            if gold is None:
                gold = parse(_wrap_gold(prompt.answer), parsing_timeout=None)
                if not gold:
                    raise ValueError(f"math-verify cannot parse the gold answer {prompt.answer!r} of {prompt.key}")
                self._gold_cache[prompt.key] = gold
            predicted = parse(answer, parsing_timeout=None)
            if not predicted:
                return None
            return float(verify(gold, predicted, timeout_seconds=None))

        return score_batch(verify_one, prompts, completions, timeout_s=self.verify_timeout_s)

    def _load(self, path: Path, limit: int | None, *, exclude: frozenset[str]) -> tuple[Prompt, ...]:
        """Distinct problems of ``path`` not in ``exclude`` (repeats keep their first occurrence)."""
        prompts: list[Prompt] = []
        seen = set(exclude)
        for where, index, record in _read_records(path, limit):
            question = _get_field(record, self.question_field, where)
            answer = _get_field(record, self.answer_field, where)
            if not isinstance(question, str) or not question.strip():
                raise ValueError(f"{where}: field {self.question_field!r} must be a non-empty string, got {question!r}")
            if isinstance(answer, bool) or not isinstance(answer, (str, numbers.Number)) or not str(answer).strip():
                raise ValueError(
                    f"{where}: field {self.answer_field!r} must be a non-empty string or number, got {answer!r}"
                )
            if question in seen:
                continue
            seen.add(question)
            meta = {"file": path.name, "index": index}
            prompts.append(Prompt(prompt_key("math", question), question, str(answer).strip(), meta))
        return tuple(prompts)


def _wrap_gold(gold: str) -> str:
    r"""``$gold$`` unless the gold answer is already LaTeX (contains ``\`` or ``$``)."""
    return gold if ("\\" in gold or "$" in gold) else f"${gold}$"


def _read_records(path: Path, limit: int | None) -> list[tuple[str, int, object]]:
    """``(location for error messages, 0-based index, record)`` for the first ``limit`` records of ``path``."""
    if not path.is_file():
        raise ValueError(f"math file {path} not found")
    suffix = path.suffix.lower()
    if suffix in PARQUET_SUFFIXES:
        rows = _read_parquet(path)[:limit]
        return [(f"{path} row {i}", i, row) for i, row in enumerate(rows)]
    if suffix not in JSONL_SUFFIXES:
        raise ValueError(f"{path}: unknown file type {suffix!r}; use {', '.join(JSONL_SUFFIXES + PARQUET_SUFFIXES)}")
    try:
        return _read_jsonl(path, limit)
    except UnicodeDecodeError as err:  # a binary file (e.g. a pickle) with a .jsonl name: refused, never unpickled
        raise ValueError(f"{path}: not UTF-8 JSON lines ({err.reason} at byte {err.start})") from None


def _read_jsonl(path: Path, limit: int | None) -> list[tuple[str, int, object]]:
    records: list[tuple[str, int, object]] = []
    with path.open(encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if limit is not None and len(records) >= limit:
                break
            if not line.strip():
                continue
            where = f"{path} line {line_no}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(
                    f"{where}: not a JSON object ({err.msg}); the file must hold one object per line"
                ) from None
            records.append((where, len(records), record))
    return records


def _read_parquet(path: Path) -> list[object]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        pq = None
    if pq is not None:
        try:
            return pq.read_table(path).to_pylist()
        except (ValueError, OSError) as err:  # ArrowInvalid is a ValueError: not Parquet (e.g. a disguised pickle)
            raise ValueError(f"{path}: not a readable Parquet file ({error_line(err)})") from None
    try:
        import pandas as pd
    except ImportError:
        raise ValueError(f"{path}: reading Parquet needs pyarrow; install it with `pip install pyarrow`") from None
    try:
        return pd.read_parquet(path).to_dict("records")
    except ImportError as err:
        raise ValueError(f"{path}: reading Parquet needs pyarrow ({err}); `pip install pyarrow`") from None


def _get_field(record: object, dotted: str, where: str) -> object:
    """``record["a"]["b"]`` for ``"a.b"``; integer parts index lists. Raises ValueError naming the field."""
    value = record
    for part in dotted.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, (list, tuple)) and part.lstrip("-").isdigit() and -len(value) <= int(part) < len(value):
            value = value[int(part)]
        else:
            available = f"; it has {sorted(map(str, value))}" if isinstance(value, dict) else ""
            raise ValueError(f"{where}: no field {dotted!r} (missing {part!r}{available})")
    return value


_math_verify: tuple[Callable[..., list[object]], Callable[..., bool]] | None = None


class _DropTimeoutDisabledWarning(logging.Filter):
    """math-verify warns that its timeouts are off; ``call_with_timeout`` provides them, so drop that record."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Timeout is disabled")


def _import_math_verify() -> tuple[Callable[..., list[object]], Callable[..., bool]]:
    global _math_verify
    if _math_verify is None:
        try:
            from math_verify import parse, verify
        except ImportError as err:
            raise ImportError(f"MathFileTask needs math-verify ({err}); install v05[train]") from None
        for name in ("math_verify.parser", "math_verify.grader"):
            logging.getLogger(name).addFilter(_DropTimeoutDisabledWarning())
        _math_verify = (parse, verify)
    return _math_verify
