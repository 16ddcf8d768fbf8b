"""SPO in V05GRPOTrainer at num_generations=1: the spo estimator and tracker, and the spo sampler of the train data."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("trl")

import torch  # noqa: E402
from scipy import stats  # noqa: E402

from datasets import Dataset  # noqa: E402
from tests.adapters.test_trl import (  # noqa: E402
    Recording,
    arithmetic_setup,
    config,
    odd_first_char,
    one_thread,  # noqa: F401 (the autouse fixture: one torch thread, restored after)
)
from v05.adapters.trl import V05GRPOConfig  # noqa: E402
from v05.adapters.trl_sampler import PoolSampler  # noqa: E402
from v05.allocation.select import PriorSelect  # noqa: E402
from v05.allocation.spo import SpoSample, spo_weights  # noqa: E402
from v05.priors import group_outcomes, make_provider  # noqa: E402
from v05.registry import estimate  # noqa: E402
from v05.round import Round  # noqa: E402

SPO = dict(
    num_generations=1,
    v05_estimator="spo",
    v05_prior="spo",
    v05_prior_options={"rho": "constant"},
)


class DrawRecording(Recording):
    """Also records each draw of the sampler: the pool, the rows drawn and how many batches were scored by then."""

    def __init__(self, *args, **kwargs):
        self.draws: list[tuple[np.ndarray, np.ndarray, int]] = []
        super().__init__(*args, **kwargs)

    def _v05_draw(self, pool, epoch, index):
        rows = super()._v05_draw(pool, epoch, index)
        self.draws.append((pool.copy(), np.asarray(rows).copy(), len(self.scored)))
        return rows


def trained_with_draws(model, tokenizer, dataset, args, allocator, *, pool_size):
    """A DrawRecording trainer run to its end: its round's allocator is ``allocator`` at 2 prompts a batch, 4
    batches were scored, and each one's prompts are 2 distinct rows of its ``pool_size`` pool, the very rows TRL
    generated for."""
    trainer = DrawRecording(
        model=model, reward_funcs=odd_first_char, args=args, train_dataset=dataset, processing_class=tokenizer
    )
    assert isinstance(trainer.v05_round.allocator, allocator) and trainer.v05_round.allocator.batch_size == 2
    trainer.train()
    assert len(trainer.scored) == 4 and len(trainer.draws) >= 4
    ids = dataset["prompt_id"]
    for t, (batch, _) in enumerate(trainer.scored):
        pool, rows, _ = trainer.draws[t]
        assert len(pool) == pool_size and len(set(rows.tolist())) == 2 and set(rows.tolist()) <= set(pool.tolist())
        assert sorted(batch.prompt_ids) == sorted(ids[i] for i in rows)  # TRL generated for the drawn rows
    return trainer

def round_draw(rnd, keys, pools=None):
    """What V05GRPOTrainer._v05_draw does on the main process: the round's prior of the pool, then its allocator
    told placeholder rewards; each pool is appended to ``pools`` when given."""

    def draw(pool, epoch, index):
        if pools is not None:
            pools.append(pool.copy())
        prior = rnd.predict(keys[pool], list(keys[pool]))
        rng = np.random.default_rng([0, 23, epoch, index])
        alloc = rnd.allocate(lambda ids, counts: np.zeros(int(counts.sum())), n_prompts=len(pool), rng=rng,
                             prior=prior, keys=keys[pool])  # fmt: skip
        return pool[alloc.kept]

    return draw

def test_spo_advantages_are_the_estimator_on_a_hand_fed_tracker(tmp_path):
    """4 CPU steps of SPO at one rollout per prompt (TRL's own sampler): the advantages TRL's loss reads are
    estimate("spo", rewards, group, prior=p̂) with p̂ = α/(α + β) of an spo tracker (rho constant 0.875) fed the same
    outcomes by hand, normalised over the batch (mean 0, unbiased std 1); the adapter's tracker ends as the hand-fed
    one; the weights move."""
    model, tokenizer, dataset, _, _ = arithmetic_setup()
    before = [p.detach().clone() for p in model.parameters()]
    args = config(tmp_path, **SPO, per_device_train_batch_size=4, max_steps=4)
    assert args.num_generations == 1 and args.scale_rewards == "none"
    trainer = Recording(
        model=model, reward_funcs=odd_first_char, args=args, train_dataset=dataset, processing_class=tokenizer
    )
    trainer.train()

    tracker = make_provider("spo", rho="constant")
    group = np.arange(4)  # one rollout per prompt: each its own group
    assert len(trainer.scored) == 4
    for batch, handed in trainer.scored:
        ids = list(batch.prompt_ids)
        alpha, beta = tracker.beta_of(ids)
        p_hat = alpha / (alpha + beta)  # (G,) before this step's outcomes
        np.testing.assert_allclose(batch.prior, p_hat, atol=1e-12)
        expected = estimate("spo", batch.rewards, group, prior=p_hat, reward_range="01").advantages
        np.testing.assert_allclose(handed, expected, atol=1e-6)  # float32 round trip
        if np.ptp(batch.rewards - p_hat) > 0:
            assert abs(handed.mean()) < 1e-6 and np.std(handed, ddof=1) == pytest.approx(1.0, abs=1e-5)
        tracker.update(ids, ids, *group_outcomes(batch.rewards, group, reward_range="01"))
    for (_, handed), used in zip(trainer.scored, trainer.loss_advantages, strict=True):
        np.testing.assert_allclose(np.sort(used), np.sort(handed), atol=1e-7)
    assert trainer.v05_provider.tracker_ == tracker.tracker_
    assert any(np.abs(h).max() > 0 for _, h in trainer.scored)
    assert any(not torch.equal(b, a.detach()) for b, a in zip(before, model.parameters(), strict=True))


def test_spo_tracker_started_from_a_prior_is_the_hand_fed_one(tmp_path):
    """SPO's tracker started from the running mean (v05_prior_options start_from, issue 42's cold start) in TRL:
    each step's p̂ is a hand-fed tracker's with the same start, predicted then updated like the adapter's; the
    prompts first seen in the second batch start from the running mean of the first, not from Beta(½, ½); the
    saved state carries the start, and the adapter's tracker ends as the hand-fed one."""
    model, tokenizer, dataset, _, _ = arithmetic_setup()
    options = {"rho": "constant", "start_from": "running_mean"}
    args = config(tmp_path, **{**SPO, "v05_prior_options": options}, per_device_train_batch_size=4, max_steps=4)
    trainer = Recording(
        model=model, reward_funcs=odd_first_char, args=args, train_dataset=dataset, processing_class=tokenizer
    )
    trainer.train()

    tracker = make_provider("spo", **options)
    group = np.arange(4)
    firsts = []
    for t, (batch, _) in enumerate(trainer.scored):
        ids = list(batch.prompt_ids)
        p_hat = (tracker.predict(ids, ids).mean + 1.0) / 2.0  # (G,) the start's belief for unseen prompts
        np.testing.assert_allclose(batch.prior, p_hat, atol=1e-12)
        if t == 1:
            firsts.append(p_hat)
        tracker.update(ids, ids, *group_outcomes(batch.rewards, group, reward_range="01"))
    alone = make_provider("running_mean")  # the start on its own, told batch 1's outcomes
    first = trainer.scored[0][0]
    first_ids = list(first.prompt_ids)
    alone.update(first_ids, first_ids, *group_outcomes(first.rewards, group, reward_range="01"))
    ids = list(trainer.scored[1][0].prompt_ids)
    pred = alone.predict(ids, ids)
    p0 = (pred.mean + 1.0) / 2.0
    assert not set(ids) & set(first.prompt_ids)  # batch 2's prompts are new: each starts from the prior
    np.testing.assert_allclose(firsts[0], (p0 * pred.n0 + 0.5) / (pred.n0 + 1.0), atol=1e-12)  # α₀ = p·n0 + ½
    assert np.all(np.abs(firsts[0] - 0.5) > 0.05)  # informative: Beta(½, ½) would fail it
    assert trainer.v05_provider.tracker_ == tracker.tracker_
    saved, fed = trainer.v05_provider.state_dict()["start"], tracker.start.state_dict()
    assert {k: v for k, v in saved.items() if k != "step"} == {k: v for k, v in fed.items() if k != "step"}


