import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("reasoning_gym")

from v05.tasks import GymTask, Prompt, render_prompt  # noqa: E402
from v05.tasks.gym import COMPACTORS, EVAL_SEED_OFFSET, printable_text  # noqa: E402

CHAIN_SUM = {"min_terms": 2, "max_terms": 2, "min_digits": 2, "max_digits": 3}


@pytest.fixture(scope="module")
def chain_sum():
    return GymTask("chain_sum", size_train=300, size_eval=100, config=CHAIN_SUM)


def test_gold_and_wrapped_answers_score_one(chain_sum):
    """Gold answers score 1 bare, in <answer> tags and boxed; garbage and partial matches score 0."""
    prompts = chain_sum.train_prompts()[:20]
    for wrap in ("{}", " {} ", "<answer>{}</answer>", "\\boxed{{{}}}", "work...\n<answer>\\boxed{{{}}}</answer>"):
        scores = chain_sum.score(prompts, [wrap.format(p.answer) for p in prompts])
        assert scores.rewards.tolist() == [1.0] * 20, wrap
    scores = chain_sum.score(prompts, ["zzz"] * 20)
    assert scores.rewards.tolist() == [0.0] * 20 and scores.failures == 0


def test_the_first_chain_sum_item_by_hand(chain_sum):
    """Item 0 of chain_sum (seed 0, 2 terms of 2-3 digits) is '141 - 365 =' with answer 141 - 365 = -224."""
    p = chain_sum.train_prompts()[0]
    assert p.question.endswith("141 - 365 =") and p.answer == "-224" and p.meta == {"split": "train", "index": 0}
    assert p.key.startswith("chain_sum:") and chain_sum.sft_target(p) == "-224"
    assert chain_sum.score([p] * 3, ["<answer>-224</answer>", "\\boxed{-224}", "-225"]).rewards.tolist() == [1, 1, 0]


def test_basic_arithmetic_binary_by_default():
    """basic_arithmetic's scorer gives ' -4 '-style partial credit; the task binarises unless partial_credit=True."""
    task = GymTask("basic_arithmetic", size_train=20, size_eval=5)
    p = task.train_prompts()[0]
    text = f"The answer is {p.answer}"  # gold is a substring: reasoning-gym scores len(gold)/len(text)
    assert task.score([p, p], [p.answer, text]).rewards.tolist() == [1.0, 0.0]
    partial = GymTask("basic_arithmetic", size_train=20, size_eval=5, partial_credit=True)
    assert partial.score([p], [text]).rewards[0] == pytest.approx(len(p.answer) / len(text))


def test_raising_scorer_gives_error_flag():
    """prime_factorization's scorer raises ValueError on 'zzz': reward 0 with errors set, and the gold scores 1."""
    task = GymTask("prime_factorization", size_train=10, size_eval=5)
    p = task.train_prompts()[0]
    scores = task.score([p, p, p], ["zzz", p.answer, ""])
    np.testing.assert_array_equal(scores.rewards, [0.0, 1.0, 0.0])
    np.testing.assert_array_equal(scores.errors, [True, False, False])
    np.testing.assert_array_equal(scores.no_answer, [False, False, True])
    assert scores.failures == 1


def test_splits_disjoint_deterministic_keys_unique(chain_sum):
    """No question in both splits; keys unique and identical across two constructions; eval uses another seed."""
    train_q = {p.question for p in chain_sum.train_prompts()}
    assert not train_q & {p.question for p in chain_sum.eval_prompts()}
    keys = [p.key for p in (*chain_sum.train_prompts(), *chain_sum.eval_prompts())]
    assert len(keys) == len(set(keys))
    assert len(chain_sum.train_prompts()) <= 300 and len(chain_sum.eval_prompts()) >= 50
    again = GymTask("chain_sum", size_train=300, size_eval=100, config=CHAIN_SUM)
    assert [p.key for p in (*again.train_prompts(), *again.eval_prompts())] == keys
    shifted = GymTask("chain_sum", size_train=100, size_eval=0, seed=EVAL_SEED_OFFSET, config=CHAIN_SUM)
    assert shifted.train_prompts()[0].question == chain_sum.eval_prompts()[0].question
    assert chain_sum.name == "reasoning_gym.chain_sum"


