"""SPO (arXiv 2509.13232, verl's ``recipe/spo``) in verl through the plugin, on CPU.

What runs: the estimator ``v05_spo`` with the ``spo`` tracker as the trainer mode's provider (ρ constant), and SPO's
prioritised sampling (``+algorithm.v05.allocator=spo``) drawing each step's ``data.train_batch_size`` prompts from a
candidate pool of ``data.gen_batch_size``, in verl 0.9.1's own V1 ``fit`` loop on local Ray (the harness of
``test_verl.py``: scripted agent-loop sessions, a recording actor). The tracker, the advantages and the draw are
checked against the recipe's rules written out here (α ← ρα + r, β ← ρβ + 1 − r; A = r − p̂ normalised over the
batch; w = √(p̂(1 − p̂)) + 0.05, numpy's weighted draw without replacement with the step's seed), not against v05's
code. The first tests need no verl (torch and omegaconf only): ``VerlEstimator`` and ``VerlConfig`` for SPO.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from v05.registry import estimate

RHO = 0.875  # the recipe's rho.value
BATCH, POOL = 4, 8  # data.train_batch_size, data.gen_batch_size
PASS_RATES = np.array([0.02, 0.98, 0.5, 0.9, 0.1, 0.7, 0.3, 0.95] * 2)  # 16 dataset prompts


# -- without verl: the estimator and the config ----------------------------------------------------------------------


def test_verl_estimator_spo_is_the_cores_spo_on_groups_of_one():
    """``VerlEstimator("spo")`` (verl's ``v05_spo``) on one rollout per prompt with the prior bound from the rows:
    the core's ``estimate("spo")`` (A = r − V, normalised over the real rollouts), verl's padding rows 0."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("omegaconf")
    from v05.adapters.verl_estimators import PromptRow, VerlEstimator

    rewards = np.array([1.0, 0.0, 0.0, 1.0, 1.0])
    p_hat = np.array([0.2, 0.5, 0.9, 0.6, 0.99])  # (G,) the tracker's pass rates
    uids = [f"u{i}" for i in range(5)] + ["pad0"]
    scores = torch.zeros(6, 3)
    scores[:5, -1] = torch.as_tensor(rewards, dtype=torch.float32)
    rows = {u: PromptRow(u, f"k{i}", float(p)) for i, (u, p) in enumerate(zip(uids, p_hat, strict=False))}
    est = VerlEstimator("spo")
    assert est.name == "v05_spo"
    with est.bind(rows, step=1):
        adv, ret = est(scores, torch.ones(6, 3), index=uids, config={"v05": {"reward_range": "01"}})
    expected = estimate("spo", rewards, np.arange(5), prior=p_hat, reward_range="01").advantages
    np.testing.assert_allclose(adv[:5, 0].numpy(), expected, atol=1e-6)
    assert not adv[5].any() and torch.equal(adv, ret)
    a = rewards - p_hat  # the recipe: (a − ā)/(std(a) + 1e-8), std unbiased
    np.testing.assert_allclose(expected, (a - a.mean()) / (a.std(ddof=1) + 1e-8), atol=1e-12)


def test_verl_config_takes_the_spo_allocator():
    """``+algorithm.v05.allocator=spo`` (and ``prior_select``) is accepted; an allocator verl cannot run names the
    ones it can."""
    pytest.importorskip("omegaconf")
    from v05.adapters.verl_estimators import VerlConfig

    cfg = VerlConfig.from_algorithm({"v05": {"allocator": "spo", "allocator_options": {"epsilon": 0.1}}})
    assert cfg.allocator == "spo"
    assert VerlConfig.from_algorithm({"v05": {"allocator": "prior_select"}}).allocator == "prior_select"
    with pytest.raises(ValueError, match="'osla'.*'spo'.*'prior_select'"):
        VerlConfig.from_algorithm({"v05": {"allocator": "sara"}})


# -- the recipe's rules, written out ---------------------------------------------------------------------------------


def recipe_p_hat(tracker, keys):
    """p̂ = α/(α + β) of each key; Beta(½, ½) for a prompt not yet visited (the recipe's offline_N = 0)."""
    return np.array([(lambda a, b: a / (a + b))(*tracker.get(k, [0.5, 0.5])) for k in keys])


def recipe_weights(p_hat):
    return np.array([math.sqrt(p * (1 - p)) + 0.05 for p in p_hat])


def recipe_draw(p_hat, step):
    """The recipe's draw (``np.random.choice(M, size=B, replace=False, p=w/Σw)``), with the step's seeded generator
    (v05's deviation: not numpy's global RNG)."""
    w = recipe_weights(p_hat)
    return set(np.random.default_rng(step).choice(len(p_hat), size=BATCH, replace=False, p=w / w.sum()).tolist())



def select_draw(p_hat, n0, step):
    """prior_select's choice written out: a Thompson draw p̃ ~ Beta(p̂·n0 + ½, (1 − p̂)·n0 + ½) per candidate from the
    step's generator, the BATCH largest p̃(1 − p̃) (ties by a second uniform draw; no exploration at 5 % of 4)."""
    rng = np.random.default_rng(step)
    p_tilde = rng.beta(p_hat * n0 + 0.5, (1 - p_hat) * n0 + 0.5)
    order = np.lexsort((rng.random(len(p_hat)), -(p_tilde * (1 - p_tilde))))
    return set(order[:BATCH].tolist())

# -- in verl's fit loop -------------------------------------------------------------------------------------------


def spo_overrides(h, tmp_path, allocator="spo"):
    """The launch script's SPO overrides (``examples/verl/run_qwen3_4b_dapo.sh``, ``METHOD=spo``: a recipe user's
    settings in v05's, examples/verl/README.md) with the sizes and the allocator set for the test."""
    scripted = ("+algorithm.v05.", "actor_rollout_ref.", "algorithm.adv_estimator", "data.", "trainer.v1.trainer_mode")
    test_only = [o for o in h.trainer_overrides(tmp_path, "v05_spo") if not o.startswith(scripted)]
    replaced = ("data.", "actor_rollout_ref.actor.ppo_mini_batch_size", "+algorithm.v05.allocator=")
    script = [o for o in h.launch_arrays()["SPO"] if not o.startswith(replaced)]
    sizes = [f"data.train_batch_size={BATCH}", f"actor_rollout_ref.actor.ppo_mini_batch_size={BATCH}"]
    sizes += [f"data.gen_batch_size={POOL}"] if allocator in ("spo", "prior_select") else []
    return [*test_only, *script, *sizes, f"+algorithm.v05.allocator={allocator}"]


@pytest.fixture(scope="module")
def harness():
    """test_verl.py's fit-loop harness on a local Ray cluster with TransferQueue (skipped without verl's stack)."""
    pytest.importorskip("transfer_queue")
    import ray
    import transfer_queue as tq
    from omegaconf import OmegaConf

    from tests.adapters import test_verl as harness  # skips without verl's training stack

    harness.register()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}))
    yield harness, tq
    tq.close()
    ray.shutdown()