@pytest.mark.parametrize("num_iterations", [1, 2])
def test_spo_sampler_trains_and_draws_through_the_round(tmp_path, num_iterations):
    """v05_sampler="spo", 2 prompts a generation batch from pools of pool_factor·2 = 4 (2 pools an epoch of the
    8 prompts): each batch is 2 distinct rows of its pool drawn by the round's SpoSample, and TRL generates for
    exactly those rows. The lag: accelerate reads a batch ahead, so at num_iterations=1 an epoch's second batch is
    drawn before the first is scored (batch t sees batches ≤ t − 2); at num_iterations=2 (each generation batch read
    twice) every draw sees all the scored batches. The sampler's statistics reach TRL's log."""
    model, tokenizer, dataset, _, _ = arithmetic_setup()
    args = config(tmp_path, **SPO, per_device_train_batch_size=2, max_steps=4 * num_iterations,
                  num_iterations=num_iterations, v05_sampler="spo", v05_sampler_options={"pool_factor": 2})  # fmt: skip
    trainer = trained_with_draws(model, tokenizer, dataset, args, SpoSample, pool_size=4)
    for t in range(len(trainer.scored)):
        scored_before = trainer.draws[t][2]
        first_of_epoch = t % 2 == 0
        assert scored_before == (t if first_of_epoch or num_iterations == 2 else t - 1)
    epoch0 = np.concatenate([trainer.draws[0][0], trainer.draws[1][0]])
    assert sorted(epoch0.tolist()) == list(range(8))  # an epoch's pools: disjoint, from one permutation
    logged = trainer.state.log_history[0]
    assert "v05/sampler_selected_weight_mean" in logged and "v05/sampler_pool_weight_mean" in logged


