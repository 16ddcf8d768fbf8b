"""One explicit dict from task name to task class, and ``make_task`` that validates option names."""

from __future__ import annotations

import dataclasses

from v05.tasks.arithmetic import ArithmeticTask
from v05.tasks.base import Task
from v05.tasks.gym import GymTask
from v05.tasks.math_file import MathFileTask

TASKS: dict[str, type[ArithmeticTask] | type[GymTask] | type[MathFileTask]] = {
    "arithmetic": ArithmeticTask,
    "reasoning_gym": GymTask,
    "math_file": MathFileTask,
}


def task_options(name: str) -> dict[str, bool]:
    """Option names of task ``name`` mapped to whether they are required.

    >>> task_options("reasoning_gym")["dataset"], task_options("reasoning_gym")["seed"]
    (True, False)
    """
    cls = _task_class(name)
    no_default = (dataclasses.MISSING, dataclasses.MISSING)
    return {
        f.name: (f.default, f.default_factory) == no_default
        for f in dataclasses.fields(cls)
        if f.init and not f.name.startswith("_")
    }


def make_task(name: str, **options: object) -> Task:
    """Build the task registered as ``name`` with the given options.

    Args:
        name: A key of ``TASKS``.
        **options: The task class's fields, e.g. ``n_train=500`` or ``dataset="chain_sum"``.

    Returns:
        The task.

    Raises:
        ValueError: Unknown name, unknown option, missing required option, or an option the task rejects.

    >>> make_task("arithmetic", n_train=3, n_eval=2).name
    'arithmetic'
    """
    valid = task_options(name)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ValueError(f"unknown option(s) {unknown} for task {name!r}; valid options: {', '.join(valid)}")
    missing = [key for key, required in valid.items() if required and key not in options]
    if missing:
        raise ValueError(f"task {name!r} needs option(s) {missing}; valid options: {', '.join(valid)}")
    try:
        return TASKS[name](**options)  # type: ignore[arg-type]
    except TypeError as err:
        raise ValueError(f"bad options for task {name!r}: {err}") from None


def _task_class(name: str) -> type[ArithmeticTask] | type[GymTask] | type[MathFileTask]:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; valid tasks: {', '.join(TASKS)}")
    return TASKS[name]