def test_validation_split_is_disjoint_from_train_and_eval(chain_sum):
    """The validation split (a third seed) holds none of the train or eval questions and is scored like them."""
    val = chain_sum.validation_prompts()
    seen = {p.question for p in (*chain_sum.train_prompts(), *chain_sum.eval_prompts())}
    assert len(val) >= 20 and not seen & {p.question for p in val}
    assert all(p.meta["split"] == "val" for p in val)
    assert chain_sum.score(val[:2], [f"<answer>{p.answer}</answer>" for p in val[:2]]).rewards.tolist() == [1.0, 1.0]


def test_unknown_dataset_and_bad_config_raise():
    """An unknown name lists close and valid names; a config the dataset rejects is a ValueError naming it."""
    with pytest.raises(ValueError, match="did you mean chain_sum.*valid names include"):
        GymTask("chain_sun")
    with pytest.raises(ValueError, match="'chain_sum' rejected config.*bogus"):
        GymTask("chain_sum", config={"bogus": 1})
    with pytest.raises(ValueError, match="max_terms"):
        GymTask("chain_sum", config={"min_terms": 5, "max_terms": 2})
    with pytest.raises(ValueError, match="size_train"):
        GymTask("chain_sum", size_train=0)
    with pytest.raises(ValueError, match="size_val"):
        GymTask("chain_sum", size_val=-1)


def test_prompts_from_elsewhere_are_rejected(chain_sum):
    """Scoring needs the dataset entry, so a prompt the task did not make is a ValueError."""
    with pytest.raises(ValueError, match="not from"):
        chain_sum.score([Prompt("chain_sum:nope", "1+1", "2")], ["2"])


def test_printing_datasets_are_silenced(capsys):
    """bf prints progress dots while generating; the task keeps stdout clean."""
    GymTask("bf", size_train=2, size_eval=1)
    assert capsys.readouterr().out == ""


@settings(max_examples=40)
@given(st.lists(st.text(), min_size=1, max_size=3))
def test_score_never_raises(chain_sum, completions):
    """Any rollout text gets a binary reward without raising."""
    p = chain_sum.train_prompts()[0]
    assert set(chain_sum.score([p] * len(completions), completions).rewards.tolist()) <= {0.0, 1.0}


# Item 0 of each dataset at seed 0 and default config, copied from reasoning_gym.create_dataset(name, size=3, seed=0).
COMPACT_ITEM_0 = [
    ("spell_backward", "Spell this word backward (example: sun -> nus): hypomeron", "hypomeron", "noremopyh"),
    ("letter_counting", 'How many times does the letter "b" appear in the text: "phrase Project Gutenberg associated '
     'with or appearing on the work you"?', "b:phrase Project Gutenberg associated with or appearing on the work you",
     "1"),
    ("chain_sum", "State the final answer to the following arithmetic problem: 1663 - 5242 - 9376 - 8961 + 7634 =",
     "1663-5242-9376-8961+7634", "-14282"),
    ("basic_arithmetic", "Calculate -1515 / 5 + -( -2842 * -5436 ) * -6892.", "-1515/5+-(-2842*-5436)*-6892",
     "106475279601"),
    ("products", "Solve the following multiplication: 1663 * 5242. Give only the result as your final answer.",
     "1663*5242", "8717446"),
    ("count_bits", "How many 1 bits are there in the binary representation of the number 1813382119?", "1813382119",
     "15"),
    ("gcd", "Find the Greatest Common Divisor (GCD) of these numbers: 777, 912. Give only the GCD as your final "
     "answer.", "777,912", "3"),
    ("lcm", "Find the Least Common Multiple (LCM) of these numbers: 98, 54", "98,54", "2646"),
]  # fmt: skip


