"""Fuzz the dataset and task loaders: ``v05.datasets.v0.load_v0`` and ``v05.tasks.make_task`` (math_file JSONL and
Parquet files, arithmetic, reasoning_gym options), and the tasks' ``score``.

Contract (their Raises sections): a missing or malformed file, row or option raises ``ValueError`` naming it;
``score`` never raises for any completion text and returns rewards in [0, 1].
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz._contract import call, fuzz_settings, scratch_dirs, tick
from tests.strategies import SEEDS, TEXT_SAMPLES, jsonl_text, messy_option, pick
from v05.datasets.v0 import load_v0
from v05.tasks import make_task

pytestmark = pytest.mark.fuzz

fresh_dir, _remove_scratch = scratch_dirs("v05-fuzz-loaders-")
ODD_VALUES = (None, True, "", "x", "é😀", "\ud800", 1e400, float("nan"), -1e400, 2**70, [], {}, [1], {"a": 1},
              1.5, -0.0)  # fmt: skip
"""Field values of the wrong kind for a V0 or math row (1e400 is written as Infinity, "\\ud800" as a lone surrogate)."""


def v0_row(rng: np.random.Generator, ids: int) -> dict[str, object]:
    """A V0 row ``{"id", "score", "model", "step", "dataset"}``, usually valid, sometimes with odd fields."""
    row: dict[str, object] = {"id": int(rng.integers(0, ids)), "score": float(rng.choice([-1.0, -0.2, 0.0, 0.6, 1.0])),
                              "model": pick(rng, ("m", "é😀", "")), "step": int(rng.integers(0, 3)), "dataset": "ds"}
    if rng.random() < 0.1:
        field = pick(rng, ("id", "score", "model", "step", "dataset"))
        if rng.random() < 0.2:
            del row[field]
        else:
            row[field] = pick(rng, ODD_VALUES)
    if rng.random() < 0.05:
        row["extra"] = "ignored"
    return row


def write_text(path: Path, text: str, rng: np.random.Generator) -> None:
    """Write ``text`` as UTF-8 (lone surrogates escaped by json), or as raw bytes that are not UTF-8."""
    data = text.encode("utf-8", "surrogatepass")
    if rng.random() < 0.05:
        data = pick(rng, (b"\x80\x04\x95pickle", b"\xff\xfe\x00\x00", b"PAR1\x00" + data))
    path.write_bytes(data)


@fuzz_settings(350)
@given(st.sampled_from(("ok", "ok", "ok", "no_prompts", "no_context", "no_query", "bad_prompts", "list_prompts",
                        "alt_prompts", "missing_dir")), SEEDS)  # fmt: skip
def test_load_v0_raises_only_valueerror(layout, seed):
    """A V0 directory with malformed rows, prompt files or layout: a V0Dataset with finite scores in [−1, 1], or a
    one-line ValueError."""
    tick(__name__)
    rng = np.random.default_rng(seed)
    root = fresh_dir()
    n_ids = int(rng.integers(1, 6))
    prompts = {f"ds_{i}": pick(rng, TEXT_SAMPLES) for i in range(n_ids)}
    if rng.random() < 0.1:
        prompts.pop(next(iter(prompts)))  # a row refers to a missing prompt
    name = "prompt_dict.json" if layout == "alt_prompts" else "prompts.json"
    if layout == "bad_prompts":
        write_text(root / name, pick(rng, ("{", "[1, 2]", "null", '{"ds_0": "\\ud800"}', "")), rng)
    elif layout == "list_prompts":
        write_text(root / name, json.dumps(list(prompts.values())), rng)
    elif layout != "no_prompts":
        write_text(root / name, json.dumps(prompts), rng)
    files = [] if layout == "no_context" else ["context.jsonl"]
    files += [] if layout == "no_query" else [f"{pick(rng, ('train', 'q', 'é😀', 'test.v2'))}.jsonl"]
    for file in files:
        rows = [v0_row(rng, n_ids) for _ in range(int(rng.integers(1, 6)) if rng.random() < 0.95 else 0)]
        write_text(root / file, jsonl_text(rng, rows) if rng.random() < 0.5 else
                   "".join(json.dumps(r) + "\n" for r in rows), rng)  # fmt: skip
    out, err = call(load_v0, root / "nope" if layout == "missing_dir" else root, allow_nan=("output",))
    if err is None:
        for rows in (out.context, *out.queries.values()):
            assert np.all(np.isfinite(rows.score)) and np.all(np.abs(rows.score) <= 1)
            assert all(str(k) in out.prompts for k in rows.prompt_id)


def math_row(rng: np.random.Generator, nested: bool) -> object:
    """A math record (flat or verl-style nested), usually valid, sometimes broken or not an object at all."""
    question = pick(rng, ("1+1?", "Compute $x^2$", "é😀 \u202e", "日本語", "  ", "q" * 50)) + str(rng.integers(0, 4))
    answer = pick(rng, ("2", "\\frac{1}{2}", 3, 0.5, "x")) if rng.random() < 0.9 else pick(
        rng, ("", None, True, [1], float("nan"), {"a": 1}))  # fmt: skip
    if rng.random() < 0.03:
        return pick(rng, ([], "text", 3, None))
    if nested:
        return {"prompt": [{"content": question}], "reward_model": {"ground_truth": answer}}
    row = {"question": question, "answer": answer}
    if rng.random() < 0.1:
        row[pick(rng, ("question", "answer"))] = pick(rng, ODD_VALUES)
    return row


MATH_OPTIONS = {
    "eval_fraction": "prob", "val_fraction": "prob", "seed": "int", "limit": "int", "verify_timeout_s": "float",
}


@fuzz_settings(350)
@given(st.sampled_from((".jsonl", ".jsonl", ".json", ".ndjson", ".parquet", ".pq", ".txt", "")), st.booleans(), SEEDS)
def test_math_file_task_raises_only_valueerror(suffix, nested, seed):
    """make_task("math_file", ...) on malformed JSONL/Parquet files and options: a task whose prompts are non-empty
    strings with unique keys, or a one-line ValueError."""
    tick(__name__)
    rng = np.random.default_rng(seed)
    path = fresh_dir() / f"problems{suffix}"
    records = [math_row(rng, nested) for _ in range(int(rng.integers(1, 8)) if rng.random() < 0.95 else 0)]
    if suffix in (".parquet", ".pq") and rng.random() < 0.8:
        write_parquet(path, records, rng)
    else:
        write_text(path, jsonl_text(rng, records) if rng.random() < 0.6 else
                   "".join(json.dumps(r) + "\n" for r in records), rng)  # fmt: skip
    options: dict[str, object] = {"path": str(path) if rng.random() < 0.95 else str(path) + ".missing"}
    if nested:
        options |= {"question_field": "prompt.0.content", "answer_field": pick(rng, ("reward_model.ground_truth",
                                                                                   "reward_model.x", "prompt.-1"))}
    for option, kind in MATH_OPTIONS.items():
        if rng.random() < 0.15:
            options[option] = messy_option(rng, kind) if rng.random() < 0.5 else pick(rng, (0.0, 0.5, None, 2, 1))
    if rng.random() < 0.1:
        options["eval_path"] = str(path)
    task, err = call(make_task, "math_file", **options, allow_nan=("output",))
    if err is None:
        prompts = [*task.train_prompts(), *task.eval_prompts(), *task.validation_prompts()]
        assert prompts and all(isinstance(p.question, str) and p.question.strip() for p in prompts)
        assert len({p.key for p in prompts}) == len(prompts)


def write_parquet(path: Path, records: list[object], rng: np.random.Generator) -> None:
    """A Parquet file of the records (columns of mixed types stringified), or a truncated / fake one."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [r if isinstance(r, dict) else {"question": str(r)} for r in records]
    columns = {k for r in rows for k in r}
    table = {k: [json.dumps(r.get(k)) if rng.random() < 0.3 else _plain(r.get(k)) for r in rows] for k in columns}
    try:
        pq.write_table(pa.table({k: pa.array(v) for k, v in table.items()}) if table else pa.table({}), path)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        path.write_bytes(b"PAR1 not really parquet PAR1")
        return
    if rng.random() < 0.15:
        path.write_bytes(path.read_bytes()[: int(rng.integers(4, 40))])  # truncated


