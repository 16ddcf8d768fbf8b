"""The guarded verl ``compute_score``: loaded by verl's own custom-reward loader, called by verl's reward managers.

A faulty scorer (a file in tmp_path, named through ``reward_kwargs.score_fn``) raises, hangs or returns garbage; the
reward manager still gets a reward for every rollout, with the fault flagged in ``reward_extra_info``.
"""

from __future__ import annotations

import asyncio
import os
import time

import numpy as np
import pytest

pytest.importorskip("verl")
pytest.importorskip("verl.trainer.ppo.ray_trainer", reason="verl installed without its dependencies (v05[verl])")

import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.trainer.ppo.reward import get_custom_reward_fn  # noqa: E402

from v05.adapters import verl as plugin  # noqa: E402
from v05.adapters.verl import guarded_compute_score  # noqa: E402

SCORER = """
import time


def score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    if solution_str == "raise":
        raise ZeroDivisionError("verifier bug")
    if solution_str == "hang":
        time.sleep(2.0)
    return {
        "good": {"score": 1.0, "acc": True, "pred": ground_truth},
        "bad": {"score": -1.0, "acc": False, "pred": "?"},
        "nan": float("nan"),
        "str": "1",
        "noscore": {"acc": True},
    }.get(solution_str, 0.5)


def plain(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return {"one": 1, "inf": float("inf")}[solution_str]


async def slow(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    import asyncio

    await asyncio.sleep(2.0 if solution_str == "hang" else 0.0)
    return 1.0
"""
WORDS = ["good", "bad", "raise", "hang", "nan", "str", "noscore", "one", "inf"]


class WordTokenizer:
    """Token i decodes to WORDS[i] (verl's reward managers only call ``decode``)."""

    def decode(self, ids, skip_special_tokens=True):
        return "".join(WORDS[int(i)] for i in ids)


def reward_config(tmp_path, name, timeout_s=0.2, **kwargs):
    """verl's reward config with the guarded scorer as its custom reward function (the documented overrides)."""
    (tmp_path / "my_reward.py").write_text(SCORER)
    reward_kwargs = {"score_fn": f"{tmp_path / 'my_reward.py'}:{name}", "timeout_s": timeout_s, **kwargs}
    return OmegaConf.create(
        {
            "reward": {
                "custom_reward_function": {
                    "path": "pkg://v05.adapters.verl",
                    "name": "guarded_compute_score",
                    "reward_kwargs": reward_kwargs,
                },
                "reward_kwargs": {},
            }
        }
    )


def one_rollout(word):
    """A DataProto of one rollout whose response decodes to ``word`` (what verl's reward loop hands run_single)."""
    responses = torch.tensor([[WORDS.index(word)]])
    return DataProto.from_dict(
        tensors={"responses": responses, "attention_mask": torch.ones(1, 3, dtype=torch.int64)},
        non_tensors={
            "data_source": np.array(["toy"], dtype=object),
            "reward_model": np.array([{"ground_truth": "7"}], dtype=object),
            "extra_info": np.array([{"index": 0}], dtype=object),
        },
    )


def run_manager(manager_name, config, words):
    from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls

    compute_score = get_custom_reward_fn(config)  # verl's loader: pkg:// imports the installed module
    manager = get_reward_manager_cls(manager_name)(config, WordTokenizer(), compute_score)
    return [manager.loop.run_until_complete(manager.run_single(one_rollout(w))) for w in words]


