import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from v05.tasks import ArithmeticTask, Prompt, make_sft_examples
from v05.tasks.arithmetic import normalize_integer

QUESTION = re.compile(r"([0-9]+)([+*-])([0-9]+)")


@pytest.fixture(scope="module")
def task():
    return ArithmeticTask()


def test_hand_scored_rollouts():
    """141-365 = -224: only rollouts whose extracted answer is the integer -224 get reward 1."""
    task = ArithmeticTask(n_train=1, n_eval=1)
    p = Prompt("arithmetic:x", "141-365", "-224")
    completions = {
        "-224": (1.0, False),  # exact
        " - 224 ": (1.0, False),  # spaces ignored
        "-0224": (1.0, False),  # leading zeros: the same integer
        "-224\n-225": (1.0, False),  # first line only
        "<answer>-224</answer>": (1.0, False),
        "\\boxed{-224}": (1.0, False),
        "224": (0.0, False),  # sign matters
        "-225": (0.0, False),  # off by one
        "-224.0": (0.0, True),  # not an integer: format failure
        "-224=": (0.0, True),
        "": (0.0, True),
    }
    scores = task.score([p] * len(completions), list(completions))
    np.testing.assert_array_equal(scores.rewards, [r for r, _ in completions.values()])
    np.testing.assert_array_equal(scores.no_answer, [n for _, n in completions.values()])
    assert scores.failures == 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [("+5", "5"), ("5", "5"), ("-0", "0"), ("+0", "0"), ("000", "0"), (" - 1 2 ", "-12"), ("1e3", None), ("--1", None)],
)
def test_normalize_integer(text, expected):
    """'+5' == '5', '-0' == '0', spaces ignored; anything but sign+digits is not an integer."""
    assert normalize_integer(text) == expected


def test_answers_are_the_exact_results(task):
    """Every question is '{a}{op}{b}' without spaces and its answer is the exact integer result."""
    for p in (*task.train_prompts(), *task.eval_prompts()):
        a, op, b = QUESTION.fullmatch(p.question).groups()
        expected = {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op]
        assert p.answer == str(expected) and task.sft_target(p) == p.answer
        assert p.meta["op"] == {"+": "add", "-": "sub", "*": "mul"}[op]
        assert p.meta["digits"] == max(len(a), len(b)) and max(len(a), len(b)) <= 3
        if op == "*":
            assert len(a) == 1 and len(b) == 2


def test_difficulty_mix_matches_the_weights(task):
    """Op shares of the 2000 training prompts lie within 4 SE of (0.4, 0.4, 0.2); SE = sqrt(w(1 - w)/n).

    A multinomial share leaves 4 SE with probability ~6e-5 per op; the seed is fixed, so the test is deterministic.
    """
    ops = [p.meta["op"] for p in task.train_prompts()]
    n = len(ops)
    assert n == 2000
    for op, w in zip(("add", "sub", "mul"), (0.4, 0.4, 0.2), strict=True):
        share = ops.count(op) / n
        assert abs(share - w) < 4 * np.sqrt(w * (1 - w) / n), (op, share)
    operand_digits = {len(x) for p in task.train_prompts() for x in QUESTION.fullmatch(p.question).group(1, 3)}
    assert operand_digits == {1, 2, 3}


def test_splits_are_disjoint_deterministic_and_keyed(task):
    """2000 train + 1000 eval + 512 validation distinct questions, no overlap between any two; the same seed
    rebuilds identical keys."""
    train, eval_, val = task.train_prompts(), task.eval_prompts(), task.validation_prompts()
    assert len(train) == 2000 and len(eval_) == 1000 and len(val) == 512
    questions = [p.question for p in (*train, *eval_, *val)]
    assert len(set(questions)) == 3512
    keys = [p.key for p in (*train, *eval_, *val)]
    assert len(set(keys)) == 3512 and all(k.startswith("arithmetic:") for k in keys)
    again = ArithmeticTask()
    assert [p.key for p in (*again.train_prompts(), *again.eval_prompts(), *again.validation_prompts())] == keys
    assert again.train_prompts() == train
    other = ArithmeticTask(seed=1)
    assert [p.key for p in other.train_prompts()] != [p.key for p in train]