@pytest.mark.parametrize("allocator", ["spo", "fixed", "prior_select"])
def test_spo_trains_in_verls_fit_loop(harness, tmp_path, monkeypatch, allocator):
    """Three steps of verl's V1 fit loop with the launch script's SPO settings (rollout.n = 1, ρ = 0.875, ±1 rewards;
    sizes scaled to the test: 4 prompts a step from 8 candidates, 16 dataset prompts):

    - the tracker: each rollout's prior (``extra_info``) is α/(α + β) of a tracker kept here by the recipe's rule
      from the rewards the actor received (ρ = 0.875, Beta(½, ½) at the start), and the provider ends equal to it;
    - the advantages verl's actor receives are ``estimate("spo", ...)`` on those values (groups of one, normalised
      over the batch), non-zero;
    - ``allocator=spo``: every step the round's allocator (a spy on ``Round.allocate``) sees the 8-prompt candidate
      pool, draws 4 of them — the recipe's weighted draw from the tracker's values — and exactly the drawn prompts,
      one rollout each, reach the actor; ``v05/spo/*`` reach verl's logger; ``allocator=prior_select`` (the selection
      grid's ``sel_tracker``, on the same draw path): the 4 drawn are prior_select's choice written out here on the
      pool's prior and the step's generator, and ``v05/prior_select/*`` reach the logger; ``allocator=fixed``: every
      prompt of verl's batch, one rollout each (groups of one in the trainer mode);
    - the checkpoint's ``v05_state.json`` restores the tracker."""
    h, tq = harness
    from verl.trainer.ppo.v1 import trainer_base

    logged = []
    monkeypatch.setattr(trainer_base.Tracking, "log", lambda self, data, step, **kw: logged.append(dict(data)))
    config = h.verl_config(*spo_overrides(h, tmp_path, allocator))
    trainer, worker = h.build_trainer(config, tq, PASS_RATES)
    draws = allocator in ("spo", "prior_select")
    assert trainer.v05_pool_size == (POOL if draws else None)
    allocations = []
    real_allocate = trainer.v05_round.allocate

    def spy(sample, **kw):
        alloc = real_allocate(sample, **kw)
        allocations.append((list(kw["keys"]), kw["prior"].pass_rate, alloc))
        return alloc

    monkeypatch.setattr(trainer.v05_round, "allocate", spy)
    trainer.fit(h.AgentLoopManager(worker))

    updates = trainer.actor_rollout_wg.updates
    assert len(updates) == len(logged) == 3
    tracker: dict[str, list[float]] = {}  # key → [α, β], the recipe's rule
    for step, (update, metrics) in enumerate(zip(updates, logged, strict=True), start=1):
        real = np.array([not u.startswith("pad") for u in update["uid"]])
        infos = [update["extra_info"][i] for i in np.flatnonzero(real)]
        keys = [info["v05_key"] for info in infos]
        assert len(set(keys)) == len(keys) == BATCH  # one rollout per prompt, the batch's prompts
        p_hat = recipe_p_hat(tracker, keys)
        np.testing.assert_allclose([info["v05_prior"] for info in infos], p_hat, atol=1e-12)
        rewards = update["reward"][real]
        expected = estimate("spo", rewards, np.arange(BATCH), prior=2 * p_hat - 1, reward_range="pm1")
        np.testing.assert_allclose(update["advantage"][real], expected.advantages, atol=1e-6)
        assert np.any(update["advantage"][real] != 0) and not update["advantage"][~real].any()
        assert metrics["v05/k/max"] == metrics["v05/k/min"] == 1 and metrics["v05/prompts"] == BATCH
        if allocator == "spo":
            pool_keys, pool_p, alloc = allocations[step - 1]
            assert len(pool_keys) == POOL > BATCH == alloc.counts.sum() and set(alloc.counts) <= {0, 1}
            np.testing.assert_allclose(pool_p, recipe_p_hat(tracker, pool_keys), atol=1e-12)
            drawn = set(np.flatnonzero(alloc.counts).tolist())
            assert drawn == recipe_draw(pool_p, step)
            assert sorted(keys) == sorted(pool_keys[i] for i in drawn)
            uids = np.array(update["uid"])[real]
            assert all(info["v05_group"] != u for info, u in zip(infos, uids, strict=True))  # drawn under new uids
            assert metrics["v05/spo/candidates"] == POOL and metrics["v05/spo/drawn"] == BATCH
            w = recipe_weights(pool_p)
            np.testing.assert_allclose(metrics["v05/spo/selected_weight_mean"], np.mean((w / w.sum())[sorted(drawn)]))
        if allocator == "prior_select":
            pool_keys, pool_p, alloc = allocations[step - 1]
            assert len(pool_keys) == POOL > BATCH == alloc.counts.sum() and set(alloc.counts) <= {0, 1}
            np.testing.assert_allclose(pool_p, recipe_p_hat(tracker, pool_keys), atol=1e-12)
            drawn = set(np.flatnonzero(alloc.counts).tolist())
            n0 = np.array([sum(tracker.get(k, [0.5, 0.5])) for k in pool_keys])
            assert drawn == select_draw(pool_p, n0, step)
            assert sorted(keys) == sorted(pool_keys[i] for i in drawn)
            assert metrics["v05/prior_select/candidates"] == POOL and metrics["v05/prior_select/drawn"] == BATCH
            assert "v05/prior_select/predicted_signal" in metrics
        for k, r in zip(keys, rewards, strict=True):
            a, b = tracker.get(k, [0.5, 0.5])
            s = (r + 1) / 2  # ±1 → success
            tracker[k] = [RHO * a + s, RHO * b + (1 - s)]
    assert len(allocations) == (3 if draws else 0)
    if draws:
        revisited = set(allocations[0][0]) & set(allocations[2][0])
        assert revisited and np.any(allocations[2][1] != 0.5), "the draw never read the tracker after an update"
    alpha, beta = trainer.v05_provider.beta_of(list(tracker))
    np.testing.assert_allclose(alpha, [v[0] for v in tracker.values()], atol=1e-12)
    np.testing.assert_allclose(beta, [v[1] for v in tracker.values()], atol=1e-12)

    saved = tmp_path / "global_step_3" / "v05_state.json"
    assert json.loads(saved.read_text())["provider"]["tracker"]
    resumed, _ = h.build_trainer(h.verl_config(*spo_overrides(h, tmp_path, allocator)), tq, PASS_RATES)
    resumed._load_checkpoint()
    assert resumed.v05_provider.state_dict() == trainer.v05_provider.state_dict()