@pytest.mark.parametrize("manager_name", ["naive", "dapo"])
def test_verl_reward_managers_get_a_reward_for_every_faulty_rollout(tmp_path, manager_name, monkeypatch):
    """Through verl's naive and DAPO reward managers: a dict result passes unchanged (plus 0.0 flags); a raise, a 2 s
    hang (deadline 0.2 s), NaN, a string and a dict without "score" give the fault reward 0.0, with the same keys as
    the good results (so verl's per-key arrays stay aligned) and the right flag; VERIFIER_FAULTS counts them."""
    monkeypatch.setattr(plugin, "VERIFIER_FAULTS", plugin.ScoreFaults())
    monkeypatch.setattr(plugin, "_LAST_KEYS", {})
    words = ["good", "raise", "hang", "nan", "str", "noscore", "bad"]
    started = time.perf_counter()
    out = run_manager(manager_name, reward_config(tmp_path, "score"), words)
    assert time.perf_counter() - started < 2.0  # the hang was cut at its deadline
    assert [o["reward_score"] for o in out] == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0]
    keys = {"score", "acc", "pred", "v05_verifier_error", "v05_verifier_timeout"}
    assert all(set(o["reward_extra_info"]) == keys for o in out)
    info = [o["reward_extra_info"] for o in out]
    assert info[0] == {"score": 1.0, "acc": True, "pred": "7", "v05_verifier_error": 0.0, "v05_verifier_timeout": 0.0}
    assert [i["v05_verifier_error"] for i in info] == [0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0]
    assert [i["v05_verifier_timeout"] for i in info] == [0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    assert info[1]["pred"] is None and info[1]["acc"] == 0.0
    faults = plugin.VERIFIER_FAULTS
    assert (faults.errors, faults.timeouts) == (4, 1)


def test_plain_and_async_scorers_and_the_fault_score(tmp_path, monkeypatch):
    """A scorer returning plain numbers is reported as verl reports one (score and acc); +inf is a fault scored
    ``fault_score`` (−1.0 here, for ±1 scorers). An async scorer is awaited with the same deadline."""
    monkeypatch.setattr(plugin, "VERIFIER_FAULTS", plugin.ScoreFaults())
    monkeypatch.setattr(plugin, "_LAST_KEYS", {})
    out = run_manager("naive", reward_config(tmp_path, "plain", fault_score=-1.0), ["one", "inf"])
    assert [o["reward_score"] for o in out] == [1.0, -1.0]
    assert out[0]["reward_extra_info"] == {"score": 1.0, "acc": 1.0, "v05_verifier_error": 0.0,
                                           "v05_verifier_timeout": 0.0}  # fmt: skip
    assert out[1]["reward_extra_info"]["v05_verifier_error"] == 1.0 and out[1]["reward_extra_info"]["acc"] == -1.0
    started = time.perf_counter()
    out = run_manager("naive", reward_config(tmp_path, "slow"), ["one", "hang"])
    assert time.perf_counter() - started < 2.0
    assert [o["reward_score"] for o in out] == [1.0, 0.0]
    assert out[1]["reward_extra_info"]["v05_verifier_timeout"] == 1.0
    assert (plugin.VERIFIER_FAULTS.errors, plugin.VERIFIER_FAULTS.timeouts) == (1, 1)


def test_default_scorer_is_verls_and_settings_are_checked():
    """Without score_fn the guard wraps verl's default_compute_score (gsm8k's scorer here: "#### 7" is right); an
    unknown data source (verl raises NotImplementedError) is a fault; bad settings raise ValueError."""
    good = asyncio.run(guarded_compute_score("openai/gsm8k", "so #### 7", "7", {}))
    assert good["score"] == 1.0 and good["v05_verifier_error"] == 0.0
    unknown = asyncio.run(guarded_compute_score("no/such/source", "7", "7", {}))
    assert unknown["score"] == 0.0 and unknown["v05_verifier_error"] == 1.0
    with pytest.raises(ValueError, match="timeout_s"):
        asyncio.run(guarded_compute_score("openai/gsm8k", "7", "7", timeout_s=0))
    with pytest.raises(ValueError, match="score_fn"):
        asyncio.run(guarded_compute_score("openai/gsm8k", "7", "7", score_fn="pkg://v05.adapters.verl"))


def test_the_documented_overrides_compose_with_verls_config():
    """The docstring's Hydra overrides are valid for verl 0.9.1's ppo_trainer config, and verl's loader resolves
    ``pkg://v05.adapters.verl`` + ``guarded_compute_score`` to this very function (not a re-executed copy)."""
    import verl
    from hydra import compose, initialize_config_dir

    doc = plugin.guarded_compute_score.__doc__
    overrides = [line.split("#")[0].strip() for line in doc.splitlines() if "reward.custom_reward_function." in line]
    assert len(overrides) == 5
    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=overrides)
    assert cfg.reward.custom_reward_function.reward_kwargs.fault_score == -1.0
    loaded = get_custom_reward_fn(cfg)
    assert loaded.args[0] is guarded_compute_score  # functools.partial(_call_with_kwargs_async, fn, reward_kwargs)
