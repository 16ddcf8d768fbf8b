import subprocess
import sys

import pytest

from v05.tasks import TASKS, ArithmeticTask, make_task, task_options


def test_make_task_builds_each_registered_task(tmp_path):
    """Each name builds its class from keyword options."""
    assert set(TASKS) == {"arithmetic", "reasoning_gym", "math_file", "mixture"}
    assert isinstance(make_task("arithmetic", n_train=5, n_eval=2, seed=3), ArithmeticTask)
    (tmp_path / "m.jsonl").write_text('{"question": "1+1", "answer": 2}\n')
    assert make_task("math_file", path=tmp_path / "m.jsonl", eval_fraction=0.0).name == "math_file"
    pytest.importorskip("reasoning_gym")
    assert make_task("reasoning_gym", dataset="lcm", size_train=3, size_eval=1).name == "reasoning_gym.lcm"


@pytest.mark.parametrize(
    ("name", "options", "match"),
    [
        ("nope", {}, "unknown task 'nope'; valid: arithmetic, reasoning_gym, math_file"),
        ("arithmetic", {"n_prompts": 3}, r"task 'arithmetic' has no option\(s\) n_prompts; valid: n_train, n_eval"),
        ("arithmetic", {"_train": ()}, r"has no option\(s\) _train"),
        ("reasoning_gym", {"size_train": 3}, r"needs option\(s\) \['dataset'\]"),
        ("math_file", {}, r"needs option\(s\) \['path'\]"),
    ],
)
def test_make_task_rejects_bad_names_and_options(name, options, match):
    """Unknown names or options and missing required options are ValueErrors listing the valid ones."""
    with pytest.raises(ValueError, match=match):
        make_task(name, **options)


def test_task_options_marks_required_fields():
    """Required options have no default; private fields are not options."""
    assert task_options("math_file")["path"] is True and task_options("math_file")["limit"] is False
    assert "_train" not in task_options("arithmetic")


def test_import_loads_numpy_only():
    """Importing v05.tasks loads neither torch, transformers, reasoning_gym nor math_verify."""
    code = (
        "import sys, v05.tasks; heavy = {'torch', 'transformers', 'reasoning_gym', 'math_verify', 'pandas', 'pyarrow'};"
        "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
