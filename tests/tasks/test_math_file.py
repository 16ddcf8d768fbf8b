import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("math_verify")

from v05.tasks import MathFileTask, Prompt  # noqa: E402


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    golds = ["12", "0.5", "3/2", 12, "\\frac{1}{2}", "\\boxed{\\frac{6}{4}}", "-224", "$x = 3$"]
    path = _jsonl(
        tmp_path_factory.mktemp("m") / "m.jsonl", [{"question": f"q{i}", "answer": g} for i, g in enumerate(golds)]
    )
    return MathFileTask(path, eval_fraction=0.0)


@pytest.mark.parametrize(
    ("question", "completion", "reward"),
    [
        ("q0", "\\boxed{12}", 1.0),
        ("q0", "12", 1.0),
        ("q0", "12.0", 1.0),
        ("q0", "The answer is \\boxed{12}.", 1.0),
        ("q0", "<answer>12</answer>", 1.0),  # math-verify alone parses this to nothing; extraction first
        ("q0", "\\boxed{13}", 0.0),
        ("q1", "\\frac{1}{2}", 1.0),  # gold 0.5
        ("q2", "\\boxed{\\frac{6}{4}}", 1.0),  # gold 3/2 = 6/4
        ("q2", "1.5", 1.0),
        ("q3", "12", 1.0),  # a numeric gold (JSON 12)
        ("q4", "0.5", 1.0),  # gold \frac{1}{2}
        ("q5", "3/2", 1.0),  # gold \boxed{\frac{6}{4}}
        ("q6", "-224", 1.0),
        ("q6", "224", 0.0),
        ("q7", "3", 1.0),  # gold $x = 3$
    ],
)
def test_answer_formats(task, question, completion, reward):
    """Boxed, plain, decimal and fraction answers are verified against plain, numeric and LaTeX golds."""
    prompt = next(p for p in task.train_prompts() if p.question == question)
    scores = task.score([prompt], [completion])
    assert scores.rewards[0] == reward and scores.failures == 0


def test_garbage_is_no_answer(task):
    """Unparseable or empty rollouts get reward 0 and the no_answer flag, not an error."""
    p = task.train_prompts()[0]
    scores = task.score([p, p, p], ["garbage", "", "\\boxed{}"])
    assert scores.rewards.tolist() == [0.0] * 3 and scores.no_answer.all() and scores.failures == 0


def test_unparseable_gold_is_an_error(tmp_path):
    """A gold answer math-verify cannot parse (a lone backslash) is a verifier error (reward 0), not a crash."""
    task = MathFileTask(_jsonl(tmp_path / "g.jsonl", [{"question": "q", "answer": "\\"}]), eval_fraction=0.0)
    scores = task.score(task.train_prompts(), ["1"])
    assert scores.errors.tolist() == [True] and scores.rewards.tolist() == [0.0]


def test_nested_fields_split_and_dedup(tmp_path):
    """Dotted fields reach nested values; repeats are dropped; the split is seeded and disjoint (10% of 20 = 2)."""
    rows = [
        {"prompt": [{"role": "user", "content": f"Q{i}"}], "reward_model": {"ground_truth": str(i)}} for i in range(20)
    ]
    path = _jsonl(tmp_path / "verl.jsonl", [*rows, rows[3]])
    kwargs = {"question_field": "prompt.0.content", "answer_field": "reward_model.ground_truth"}
    task = MathFileTask(path, **kwargs)
    train, eval_ = task.train_prompts(), task.eval_prompts()
    assert len(train) == 18 and len(eval_) == 2
    assert not {p.question for p in train} & {p.question for p in eval_}
    assert all(p.answer == p.question[1:] for p in (*train, *eval_))
    assert [p.key for p in MathFileTask(path, **kwargs).eval_prompts()] == [p.key for p in eval_]
    assert train[0].meta == {"file": "verl.jsonl", "index": 0} and train[0].key.startswith("math:")
    assert len(MathFileTask(path, **kwargs, limit=10).train_prompts()) == 9  # 10 rows, 1 held out


def test_val_fraction_holds_out_training_problems(tmp_path):
    """val_fraction takes a seeded share of the training problems (25% of 18 ≈ 4) as a validation split disjoint from
    train and eval; the default 0 keeps every training problem."""
    path = _jsonl(tmp_path / "p.jsonl", [{"question": f"q{i}", "answer": i} for i in range(20)])
    task = MathFileTask(path, val_fraction=0.25)
    train, eval_, val = task.train_prompts(), task.eval_prompts(), task.validation_prompts()
    assert (len(train), len(eval_), len(val)) == (14, 2, 4)
    assert len({p.question for p in (*train, *eval_, *val)}) == 20
    assert MathFileTask(path).validation_prompts() == ()
    with pytest.raises(ValueError, match="val_fraction"):
        MathFileTask(path, val_fraction=1.0)