def test_spo_sampler_draws_uncertain_prompts_more():
    """The draws follow w = √(p̂(1 − p̂)) + 0.05 through Round.predict → Round.allocate (the trainer's _v05_draw): a
    tracker holds p̂ = 0.5 for 4 of 16 prompts and p̂ ≈ 0 or 1 (Beta(0.01, 8), Beta(8, 0.01)) for the others; over 200
    epochs (4 pools of 4, 2 drawn from each), a p̂ = 0.5 prompt is drawn more than twice as often as the others, and
    their share of the draws exceeds their 1/4 share of the prompts (one-sided binomial test, p < 1e-6)."""
    n, b = 16, 2
    keys = np.asarray([f"p{i}" for i in range(n)], dtype=object)
    uncertain = np.arange(n) % 4 == 0  # (n,)
    rnd = Round("spo", reward_range="01", prior="spo", prior_options={"rho": "constant"},
                allocator=SpoSample(k=1, batch_size=b, pool_factor=2))  # fmt: skip
    table = rnd.provider.tracker_.setdefault("default", {})
    for i, key in enumerate(keys):
        table[key] = [4.0, 4.0, 1] if uncertain[i] else ([8.0, 0.01, 1] if i % 2 else [0.01, 8.0, 1])

    sampler = PoolSampler(n, batch_size=b, pool_size=2 * b, mini_repeat_count=1, repeat_count=1, seed=0,
                          draw=round_draw(rnd, keys))  # fmt: skip
    counts = np.zeros(n, np.int64)
    for epoch in range(200):
        sampler.set_epoch(epoch)
        drawn = list(sampler)
        assert len(drawn) == len(sampler) == 4 * b and len(set(drawn)) == len(drawn)
        counts += np.bincount(drawn, minlength=n)
    rate_uncertain, rate_other = counts[uncertain].mean(), counts[~uncertain].mean()
    assert rate_uncertain > 2 * rate_other
    assert spo_weights(np.array([0.5]))[0] == pytest.approx(0.55)
    test = stats.binomtest(int(counts[uncertain].sum()), int(counts.sum()), 0.25, alternative="greater")
    assert test.pvalue < 1e-6


def test_spo_sampler_is_deterministic_in_its_seed():
    """Same seed and tracker: the same indices (what every process yields); another seed: another order."""
    n = 12

    def draw(pool, epoch, index):
        return np.sort(pool[:3])

    def run(seed):
        s = PoolSampler(n, batch_size=3, pool_size=6, mini_repeat_count=2, repeat_count=2, seed=seed, draw=draw)
        return list(s)

    first = run(0)
    assert first == run(0) and first != run(1)
    assert len(first) == 2 * 3 * 2 * 2 and first[:2] == [first[0]] * 2  # K = 2 in a row, R = 2 block repeats
    assert first[:6] == first[6:12]
    with pytest.raises(ValueError, match="give it at least 3 rows"):
        PoolSampler(2, batch_size=3, pool_size=6, mini_repeat_count=1, repeat_count=1, seed=0, draw=draw)


