"""The multi-domain task (``mixture``): keys, routing of the verifier, splits, leak filter and warm-up examples."""

from __future__ import annotations

import pytest

from v05.tasks import make_task
from v05.tasks.arithmetic import ArithmeticTask
from v05.tasks.mixture import Mixture

EASY = {"task": "arithmetic", "options": {"n_train": 40, "n_eval": 10, "n_val": 5, "max_digits": 1,
                                           "mix": [1.0, 0.0, 0.0], "seed": 1}}  # fmt: skip
HARD = {"task": "arithmetic", "options": {"n_train": 60, "n_eval": 20, "n_val": 8, "mix": [0.0, 0.0, 1.0]}}


def mixture(*components: dict) -> Mixture:
    return make_task("mixture", components=list(components))  # type: ignore[return-value]


def test_splits_are_the_components_splits_concatenated_with_prefixed_keys():
    """A mixture's splits are its components' splits in order, keys prefixed mix<i>. so they stay distinct."""
    task = mixture(EASY, HARD)
    assert (len(task.train_prompts()), len(task.eval_prompts()), len(task.validation_prompts())) == (100, 30, 13)
    keys = [p.key for p in (*task.train_prompts(), *task.eval_prompts(), *task.validation_prompts())]
    assert len(set(keys)) == len(keys)
    assert {p.meta["component"] for p in task.train_prompts()} == {0, 1}
    assert all(p.key.startswith(f"mix{p.meta['component']}.") for p in task.train_prompts())
    assert task.plain_template == "{question}="


def test_each_prompt_is_scored_by_its_own_component():
    """The same question in two components keeps two keys; each rollout meets its component's verifier."""
    task = mixture(EASY, HARD)
    prompts = [task.train_prompts()[0], task.train_prompts()[-1], task.eval_prompts()[-1], task.train_prompts()[1]]
    gold = [task.sft_target(p) for p in prompts]
    assert task.score(prompts, gold).rewards.tolist() == [1.0, 1.0, 1.0, 1.0]
    wrong = [gold[1], gold[0], "zzz", gold[3]]  # two components' answers swapped: both wrong
    assert task.score(prompts, wrong).rewards.tolist() == [0.0, 0.0, 0.0, 1.0]


def test_a_question_another_component_holds_out_is_no_training_prompt():
    """Overlapping components (1-digit sums inside 1-3 digit add/sub) must not leak eval questions into training."""
    wide = {"task": "arithmetic", "options": {"n_train": 300, "n_eval": 60, "n_val": 20, "max_digits": 1,
                                               "mix": [1.0, 0.0, 0.0], "seed": 2}}  # fmt: skip  (100 questions)
    narrow = {"task": "arithmetic", "options": {"n_train": 10, "n_eval": 50, "n_val": 20, "max_digits": 1,
                                                 "mix": [1.0, 0.0, 0.0], "seed": 3}}  # fmt: skip
    with pytest.raises(ValueError, match="distinct"):
        mixture(wide, narrow)  # 380 > 100 questions: the component itself refuses
    wide["options"] |= {"n_train": 20}
    task = mixture(wide, narrow)
    held = {p.question for p in (*task.eval_prompts(), *task.validation_prompts())}
    assert not held & {p.question for p in task.train_prompts()}
    assert len(task.train_prompts()) < 30  # some were dropped: the overlap is real


def test_warm_up_examples_take_each_components_share_and_score_through_the_mixture():
    """Warm-up examples come from each component in proportion to its pool (40:60 → 20:30), score 1 on their own
    targets and are seeded."""
    task = mixture(EASY, HARD)
    examples = task.sft_examples(50, seed=7)
    assert len(examples) == 50
    shares = [sum(p.meta["component"] == i for p in examples) for i in (0, 1)]
    assert shares == [20, 30]  # pools of 40 and 60
    assert task.score(examples, [task.sft_target(p) for p in examples]).rewards.tolist() == [1.0] * 50
    assert [p.key for p in task.sft_examples(50, seed=7)] == [p.key for p in examples]  # seeded


@pytest.mark.parametrize(
    ("components", "match"),
    [
        ([EASY], "at least 2"),
        ([EASY, {"task": "mixture", "options": {}}], "cannot hold a mixture"),
        ([EASY, {"name": "arithmetic"}], "must be"),
        ([EASY, {"task": "arithmetic", "options": {"n_trian": 3}}], r"component 1: task .arithmetic. has no option"),
        ("arithmetic", "list of"),
    ],
)
def test_bad_components_are_one_clear_error(components, match):
    """Each malformed component list is one ValueError that says what is wrong."""
    with pytest.raises(ValueError, match=match):
        make_task("mixture", components=components)


def test_a_prompt_from_elsewhere_is_refused():
    """Scoring a prompt that is not from the mixture is a ValueError, not a silent score."""
    task = mixture(EASY, HARD)
    other = ArithmeticTask(n_train=2, n_eval=1, n_val=1).train_prompts()[0]
    with pytest.raises(ValueError, match="not from this mixture"):
        task.score([other], ["1"])
