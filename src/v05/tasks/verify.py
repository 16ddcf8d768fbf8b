r"""Answer extraction, per-call timeouts and the batch scoring loop shared by every task.

Every task extracts the answer before its verifier sees it: reasoning-gym's default scorer gives partial credit
to unextracted text (``" -4 "`` scores 0.5) and math-verify parses ``<answer>292</answer>`` to nothing.
:func:`score_batch` runs a per-rollout verifier behind :func:`call_with_timeout` and maps every failure
(nothing extracted, an exception, a timeout) to reward 0 with its own flag, so scoring never raises or hangs.
The timeout is a SIGALRM interval timer: it interrupts pure-Python hangs in the main thread only.
:func:`guard_score` gives any per-rollout scoring callable (an engine's reward function) the same never-raise,
never-hang contract, with the failures counted on a :class:`ScoreFaults`.
"""

from __future__ import annotations

import functools
import logging
import math
import re
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Literal, TypeVar

import numpy as np

from v05.tasks.base import Prompt, Scores

logger = logging.getLogger(__name__)

AnswerStyle = Literal["auto", "tag", "boxed", "plain"]
Verifier = Callable[[Prompt, str], float | None]
"""Scores one extracted answer: a reward in [0, 1], or None when the answer cannot be parsed (-> ``no_answer``)."""

ScoreFault = Literal["error", "timeout", "garbage"]
"""Why a guarded scorer gave reward 0: it raised, it timed out, or it returned something other than a finite number."""

_T = TypeVar("_T")
_OPEN_TAG, _CLOSE_TAG = "<answer>", "</answer>"
_BOXED_OR_BRACE = re.compile(r"\\boxed\s*\{|[{}]")
_warned_off_main_thread = False


class _AlarmFired(BaseException):
    """Raised by our SIGALRM handler; a BaseException so that verifiers' ``except Exception`` cannot swallow it."""

    def __init__(self, token: object) -> None:
        super().__init__()
        self.token = token


def call_with_timeout(fn: Callable[..., _T], *args: object, timeout_s: float | None) -> _T:
    """Call ``fn(*args)`` and raise ``TimeoutError`` if it runs longer than ``timeout_s`` seconds.

    In the main thread a SIGALRM interval timer interrupts the call at the next Python bytecode, so pure-Python
    hangs (loops, sympy, ``time.sleep``) are stopped; a single long C call (e.g. a huge integer power) is not.
    The previous SIGALRM handler is restored afterwards and a timer that was already running (an outer
    ``call_with_timeout``, say) is re-armed with its remaining time; if that earlier deadline comes first, this
    call times out at it and the outer alarm fires right after. Outside the main thread signals cannot be used:
    the call runs without a timer and a warning is logged once.

    Args:
        fn: The function to call.
        *args: Its positional arguments.
        timeout_s: Seconds allowed (> 0), or None for no limit.

    Returns:
        ``fn(*args)``.

    Raises:
        TimeoutError: The call did not finish within ``timeout_s``.
        ValueError: ``timeout_s`` is not positive.

    >>> call_with_timeout(sum, [1, 2, 3], timeout_s=1.0)
    6
    """
    if timeout_s is None:
        return fn(*args)
    if not timeout_s > 0 or not math.isfinite(timeout_s):
        raise ValueError(f"timeout_s must be a positive number of seconds or None, got {timeout_s!r}")
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        _warn_off_main_thread_once()
        return fn(*args)

    token = object()  # tells our alarm apart from a nested call's

    def on_alarm(signum: int, frame: FrameType | None) -> None:
        raise _AlarmFired(token)

    previous_handler = signal.getsignal(signal.SIGALRM)
    previous_delay, previous_interval = signal.getitimer(signal.ITIMER_REAL)
    start = time.monotonic()
    try:
        try:  # install inside the try, so that no alarm of ours can fire outside it
            signal.signal(signal.SIGALRM, on_alarm)
            signal.setitimer(signal.ITIMER_REAL, min(timeout_s, previous_delay) if previous_delay > 0 else timeout_s)
            return fn(*args)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)  # an alarm before this line lands in the handler below
    except _AlarmFired as alarm:
        if alarm.token is not token:
            raise
        raise TimeoutError(f"{getattr(fn, '__name__', 'call')} exceeded its {timeout_s} s timeout") from None
    finally:
        signal.signal(signal.SIGALRM, previous_handler if previous_handler is not None else signal.SIG_DFL)
        if previous_delay > 0:
            remaining = previous_delay - (time.monotonic() - start)
            signal.setitimer(signal.ITIMER_REAL, max(remaining, 1e-6), previous_interval)


