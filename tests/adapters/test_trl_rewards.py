"""v05.adapters.trl_rewards restates two helpers of TRL 1.16 (it does not import TRL): pin them to TRL's answers."""

from __future__ import annotations

import functools

import pytest

pytest.importorskip("trl")

from trl.trainer.utils import get_callable_name, is_async_callable  # noqa: E402

from v05.adapters.trl_rewards import _callable_name, _is_async  # noqa: E402


def exact(prompts, completions, **kwargs):
    return [1.0] * len(completions)


async def exact_async(prompts, completions, **kwargs):
    return [1.0] * len(completions)


class Scorer:
    def __call__(self, prompts, completions, **kwargs):
        return [1.0] * len(completions)


class AsyncScorer:
    async def __call__(self, prompts, completions, **kwargs):
        return [1.0] * len(completions)


@pytest.mark.parametrize(
    "fn",
    [exact, exact_async, functools.partial(exact), functools.partial(functools.partial(exact_async)), Scorer(),
     AsyncScorer(), functools.partial(AsyncScorer()), lambda prompts, completions, **kw: []],
    ids=["function", "async", "partial", "nested-partial-async", "instance", "async-instance", "partial-instance",
         "lambda"],
)  # fmt: skip
def test_reward_name_and_async_test_match_trl(fn):
    """For each reward-function form TRL accepts, the display name (TRL names the reward's metrics after it) and the
    async test (async functions are left unguarded) are TRL's own."""
    assert _callable_name(fn) == get_callable_name(fn)
    assert _is_async(fn) is is_async_callable(fn)
