r"""TRL's reward functions under v05's reward rule, and their weighted sum as v05's per-rollout reward.

Used by :class:`v05.adapters.trl.V05GRPOTrainer`; it does not import TRL (TRL's two helpers it needs, the display
name and the async test of a reward callable, are restated here as in TRL 1.16's ``trl.trainer.utils``).

Rewards. The reward of a rollout is TRL's weighted sum r = Σ_f w_f·r_f over the reward functions f (a ``None``
counts 0, as in TRL), on the scale ``v05_reward_range`` declares: ``"01"`` ([0, 1]) or ``"pm1"`` ([−1, 1]). A sum
outside that range raises ``ValueError``. A rollout every function scored ``None`` is unscored: NaN here; the
trainer leaves it out of the estimate and gives it advantage 0, as TRL does.

Each synchronous reward function is wrapped in :class:`_GuardedReward`. Without ``v05_reward_timeout_s`` (None, the
default) an exception propagates as in TRL, and a result that is not one finite number or ``None`` per rollout raises
``ValueError`` (TRL would read NaN as ``None`` and go on). With ``v05_reward_timeout_s`` set, each call runs behind
:func:`v05.tasks.verify.call_with_timeout`: a call that raises, times out or does not return one value per rollout
gives every rollout of its batch the range's failure reward (its lower end: 0 on ``01``, −1 on ``pm1``) for that
function, and so does each element that is neither ``None`` nor a finite number (garbage); ``None`` stays TRL's "not
applicable". The trainer counts the rollouts so scored in ``v05/verifier_errors`` (garbage included, as in v05's
trainer) and ``v05/verifier_timeouts``. Reward models (``nn.Module``, model ids) and async functions are passed to
TRL as they are, neither checked nor guarded: the SIGALRM timeout cannot reach TRL's async event-loop thread.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from v05._checks import check_reward_range, error_line
from v05._types import FloatArray
from v05.tasks.verify import ScoreFault, ScoreFaults, call_with_timeout, finite_reward

logger = logging.getLogger(__name__)


def _callable_name(fn: Callable[..., Any]) -> str:
    """The name TRL logs a reward function under: a partial's wrapped function's ``__name__``, else the class name."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return getattr(fn, "__name__", type(fn).__name__)


def _is_async(fn: Callable[..., Any]) -> bool:
    """True if calling ``fn`` gives a coroutine: TRL's test of whether to await a reward function.

    ``fn`` may be a function, a ``functools.partial`` of one, or an instance whose ``__call__`` is async.
    """
    while isinstance(fn, functools.partial):
        fn = fn.func
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(fn.__call__)


