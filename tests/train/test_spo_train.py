"""SPO in v05's trainer: the drift-discounted tracker, the offline init counted as the run's cost, exact resume."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.train._rows import comparable, rows_of
from v05.round import Round
from v05.train.config import load_config
from v05.train.loop import train

SPO = ["estimator.name=spo", "estimator.options={}", "prior.name=spo", "allocator.name=spo",
       "allocator.options={k: 1, pool_factor: 2}", "train.steps=6"]  # fmt: skip


def test_spo_trains_measures_drift_on_revisits_and_resumes_exactly(tmp_path, tiny_overrides, monkeypatch):
    """A 6-step SPO run over a 50-prompt pool (prompts recur): every revisit's ρ comes from a measured drift D ≥ 0
    with at least one D > 0 (the policy moved), first visits get none; the drift passes are counted (recompute);
    a run killed after its step-3 checkpoint and resumed equals the uninterrupted one in every row (the stored
    responses and log-probs are checkpointed)."""
    seen: list[dict] = []
    real = Round.learn

    def spy(self, keys, texts, rewards, group, *, step):
        seen.append({str(k): self.provider.drift_.get(str(k)) for k in keys})
        return real(self, keys, texts, rewards, group, step=step)

    monkeypatch.setattr(Round, "learn", spy)
    over = [*tiny_overrides, *SPO, "run.checkpoint_every=3"]
    cfg = load_config(None, over)
    train(cfg, tmp_path / "full")
    visited: set[str] = set()
    drifts = []
    for step in seen:
        for key, d in step.items():
            assert (d is not None) == (key in visited), key  # a drift exactly for the revisits
            if d is not None:
                drifts.append(d)
        visited |= set(step)
    assert drifts and min(drifts) >= 0 and max(drifts) > 0
    rows = [r for r in rows_of(tmp_path / "full") if r["step"] > 0]
    assert all(r["compute/recompute"] > 0 for r in rows) and all(r["rollouts_step"] == 8 for r in rows)

    def die_at_4(row):
        if row["step"] == 4:
            raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        train(cfg, tmp_path / "cut", log=die_at_4)
    train(cfg, tmp_path / "cut", resume=True)
    a, b = rows_of(tmp_path / "full"), rows_of(tmp_path / "cut")
    assert [comparable(r) for r in a] == [comparable(r) for r in b]


def test_the_offline_init_is_counted_and_starts_the_tracker(tmp_path, tiny_overrides, monkeypatch):
    """spo-offline: offline_n rollouts per train prompt before step 1, in rollouts_total and compute_total from the
    step-0 row on (init_rollouts = offline_n × pool); every prompt's tracker starts at α + β = 1/(1 − clip_lower)
    with p̂ = (s + ½)/(n + 1) for some s in 0..n."""
    starts = []
    real = Round.predict

    def spy(self, keys, texts):
        if not starts:
            alpha, beta = self.provider.beta_of([str(k) for k in keys])
            starts.append((alpha, beta))
        return real(self, keys, texts)

    monkeypatch.setattr(Round, "predict", spy)
    over = [*tiny_overrides, *SPO, "prior.options={offline: true, offline_n: 4, rho: constant}"]
    train(load_config(None, over), tmp_path / "run")
    rows = rows_of(tmp_path / "run")
    assert rows[0]["step"] == 0 and rows[0]["init_rollouts"] == 4 * 50 == rows[0]["rollouts_total"]
    assert rows[0]["pool_size"] == 50  # the pool an init would cost offline_n × pool_size for (cold-start report)
    assert rows[0]["compute_total"] > 0
    assert rows[1]["rollouts_total"] == 200 + rows[1]["rollouts_step"]
    assert all(r["init_rollouts"] == 200 for r in rows)
    alpha, beta = starts[0]
    np.testing.assert_allclose(alpha + beta, 8.0)  # N_init = 1/(1 − 0.875)
    s = (alpha / (alpha + beta)) * 5 - 0.5  # p̂·(n + 1) − ½
    np.testing.assert_allclose(s, np.round(s), atol=1e-9)
    assert s.min() >= 0 and s.max() <= 4


def test_an_offline_init_over_the_budget_is_refused_and_quick_caps_it(tmp_path, tiny_overrides):
    """The init counts against train.max_rollouts: an init at or over it (50 prompts × 4 = 200 ≥ 200) stops with
    one line before a rollout is drawn, not a run that trains 0 steps; ``offline_prompts`` caps the init to the
    pool's first prompts; ``--quick`` on the packaged spo-offline (2,000 × 8 = 16,000 rollouts over a 1,536 budget)
    caps it to half the quick budget and trains."""
    over = [*tiny_overrides, *SPO, "prior.options={offline: true, offline_n: 4, rho: constant}"]
    with pytest.raises(ValueError, match=r"offline init draws 200 rollouts .* train\.max_rollouts=200"):
        train(load_config(None, [*over, "train.max_rollouts=200"]), tmp_path / "over")
    assert not list((tmp_path / "over").glob("checkpoint*"))
    capped = [*tiny_overrides, *SPO, "prior.options={offline: true, offline_n: 4, rho: constant, offline_prompts: 10}"]
    train(load_config(None, capped), tmp_path / "capped")
    assert rows_of(tmp_path / "capped")[0]["init_rollouts"] == 40
    quick = load_config("spo-offline", quick=True)
    assert quick.prior.options["offline_prompts"] * 8 == quick.train.max_rollouts // 2
    assert load_config("spo", quick=True).prior.options == {}


def test_a_tracker_started_from_a_learned_prior_trains_and_checkpoints_its_start(tmp_path, tiny_overrides):
    """SPO with prior.options.start_from=combined (the selection grid's cold start, no offline rollouts): 6 steps
    without a guard fallback; the prompts it saw but never drew still hold the start's belief (α + β = the
    combined prior's n0 + 1 > 1, not Beta(½, ½)); the checkpointed state carries the start provider's, which
    learned every step."""
    opts = "prior.options={rho: constant, start_from: combined, start_options: {backend: tfidf, min_context: 8}}"
    over = [*tiny_overrides, *SPO, opts, "run.checkpoint_every=3"]
    res = train(load_config(None, over), tmp_path / "run")
    steps = [r for r in rows_of(tmp_path / "run") if r["step"] > 0]
    assert res.steps == 6 and all(r["prior_fallbacks"] == 0 for r in steps)
    saved = json.loads((tmp_path / "run" / "checkpoints" / "step_000006" / "state.json").read_text())
    provider = saved["provider"]  # the round's states sit at the top level (Round.state_dict)
    assert provider["start"]["provider"] == "combined" and provider["start"]["step"] == 6
    unvisited = [a + b for a, b, v in provider["tracker"]["default"].values() if v == 0]
    assert unvisited and min(unvisited) > 1.0 + 1e-9