def test_options_change_the_pool():
    """mix and max_digits are honoured: only mul questions, or only 1-digit add/sub operands."""
    only_mul = ArithmeticTask(n_train=50, n_eval=10, n_val=10, mix=(0, 0, 1))
    assert {p.meta["op"] for p in only_mul.train_prompts()} == {"mul"}
    small = ArithmeticTask(n_train=40, n_eval=10, n_val=10, mix=[1, 1, 0], max_digits=1)
    assert all(p.meta["digits"] == 1 for p in small.train_prompts()) and small.mix == (0.5, 0.5, 0.0)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"mix": (1, 0)}, "mix"),
        ({"mix": (0, 0, 0)}, "mix"),
        ({"mix": (-1, 1, 1)}, "mix"),
        ({"n_train": 0}, "n_train"),
        ({"n_eval": -1}, "n_eval"),
        ({"n_val": -1}, "n_val"),
        ({"n_train": 50, "n_eval": 30, "n_val": 21, "mix": (1, 0, 0), "max_digits": 1}, "n_val"),  # 100 questions
        ({"max_digits": 0}, "max_digits"),
        ({"n_train": 2.5}, "n_train"),
        ({"verify_timeout_s": 0}, "verify_timeout_s"),
        ({"n_train": 1000, "mix": (0, 0, 1)}, "only 900"),  # 10 one-digit × 90 two-digit = 900 mul questions
    ],
)
def test_bad_options_raise(options, match):
    """Invalid options are ValueErrors that name the option (or say why the pool cannot be drawn)."""
    with pytest.raises(ValueError, match=match):
        ArithmeticTask(**options)


def test_sft_examples_avoid_eval_and_validation_and_are_deterministic(task):
    """make_sft_examples draws n fresh prompts, none in the eval or the validation split; same seed, same list. Ops
    follow the mix before the held-out questions are rejected: with tiny held-out splits the mul share is 0.2."""
    examples = make_sft_examples(task, 3000, seed=7)
    assert len(examples) == 3000
    held_out = {p.question for p in (*task.eval_prompts(), *task.validation_prompts())}
    assert len(task.validation_prompts()) == 512 and not {p.question for p in examples} & held_out
    assert make_sft_examples(task, 3000, seed=7) == examples
    assert make_sft_examples(task, 0, seed=7) == []
    few_held_out = ArithmeticTask(n_train=10, n_eval=1, n_val=1)
    examples = make_sft_examples(few_held_out, 3000, seed=7)
    mul_share = sum(p.meta["op"] == "mul" for p in examples) / 3000
    assert abs(mul_share - 0.2) < 4 * np.sqrt(0.2 * 0.8 / 3000)  # 4 SE, as above
    with pytest.raises(ValueError, match="n must be"):
        make_sft_examples(task, -1, seed=0)


@settings(max_examples=100)
@given(st.lists(st.text(), min_size=1, max_size=4))
def test_score_never_raises(completions):
    """Any rollout text gets a reward in {0, 1} without raising or flagging a failure."""
    task = ArithmeticTask(n_train=1, n_eval=1)
    p = Prompt("arithmetic:x", "2+3", "5")
    scores = task.score([p] * len(completions), completions)
    assert set(scores.rewards.tolist()) <= {0.0, 1.0} and scores.failures == 0


def test_held_out_first_keeps_the_eval_and_validation_splits_whatever_the_pool_size():
    """The pool regimes (revisited 2,000 / fresh 40,000 prompts) are judged on the same held-out prompts."""
    small = ArithmeticTask(n_train=50, n_eval=40, n_val=20, mix=(0.5, 0.5, 0.0), held_out_first=True)
    large = ArithmeticTask(n_train=5000, n_eval=40, n_val=20, mix=(0.5, 0.5, 0.0), held_out_first=True)
    assert small.eval_prompts() == large.eval_prompts()
    assert small.validation_prompts() == large.validation_prompts()
    held = {p.question for p in (*large.eval_prompts(), *large.validation_prompts())}
    assert not held & {p.question for p in large.train_prompts()}
    assert len({p.question for p in large.train_prompts()}) == 5000
    # the default order is unchanged (every earlier grid's pools and splits): a pool of another size moves the split
    assert ArithmeticTask(n_train=50, n_eval=40).eval_prompts() != ArithmeticTask(n_train=60, n_eval=40).eval_prompts()


def test_held_out_first_can_use_the_whole_space():
    """mul 1x2-digit holds 900 questions: 100 held out first, the pool takes the 800 left (and one more is refused)."""
    task = ArithmeticTask(n_train=800, n_eval=60, n_val=40, mix=(0.0, 0.0, 1.0), held_out_first=True)
    assert len({p.question for p in (*task.train_prompts(), *task.eval_prompts(), *task.validation_prompts())}) == 900
    with pytest.raises(ValueError, match="only 900 distinct questions exist"):
        ArithmeticTask(n_train=801, n_eval=60, n_val=40, mix=(0.0, 0.0, 1.0), held_out_first=True)
