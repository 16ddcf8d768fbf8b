import string

import numpy as np
import pytest

from v05.tasks import ArithmeticTask, MathFileTask, Prompt, Scores, render_prompt
from v05.tasks.base import check_unique_keys, prompt_key

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
PROMPT = Prompt("arithmetic:x", "141-365", "-224")


@pytest.fixture(scope="module")
def char_tokenizer():
    """A char-level PreTrainedTokenizerFast (WordLevel vocab), as the tiny policy uses; no chat template."""
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    specials = ["<pad>", "<bos>", "<eos>", "<unk>"]
    chars = [c for c in string.printable if c not in "\t\r\x0b\x0c"]
    vocab = {t: i for i, t in enumerate(specials + chars)}
    tk = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.pre_tokenizer = tokenizers.pre_tokenizers.Split(tokenizers.Regex("."), behavior="isolated")
    tk.decoder = tokenizers.decoders.Fuse()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tk, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", unk_token="<unk>"
    )


@pytest.fixture(scope="module")
def task():
    return ArithmeticTask(n_train=2, n_eval=1)


def test_plain_template(task, char_tokenizer):
    """'plain' and 'auto' without a chat template give task.plain_template filled with the question."""
    assert render_prompt(task, PROMPT, None) == "141-365="
    assert render_prompt(task, PROMPT, char_tokenizer) == "141-365="
    assert render_prompt(task, PROMPT, char_tokenizer, template="plain") == "141-365="
    assert char_tokenizer("141-365=")["input_ids"] == [char_tokenizer.convert_tokens_to_ids(c) for c in "141-365="]


def test_chat_template(task, char_tokenizer):
    """'chat' (and 'auto' once a chat template is set) renders system + user(question, instruction) + generation."""
    char_tokenizer = char_tokenizer.__class__(tokenizer_object=char_tokenizer.backend_tokenizer)
    char_tokenizer.chat_template = CHAT_TEMPLATE
    assert render_prompt(task, PROMPT, char_tokenizer, instruction="") == "<|user|>141-365\n<|assistant|>"
    assert render_prompt(
        task, PROMPT, char_tokenizer, template="chat", system_prompt="Be brief.", instruction="Go."
    ) == ("<|system|>Be brief.\n<|user|>141-365\n\nGo.\n<|assistant|>")
    # instruction=None uses the task's chat_instruction
    assert render_prompt(task, PROMPT, char_tokenizer) == (f"<|user|>141-365\n\n{task.chat_instruction}\n<|assistant|>")
    assert render_prompt(task, PROMPT, char_tokenizer, template="plain") == "141-365="


def test_math_file_chat_instruction(tmp_path, char_tokenizer):
    """MathFileTask asks for a boxed answer in chat mode and uses its own plain template otherwise."""
    (tmp_path / "m.jsonl").write_text('{"question": "1+1?", "answer": "2"}\n')
    task = MathFileTask(tmp_path / "m.jsonl", eval_fraction=0.0)
    prompt = task.train_prompts()[0]
    assert render_prompt(task, prompt, None) == "Problem: 1+1?\nSolution:"
    tok = char_tokenizer.__class__(tokenizer_object=char_tokenizer.backend_tokenizer)
    tok.chat_template = CHAT_TEMPLATE
    expected = "<|user|>1+1?\n\nPlease reason step by step, and put your final answer within \\boxed{}.\n<|assistant|>"
    assert render_prompt(task, prompt, tok) == expected


def test_chat_without_template_and_unknown_mode_raise(task, char_tokenizer):
    """'chat' with no chat template (or no tokenizer) names the fix; unknown modes are rejected."""
    for tok in (None, char_tokenizer):
        with pytest.raises(ValueError, match="template='plain'"):
            render_prompt(task, PROMPT, tok, template="chat")
    with pytest.raises(ValueError, match="template must be"):
        render_prompt(task, PROMPT, None, template="jinja")  # type: ignore[arg-type]


def test_prompt_key_is_namespace_and_sha1_prefix():
    """Keys are 'namespace:' + the first 12 hex digits of sha1(question) (sha1('1+1') = 3f5651c4c9a7...)."""
    assert prompt_key("arithmetic", "1+1") == "arithmetic:3f5651c4c9a7"
    assert prompt_key("arithmetic", "1+2") != prompt_key("arithmetic", "1+1")


def test_check_unique_keys_catches_collisions():
    """Two different questions with one key are an error; the same question twice is not."""
    check_unique_keys([Prompt("k", "a", "1"), Prompt("k", "a", "1")], "here")
    with pytest.raises(ValueError, match="share the key 'k'"):
        check_unique_keys([Prompt("k", "a", "1"), Prompt("k", "b", "1")], "here")


def test_scores_failures_counts_errors_and_timeouts_only():
    """failures = errors + timeouts (no_answer is separate): [E, T, N, ok] -> 2."""
    flags = np.array([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]], dtype=bool)
    scores = Scores(np.array([0, 0, 0, 1.0]), flags[2], flags[0], flags[1], (None, "x", None, "1"))
    assert scores.failures == 2 and len(scores) == 4