class _GuardedReward:
    """A synchronous TRL reward function behind v05's reward rule (module docstring, "Rewards").

    ``fn(prompts, completions, **kwargs) -> list[float | None]``. Unguarded (``timeout_s`` None): an exception
    propagates (TRL's behaviour) and a result that is not one finite number or None per rollout raises
    ``ValueError`` naming the function and the rollout (TRL would read NaN as None and go on). Guarded: the call runs
    behind ``call_with_timeout`` (the main thread, where TRL calls reward functions); a raise, a timeout or a result
    that is not a list of one value per rollout gives every rollout ``fault_score``, and each element that is neither
    None nor a finite number gives ``fault_score`` (garbage). ``faults`` counts rollouts; the first fault of each kind
    is logged at WARNING.
    """

    def __init__(self, fn: Callable[..., Any], timeout_s: float | None, fault_score: float = 0.0) -> None:
        functools.update_wrapper(self, fn)
        self.__name__ = _callable_name(fn)  # TRL names the reward's metrics after it
        self.fn, self.timeout_s, self.fault_score, self.faults = fn, timeout_s, fault_score, ScoreFaults()
        self._warned: set[str] = set()

    @property
    def guarded(self) -> bool:
        """True when faults score ``fault_score`` (a timeout is set) rather than stop the run."""
        return self.timeout_s is not None

    def __call__(self, prompts: Any, completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        n = len(completions)
        call = functools.partial(self.fn, prompts=prompts, completions=completions, **kwargs)
        if not self.guarded:
            return self._checked(call(), n)
        try:
            out = call_with_timeout(call, timeout_s=self.timeout_s)
        except TimeoutError:
            return self._faulted("timeout", n, f"ran past its {self.timeout_s} s timeout")
        except Exception as err:  # guarded: any reward-function bug is a fault reward, never a crashed run
            return self._faulted("error", n, f"raised {error_line(err)}")
        if isinstance(out, str | bytes) or not isinstance(out, Sequence | np.ndarray) or len(out) != n:
            return self._faulted("garbage", n, f"returned {type(out).__name__}, not a list of {n} rewards")
        rewards: list[float | None] = []
        for value in out:
            reward = None if value is None else finite_reward(value)
            if value is not None and reward is None:
                self._fault("garbage", 1, f"returned {value!r}, not a finite number or None")
            rewards.append(None if value is None else (self.fault_score if reward is None else reward))
        return rewards

    def _checked(self, out: Any, n: int) -> list[float | None]:
        """The unguarded rule: one finite number or None per rollout, else ``ValueError``."""
        if isinstance(out, str | bytes) or not isinstance(out, Sequence | np.ndarray) or len(out) != n:
            raise ValueError(
                f"reward function {self.__name__} returned {type(out).__name__}"
                f"{f' of length {len(out)}' if hasattr(out, '__len__') else ''}, not a list of {n} rewards"
            )
        rewards: list[float | None] = []
        for i, value in enumerate(out):
            reward = None if value is None else finite_reward(value)
            if value is not None and reward is None:
                raise ValueError(
                    f"reward function {self.__name__} returned {value!r} for rollout {i}: return a finite number, or "
                    "None where the function does not apply (set v05_reward_timeout_s to score faults instead)"
                )
            rewards.append(reward)
        return rewards

    def _faulted(self, fault: ScoreFault, n: int, what: str) -> list[float | None]:
        self._fault(fault, n, what)
        return [self.fault_score] * n

    def _fault(self, fault: ScoreFault, n: int, what: str) -> None:
        self.faults.add(fault, n)
        level = logging.DEBUG if fault in self._warned else logging.WARNING
        self._warned.add(fault)
        logger.log(level, "reward function %s %s: reward %s, counted in v05/verifier_*", self.__name__, what,
                   self.fault_score)  # fmt: skip


def _guard_rewards(reward_funcs: Any, timeout_s: float | None, reward_range: str) -> Any:
    """``reward_funcs`` as a list with each synchronous callable wrapped in :class:`_GuardedReward` (None stays None).

    A guarded fault scores the range's failure reward, its lower end (0 on ``01``, −1 on ``pm1``).

    Reward models (``nn.Module``, model ids) and async functions are left as they are: the SIGALRM timeout cannot
    reach TRL's async event-loop thread.
    """
    if reward_funcs is None:
        return reward_funcs
    fault_score = check_reward_range(reward_range)[0]
    funcs = reward_funcs if isinstance(reward_funcs, list) else [reward_funcs]
    return [
        _GuardedReward(f, timeout_s, fault_score)
        if callable(f) and not isinstance(f, torch.nn.Module | _GuardedReward) and not _is_async(f)
        else f
        for f in funcs
    ]


def _weighted_rewards(rewards_per_func: torch.Tensor, weights: torch.Tensor, reward_range: str) -> FloatArray:
    """(N,) Σ_f w_f·r_f as TRL sums them, checked to lie in ``reward_range``.

    A ``None`` reward counts 0, as in TRL's sum; a rollout every function scored ``None`` is NaN (unscored).
    """
    r = rewards_per_func.detach().to("cpu", torch.float64)  # (N, F), NaN for None
    rewards = (r * weights.to(torch.float64).unsqueeze(0)).nansum(dim=1).numpy()  # (N,)
    rewards[torch.isnan(r).all(dim=1).numpy()] = np.nan  # unscored: TRL leaves them out of its baseline
    lo, hi = check_reward_range(reward_range)
    bad = np.flatnonzero(~np.isnan(rewards) & ~((rewards >= lo) & (rewards <= hi)))
    if bad.size:
        i = int(bad[0])
        other = "pm1" if reward_range == "01" and rewards[i] >= -1.0 and rewards[i] <= 1.0 else None
        hint = f"set v05_reward_range={other!r} for rewards in [-1, 1], or make" if other else "make"
        raise ValueError(
            f"reward {float(rewards[i])!r} of rollout {i} lies outside v05_reward_range={reward_range!r} "
            f"[{lo:g}, {hi:g}] (TRL's weighted sum of the reward functions); {hint} the reward functions and "
            "reward_weights keep the sum in range"
        )
    return rewards
