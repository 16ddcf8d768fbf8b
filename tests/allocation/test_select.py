"""prior_select: the Beta belief from (V, n0), the score p(1 − p), Thompson draws, exploration, stats, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from v05.allocation import PriorSelect, allocate
from v05.allocation.select import prior_belief
from v05.registry import get_allocator


def bernoulli(p: np.ndarray, rng: np.random.Generator, reward_range: str = "pm1"):
    """A sampler: rollouts of pool prompt i succeed with probability p[i]."""

    def sample(ids: np.ndarray, counts: np.ndarray) -> np.ndarray:
        r = (rng.random(int(counts.sum())) < np.repeat(p[ids], counts)).astype(np.float64)
        return 2 * r - 1 if reward_range == "pm1" else r

    return sample


def replay(rewards: dict[int, list[float]]):
    """A sampler that returns fixed rewards per pool prompt (rollout j of prompt i is rewards[i][j])."""

    def sample(ids: np.ndarray, counts: np.ndarray) -> np.ndarray:
        return np.concatenate([rewards[int(i)][:c] for i, c in zip(ids, counts, strict=True)])

    return sample


def pm1(pass_rate: list[float] | np.ndarray) -> np.ndarray:
    """Pass rates → priors on the ±1 reward scale (V = 2p − 1)."""
    return 2.0 * np.asarray(pass_rate, np.float64) - 1.0


def run(alloc: PriorSelect, pass_rate, *, seed: int = 0, n0: object = None, p_true=None, reward_range: str = "pm1"):
    """One step of ``alloc`` over a pool whose prior pass rates are ``pass_rate`` (rewards drawn at ``p_true``)."""
    rng = np.random.default_rng(seed)
    p = np.asarray(pass_rate, np.float64)
    prior = pm1(p) if reward_range == "pm1" else p
    truth = p if p_true is None else np.asarray(p_true, np.float64)
    return allocate(alloc, bernoulli(truth, rng, reward_range), n_prompts=len(p), rng=rng, prior=prior, n0=n0,
                    reward_range=reward_range)  # fmt: skip


@pytest.mark.parametrize("k", [1, 2, 4])
def test_exact_batch_size_and_rollout_count(k):
    """B of P prompts are sampled, k rollouts each, in one round: rollouts = B·k exactly; all sampled prompts are
    kept and reach the loss batch."""
    rng = np.random.default_rng(k)
    a = run(PriorSelect(k=k, batch_size=8), rng.uniform(size=40), seed=k)
    assert a.n_rollouts == 8 * k and a.rounds == 1
    assert int((a.counts > 0).sum()) == 8 and set(a.counts[a.counts > 0].tolist()) == {k}
    np.testing.assert_array_equal(a.kept, a.counts > 0)
    r, g, idx = a.loss_batch()
    assert len(r) == 8 * k and len(idx) == 8


def test_mean_score_picks_the_top_b_by_variance():
    """thompson=False, no exploration: prior pass rates 0.5, 0.9, 0.1, 0.45 with n0 = 4, α₀ = 0.5 give means
    m = (4p + 0.5)/5 = 0.5, 0.82, 0.18, 0.46 and scores m(1 − m) = 0.25, 0.1476, 0.1476, 0.2484: the top two are
    the prompts nearest 1/2 (0 and 3). A negated score would pick the saturated 1 and 2."""
    alloc = PriorSelect(k=2, batch_size=2, thompson=False, explore_frac=0.0)
    for seed in range(5):
        a = run(alloc, [0.5, 0.9, 0.1, 0.45], seed=seed, n0=4.0)
        np.testing.assert_array_equal(a.counts, [2, 0, 0, 2])
        # predicted_signal = mean 4·m(1 − m) over the selected: 4·(0.25 + 0.2484)/2
        assert a.stats["predicted_signal"] == pytest.approx(2 * (0.25 + 0.46 * 0.54))


def test_the_unselected_prompts_are_passed_over():
    """Every pool prompt prior_select does not sample was looked at and rejected (``Allocation.passed``: the
    trainer drops them for the epoch instead of offering them again); the selected ones never are."""
    a = run(PriorSelect(k=2, batch_size=3), np.linspace(0.05, 0.95, 12), seed=3, n0=4.0)
    assert int(a.passed.sum()) == 9
    np.testing.assert_array_equal(a.passed, a.counts == 0)


def test_mean_score_matches_a_hand_ranking_on_a_larger_pool():
    """Differential: with thompson=False the selected set is the top-B of m(1 − m), m = (p·n0 + α₀)/(n0 + 2α₀), per
    prompt n0 (distinct scores, so no ties), on the 0/1 reward scale too."""
    rng = np.random.default_rng(11)
    p, n0 = rng.uniform(size=30), rng.uniform(0, 20, 30)
    m = (p * n0 + 0.5) / (n0 + 1.0)
    top = set(np.argsort(-(m * (1 - m)))[:7].tolist())
    a = run(PriorSelect(k=1, batch_size=7, thompson=False, explore_frac=0.0), p, n0=n0, reward_range="01")
    assert set(np.flatnonzero(a.counts).tolist()) == top


def test_selection_prefers_uncertain_prompts_near_one_half_statistically():
    """On a pool of 20 prompts with prior pass rates evenly spread in [0.025, 0.975] and n0 = 4, the mean |p_V − 1/2|
    of the selected prompts is below the pool's (0.25) over 200 seeds with Thompson draws: the score must prefer
    uncertain prompts. Observed 0.178 with SE 0.0034 over the seeds, so the 0.2 bound is > 6 SE away (a negated score
    gives 0.356)."""
    p = np.linspace(0.025, 0.975, 20)
    dist = [np.abs(p[run(PriorSelect(k=1, batch_size=5, explore_frac=0.0), p, seed=s, n0=4.0).counts > 0] - 0.5).mean()
            for s in range(200)]  # fmt: skip
    assert float(np.mean(dist)) < 0.2


def test_thompson_draw_changes_with_the_rng():
    """Thompson selection is random: over 30 seeds the selected sets differ; the same seed gives the same set."""
    p = np.linspace(0.3, 0.7, 12)
    alloc = PriorSelect(batch_size=4, explore_frac=0.0)
    sets = {tuple(np.flatnonzero(run(alloc, p, seed=s).counts)) for s in range(30)}
    assert len(sets) > 5
    a, b = run(PriorSelect(batch_size=4), p, seed=3), run(PriorSelect(batch_size=4), p, seed=3)
    np.testing.assert_array_equal(a.counts, b.counts)


def test_thompson_favours_the_uncertain_of_two_saturated_prompts():
    """Two prompts with the same prior pass rate 0.9: n0 = 1 (Beta(1.4, 0.6), wide) vs n0 = 1000 (p̃ ≈ 0.9, score
    ≈ 0.09). With B = 1 the uncertain one wins iff its draw lands in (0.1, 0.9): probability ≈ 0.665 (Monte Carlo,
    2·10⁵ draws). Over 1000 seeds the SE is 0.015, so the 0.55 bound is ~7.7 SE below (false-failure rate < 1e-12).
    With thompson=False their means are 0.7 and 0.8996 (scores 0.21, 0.09): the mean rule picks the uncertain one
    every time, and a negated score would pick the confident one."""
    alloc = PriorSelect(k=1, batch_size=1, explore_frac=0.0)
    wins = sum(int(run(alloc, [0.9, 0.9], seed=s, n0=np.array([1.0, 1000.0])).counts[0] > 0) for s in range(1000))
    assert wins / 1000 > 0.55
    mean = run(PriorSelect(k=1, batch_size=1, explore_frac=0.0, thompson=False), [0.9, 0.9],
               n0=np.array([1.0, 1000.0]))  # fmt: skip
    np.testing.assert_array_equal(mean.counts, [1, 0])


def test_exploration_picks_the_documented_count_outside_the_top_set():
    """explore_frac = 0.3, B = 10 of P = 30 (thompson=False): n_e = ⌊0.3·10⌋ = 3 prompts come from outside the top-10
    by score, the other 7 are the top-7; the batch stays 10 and the explored ones vary with the rng."""
    rng = np.random.default_rng(5)
    p = rng.uniform(size=30)
    m = (p * 4 + 0.5) / 5
    order = np.argsort(-(m * (1 - m)))
    top7, top10 = set(order[:7].tolist()), set(order[:10].tolist())
    outside = set()
    for seed in range(20):
        a = run(PriorSelect(k=2, batch_size=10, thompson=False, explore_frac=0.3), p, seed=seed, n0=4.0)
        chosen = set(np.flatnonzero(a.counts).tolist())
        assert len(chosen) == 10 and a.n_rollouts == 20 and top7 <= chosen
        assert len(chosen - top10) == 3 and a.stats["explored"] == 3
        outside |= chosen - top10
    assert len(outside) > 6  # uniform over the 20 outside the top set, not a fixed pick


def test_explore_rounds_down_and_is_zero_by_request():
    """n_e = ⌊explore_frac·B⌋: 0.05 of B = 8 explores nothing; 0.125 of 8 explores exactly one."""
    p = np.linspace(0.05, 0.95, 30)
    assert run(PriorSelect(batch_size=8, explore_frac=0.05), p).stats["explored"] == 0
    assert run(PriorSelect(batch_size=8, explore_frac=0.125), p).stats["explored"] == 1


def test_pool_not_larger_than_batch_takes_the_whole_pool():
    """P ≤ batch_size: every prompt is sampled, k each; nothing is explored."""
    a = run(PriorSelect(k=4, batch_size=10, explore_frac=0.5), [0.5, 0.99, 0.01])
    np.testing.assert_array_equal(a.counts, [4, 4, 4])
    assert a.stats["explored"] == 0 and a.kept.all()


def test_missing_n0_uses_default_n0():
    """Without n0, default_n0 sets the belief: one prompt at p_V = 0.9 has m = (0.9·4 + 0.5)/5 = 0.82 with
    default_n0 = 4 (predicted_signal 4·0.82·0.18 = 0.5904), the same as n0 = 4 passed in, and m = 0.5 (signal 1)
    with default_n0 = 0 (the prior ignored)."""
    four = run(PriorSelect(batch_size=1, thompson=False, default_n0=4.0), [0.9])
    zero = run(PriorSelect(batch_size=1, thompson=False, default_n0=0.0), [0.9])
    given = run(PriorSelect(batch_size=1, thompson=False, default_n0=0.0), [0.9], n0=4.0)
    assert four.stats["predicted_signal"] == pytest.approx(4 * 0.82 * 0.18)
    assert given.stats["predicted_signal"] == pytest.approx(4 * 0.82 * 0.18)
    assert zero.stats["predicted_signal"] == pytest.approx(1.0)


def test_n0_zero_ignores_the_prior():
    """n0 = 0: every belief is Beta(α₀, α₀), so with thompson=False all scores tie and the rng decides: a prior of
    0.99 is picked as often as one of 0.5 (each of 4 prompts in 1 of B = 1: ≈ 1/4 of 400 seeds; 4 SE ≈ 0.087)."""
    picks = np.zeros(4)
    for s in range(400):
        picks += run(PriorSelect(batch_size=1, thompson=False, explore_frac=0.0), [0.5, 0.99, 0.01, 0.7], seed=s,
                     n0=0.0).counts  # fmt: skip
    assert np.all(np.abs(picks / 400 - 0.25) < 4 * math.sqrt(0.25 * 0.75 / 400))


def test_stats_keys_present_finite_and_realised_signal_by_hand():
    """Stats: predicted/realised signal, selected and pool prior means, explored; all finite JSON scalars.
    k = 2, rewards (+1, −1) and (+1, +1): unbiased ±1 variances 2 and 0 → realised 1. k = 1, V = 0 (p_V = 1/2),
    rewards +1 and −1: (r − V)² = 1 each → realised 1."""
    two = allocate(PriorSelect(k=2, batch_size=2, thompson=False, explore_frac=0.0), replay({0: [1, -1], 1: [1, 1]}),
                   n_prompts=2, rng=np.random.default_rng(0), prior=[0.0, 0.4])  # fmt: skip
    assert set(two.stats) == {"predicted_signal", "realised_signal", "selected_prior_mean", "pool_prior_mean",
                              "explored"}  # fmt: skip
    assert all(math.isfinite(v) for v in two.stats.values())
    assert two.stats["realised_signal"] == pytest.approx(1.0)
    assert two.stats["selected_prior_mean"] == pytest.approx(0.2) and two.stats["pool_prior_mean"] == pytest.approx(0.2)
    assert isinstance(two.stats["explored"], int)
    one = allocate(PriorSelect(k=1, batch_size=2), replay({0: [1.0], 1: [-1.0]}), n_prompts=2,
                   rng=np.random.default_rng(0), prior=[0.0, 0.0])  # fmt: skip
    assert one.stats["realised_signal"] == pytest.approx(1.0)


def test_selected_prior_mean_differs_from_the_pool_when_the_pool_is_skewed():
    """A pool of mostly solved prompts (p_V = 0.97) and a few at 1/2: the selected prompts' mean prior is the
    mid ones' (0 on ±1), below the pool's."""
    p = np.array([0.97] * 12 + [0.5] * 4)
    a = run(PriorSelect(batch_size=4, thompson=False, explore_frac=0.0), p, n0=8.0)
    assert a.stats["selected_prior_mean"] == pytest.approx(0.0)
    assert a.stats["pool_prior_mean"] == pytest.approx(float(np.mean(pm1(p))))


def test_realised_signal_tracks_predicted_under_a_calibrated_prior():
    """With an exact prior and k = 4, the unbiased within-group variance averages 4p(1 − p), i.e. predicted_signal
    up to α₀'s pull (n0 = 200 makes it negligible): over 100 steps of B = 32 the mean realised signal is within 4 SE
    of the mean predicted one (false-failure rate < 1e-4)."""
    rng = np.random.default_rng(9)
    pred, real = [], []
    for s in range(100):
        p = rng.uniform(size=64)
        a = run(PriorSelect(k=4, batch_size=32), p, seed=1000 + s, n0=200.0)
        pred.append(a.stats["predicted_signal"])
        real.append(a.stats["realised_signal"])
    diff = np.array(real) - np.array(pred)
    assert abs(diff.mean()) < 4 * diff.std(ddof=1) / math.sqrt(len(diff))


def test_registry_builds_it_by_name():
    """get_allocator("prior_select", k=1) is a PriorSelect with k = 1 and the documented defaults."""
    alloc = get_allocator("prior_select", k=1)
    assert isinstance(alloc, PriorSelect) and alloc.k == 1 and alloc.batch_size == 32
    assert alloc.thompson and alloc.score == "variance" and alloc.explore_frac == 0.05 and alloc.default_n0 == 4.0


def test_missing_prior_is_a_clear_error():
    """Without a prior prior_select raises a ValueError that says how to pass one."""
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="prior_select needs a prior"):
        allocate(PriorSelect(), bernoulli(np.full(3, 0.5), rng), n_prompts=3, rng=rng)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"k": 0}, "k must"),
        ({"k": 2.0}, "k must"),
        ({"batch_size": 0}, "batch_size"),
        ({"explore_frac": 1.0}, "explore_frac"),
        ({"explore_frac": -0.1}, "explore_frac"),
        ({"explore_frac": float("nan")}, "explore_frac"),
        ({"default_n0": -1.0}, "default_n0"),
        ({"default_n0": float("inf")}, "default_n0"),
        ({"alpha0": 0.0}, "alpha0"),
        ({"score": "mixed"}, "score"),
        ({"thompson": "yes"}, "thompson"),
    ],
)
def test_bad_config_raises(options, match):
    """Invalid prior_select options raise a ValueError naming the option."""
    with pytest.raises(ValueError, match=match):
        PriorSelect(**options)


def test_prior_belief_by_hand_and_bad_input():
    """α = p·n0 + α₀, β = (1 − p)·n0 + α₀: p = 0.9, n0 = 4, α₀ = 0.5 → (4.1, 0.9); n0 = 0 → (0.5, 0.5). Bad p, n0
    and α₀ raise naming the argument."""
    b = prior_belief([0.9, 0.9], [4.0, 0.0], alpha0=0.5)
    np.testing.assert_allclose(b.alpha, [4.1, 0.5])
    np.testing.assert_allclose(b.beta, [0.9, 0.5])
    bad = [
        (([1.2], 1.0), {}, "pass_rate"),
        (([0.5], -1.0), {}, "n0"),
        (([0.5, 0.5], [1.0, 1.0, 1.0]), {}, "n0"),
        (([0.5], 1.0), {"alpha0": 0.0}, "alpha0"),
    ]
    for args, kw, match in bad:
        with pytest.raises(ValueError, match=match):
            prior_belief(*args, **kw)