def _warn_off_main_thread_once() -> None:
    global _warned_off_main_thread
    if not _warned_off_main_thread:
        _warned_off_main_thread = True
        logger.warning(
            "verifier timeouts need the main thread (SIGALRM); verifiers called from other threads run without one"
        )


def extract_answer(text: str, *, style: AnswerStyle = "auto") -> str | None:
    r"""The answer part of a rollout, stripped, or None if there is none.

    Styles: ``"tag"``: the content of the last ``<answer>...</answer>`` pair; ``"boxed"``: the content of the last
    ``\boxed{...}`` with balanced braces; ``"plain"``: the stripped text up to its first newline; ``"auto"``: the
    tag if there is one (with a ``\boxed{}`` inside it unwrapped), else the box, else plain. An empty answer is
    None; an ``"auto"`` tag or box that is present but empty is None too (it does not fall back to plain).

    Args:
        text: The rollout text (a non-string gives None).
        style: Which of the rules above to apply.

    Returns:
        The extracted answer, or None.

    Raises:
        ValueError: Unknown ``style``.

    >>> extract_answer("so <answer> 292 </answer>")
    '292'
    >>> extract_answer(r"thus \boxed{\frac{1}{2}}.")
    '\\frac{1}{2}'
    >>> extract_answer("  -224\n-225"), extract_answer("   ")
    ('-224', None)
    """
    if style not in ("auto", "tag", "boxed", "plain"):
        raise ValueError(f"style must be 'auto', 'tag', 'boxed' or 'plain', got {style!r}")
    if not isinstance(text, str):
        return None
    if style == "tag":
        return _nonempty(_last_tag(text))
    if style == "boxed":
        return _nonempty(_last_boxed(text))
    if style == "plain":
        return _first_line(text)
    tagged = _last_tag(text)
    if tagged is not None:
        boxed = _last_boxed(tagged)
        return _nonempty(boxed if boxed is not None else tagged)
    boxed = _last_boxed(text)
    if boxed is not None:
        return _nonempty(boxed)
    return _first_line(text)


def _nonempty(answer: str | None) -> str | None:
    if answer is None:
        return None
    answer = answer.strip()
    return answer or None


def _first_line(text: str) -> str | None:
    return _nonempty(text.strip().split("\n", 1)[0])


def _last_tag(text: str) -> str | None:
    """Content between the last ``</answer>`` and the ``<answer>`` before it (linear time, unlike a lazy regex)."""
    end = text.rfind(_CLOSE_TAG)
    if end < 0:
        return None
    start = text.rfind(_OPEN_TAG, 0, end)
    return None if start < 0 else text[start + len(_OPEN_TAG) : end]


def _last_boxed(text: str) -> str | None:
    r"""Content of the balanced ``\boxed{...}`` that opens last, in one pass with a brace stack."""
    stack: list[int] = []  # content start of a \boxed{ brace, or -1 for a plain brace
    best: tuple[int, int] | None = None
    for match in _BOXED_OR_BRACE.finditer(text):
        token = match.group()
        if token == "}":
            if stack:
                start = stack.pop()
                if start >= 0 and (best is None or start > best[0]):
                    best = (start, match.start())
        else:
            stack.append(match.end() if token != "{" else -1)
    return None if best is None else text[best[0] : best[1]]