@pytest.mark.parametrize(("dataset", "full", "compact", "answer"), COMPACT_ITEM_0, ids=[c[0] for c in COMPACT_ITEM_0])
def test_compact_form_of_real_entries(dataset, full, compact, answer):
    """Each compactor turns the real item 0 into its short form, rendered '{question}='; the full form keeps the text
    and its 'Question: ... Answer:' template; the gold answer scores 1 in both forms (the dataset's own scorer)."""
    short = GymTask(dataset, size_train=3, size_eval=1, size_val=1, prompt_form="compact")
    long = GymTask(dataset, size_train=3, size_eval=1, size_val=1)
    p, q = short.train_prompts()[0], long.train_prompts()[0]
    assert (q.question, q.answer) == (full, answer) and (p.question, p.answer) == (compact, answer)
    assert render_prompt(short, p, None) == compact + "="
    assert render_prompt(long, q, None) == f"Question: {full}\nAnswer:"
    assert short.score([p, p], [answer, answer + "0"]).rewards.tolist() == [1.0, 0.0]
    assert p.key != q.key and p.key.startswith(f"{dataset}:")


def test_compact_fallback_collapses_whitespace_and_drops_non_ascii():
    """A dataset without a compactor keeps its question with whitespace runs collapsed and non-ASCII dropped:
    prime_factorization item 0 (seed 0) writes '×' (U+00D7) between factors; word_sorting's has blank lines."""
    assert "prime_factorization" not in COMPACTORS and "word_sorting" not in COMPACTORS
    task = GymTask("prime_factorization", size_train=2, size_eval=1, size_val=1, prompt_form="compact")
    p = task.train_prompts()[0]
    assert p.question == (
        "Find the prime factorization of 866. Write the factors separated by (Example: for 12 the answer would be: 2 "
        "2 3)"
    )
    assert task.score([p], [p.answer]).rewards.tolist() == [1.0]  # gold '2 × 433', scored on the entry
    words = GymTask("word_sorting", size_train=2, size_eval=1, size_val=1, prompt_form="compact").train_prompts()[0]
    assert "\n" not in words.question and "  " not in words.question
    assert words.question.startswith("Your task is to sort words in ascending or descending order using ASCII/Unicode "
                                     "ordering. Your output should be")  # fmt: skip
    assert printable_text(" a\t\u00e9 b\n\nc ") == "a b c"  # 'é' dropped, then its spaces collapse too


def test_questions_that_coincide_after_compaction_are_kept_once(monkeypatch):
    """With a compactor that maps every entry to one text, the pool keeps one prompt and the other splits none
    (they would repeat a train question); the kept prompt still scores against its own entry."""
    monkeypatch.setitem(COMPACTORS, "spell_backward", lambda entry: "same")
    task = GymTask("spell_backward", size_train=20, size_eval=5, size_val=5, prompt_form="compact")
    assert [p.question for p in task.train_prompts()] == ["same"]
    assert task.eval_prompts() == () and task.validation_prompts() == ()
    p = task.train_prompts()[0]
    assert p.answer == "noremopyh" and task.score([p], ["noremopyh"]).rewards.tolist() == [1.0]


def test_bad_prompt_form_raises():
    """prompt_form is 'full' or 'compact'; anything else is a one-line ValueError naming both."""
    with pytest.raises(ValueError, match="prompt_form must be 'full' or 'compact', got 'short'"):
        GymTask("spell_backward", size_train=2, prompt_form="short")  # type: ignore[arg-type]


def test_held_out_first_keeps_the_eval_and_validation_splits_whatever_the_pool_size():
    """Generated before the pool, the held-out splits do not depend on size_train (revisited and fresh pools)."""
    kw = {"size_eval": 30, "size_val": 10, "held_out_first": True, "prompt_form": "compact",
          "config": {"min_word_len": 3, "max_word_len": 5}}  # fmt: skip
    small, large = GymTask("spell_backward", size_train=20, **kw), GymTask("spell_backward", size_train=400, **kw)
    assert small.eval_prompts() == large.eval_prompts()
    assert small.validation_prompts() == large.validation_prompts()
    held = {p.question for p in (*large.eval_prompts(), *large.validation_prompts())}
    assert not held & {p.question for p in large.train_prompts()}
    assert len(large.train_prompts()) > 300