def test_spo_tracker_started_from_a_prior_in_verls_fit_loop(harness, tmp_path, monkeypatch):
    """The launch script's SPO with the tracker started from the running mean
    (``+algorithm.v05.provider_options.start_from=running_mean``, issue 42's cold start), three steps of verl's fit
    loop: each step's candidate pool is predicted by a tracker with the same start hand-fed the rewards the actor
    received (so a prompt first seen after step 1 starts from the running mean, not Beta(½, ½)), the drawn prompts'
    priors are those values, and the checkpoint restores the start with the tracker."""
    h, tq = harness
    from v05.priors import group_outcomes, make_provider

    overrides = [*spo_overrides(h, tmp_path), "+algorithm.v05.provider_options.start_from=running_mean"]
    skewed = np.array([0.95, 0.9, 0.98, 0.2] * 4)  # the running mean moves off 0.5
    trainer, worker = h.build_trainer(h.verl_config(*overrides), tq, skewed)
    allocations = []
    real_allocate = trainer.v05_round.allocate

    def spy(sample, **kw):
        allocations.append((list(kw["keys"]), kw["prior"].pass_rate))
        return real_allocate(sample, **kw)

    monkeypatch.setattr(trainer.v05_round, "allocate", spy)
    trainer.fit(h.AgentLoopManager(worker))

    hand = make_provider("spo", **trainer.v05_config.provider_options)
    assert hand.start is not None
    started_off_half = 0
    for (pool_keys, pool_p), update in zip(allocations, trainer.actor_rollout_wg.updates, strict=True):
        unseen = [k not in hand.tracker_.get("default", {}) for k in pool_keys]
        expected = (hand.predict(pool_keys, pool_keys).mean + 1.0) / 2.0
        np.testing.assert_allclose(pool_p, expected, atol=1e-12)
        started_off_half += int(np.sum(np.abs(expected[unseen] - 0.5) > 1e-6))
        real = np.array([not u.startswith("pad") for u in update["uid"]])
        infos = [update["extra_info"][i] for i in np.flatnonzero(real)]
        keys = [info["v05_key"] for info in infos]
        np.testing.assert_allclose([info["v05_prior"] for info in infos],
                                   [expected[pool_keys.index(k)] for k in keys], atol=1e-12)  # fmt: skip
        hand.update(keys, keys, *group_outcomes(update["reward"][real], np.arange(len(keys)), reward_range="pm1"))
    assert started_off_half > 0, "no prompt started from the running mean"
    saved = json.loads((tmp_path / "global_step_3" / "v05_state.json").read_text())
    assert saved["provider"]["start"] is not None
    resumed, _ = h.build_trainer(h.verl_config(*overrides), tq, skewed)
    resumed._load_checkpoint()
    assert resumed.v05_provider.state_dict() == trainer.v05_provider.state_dict()