def score_batch(
    verifier: Verifier,
    prompts: Sequence[Prompt],
    completions: Sequence[str],
    *,
    timeout_s: float | None,
    style: AnswerStyle = "auto",
) -> Scores:
    """Extract and verify each rollout; failures give reward 0 and a flag, nothing raises.

    Args:
        verifier: ``verifier(prompt, extracted)`` -> reward in [0, 1] (bools allowed) or None for an unparseable
            answer. It runs behind :func:`call_with_timeout`; an exception sets ``errors``, a timeout ``timeouts``,
            and a result that is not a number in [0, 1] counts as an error.
        prompts: (N,) the prompt of each rollout.
        completions: (N,) the rollout texts.
        timeout_s: Per-call timeout in seconds, or None.
        style: Extraction style (see :func:`extract_answer`).

    Returns:
        The batch's :class:`Scores`.

    Raises:
        ValueError: ``prompts`` and ``completions`` differ in length.
    """
    if len(prompts) != len(completions):
        raise ValueError(f"prompts and completions must have equal lengths, got {len(prompts)} and {len(completions)}")
    n = len(completions)
    rewards = np.zeros(n, dtype=np.float64)  # (N,)
    no_answer, errors, timeouts = (np.zeros(n, dtype=np.bool_) for _ in range(3))  # (N,) each
    extracted = tuple(extract_answer(c, style=style) for c in completions)
    for i, (prompt, answer) in enumerate(zip(prompts, extracted, strict=True)):
        if answer is None:
            no_answer[i] = True
            continue
        try:
            reward = call_with_timeout(verifier, prompt, answer, timeout_s=timeout_s)
        except TimeoutError:
            timeouts[i] = True
            logger.debug("verifier timed out on prompt %s", prompt.key)
            continue
        except Exception as err:  # any verifier bug is a zero reward, never a crashed run
            errors[i] = True
            logger.debug("verifier raised on prompt %s: %r", prompt.key, err)
            continue
        if reward is None:
            no_answer[i] = True
        elif isinstance(reward, (bool, int, float, np.floating, np.integer)) and 0.0 <= float(reward) <= 1.0:
            rewards[i] = float(reward)
        else:
            errors[i] = True
            logger.debug("verifier returned %r for prompt %s, not a reward in [0, 1]", reward, prompt.key)
    return Scores(rewards=rewards, no_answer=no_answer, errors=errors, timeouts=timeouts, extracted=extracted)


def finite_reward(value: object) -> float | None:
    """``float(value)`` if ``value`` is a finite real number (bool, int, float or a numpy scalar of those), else None.

    >>> finite_reward(True), finite_reward(np.float32(0.5)), finite_reward(float("nan")), finite_reward("1")
    (1.0, 0.5, None, None)
    """
    if not isinstance(value, (bool, int, float, np.floating, np.integer)):
        return None
    try:
        reward = float(value)
    except OverflowError:  # an int too large for a float
        return None
    return reward if math.isfinite(reward) else None


@dataclass
class ScoreFaults:
    """Counts of the calls a guarded scorer turned into reward 0, by kind (thread-safe; several scorers may share one).

    Attributes:
        errors: calls that raised.
        timeouts: calls that ran past their timeout.
        garbage: calls that returned something other than a finite number (NaN, ±inf, None, a string, ...).
    """

    errors: int = 0
    timeouts: int = 0
    garbage: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def total(self) -> int:
        """All faults: errors + timeouts + garbage."""
        return self.errors + self.timeouts + self.garbage

    def add(self, fault: ScoreFault, n: int = 1) -> None:
        """Count ``n`` faults of kind ``fault``."""
        name = {"error": "errors", "timeout": "timeouts", "garbage": "garbage"}[fault]
        with self._lock:
            setattr(self, name, getattr(self, name) + n)

    def reset(self) -> None:
        """Set every count to 0."""
        with self._lock:
            self.errors = self.timeouts = self.garbage = 0


