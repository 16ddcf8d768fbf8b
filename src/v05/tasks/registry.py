"""One explicit dict from task name to task class, and ``make_task`` that validates option names."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from v05.names import build, check_options, lookup
from v05.tasks.arithmetic import ArithmeticTask
from v05.tasks.base import Task
from v05.tasks.gym import GymTask
from v05.tasks.math_file import MathFileTask
from v05.tasks.mixture import Mixture


@dataclass(frozen=True, kw_only=True, slots=True)
class MixtureTask:
    """The task ``mixture``: component tasks behind one policy, their splits concatenated.

    Each component is ``{task: NAME, options: {...}}``, any task but a mixture; keys, scoring and warm-up examples
    are :class:`v05.tasks.mixture.Mixture`'s.

    Example (a config): ``task: {name: mixture, options: {components: [{task: arithmetic, options: {n_train: 500}},
    {task: reasoning_gym, options: {dataset: spell_backward, prompt_form: compact}}]}}``.
    """

    components: Sequence[Mapping[str, object]]
    """the component tasks, ``{task: NAME, options: {...}}`` each (at least two)"""
    built: Mixture = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.components, (str, bytes)) or not isinstance(self.components, Sequence):
            raise ValueError(f"mixture components must be a list of {{task, options}}, got {self.components!r}")
        parts = []
        for i, spec in enumerate(self.components):
            if not isinstance(spec, Mapping) or "task" not in spec or set(spec) - {"task", "options"}:
                raise ValueError(f"mixture component {i} must be {{task: NAME, options: {{...}}}}, got {spec!r}")
            if spec["task"] == "mixture":
                raise ValueError(f"mixture component {i}: a mixture cannot hold a mixture")
            options = spec.get("options") or {}
            if not isinstance(options, Mapping):
                raise ValueError(f"mixture component {i}: options must be a mapping, got {options!r}")
            try:
                parts.append(make_task(str(spec["task"]), **dict(options)))
            except ValueError as err:
                raise ValueError(f"mixture component {i}: {err}") from None
        object.__setattr__(self, "built", Mixture(tuple(parts)))

    def __getattr__(self, name: str) -> object:  # the task interface is the built mixture's
        return getattr(object.__getattribute__(self, "built"), name)


TASKS: dict[str, type[ArithmeticTask] | type[GymTask] | type[MathFileTask] | type[MixtureTask]] = {
    "arithmetic": ArithmeticTask,
    "reasoning_gym": GymTask,
    "math_file": MathFileTask,
    "mixture": MixtureTask,
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
    check_options(options, valid, "task", name)
    missing = [key for key, required in valid.items() if required and key not in options]
    if missing:
        raise ValueError(f"task {name!r} needs option(s) {missing}; valid options: {', '.join(valid)}")
    return build(TASKS, name, "task", **options)  # type: ignore[return-value]


def _task_class(name: str) -> type[ArithmeticTask] | type[GymTask] | type[MathFileTask] | type[MixtureTask]:
    return lookup(TASKS, name, "task")