def test_spo_settings_verl_cannot_honour_are_refused(harness, tmp_path):
    """Before verl builds anything, in one line each: the tracker's ρ from the policy's drift (``rho="kl"``, the
    provider's default: its spec's ``needs_drift``), the offline init, ``k`` unequal to ``rollout.n``, a candidate
    pool smaller than the batch or set twice, DAPO's filter; without ``data.gen_batch_size`` the pool is
    ``pool_factor`` batches."""
    h, _ = harness
    from v05.adapters.verl_trainer import trainer_class

    base = spo_overrides(h, tmp_path)
    plain = [o for o in base if not o.startswith("+algorithm.v05.provider_options")]
    for overrides, match in (
        (plain, r"^algorithm\.v05\.provider='spo' with rho='kl' \(its default\).*rho=constant"),
        ([*base, "+algorithm.v05.provider_options.offline=true"], "only v05 train draws"),
        ([*base, "+algorithm.v05.allocator_options.k=2"], r"allocator_options\.k=2 differs from .*rollout\.n=1"),
        ([*base, "data.gen_batch_size=2"], r"set data\.gen_batch_size >= data\.train_batch_size"),
        ([*base, "+algorithm.v05.allocator_options.pool_factor=3"], "remove algorithm.v05.allocator_options.pool"),
        ([*base, "algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc"], "filter_groups"),
    ):
        with pytest.raises(ValueError, match=match) as err:
            trainer_class()(h.verl_config(*overrides))
        assert "\n" not in str(err.value)
    no_pool = [o for o in base if not o.startswith("data.gen_batch_size")]
    for extra, pool in (([], 4 * BATCH), (["+algorithm.v05.allocator_options.pool_factor=3"], 3 * BATCH)):
        assert trainer_class()(h.verl_config(*no_pool, *extra)).v05_pool_size == pool


