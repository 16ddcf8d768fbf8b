"""The task interface the trainer sees: prompts, batch scores, the ``Task`` protocol and prompt rendering.

A task owns a finite training pool, a disjoint held-out (eval) split and a validation split in neither, of
:class:`Prompt` objects, and turns a batch of rollouts into :class:`Scores`. Rendering (chat template or a plain
``"{question}="`` template) is kept outside the tasks so that one task serves a char-level tiny model and an
instruction-tuned LM alike.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from v05._types import BoolArray, FloatArray

TemplateMode = Literal["auto", "chat", "plain"]
KEY_HASH_CHARS = 12
"""Hex characters of sha1(question) in a prompt key (48 bits: ~2e-5 collision odds for 100 k prompts; checked)."""


@dataclass(frozen=True, slots=True)
class Prompt:
    """One problem of a task's pool.

    Attributes:
        key: Stable id across runs and processes (``"arithmetic:" + sha1(question)[:12]``); unique within a task.
        question: The problem text without any template, e.g. ``"141-365"``.
        answer: The gold answer as text, e.g. ``"-224"`` (``""`` when the task has no unique gold answer).
        meta: JSON-serialisable details, e.g. ``{"op": "sub", "digits": 3}``.
    """

    key: str
    question: str
    answer: str
    meta: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Scores:
    """Verification results of a batch of N rollouts; every failure mode gives reward 0 and sets one flag.

    Attributes:
        rewards: (N,) float64 in [0, 1]; 1.0 = verified correct (binary for every shipped task).
        no_answer: (N,) bool: nothing could be extracted or parsed (garbage, format failure).
        errors: (N,) bool: the verifier raised.
        timeouts: (N,) bool: the verifier exceeded its per-call timeout.
        extracted: (N,) the extracted answer text (``None`` where nothing was extracted).
    """

    rewards: FloatArray
    no_answer: BoolArray
    errors: BoolArray
    timeouts: BoolArray
    extracted: tuple[str | None, ...]

    @property
    def failures(self) -> int:
        """Number of rollouts whose verification raised or timed out (``no_answer`` is counted separately)."""
        return int(self.errors.sum() + self.timeouts.sum())

    def __len__(self) -> int:
        return len(self.extracted)


class Task(Protocol):
    r"""A finite pool of prompts with a verifier.

    Tasks may also define ``chat_instruction: str | None``, the sentence :func:`render_prompt` appends to the user
    message in chat mode when no ``instruction`` is given (e.g. "put your final answer within \boxed{}").
    """

    @property
    def name(self) -> str:
        """Short name for logs and run directories, e.g. ``"arithmetic"``."""
        ...

    @property
    def plain_template(self) -> str:
        """``str.format`` template with a ``{question}`` field for models without a chat template."""
        ...

    def train_prompts(self) -> Sequence[Prompt]:
        """The finite training pool, revisited across epochs."""
        ...

    def eval_prompts(self) -> Sequence[Prompt]:
        """A held-out split: no question occurs in both splits."""
        ...

    def validation_prompts(self) -> Sequence[Prompt]:
        """A split in neither of the others, for model selection (the SFT warm start stops on it); may be empty."""
        ...

    def score(self, prompts: Sequence[Prompt], completions: Sequence[str]) -> Scores:
        """Score rollout ``i`` (``completions[i]``) against ``prompts[i]``; never raises for any completion text."""
        ...

    def sft_target(self, prompt: Prompt) -> str:
        """The completion an SFT warm-up trains on after the plain template, e.g. ``"-224"``."""
        ...


def prompt_key(namespace: str, question: str) -> str:
    """Stable prompt key: ``namespace + ":" + sha1(question)[:12]`` (UTF-8).

    >>> prompt_key("arithmetic", "1+1")
    'arithmetic:3f5651c4c9a7'
    """
    return f"{namespace}:{hashlib.sha1(question.encode('utf-8')).hexdigest()[:KEY_HASH_CHARS]}"


def check_unique_keys(prompts: Iterable[Prompt], where: str) -> None:
    """Raise ``ValueError`` if two prompts share a key (distinct questions whose sha1 prefixes collide)."""
    seen: dict[str, str] = {}
    for p in prompts:
        other = seen.setdefault(p.key, p.question)
        if other != p.question:
            raise ValueError(f"{where}: questions {other!r} and {p.question!r} share the key {p.key!r}")


def sft_examples(task: Task, n: int, seed: int) -> list[Prompt]:
    """Prompts for a warm-up of ``task``.

    Its own ``sft_examples(n, seed)`` where it has one (fresh generator draws for arithmetic, each component's share
    for a mixture), else its training pool cycled.
    """
    own = getattr(task, "sft_examples", None)
    if own is not None:
        return list(own(n, seed))
    pool = list(task.train_prompts())
    return [pool[i % len(pool)] for i in range(n)]


def render_prompt(
    task: Task,
    prompt: Prompt,
    tokenizer: object | None,
    *,
    template: TemplateMode = "auto",
    system_prompt: str | None = None,
    instruction: str | None = None,
) -> str:
    r"""The text the policy is conditioned on.

    Args:
        task: The prompt's task (for ``plain_template`` and its optional ``chat_instruction``).
        prompt: The prompt to render.
        tokenizer: A Hugging Face tokenizer (anything with ``chat_template`` and ``apply_chat_template``) or None.
        template: ``"chat"``: the tokenizer's chat template with a generation prompt; ``"plain"``:
            ``task.plain_template.format(question=...)``; ``"auto"``: chat if the tokenizer has a chat template.
        system_prompt: An optional system message (chat only).
        instruction: Appended to the question after a blank line (chat only); None uses the task's
            ``chat_instruction`` if it has one, ``""`` appends nothing.

    Returns:
        The rendered prompt text.

    Raises:
        ValueError: Unknown ``template``, or ``"chat"`` with a tokenizer that has no chat template.

    >>> from v05.tasks.arithmetic import ArithmeticTask
    >>> task = ArithmeticTask(n_train=1, n_eval=1)
    >>> render_prompt(task, Prompt("k", "141-365", "-224"), None)
    '141-365='
    """
    if template not in ("auto", "chat", "plain"):
        raise ValueError(f"template must be 'auto', 'chat' or 'plain', got {template!r}")
    has_chat = tokenizer is not None and bool(getattr(tokenizer, "chat_template", None))
    if template == "plain" or (template == "auto" and not has_chat):
        return task.plain_template.format(question=prompt.question)
    if not has_chat:
        raise ValueError(
            "template='chat' needs a tokenizer with a chat template; use template='plain' (or 'auto'), "
            "or set tokenizer.chat_template to a Jinja template"
        )
    if instruction is None:
        instruction = getattr(task, "chat_instruction", None)
    content = prompt.question + (f"\n\n{instruction}" if instruction else "")
    messages = [{"role": "system", "content": system_prompt}] if system_prompt is not None else []
    messages.append({"role": "user", "content": content})
    apply_chat_template = getattr(tokenizer, "apply_chat_template")  # noqa: B009 (duck-typed tokenizer)
    return str(apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