def test_rho_kl_and_bad_samplers_are_refused(tmp_path):
    """rho='kl' (the spo prior's default) needs the policy's drift, which only v05 train measures: refused in one
    line naming the fix; an unknown sampler, a sampler without a prior, reserved sampler options and an iterable
    dataset are refused too."""
    fix = r"v05_prior='spo' with rho='kl' discounts by the policy's drift, which only v05 train measures; set "
    with pytest.raises(ValueError, match=fix + r"v05_prior_options=\{'rho': 'constant'\}"):
        config(tmp_path, **(SPO | {"v05_prior_options": {}}))
    with pytest.raises(ValueError, match="rho='kl'"):
        config(tmp_path, **(SPO | {"v05_prior_options": {"rho": "kl"}}))
    with pytest.raises(ValueError, match="rho='kl'"):  # the sampler alone builds the tracker too
        config(tmp_path, num_generations=4, v05_estimator="grpo", v05_prior="spo", v05_sampler="spo")
    assert isinstance(config(tmp_path, **SPO, v05_sampler="spo"), V05GRPOConfig)
    with pytest.raises(ValueError, match="unknown v05_sampler 'dps'; valid: spo, prior_select"):
        config(tmp_path, **SPO, v05_sampler="dps")
    with pytest.raises(ValueError, match="draws by the prior"):
        config(tmp_path, num_generations=4, v05_estimator="grpo", v05_prior=None, v05_sampler="spo")
    with pytest.raises(ValueError, match="may not set k"):
        config(tmp_path, **SPO, v05_sampler="spo", v05_sampler_options={"k": 2})
    with pytest.raises(ValueError, match="v05_sampler='spo'"):
        config(tmp_path, **SPO, v05_allocator="spo")
    model, tokenizer, _, reward, _ = arithmetic_setup()
    stream = Dataset.from_dict({"prompt": ["1+1="] * 8}).to_iterable_dataset()
    with pytest.raises(ValueError, match="not of an IterableDataset"):
        Recording(model=model, reward_funcs=reward, args=config(tmp_path, **SPO, v05_sampler="spo"),
                  train_dataset=stream, processing_class=tokenizer)  # fmt: skip


@pytest.mark.parametrize("prior", ["spo", "history", "combined", "v0"])
def test_prior_select_sampler_trains_on_the_rows_it_selects(tmp_path, prior):
    """v05_sampler="prior_select" at num_generations=1 with v05_eb and each prior the selection grid's pick may be
    (SPO's tracker at rho = constant, the one TRL runs; the prompt's history; the text priors combined and v0, which
    read the prompts' texts): 2 prompts a generation
    batch selected from pools of 4·2 = 8 (one pool an epoch of the 8 prompts) by the round's PriorSelect, TRL
    generates for exactly those rows, and the log carries the selection's statistics but not the realised signal
    (computed from the placeholder rewards the draw is told)."""
    model, tokenizer, dataset, _, _ = arithmetic_setup()
    args = config(tmp_path, num_generations=1, v05_estimator="v05_eb", v05_estimator_options={"scale": "none"},
                  v05_prior=prior, per_device_train_batch_size=2, max_steps=4, v05_sampler="prior_select",
                  **({"v05_prior_options": {"rho": "constant"}} if prior == "spo" else {}))  # fmt: skip
    trainer = trained_with_draws(model, tokenizer, dataset, args, PriorSelect, pool_size=8)
    logged = trainer.state.log_history[0]
    assert "v05/sampler_predicted_signal" in logged and "v05/sampler_realised_signal" not in logged


def test_prior_select_sampler_draws_uncertain_prompts():
    """The selection follows the prior through Round.predict → Round.allocate (the trainer's _v05_draw): SPO's
    tracker as the prior (the selection grid's sel_tracker) holds p̂ = 0.5 for 4 of 16 prompts and p̂ ≈ 0 or 1 for
    the others; from each pool of 8, the 2 with the largest p̃(1 − p̃) are taken (no exploration at B = 2: ⌊0.05·2⌋
    = 0), so over 50 epochs an uncertain prompt is drawn whenever its pool holds one, an extreme one only when its
    pool holds fewer than two uncertain ones."""
    n, b = 16, 2
    keys = np.asarray([f"p{i}" for i in range(n)], dtype=object)
    uncertain = np.arange(n) % 4 == 0  # (n,)
    rnd = Round("v05_eb", reward_range="01", prior="spo", prior_options={"rho": "constant"},
                allocator=PriorSelect(k=1, batch_size=b))  # fmt: skip
    table = rnd.provider.tracker_.setdefault("default", {})
    for i, key in enumerate(keys):
        table[key] = [40.0, 40.0, 1] if uncertain[i] else ([80.0, 0.01, 1] if i % 2 else [0.01, 80.0, 1])

    pools: list[np.ndarray] = []
    draw = round_draw(rnd, keys, pools)

    sampler = PoolSampler(n, batch_size=b, pool_size=4 * b, mini_repeat_count=1, repeat_count=1, seed=0, draw=draw)
    drawn = []
    for epoch in range(50):
        sampler.set_epoch(epoch)
        drawn += list(np.asarray(list(sampler)).reshape(-1, b))  # (2 pools, B) an epoch
    assert len(drawn) == len(pools) == 100
    for pool, rows in zip(pools, drawn, strict=True):
        assert set(rows.tolist()) <= set(pool.tolist())
        assert int(uncertain[rows].sum()) == min(int(uncertain[pool].sum()), b), (pool, rows)