@pytest.mark.parametrize("provider", ["history", "combined", "v0"])
def test_prior_select_with_a_learned_prior_trains_in_verls_fit_loop(harness, tmp_path, monkeypatch, provider):
    """The launch script's SEL1 (``v05_eb`` at one rollout per prompt, ±1 rewards, the bare question as the prior's
    text, ``+algorithm.v05.allocator=prior_select``) with its prior, the selection grid's pick, and the others the pick
    might have been (the prompt's history; combined and v0, which read the question's text; v0 with a context of 4 rows,
    not 32, so that it predicts from the test's 12 outcomes instead of its running-mean fallback): three steps of verl's
    fit loop, 4 prompts a step from 8 candidates (``data.gen_batch_size``). Each step the round's allocator (a spy on
    ``Round.allocate``) sees the 8 candidates with the provider's pass rates and n0, draws prior_select's choice on them
    written out here (:func:`select_draw`: a mutation of the draw, the pool or the prior it reads goes red), exactly the
    drawn prompts reach the actor, one rollout each, each with its candidate's prior in ``extra_info``; by step 3 the
    priors have moved off their common start, and every candidate's prior and n0 are those of the same provider hand-fed
    the rewards the actor received (the pool's own keys and questions: a prior read for other prompts goes red); the
    checkpoint restores the provider."""
    h, tq = harness
    from v05.priors import group_outcomes, make_provider

    scripted = ("+algorithm.v05.", "actor_rollout_ref.", "algorithm.adv_estimator", "data.", "trainer.v1.trainer_mode")
    test_only = [o for o in h.trainer_overrides(tmp_path, "v05_eb") if not o.startswith(scripted)]
    replaced = ("data.", "actor_rollout_ref.actor.ppo_mini_batch_size", "+algorithm.v05.allocator=",
                "+algorithm.v05.provider=")  # fmt: skip
    script = [o for o in h.launch_arrays()["SEL1"] if not o.startswith(replaced)]
    overrides = [*test_only, *script, f"data.train_batch_size={BATCH}", f"data.gen_batch_size={POOL}",
                 f"actor_rollout_ref.actor.ppo_mini_batch_size={BATCH}", "+algorithm.v05.allocator=prior_select",
                 f"+algorithm.v05.provider={provider}",
                 *(["+algorithm.v05.provider_options.min_context=4"] if provider == "v0" else [])]  # fmt: skip
    trainer, worker = h.build_trainer(h.verl_config(*overrides), tq, PASS_RATES)
    assert trainer.v05_pool_size == POOL
    allocations = []
    real_allocate = trainer.v05_round.allocate

    def spy(sample, **kw):
        alloc = real_allocate(sample, **kw)
        prior = kw["prior"]
        allocations.append((list(kw["keys"]), np.array(prior.pass_rate), np.broadcast_to(prior.n0, (POOL,)), alloc))
        return alloc

    monkeypatch.setattr(trainer.v05_round, "allocate", spy)
    trainer.fit(h.AgentLoopManager(worker))
    updates = trainer.actor_rollout_wg.updates
    assert len(updates) == len(allocations) == 3
    for step, (update, (pool_keys, pool_p, n0, alloc)) in enumerate(zip(updates, allocations, strict=True), start=1):
        assert len(pool_keys) == POOL > BATCH == alloc.counts.sum() and set(alloc.counts) <= {0, 1}
        drawn = set(np.flatnonzero(alloc.counts).tolist())
        assert drawn == select_draw(pool_p, n0, step)
        real = np.array([not u.startswith("pad") for u in update["uid"]])
        infos = [update["extra_info"][i] for i in np.flatnonzero(real)]
        keys = [info["v05_key"] for info in infos]
        assert len(set(keys)) == len(keys) == BATCH and sorted(keys) == sorted(pool_keys[i] for i in drawn)
        by_key = dict(zip(pool_keys, pool_p, strict=True))
        np.testing.assert_allclose([info["v05_prior"] for info in infos], [by_key[k] for k in keys], atol=1e-12)
    assert np.ptp(allocations[0][1]) < 1e-12 < np.ptp(allocations[2][1])  # one start for all, then learned
    hand = make_provider(provider, **trainer.v05_config.provider_options)  # fed what the actor received
    for (pool_keys, pool_p, n0, _), update in zip(allocations, updates, strict=True):
        texts = [f"question {k}" for k in pool_keys]  # the dataset's bare question (extra_info["question"])
        expected = hand.predict(pool_keys, texts)
        np.testing.assert_allclose(pool_p, (expected.mean + 1.0) / 2.0, atol=1e-9)
        np.testing.assert_allclose(n0, np.broadcast_to(expected.n0, (POOL,)), atol=1e-9)
        real = np.array([not u.startswith("pad") for u in update["uid"]])
        keys = [update["extra_info"][i]["v05_key"] for i in np.flatnonzero(real)]
        hand.update(keys, [f"question {k}" for k in keys],
                    *group_outcomes(update["reward"][real], np.arange(len(keys)), reward_range="pm1"))  # fmt: skip
    saved = json.loads((tmp_path / "global_step_3" / "v05_state.json").read_text())["provider"]
    resumed, _ = h.build_trainer(h.verl_config(*overrides), tq, PASS_RATES)
    resumed._load_checkpoint()
    assert json.loads(json.dumps(resumed.v05_provider.state_dict())) == saved