def _plain(value: object) -> object:
    """Values Arrow can store in one column: strings, or None."""
    if value is None or isinstance(value, dict | list):
        return value if isinstance(value, dict) and value else None
    return str(value).encode("utf-8", "surrogatepass").decode("utf-8", "replace")


TASK_OPTIONS = {
    "arithmetic": {"n_train": "int", "n_eval": "int", "n_val": "int", "seed": "int", "max_digits": "int",
                   "verify_timeout_s": "float", "mix": "mix"},
    "reasoning_gym": {"size_train": "int", "size_eval": "int", "size_val": "int", "seed": "int",
                      "verify_timeout_s": "float", "partial_credit": "bool", "prompt_form": "form",
                      "dataset": "dataset", "config": "config"},
}  # fmt: skip
SMALL = (0, 1, 2, 3, 5, 8)


@fuzz_settings(200)
@given(st.sampled_from(("arithmetic", "arithmetic", "arithmetic", "reasoning_gym", "math", "", None)), SEEDS)
def test_make_task_raises_only_valueerror(name, seed):
    """make_task with unknown names and messy options: a task or a one-line ValueError (sizes are kept small, huge
    sizes are pinned by a regression test below)."""
    tick(__name__)
    rng = np.random.default_rng(seed)
    options: dict[str, object] = {}
    for option, kind in TASK_OPTIONS.get(name, {}).items():
        if option in ("dataset", "config") and name == "reasoning_gym":
            options[option] = pick(rng, ("chain_sum", "nope", "", None)) if option == "dataset" else pick(
                rng, ({}, {"size": 3}, {"min_terms": 2}, {"bogus": 1}, None, []))  # fmt: skip
        elif rng.random() < 0.4:
            if kind == "int":
                options[option] = pick(rng, SMALL) if rng.random() < 0.8 else messy_option(rng, "int")
                if isinstance(options[option], int) and options[option] > 64 and option != "seed":
                    options[option] = 64  # a pool this big is materialised: keep cases fast
            elif kind == "mix":
                options[option] = pick(rng, ((1, 0, 0), (0.5, 0.5), (-1, 1, 1), (0, 0, 0), ("a", 1, 1), None, 3))
            elif kind == "form":
                options[option] = pick(rng, ("full", "compact", "bogus"))
            else:
                options[option] = messy_option(rng, kind)
    if rng.random() < 0.05:
        options["bogus"] = 1
    if name == "arithmetic" and options.get("max_digits", 3) in (1, 2, 3):
        options.setdefault("n_train", 8)
        options.setdefault("n_eval", 4)
        options.setdefault("n_val", 4)
    call(make_task, name, **options, allow_nan=("output",))