class GuardedScore:
    """A per-rollout scorer that never raises or hangs: built by :func:`guard_score` (its docstring)."""

    def __init__(
        self, fn: Callable[..., object], *, timeout_s: float | None, faults: ScoreFaults | None = None
    ) -> None:
        if timeout_s is not None and (isinstance(timeout_s, bool) or not timeout_s > 0 or not math.isfinite(timeout_s)):
            raise ValueError(f"timeout_s must be a positive number of seconds or None, got {timeout_s!r}")
        functools.update_wrapper(self, fn)  # __name__, __doc__ and __wrapped__ (so inspect.signature is fn's)
        self.fn = fn
        self.timeout_s = timeout_s
        self.faults = ScoreFaults() if faults is None else faults

    def __call__(self, *args: object, **kwargs: object) -> float:
        """``fn(*args, **kwargs)`` as a finite float; 0.0 (counted) if it raised, timed out or returned garbage."""
        return self.score(*args, **kwargs)[0]

    def score(self, *args: object, **kwargs: object) -> tuple[float, ScoreFault | None]:
        """The reward and why it is 0.0 (None when ``fn`` returned a finite number)."""
        name = getattr(self.fn, "__name__", type(self.fn).__name__)
        try:
            result = call_with_timeout(functools.partial(self.fn, *args, **kwargs), timeout_s=self.timeout_s)
        except TimeoutError:
            self.faults.add("timeout")
            logger.debug("scorer %s timed out after %s s", name, self.timeout_s)
            return 0.0, "timeout"
        except Exception as err:  # any scorer bug is a zero reward, never a crashed run
            self.faults.add("error")
            logger.debug("scorer %s raised: %r", name, err)
            return 0.0, "error"
        reward = finite_reward(result)
        if reward is None:
            self.faults.add("garbage")
            logger.debug("scorer %s returned %r, not a finite number", name, result)
            return 0.0, "garbage"
        return reward, None


def guard_score(
    fn: Callable[..., object], *, timeout_s: float | None, faults: ScoreFaults | None = None
) -> GuardedScore:
    """Wrap a per-rollout scoring callable so that it can never raise or hang; failures give reward 0.0, counted.

        guarded(*args, **kwargs) = float(r)   if r = fn(*args, **kwargs) returns in time and is a finite real number
                                 = 0.0        otherwise: an exception (``faults.errors``), a timeout
                                              (``faults.timeouts``) or any other result (``faults.garbage``)

    The call runs behind :func:`call_with_timeout`, so the timeout holds in the main thread only (elsewhere it runs
    without one, with a warning logged once); each failure is logged at DEBUG, as :func:`score_batch` does. Unlike
    a :data:`Verifier`, ``fn`` gets no extraction and no [0, 1] check (an engine's scorer may use ±1): None is
    garbage here. ``KeyboardInterrupt`` and an outer ``call_with_timeout``'s alarm still propagate.

    Args:
        fn: The scorer; any signature (the wrapper passes its arguments through and keeps ``fn``'s name and
            signature).
        timeout_s: Seconds allowed per call (> 0), or None for no limit.
        faults: A :class:`ScoreFaults` to count into (to share it among scorers); a fresh one by default.

    Returns:
        The :class:`GuardedScore`; its counts are on ``.faults``, and ``.score(...)`` also says why a reward is 0.

    Raises:
        ValueError: ``timeout_s`` is not positive and finite.

    >>> guarded = guard_score(lambda a, b: a / b, timeout_s=1.0)
    >>> guarded(1, 4), guarded(1, 0), guarded.faults.errors
    (0.25, 0.0, 1)
    """
    return GuardedScore(fn, timeout_s=timeout_s, faults=faults)
