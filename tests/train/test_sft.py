import numpy as np
import pytest
import torch

import v05.train.sft as sft
from v05.engines import GenerationConfig, HFEngine
from v05.train.policy import PolicyConfig, load_policy
from v05.train.sft import SFTConfig, sft_warmup

torch.set_num_threads(1)

# toy task: 1-digit sums "a+b=" → "a+b" as text (100 problems, answers 0-18)
EXAMPLES = [(f"{a}+{b}=", f"{a + b}") for a in range(10) for b in range(10)]


def make_evaluate(tok, seed=7):
    """Sampled (T = 1) pass rate over every problem, twice, with a fixed sampling seed at every evaluation."""

    def evaluate(model):
        eng = HFEngine(model, tok, GenerationConfig(max_new_tokens=4), seed=seed)
        r = eng.generate([p for p, _ in EXAMPLES], [2] * len(EXAMPLES))
        gold = [EXAMPLES[i][1] for i in r.prompt_index]
        return float(np.mean([t == g for t, g in zip(r.texts, gold, strict=True)]))

    return evaluate


def test_sft_reaches_a_modest_sampled_pass_rate_on_one_digit_sums():
    """A tiny model goes from ~0 to ≥ 40 % sampled pass within 400 steps; loss falls; history ends at the stop."""
    model, tok = load_policy(PolicyConfig(seed=0))
    evaluate = make_evaluate(tok)
    assert evaluate(model) < 0.05
    config = SFTConfig(batch_size=64, warmup_steps=10, eval_every=25, max_steps=400, target_pass_rate=0.4)
    res = sft_warmup(model, tok, EXAMPLES, evaluate=evaluate, config=config, progress=False)
    assert res.reached and res.pass_rate >= 0.4 and res.steps < 400
    assert res.history[-1] == (res.steps, res.pass_rate)
    assert [s for s, _ in res.history] == list(range(25, res.steps + 1, 25))
    assert all(p < 0.4 for _, p in res.history[:-1])
    assert len(res.losses) == res.steps and np.mean(res.losses[-10:]) < 0.5 * np.mean(res.losses[:10])
    assert model.training and res.seconds > 0


def test_max_steps_stops_an_unreachable_target():
    """target 1.0 cannot be hit in 20 steps: reached is False and the final step is still evaluated."""
    model, tok = load_policy(PolicyConfig(seed=0))
    config = SFTConfig(batch_size=32, eval_every=25, max_steps=20, target_pass_rate=1.0)
    res = sft_warmup(model, tok, EXAMPLES, evaluate=make_evaluate(tok), config=config, progress=False)
    assert not res.reached and res.steps == 20
    assert res.history == ((20, res.pass_rate),) and res.pass_rate < 1.0


def test_max_seconds_stops_early():
    """A wall-time budget stops training (and evaluates once) before max_steps."""
    model, tok = load_policy(PolicyConfig(seed=0))
    config = SFTConfig(batch_size=8, max_steps=5000, max_seconds=0.3, target_pass_rate=1.0)
    res = sft_warmup(model, tok, EXAMPLES, evaluate=lambda m: 0.0, config=config, progress=False)
    assert not res.reached and res.steps < 5000 and res.history == ((res.steps, 0.0),)


def test_same_seed_same_training():
    """Batch order comes from config.seed only: two runs from the same weights give identical losses."""
    runs = []
    for _ in range(2):
        model, tok = load_policy(PolicyConfig(seed=0))
        config = SFTConfig(batch_size=16, max_steps=5, eval_every=5, target_pass_rate=1.0, seed=3)
        runs.append(sft_warmup(model, tok, EXAMPLES, evaluate=lambda m: 0.0, config=config, progress=False).losses)
    assert runs[0] == runs[1]


def test_bad_inputs_are_value_errors():
    """Empty examples, a too-long example and an out-of-range pass rate raise ValueError."""
    model, tok = load_policy(PolicyConfig(seed=0))
    config = SFTConfig(max_steps=1, eval_every=1)
    with pytest.raises(ValueError, match="empty"):
        sft_warmup(model, tok, [], evaluate=lambda m: 0.0, config=config, progress=False)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        sft_warmup(model, tok, [("1=", "9" * 200)], evaluate=lambda m: 0.0, config=config, progress=False)
    with pytest.raises(ValueError, match="pass rate"):
        sft_warmup(model, tok, EXAMPLES, evaluate=lambda m: 3.0, config=config, progress=False)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"lr": 0.0}, "lr"),
        ({"batch_size": 0}, "batch_size"),
        ({"warmup_steps": -1}, "warmup_steps"),
        ({"weight_decay": -0.1}, "weight_decay"),
        ({"betas": (0.9, 1.0)}, "betas"),
        ({"target_pass_rate": 1.5}, "target_pass_rate"),
        ({"eval_every": 0}, "eval_every"),
        ({"eval_size": 0}, "eval_size"),
        ({"max_steps": 0}, "max_steps"),
        ({"max_seconds": 0.0}, "max_seconds"),
        ({"seed": -1}, "seed"),
    ],
)
def test_bad_sft_config_names_the_field(kwargs, field):
    """Invalid fields raise ValueError naming the field."""
    with pytest.raises(ValueError, match=field):
        SFTConfig(**kwargs)


def test_the_progress_bar_shows_no_pass_rate_before_the_first_check(monkeypatch):
    """With progress on, each step's postfix gives the loss; the pass rate appears from the first check on (step 3
    here), never as 'nan' before it."""
    shown = []
    monkeypatch.setattr(sft.tqdm, "set_postfix", lambda self, ordered_dict=None, refresh=True, **kw: shown.append(
        dict(ordered_dict or {}, **kw)))  # fmt: skip
    model, tok = load_policy(PolicyConfig(seed=0))
    config = SFTConfig(batch_size=4, eval_every=3, max_steps=4, target_pass_rate=1.0)
    sft_warmup(model, tok, EXAMPLES, evaluate=lambda m: 0.25, config=config, progress=True)
    assert [sorted(p) for p in shown] == [["loss"], ["loss"], ["loss", "pass_rate"], ["loss", "pass_rate"]]
    assert [p.get("pass_rate") for p in shown] == [None, None, "0.250", "0.250"]