ARITHMETIC = make_task("arithmetic", n_train=20, n_eval=5, n_val=0, max_digits=1)
COMPLETIONS = ("42", "-0", "+5", " 7 ", "\\boxed{12}", "<answer>3</answer>", "", "\x00", "é😀", "1e400", "nan",
               "9" * 400, "\ud800", "<answer>", "\\boxed{", "−3", "٣", "1/2")  # fmt: skip


@fuzz_settings(250)
@given(SEEDS)
def test_arithmetic_score_never_raises(seed):
    """ArithmeticTask.score on any completion text (unicode digits, surrogates, huge numbers): rewards in [0, 1]."""
    tick(__name__)
    rng = np.random.default_rng(seed)
    task = ARITHMETIC
    prompts = [pick(rng, task.train_prompts()) for _ in range(int(rng.integers(0, 5)))]
    completions = [pick(rng, COMPLETIONS) + (pick(rng, TEXT_SAMPLES) if rng.random() < 0.3 else "") for _ in prompts]
    scores = task.score(prompts, completions)
    assert len(scores) == len(prompts) and np.all((scores.rewards >= 0) & (scores.rewards <= 1))



def test_arithmetic_huge_pool_is_a_valueerror_regression():
    """A pool beyond the question space or beyond memory is a ValueError (it was OverflowError / MemoryError)."""
    for n in (2**64, 10**30):
        with pytest.raises(ValueError, match="n_train"):
            make_task("arithmetic", n_train=n, max_digits=1)
    with pytest.raises(ValueError, match="n_train"):
        make_task("arithmetic", n_train=2**40, max_digits=18)


def test_v0_step_overflow_is_a_valueerror_regression(tmp_path):
    """A V0 row whose step is Infinity (JSON 1e400) is a ValueError naming the line (it was OverflowError)."""
    (tmp_path / "prompts.json").write_text(json.dumps({"ds_0": "q"}))
    row = '{"id": 0, "score": 0.5, "model": "m", "step": 1e400, "dataset": "ds"}\n'
    (tmp_path / "context.jsonl").write_text(row)
    (tmp_path / "train.jsonl").write_text(row)
    with pytest.raises(ValueError, match="context.jsonl:1"):
        load_v0(tmp_path)