def test_eval_path_drops_overlap(tmp_path):
    """With eval_path, all of path trains and eval keeps only the eval file's problems not in train."""
    train_path = _jsonl(tmp_path / "a.jsonl", [{"question": "a", "answer": 1}, {"question": "b", "answer": 2}])
    eval_path = _jsonl(tmp_path / "b.jsonl", [{"question": "b", "answer": 2}, {"question": "c", "answer": 3}])
    task = MathFileTask(train_path, eval_path=eval_path)
    assert [p.question for p in task.train_prompts()] == ["a", "b"]
    assert [p.question for p in task.eval_prompts()] == ["c"]


def test_parquet_with_nested_fields(tmp_path):
    """A verl/DAPO-style Parquet file (struct and list columns) loads with dotted fields."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = [
        {"prompt": [{"role": "user", "content": f"Q{i}"}], "reward_model": {"ground_truth": f"{i}/2"}} for i in range(5)
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d.parquet")
    task = MathFileTask(
        tmp_path / "d.parquet",
        question_field="prompt.0.content",
        answer_field="reward_model.ground_truth",
        eval_fraction=0.0,
    )
    p = task.train_prompts()[3]
    assert (p.question, p.answer) == ("Q3", "3/2")
    assert task.score([p, p], ["\\boxed{1.5}", "\\boxed{3}"]).rewards.tolist() == [1.0, 0.0]  # 3/2 = 1.5
    with pytest.raises(ValueError, match=r"d.parquet row 0: no field 'reward_model.gt' \(missing 'gt'"):
        MathFileTask(tmp_path / "d.parquet", question_field="prompt.0.content", answer_field="reward_model.gt")


@pytest.mark.parametrize(
    ("lines", "options", "match"),
    [
        (['{"question": "a", "answer": 1}', '{"question": "b"}'], {}, r"bad.jsonl line 2: no field 'answer'"),
        (
            ['{"q": "a", "answer": 1}'],
            {},
            r"line 1: no field 'question' \(missing 'question'; it has \['answer', 'q'\]",
        ),
        (['{"question": "a", "answer": 1}', "", "{oops"], {}, "line 3: not a JSON object"),
        (['{"question": 3, "answer": 1}'], {}, "line 1: field 'question' must be a non-empty string"),
        (['{"question": "a", "answer": [1]}'], {}, "line 1: field 'answer' must be a non-empty string or number"),
        (['{"question": "a", "answer": {"x": 1}}'], {"answer_field": "answer.y"}, "no field 'answer.y'"),
        (['{"question": "a", "answer": 1}'], {"eval_fraction": 1.0}, "eval_fraction"),
        (['{"question": "a", "answer": 1}'], {"limit": 0}, "limit"),
    ],
)
def test_bad_files_name_file_line_and_field(tmp_path, lines, options, match):
    """Malformed records and options are ValueErrors naming the file, the line and the field."""
    (tmp_path / "bad.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=match):
        MathFileTask(tmp_path / "bad.jsonl", **options)


def test_missing_and_unknown_files(tmp_path):
    """A missing file or an unknown suffix is a ValueError naming the path."""
    with pytest.raises(ValueError, match="nope.jsonl not found"):
        MathFileTask(tmp_path / "nope.jsonl")
    (tmp_path / "x.csv").write_text("question,answer\n")
    with pytest.raises(ValueError, match="x.csv: unknown file type '.csv'"):
        MathFileTask(tmp_path / "x.csv")


def test_timeout_flags_a_hanging_verifier(task, monkeypatch):
    """A math-verify call that hangs is cut at verify_timeout_s and flagged as a timeout."""
    import time

    import v05.tasks.math_file as math_file

    def hang(*args, **kwargs):
        while True:
            time.sleep(0.01)

    monkeypatch.setattr(math_file, "_math_verify", (hang, hang))
    slow = MathFileTask(task.path, eval_fraction=0.0, verify_timeout_s=0.2)
    start = time.monotonic()
    scores = slow.score(slow.train_prompts()[:1], ["12"])
    assert time.monotonic() - start < 0.2 + 0.5
    np.testing.assert_array_equal(scores.timeouts, [True])
    assert scores.rewards[0] == 0.0 and scores.failures == 1


@settings(max_examples=30)
@given(st.lists(st.text(max_size=40), min_size=1, max_size=3))
def test_score_never_raises(task, completions):
    """Any rollout text gets a reward in {0, 1} without raising."""
    p = task.train_prompts()[0]
    assert set(task.score([p] * len(completions), completions).rewards.tolist()) <= {0.0, 1.0}


def test_prompt_from_another_file_is_scored_by_its_answer(task):
    """math_file scoring only needs the prompt's gold answer: 1/4 = 0.25."""
    assert task.score([Prompt("math:x", "?", "\\frac{1}{4}")], ["0.25"]).rewards.tolist() == [1.0]
