"""Tasks and verifiers for the single-machine trainer: prompt pools, answer extraction and batch scoring.

Importing this package loads numpy only; reasoning-gym and math-verify are imported by the tasks that need them.
"""

from v05.tasks.arithmetic import ArithmeticTask, make_sft_examples
from v05.tasks.base import Prompt, Scores, Task, render_prompt
from v05.tasks.gym import GymTask
from v05.tasks.math_file import MathFileTask
from v05.tasks.registry import TASKS, make_task, task_options
from v05.tasks.verify import call_with_timeout, extract_answer, score_batch

__all__ = [
    "TASKS",
    "ArithmeticTask",
    "GymTask",
    "MathFileTask",
    "Prompt",
    "Scores",
    "Task",
    "call_with_timeout",
    "extract_answer",
    "make_sft_examples",
    "make_task",
    "render_prompt",
    "score_batch",
    "task_options",
]
