"""The verl example at real scale, in the verl environment (``v05[dev,verl]``, as ``make test`` builds it).

``examples/verl/run_qwen3_4b_dapo.sh``'s prior must run with what ``v05[verl]`` installs; its OSLA schedule must
keep a step's synchronous generation rounds few; ``examples/verl/add_problem_text.py`` must give the prior the bare
DAPO problem text. The plugin's own contract tests are in ``test_verl.py``.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("verl")
pytest.importorskip("verl.trainer.ppo.ray_trainer", reason="verl installed without its dependencies (v05[verl])")

from omegaconf import OmegaConf  # noqa: E402

from v05.adapters.verl import VerlConfig  # noqa: E402
from v05.allocation import allocate  # noqa: E402
from v05.priors import make_provider  # noqa: E402
from v05.registry import get_allocator  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "verl"
DAPO_TEMPLATE = (  # the user turn of DAPO-Math-17k's verl parquet
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n{problem}\n\n"
    'Remember to put your answer on its own line after "Answer:".'
)


def example_v05_config() -> VerlConfig:
    """The ``+algorithm.v05.*`` overrides of the launch script's V05 array, with the script's variable defaults."""
    text = (EXAMPLE / "run_qwen3_4b_dapo.sh").read_text()
    defaults = dict(re.findall(r"^(\w+)=\$\{\1:-([^}]*)\}", text, flags=re.M))
    body = text.split("\nV05=(\n", 1)[1].split("\n)\n", 1)[0]
    args = [a for line in body.splitlines() if not line.strip().startswith("#") for a in shlex.split(line)]
    dotlist = [re.sub(r"\$\{(\w+)\}", lambda m: defaults[m.group(1)], a)[len("+algorithm.") :] for a in args]
    algorithm = OmegaConf.from_dotlist([a for a in dotlist if a.startswith("v05.")])
    return VerlConfig.from_algorithm(algorithm)


def dapo_problems(n: int) -> list[str]:
    """``n`` bare DAPO-Math problem texts (the V0 data bundled with v05)."""
    prompts = json.loads(resources.files("v05.datasets").joinpath("v0_dapomath/prompts.json").read_text())
    return [prompts[k] for k in sorted(prompts)[:n]]


def test_the_examples_prior_runs_with_the_verl_extra(tmp_path, monkeypatch):
    """The provider built from the example's config (``v0`` on MiniLM, its default ``PRIOR_BACKEND``) learns a full
    context (``update``, min_context groups) and then embeds new prompts (``predict``) in the environment
    ``v05[verl]`` installs; before, ``predict`` raised ``ModuleNotFoundError: sentence_transformers`` here as soon
    as the context filled (a real run's step 2)."""
    monkeypatch.setenv("V05_CACHE_DIR", str(tmp_path))  # the embedding cache, off the home directory
    cfg = example_v05_config()
    assert (cfg.provider, cfg.provider_options["backend"]) == ("v0", "minilm")
    provider = make_provider(cfg.provider, **cfg.provider_options)
    n_ctx = provider.min_context
    texts = dapo_problems(n_ctx + 8)
    rng = np.random.default_rng(0)
    scores = rng.choice([-1.0, -0.5, 0.0, 0.5, 1.0], size=n_ctx)  # (C,) group means, ±1 space
    provider.update([str(i) for i in range(n_ctx)], texts[:n_ctx], scores, np.full(n_ctx, 4.0), step=1)
    pred = provider.predict([str(i) for i in range(n_ctx, n_ctx + 8)], texts[n_ctx:])
    assert provider.fits_, "the head was not fitted: predict fell back to the running mean"
    assert np.all(np.isfinite(pred.mean)) and np.all(np.abs(pred.mean) <= 1.0)
    assert np.ptp(pred.mean) > 0  # embedded: prompts get different priors, not one running mean


def test_the_examples_osla_schedule_keeps_generation_rounds_few():
    """The example's OSLA settings (k_init 4 → k_max 16, c = 0.0039, its schedule) finish a simulated 384-prompt step
    in at most 6 synchronous generation rounds (round 0 included); ``plus_one`` needs 13 on the same population (one
    per extra rollout up to k_max), each waiting for the slowest response. Population: p ~ Beta(0.6, 0.6), prior =
    p + N(0, 0.25²) clipped, ±1 rewards, 5 seeds."""
    cfg = example_v05_config()
    example, rounds = cfg.allocator_options["schedule"], {}
    for schedule in (example, "plus_one"):
        osla = get_allocator("osla", **{**cfg.allocator_options, "schedule": schedule})
        worst = 0
        for seed in range(5):
            rng = np.random.default_rng(seed)
            p = rng.beta(0.6, 0.6, size=384)  # (G,) true pass rates
            prior = 2 * np.clip(p + rng.normal(0, 0.25, size=384), 0, 1) - 1  # (G,) ±1 prior

            def sample(ids, counts, p=p, rng=rng):
                draws = [np.where(rng.random(c) < p[i], 1.0, -1.0) for i, c in zip(ids, counts, strict=True)]
                return np.concatenate(draws)

            step = allocate(osla, sample, n_prompts=384, rng=np.random.default_rng(seed), prior=prior)
            worst = max(worst, step.rounds)
        rounds[schedule] = worst
    assert rounds[example] <= 6 < 12 <= rounds["plus_one"], rounds


def test_add_problem_text_recovers_the_bare_problem(tmp_path):
    """``add_problem_text.py`` turns a verl DAPO-Math-17k parquet (chat-wrapped prompts) into one whose
    ``extra_info["question"]`` is exactly the bundled V0 problem text, keeping the other fields; prompts not in DAPO's
    template raise."""
    import pandas as pd

    spec = importlib.util.spec_from_file_location("add_problem_text", EXAMPLE / "add_problem_text.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    problems = dapo_problems(3)
    frame = pd.DataFrame(
        {
            "data_source": ["math_dapo"] * 3,
            "prompt": [[{"role": "user", "content": DAPO_TEMPLATE.format(problem=q)}] for q in problems],
            "reward_model": [{"ground_truth": "1", "style": "rule"}] * 3,
            "extra_info": [{"index": f"id-{i}"} for i in range(3)],
        }
    )
    src, dst = tmp_path / "dapo.parquet", tmp_path / "dapo-v05.parquet"
    frame.to_parquet(src)
    assert script.main([str(src), str(dst)]) == 0
    out = pd.read_parquet(dst)
    assert [info["question"] for info in out["extra_info"]] == problems
    assert [info["index"] for info in out["extra_info"]] == ["id-0", "id-1", "id-2"]
    assert list(out["prompt"][0][0].values()) == list(frame["prompt"][0][0].values())
    with pytest.raises(ValueError, match="DAPO-Math-17k's template"):
        script.problem_text([{"role": "user", "content": problems[0]}])
